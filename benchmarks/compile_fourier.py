"""Does torch.compile pay for itself on the default run's longest training, the Fourier MLP?

The Fourier MLP's GD step (nqf.training.fourier_training.FourierReplicas.loss_and_grad and the
in-place update, float32) at the default config's shapes (its fourier_powerlaw seeds, P units on
the M/2 + 1 folded grid points; the steps of all its thetas, as the library resolves them) eager against ``torch.compile(dynamic=False)`` of the same step, on one
thread. The compile time is measured in fresh processes: with an empty inductor cache (cold, a CI
machine or a first run) and again with the cache the first one left (warm). Equality: the losses
of 3000 steps from the same start, eager against compiled (float32 rounding). Needs a C++
compiler (inductor's CPU code generation).

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
from nqf.training.fourier_training import FourierReplicas, fold_even_grid, init_draws

M, P, S = (int(v) for v in sys.argv[1:4])
lr = 1e-3
idx, w = fold_even_grid(M)
k = np.arange(1, P + 1)
psi = (np.sqrt(2) * np.cos(2 * np.pi * k[None] * (np.arange(M) / M)[:, None]))[idx]
a0, W0 = init_draws(range(S), P, 0.3)
model = FourierReplicas(a0, W0, np.repeat((k ** -1.0)[None], S, 0), psi, w, nonlinear=True, dtype=torch.float32)
y = torch.as_tensor(np.random.default_rng(0).standard_normal((S, idx.size)), dtype=torch.float32)
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

def per_step(fn, n=2000, rounds=5):
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
le, lc = losses(step, 3000), losses(compiled, 3000)
print(json.dumps({"compile_s": compile_s, "eager_us": 1e6 * eager_s, "compiled_us": 1e6 * compiled_s,
                  "max_rel_loss": float(((le - lc).abs() / le.abs()).max())}))
'''


def default_fourier() -> tuple[dict, int]:
    """The default config's fourier_powerlaw experiment and the Fourier MLP's GD steps over its
    thetas (steps: auto resolved by the library, nqf.experiments.fourier_powerlaw.theta_steps)."""
    from nqf.experiments.fourier_powerlaw import theta_steps
    from nqf.pipeline.config import validate_config
    from nqf.pipeline.config_files import read_config_file

    cfg = validate_config(read_config_file(Path(__file__).resolve().parents[1] / "config" / "config.yaml"))
    exp = cfg["experiments"]["fourier_powerlaw"]
    return exp, sum(theta_steps(exp))


def child(cache: str, exp: dict) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}
    shape = [str(exp["M"]), str(exp["P"]), str(len(exp["seeds"]))]
    out = subprocess.run([sys.executable, "-c", CHILD, *shape], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> str:
    import torch

    exp, steps = default_fourier()
    with tempfile.TemporaryDirectory() as cache:
        cold, warm = child(cache, exp), child(cache, exp)
    lines = [f"Fourier MLP GD step, eager vs torch.compile, torch {torch.__version__}, 1 thread, float32, "
             f"{len(exp['seeds'])} seeds x {exp['P']} units x {int(exp['M']) // 2 + 1} points "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
             f"{'cache':>6} {'compile s':>10} {'eager us':>9} {'compiled us':>12} {'speed-up':>9} "
             f"{'max rel diff of 3000 losses':>28}"]
    for name, r in (("cold", cold), ("warm", warm)):
        lines.append(f"{name:>6} {r['compile_s']:>10.1f} {r['eager_us']:>9.0f} {r['compiled_us']:>12.0f} "
                     f"{r['eager_us'] / r['compiled_us']:>8.2f}x {r['max_rel_loss']:>28.1e}")
    for name, r in (("cold", cold), ("warm", warm)):
        saved = steps * (r["eager_us"] - r["compiled_us"]) / 1e6
        lines.append(f"default run's {steps} steps: {saved:.0f} s saved against {r['compile_s']:.0f} s of "
                     f"compiling ({name} cache), net {saved - r['compile_s']:.0f} s")
    text = "\n".join(lines) + "\n"
    (Path(__file__).with_name("results") / "compile_fourier.txt").write_text(text)
    return text


if __name__ == "__main__":
    print(main())
