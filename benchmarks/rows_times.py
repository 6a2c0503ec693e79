"""A batched matrix times vector, h (R, m, k) @ v (R, k) -> (R, m), two ways, and the Fourier
training steps that use it (nqf.training.fourier_training.rows_times), on one CPU thread:

* "column": torch.bmm(h, v[:, :, None]) (what torch.einsum("rmk,rk->rm") also runs);
* "row": torch.bmm(v[:, None, :], h.mT), the row vector times h transposed.

Then whole steps (loss_and_grad) of the default Fourier MLP and of paper.yaml's raw MLP with each
way, back to back, and the float32 matmul peak of this machine in the same run.

    python benchmarks/rows_times.py [--out benchmarks/results/rows_times.txt]
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import matmul_peak

import nqf.training.fourier_training as F


def column(h, v):
    return torch.bmm(h, v[:, :, None])[:, :, 0]


def per_call(fn, repeats: int) -> float:
    """Best of 5 means over ``repeats`` calls, in microseconds."""
    for _ in range(max(10, repeats // 10)):
        fn()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - t) / repeats)
    return best * 1e6


def steps(cfg_name: str):
    """(name, model, y) of the two Fourier workloads."""
    from nqf.training.fourier_training import RawMLPReplicas, raw_init_draws

    if cfg_name == "raw":
        x = np.arange(256) / 256.0
        return RawMLPReplicas(raw_init_draws(np.arange(4), 256, 1e-4), x), torch.zeros(4, 256, dtype=torch.float64)
    from nqf.training.fourier_training import FourierReplicas, fold_even_grid, init_draws

    M, P, S = 256, 104, 6  # the default Fourier MLP: 6 seeds, P = 104 modes, float32
    idx, weights = fold_even_grid(M)
    xs = np.arange(M) / M
    k = np.arange(1, P + 1)
    psi = (np.sqrt(2) * np.cos(2 * np.pi * np.outer(xs, k)))[idx]
    a0, W0 = init_draws(np.arange(S), P, 1e-3)
    model = FourierReplicas(a0, W0, k ** -1.0, psi, weights, nonlinear=True, dtype=torch.float32)
    return model, torch.zeros(S, len(idx), dtype=torch.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "rows_times.txt")
    args = ap.parse_args()
    torch.set_num_threads(1)
    lines = [(f"rows_times on {platform.node()}, {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}, "
              f"one thread, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC"),
             f"float32 matmul peak: {matmul_peak(torch.float32, (512, 1024), 10):.1f} GFLOP/s", "",
             "h (R, m, k) @ v (R, k)        dtype     column us   row us   column/row   max rel diff"]
    for shape, dt in [((6, 129, 104), torch.float32), ((16, 129, 64), torch.float64),
                      ((64, 129, 64), torch.float64), ((4, 256, 256), torch.float64)]:
        g = torch.Generator().manual_seed(0)
        h, v = torch.randn(*shape, dtype=dt, generator=g), torch.randn(shape[0], shape[2], dtype=dt, generator=g)
        c, r = per_call(lambda h=h, v=v: column(h, v), 500), per_call(lambda h=h, v=v: F.rows_times(h, v), 500)
        a, b = column(h, v), F.rows_times(h, v)
        diff = float((a - b).abs().max() / a.abs().max())
        lines.append(f"{shape!s:28s}  {str(dt)[6:]:8s}  {c:10.1f}  {r:7.1f}  {c / r:11.2f}   {diff:.1e}")
    lines += ["", "whole step (loss_and_grad)                 column us   row us   column/row"]
    row_way = F.rows_times
    for name, label in (("fourier", "default Fourier MLP (6, 129, 104) float32"),
                        ("raw", "paper raw MLP (4, 256, 256) float64")):
        model, y = steps(name)
        times = {}
        for way, fn in (("column", column), ("row", row_way)):
            F.rows_times = fn
            times[way] = per_call(lambda m=model, t=y: m.loss_and_grad(t), 300)
        F.rows_times = row_way
        lines.append(f"{label:42s} {times['column']:10.1f}  {times['row']:7.1f}  {times['column'] / times['row']:11.2f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.write_text(text)


if __name__ == "__main__":
    main()
