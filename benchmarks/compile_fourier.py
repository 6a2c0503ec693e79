"""Does torch.compile pay for itself on the tanh networks of the Fourier experiment?

The GD steps of the Fourier MLP (nqf.training.fourier_training.FourierReplicas.loss_and_grad
and the in-place update) and of the raw tanh MLP (RawMLPReplicas), eager against
``torch.compile(dynamic=False)`` of the same step, on one thread, at the shapes, dtypes and step
counts of fourier_powerlaw in config/config.yaml (the default run's longest job) and in
config/paper.yaml (the raw MLP's 750 000 steps are paper.yaml's longest job). The compile time is
measured in fresh processes: with an empty inductor cache (cold, a CI machine or a first run) and
again with the cache the first one left (warm). Equality: the losses of 2000 steps from the same
start, eager against compiled (the dtype's rounding). Needs a C++ compiler (inductor's CPU code
generation). Each process runs with the workflow's allocator settings, as its jobs do.

    python benchmarks/compile_fourier.py     # writes benchmarks/results/compile_fourier.txt
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r'''
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
from nqf.training.fourier_training import FourierReplicas, RawMLPReplicas, fold_even_grid, init_draws, raw_init_draws

net, dtype = sys.argv[1], getattr(torch, sys.argv[2])
M, P, S, width = (int(v) for v in sys.argv[3:7])
lr = 1e-3
rng = np.random.default_rng(0)
if net == "fourier_mlp":
    idx, w = fold_even_grid(M)
    k = np.arange(1, P + 1)
    psi = (np.sqrt(2) * np.cos(2 * np.pi * k[None] * (np.arange(M) / M)[:, None]))[idx]
    a0, W0 = init_draws(range(S), P, 0.3)
    model = FourierReplicas(a0, W0, np.repeat((k ** -1.0)[None], S, 0), psi, w, nonlinear=True, dtype=dtype)
    y = torch.as_tensor(rng.standard_normal((S, idx.size)), dtype=dtype)
else:
    model = RawMLPReplicas(raw_init_draws(range(S), width, 0.3), np.arange(M) / M, dtype=dtype)
    y = torch.as_tensor(rng.standard_normal((S, M)), dtype=dtype)
start = model.theta.detach().clone()

def step():
    loss, grad = model.loss_and_grad(y)
    with torch.no_grad():
        model.theta.sub_(grad, alpha=lr)
    return loss

def losses(fn, n):
    with torch.no_grad():
        model.theta.copy_(start)
    return torch.stack([fn() for _ in range(n)])

def per_step(fn, n=1000, rounds=5):
    fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best

t = time.perf_counter()
compiled = torch.compile(step, dynamic=False)
compiled()
compile_s = time.perf_counter() - t
eager_s, compiled_s = per_step(step), per_step(compiled)
le, lc = losses(step, 2000), losses(compiled, 2000)
print(json.dumps({"compile_s": compile_s, "eager_us": 1e6 * eager_s, "compiled_us": 1e6 * compiled_s,
                  "max_rel_loss": float(((le - lc).abs() / le.abs()).max())}))
'''


def workloads() -> list[dict]:
    """The Fourier MLP and the raw MLP of fourier_powerlaw in each config file: shapes, dtype and
    GD steps (the Fourier MLP's over its thetas, ``steps: auto`` resolved by the library)."""
    from nqf.experiments.fourier_powerlaw import theta_steps
    from nqf.pipeline.config import validate_config
    from nqf.pipeline.config_files import read_config_file

    out = []
    for name in ("config", "paper"):
        path = Path(__file__).resolve().parents[1] / "config" / f"{name}.yaml"
        exp = validate_config(read_config_file(path))["experiments"]["fourier_powerlaw"]
        dtype = exp.get("mlp_dtype") or "float64"
        shape = {"M": int(exp["M"]), "P": int(exp["P"]), "width": int(exp["raw_width"])}
        out.append({**shape, "config": name, "net": "fourier_mlp", "dtype": dtype, "replicas": len(exp["seeds"]),
                    "steps": sum(theta_steps(exp))})
        out.append({**shape, "config": name, "net": "raw_mlp", "dtype": dtype, "replicas": len(exp["raw_seeds"]),
                    "steps": int(exp["raw_steps"])})
    return out


def child(cache: str, w: dict) -> dict:
    from nqf.pipeline.snakefile import ALLOCATOR_SETTINGS  # as the workflow's jobs run: without them the
    # float64 raw MLP's 2 MB temporaries are mapped and unmapped every step and its times spread 2x

    env = {**os.environ, **ALLOCATOR_SETTINGS, "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}
    args = [w["net"], w["dtype"], *(str(w[k]) for k in ("M", "P", "replicas", "width"))]
    out = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> str:
    import torch

    lines = [f"GD steps of fourier_powerlaw's tanh networks, eager vs torch.compile(dynamic=False), torch "
             f"{torch.__version__}, 1 thread ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); net: the "
             "steps the config trains, saved (eager - compiled) x steps less the compile time",
             f"{'config':>7} {'network':>12} {'dtype':>8} {'shape':>16} {'cache':>6} {'compile s':>10} "
             f"{'eager us':>9} {'compiled us':>12} {'speed-up':>9} {'steps':>8} {'net s':>8} {'max rel diff':>13}"]
    for w in workloads():
        shape = (f"{w['replicas']}x{w['P']}x{w['M'] // 2 + 1}" if w["net"] == "fourier_mlp" else
                 f"{w['replicas']}x{w['width']}x{w['M']}")
        with tempfile.TemporaryDirectory() as cache:
            runs = {"cold": child(cache, w), "warm": child(cache, w)}
        for name, r in runs.items():
            net = w["steps"] * (r["eager_us"] - r["compiled_us"]) / 1e6 - r["compile_s"]
            lines.append(f"{w['config']:>7} {w['net']:>12} {w['dtype']:>8} {shape:>16} {name:>6} "
                         f"{r['compile_s']:>10.1f} {r['eager_us']:>9.0f} {r['compiled_us']:>12.0f} "
                         f"{r['eager_us'] / r['compiled_us']:>8.2f}x {w['steps']:>8} {net:>8.0f} "
                         f"{r['max_rel_loss']:>13.1e}")
    lines.append("shape: replicas x units x grid points (Fourier MLP: the folded M/2 + 1 points; raw MLP: "
                 "width x M inputs)")
    text = "\n".join(lines) + "\n"
    (Path(__file__).with_name("results") / "compile_fourier.txt").write_text(text)
    return text


if __name__ == "__main__":
    print(main())
