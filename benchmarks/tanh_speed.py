"""torch.tanh against NumPy's tanh (nqf.architectures.fast_tanh) on this machine, in one run.

For the Fourier MLP's step arguments (default and paper configs) and two larger tensors, float32 and
float64, one torch thread:

* microseconds per call of torch.tanh, of NumPy's np.tanh into a torch-allocated output (what
  ``fast_tanh.tanh_values`` does) and of ``fast_tanh.tanh`` under autograd (forward + backward
  through aten.tanh_backward, against torch.tanh's forward + backward), the best of a few repeats;
* the largest error of each against a float64 (for float32) or extended-precision (for float64)
  reference, in units of the dtype's machine epsilon times |tanh x|, over normal, small (1e-6) and
  saturating arguments.

Then whole training steps of the library's loops (benchmarks/workloads.py's harness: each kind's own
model, targets and optimizer) with the two tanh implementations alternated in this one process
(``fast_tanh.ENABLED`` switched between timings), so that the machine's load drifts alike over
both: the median over rounds of each one's time per step, and their ratio.

    python benchmarks/tanh_speed.py          # ~3 min; writes benchmarks/results/tanh_speed.txt
"""
from __future__ import annotations

import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nqf.architectures.fast_tanh as fast_tanh  # noqa: E402
from nqf.architectures.fast_tanh import tanh, tanh_values  # noqa: E402

STEPS = ("default fourier_powerlaw/fourier_mlp", "default fourier_powerlaw/raw_mlp", "default nqf_approximation/mlp",
         "default nqf_approximation/cnn", "default real_data/cnn", "default deep/mlp_gd", "paper fourier_powerlaw/fourier_mlp",
         "paper nqf_approximation/cnn")

SHAPES = {  # one training step's tanh arguments: the Fourier MLP's (replicas, grid points, units), and larger
    "Fourier MLP, default config (6, 129, 104)": (6, 129, 104),
    "Fourier MLP, paper config (48, 129, 64)": (48, 129, 64),
    "1 M elements (1000, 1000)": (1000, 1000),
    "10 M elements (100, 400, 250)": (100, 400, 250),
}


def best_us(fn, repeats: int = 5, target: float = 0.05) -> float:
    fn()
    n, took = 1, 0.0
    while took < target:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        took = time.perf_counter() - t0
        n *= 2
    n //= 2
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n)
    return 1e6 * min(times)


def max_error_eps(values: torch.Tensor, x: torch.Tensor) -> float:
    """max |values - tanh x| / (eps |tanh x|), tanh x from a wider type."""
    wide = np.longdouble if x.dtype == torch.float64 else np.float64
    ref = np.tanh(x.numpy().astype(wide))
    err = np.abs(values.numpy().astype(wide) - ref) / np.maximum(np.abs(ref), np.finfo(wide).tiny)
    return float(err.max() / torch.finfo(x.dtype).eps)


def main() -> str:
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    automatic = [str(d)[6:] for d in fast_tanh.NUMPY_DTYPES]
    fast_tanh.NUMPY_DTYPES = (torch.float32, torch.float64)  # NumPy measured for both, whatever the rule says
    simd = [k for k, v in fast_tanh._cpu_features().items() if v and (k.startswith("X86_V") or "AVX" in k)]
    lines = [f"torch.tanh against NumPy's tanh, measured in one run ({datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z})",
             f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; torch {torch.__version__} "
             f"(CPU capability {torch.backends.cpu.get_cpu_capability()}); NumPy {np.__version__}; one torch thread",
             f"NumPy's SIMD extensions here: {', '.join(simd) or 'none'}; fast_tanh's rule gives NumPy: "
             f"{', '.join(automatic) or 'no dtype'}",
             "us per call, best of 5; error: max |f - tanh| / (eps |tanh|) against a wider reference", "",
             f"{'arguments':42s} {'dtype':8s} {'torch':>9s} {'numpy':>9s} {'ratio':>6s} {'fwd+bwd torch':>14s} "
             f"{'fwd+bwd ours':>13s} {'ratio':>6s} {'err torch':>9s} {'err ours':>9s}"]
    for label, shape in SHAPES.items():
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
            t_torch = best_us(lambda: torch.tanh(x))
            t_numpy = best_us(lambda: tanh_values(x))
            xg = x.clone().requires_grad_()
            grad = torch.ones_like(x)
            t_bt = best_us(lambda: torch.autograd.grad(torch.tanh(xg), xg, grad))
            t_bo = best_us(lambda: torch.autograd.grad(tanh(xg), xg, grad))
            special = torch.cat([x.flatten()[:10000], 1e-6 * x.flatten()[:10000],
                                 torch.tensor([0.0, 20.0, -20.0], dtype=dtype)])
            e_torch, e_ours = max_error_eps(torch.tanh(special), special), max_error_eps(tanh_values(special), special)
            lines.append(f"{label:42s} {str(dtype)[6:]:8s} {t_torch:9.1f} {t_numpy:9.1f} {t_torch / t_numpy:6.2f} "
                         f"{t_bt:14.1f} {t_bo:13.1f} {t_bt / t_bo:6.2f} {e_torch:9.2f} {e_ours:9.2f}")
            print(lines[-1], flush=True)
    lines += ["", "training steps, ms per step (median of 5 rounds, each timing both implementations in turn)", "",
              f"{'workload':48s} {'dtype':8s} {'torch.tanh':>10s} {'numpy':>9s} {'ratio':>6s}"]
    lines += alternated_steps()
    text = "\n".join(lines) + "\n"
    out = ROOT / "benchmarks" / "results" / "tanh_speed.txt"
    out.write_text(text)
    return text


def alternated_steps(rounds: int = 5, target: float = 0.2) -> list[str]:
    """Time per training step with torch.tanh and with NumPy's, alternated (module docstring)."""
    import statistics

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import workloads

    rows = []

    def measure(run, **_):
        run(1, False)
        n = 1
        while workloads.clock(lambda: run(1 + n, False)) - workloads.clock(lambda: run(1, False)) < target and n < 4096:
            n *= 2
        times = {False: [], True: []}
        for _ in range(rounds):
            for enabled in (False, True):
                fast_tanh.ENABLED = enabled
                times[enabled].append((workloads.clock(lambda: run(1 + n, False)) - workloads.clock(lambda: run(1, False))) / n)
        fast_tanh.ENABLED = True
        return {k: 1e3 * statistics.median(v) for k, v in times.items()}

    def sink(label, dtype, m):
        rows.append(f"{label:48s} {str(dtype)[6:]:8s} {m[False]:10.3f} {m[True]:9.3f} {m[False] / m[True]:6.2f}")
        print(rows[-1], flush=True)

    workloads.measure = measure
    configs = sorted({s.split()[0] for s in STEPS})
    with workloads.Interceptor(sink, {}) as icp:
        for config in configs:
            only = [s.split(" ", 1)[1] for s in STEPS if s.startswith(config)]
            workloads.workloads(config, only, icp)
    return rows


if __name__ == "__main__":
    import logging
    import warnings

    logging.getLogger("nqf").setLevel(logging.WARNING)
    warnings.simplefilter("ignore")
    main()
