"""Training-loop speed of the quadratic model, measured side by side in one run.

1. Exact closed-form gradient H W (QuadraticModel.loss_and_grad) against autograd.
2. R replicas (seeds) as one tensor program against R separate trainings.

Run: python benchmarks/training_step.py   (writes benchmarks/results/training_step.txt)
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

import nqf
from nqf.training.loop import mse_per_replica


def per_step(fn, steps: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) / steps


def gd_step_functions(form, y, W0, lr=1e-3):
    analytic = nqf.QuadraticModel(form, W0, device="cpu")
    auto = nqf.QuadraticModel(form, W0, device="cpu")
    opt_a = torch.optim.SGD(analytic.parameters(), lr=lr)
    opt_b = torch.optim.SGD(auto.parameters(), lr=lr)

    def step_analytic():
        _, grad = analytic.loss_and_grad(y)
        analytic.W.grad = grad
        opt_a.step()

    def step_autograd():
        opt_b.zero_grad(set_to_none=True)
        mse_per_replica(auto(), y).sum().backward()
        opt_b.step()

    return step_analytic, step_autograd


def main() -> str:
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    lines = [f"nqf training-step benchmark, torch {torch.__version__}, {torch.get_num_threads()} threads", ""]
    cases = {
        "featurewise (diagonal, m = p = 5, d = 5)": (
            nqf.DiagonalForm(torch.randn(5, 5, generator=g, dtype=torch.float64)), 5, 5, 20000),
        "dense (m = 256, p = 32, d = 32)": (
            nqf.DenseForm((lambda B: B + B.transpose(1, 2))(torch.randn(256, 32, 32, generator=g, dtype=torch.float64))),
            32, 32, 2000),
    }
    for name, (form, p, d, steps) in cases.items():
        y = torch.randn(form.m, generator=g, dtype=torch.float64)
        W0 = 1e-3 * torch.randn(1, p, d, generator=g, dtype=torch.float64)
        fa, fb = gd_step_functions(form, y, W0)
        ta, tb = per_step(fa, steps), per_step(fb, steps)
        lines.append(f"{name}: analytic {ta * 1e6:.1f} us/step, autograd {tb * 1e6:.1f} us/step, "
                     f"speed-up {tb / ta:.2f}x")
    form, _, _, _ = cases["dense (m = 256, p = 32, d = 32)"]
    y = torch.randn(form.m, generator=g, dtype=torch.float64)
    R = 8
    W0 = 1e-3 * torch.randn(R, 32, 32, generator=g, dtype=torch.float64)
    batched, _ = gd_step_functions(form, y, W0)
    singles = [gd_step_functions(form, y, W0[r:r + 1])[0] for r in range(R)]
    t_batched = per_step(batched, 500)
    t_loop = per_step(lambda: [s() for s in singles], 500)
    lines.append(f"{R} replicas, dense m = 256, p = d = 32: one tensor program {t_batched * 1e6:.0f} us/step, "
                 f"Python loop over replicas {t_loop * 1e6:.0f} us/step, speed-up {t_loop / t_batched:.2f}x")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = main()
    print(text, end="")
    out = Path(__file__).resolve().parent / "results" / "training_step.txt"
    out.write_text(text)
