"""Speed of the theory engine, measured side by side in one run.

1. M-flow (nqf.theory.mflow) wall time per unit of gradient-flow time at width d = 16 and d = 4096 on the
   same data, against training W itself (nqf.train, full-batch GD) at d = 4096: the M-flow cost
   must not depend on d, and must beat training by a wide margin.
2. The GLV over its full staircase (up to 1.2 x the last event of nqf.theory.staircase, in t = tau ln(1/eps)):
   10^4 modes with diagonal C (power-law rates, the Fig. 3-right kind of data) and 10^3 modes with
   a dense Gram C (m = 100 samples), plus the eps -> 0 event solver on the same systems.

Run: python benchmarks/dynamics_speed.py   (writes benchmarks/results/dynamics_speed.txt)
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

import nqf
from nqf.theory.mflow import SecondMoment
from nqf.theory.staircase import staircase_from_init


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def mflow_section(lines: list[str]) -> None:
    """Fig.-2-sized dense data (p = 20 + 8, m = 600), scaled so the fastest curvature is 1."""
    rng = np.random.default_rng(0)
    p, m, T, lr = 28, 600, 40.0, 0.01
    B = rng.standard_normal((m, p, p))
    A = (B + B.transpose(0, 2, 1)) / 2
    A /= np.sqrt(np.linalg.eigvalsh(SecondMoment.from_matrices(A, np.zeros(m)).kmat)[-1])
    teacher = rng.standard_normal((p, 2))
    teacher /= np.linalg.norm(teacher, axis=0)
    y = np.einsum("mpq,pk,qk->m", A, teacher, teacher)
    form = nqf.DenseForm(torch.as_tensor(A))
    t0 = time.perf_counter()
    stats = SecondMoment.from_form(form, y)
    t_stats = time.perf_counter() - t0
    t = np.linspace(0, T, 101)
    W0 = {d: 1e-3 / np.sqrt(d) * rng.standard_normal((p, d)) for d in (16, 4096)}
    nqf.mflow(stats, W0=W0[16], t=t)  # warm-up (imports, caches)
    per_unit, nfev = {}, {}
    for rtol in (1e-10, 1e-6):
        for d in (16, 4096):
            per_unit[rtol, d] = best_of(lambda: nqf.mflow(stats, W0=W0[d], t=t, rtol=rtol)) / T
        nfev[rtol] = nqf.mflow(stats, W0=W0[4096], t=t, rtol=rtol).attrs["rhs_evaluations"]
    flow_T = nqf.mflow(stats, W0=W0[4096], t=[0.0, T], rtol=1e-12)["M"].values[-1]
    steps = int(round(T / lr))
    nqf.train(nqf.QuadraticModel(form, W0[4096][None], device="cpu"), y, lr=lr, steps=5,
              record_steps=[0, 5])  # warm-up (first einsum path search)
    t0 = time.perf_counter()
    ds = nqf.train(nqf.QuadraticModel(form, W0[4096][None], device="cpu"), y, lr=lr, steps=steps,
                   record_steps=[0, steps])
    t_train = time.perf_counter() - t0
    train_per_unit = t_train / T
    gd_dev = np.abs(ds["M"].values[0, -1] - flow_T).max() / np.abs(flow_T).max()
    lines += [
        f"[M-flow] dense data m = {m}, p = {p}, scaled so that max eig K = 1; T = {T:g} time units; "
        f"statistics (one pass over the data) {t_stats * 1e3:.1f} ms",
    ]
    for rtol in (1e-10, 1e-6):
        lines += [
            f"  M-flow rtol {rtol:g} ({nfev[rtol]} right-hand sides): "
            f"d = 16 {per_unit[rtol, 16] * 1e3:.3f} ms, "
            f"d = 4096 {per_unit[rtol, 4096] * 1e3:.3f} ms per unit time; ratio d=4096/d=16 "
            f"{per_unit[rtol, 4096] / per_unit[rtol, 16]:.2f} (check: within 1.5x); speed-up over "
            f"training {train_per_unit / per_unit[rtol, 4096]:.0f}x (check: >= 20x)",
        ]
    lines += [
        f"  train W, d = 4096, full-batch GD lr = {lr:g}, {steps} steps: {train_per_unit * 1e3:.2f} ms per "
        f"unit time ({t_train / steps * 1e3:.3f} ms/step); its M(T) deviates from the flow by "
        f"{gd_dev:.2e} (relative max-abs), the O(lr) error of GD",
        "",
    ]


def glv_section(lines: list[str]) -> None:
    eps = 1e-8
    ln = np.log(1 / eps)
    # 10^4 modes, diagonal C: r_k = k^-0.8, V_k = r_k^2 / (8 C_kk) = k^-2, z_k0 = eps k^-1.2.
    K = 10_000
    k = np.arange(1, K + 1, dtype=float)
    r = k ** -0.8
    c = r ** 2 / (8 * k ** -2.0)
    z0 = eps * k ** -1.2
    t0 = time.perf_counter()
    sc = staircase_from_init(r, c, z0, eps)
    t_stair = time.perf_counter() - t0
    t = np.geomspace(1e-2, 1.2 * sc.tau_start[-1] * ln, 400)
    t_exact = best_of(lambda: nqf.glv(r, c, z0, t))
    exact = nqf.glv(r, c, z0, t)
    numeric = None

    def run_numeric():
        nonlocal numeric
        numeric = nqf.glv(r, c, z0, t, method="LSODA")

    t_num = best_of(run_numeric, repeats=1)
    Ks = 1000
    t_radau = best_of(lambda: nqf.glv(r[:Ks], c[:Ks], z0[:Ks], t, method="Radau"), repeats=1)
    lines += [
        f"[GLV] {K} modes, diagonal C, eps = {eps:g}: {sc.order.size} ignitions up to "
        f"t = {t[-1]:.3g} (tau = {1.2 * sc.tau_start[-1]:.3g}), 400 output times",
        f"  glv numerical (LSODA rtol 1e-10, decoupled modes in chunks of 64): {t_num:.2f} s "
        f"(check: under 10 s); max relative deviation from the exact logistic "
        f"{np.max(np.abs(numeric / exact - 1)):.1e}",
        f"  glv default (decoupled -> exact logistic integral, Theorem 6):     {t_exact:.3f} s",
        f"  numerical Radau (sparse Jacobian), first {Ks} modes, same horizon:            {t_radau:.2f} s",
        f"  eps -> 0 event solver (staircase, closed form for diagonal C):               {t_stair:.3f} s",
    ]
    # 10^3 modes, dense Gram C from m = 100 samples.
    rng = np.random.default_rng(1)
    K, m = 1000, 100
    lam = rng.standard_normal((m, K)) / np.sqrt(K)
    y = rng.standard_normal(m)
    r, C = nqf.lv_coefficients(lam, y)
    t0 = time.perf_counter()
    sc = nqf.staircase(r, C, -1.0, loss0=float(np.mean(y ** 2)))
    t_stair = time.perf_counter() - t0
    t = np.geomspace(1e-2, 1.2 * sc.tau_start[-1] * ln, 400)
    z = None

    def run():
        nonlocal z
        z = nqf.glv(r, C, np.full(K, eps), t)

    t_dense = best_of(run, repeats=1)
    loss = np.mean((z[-1] @ lam.T - y) ** 2)
    lines += [
        f"[GLV] {K} modes, dense Gram C (m = {m}), eps = {eps:g}: {sc.order.size} ignitions, "
        f"{sc.suppressed.size} suppressions, last event at tau = {sc.tau_start[-1]:.4g}",
        f"  glv (LSODA, analytic Jacobian, rtol 1e-10) over the full staircase: {t_dense:.2f} s "
        "(check: under 10 s)",
        f"  final loss: GLV {loss:.3e}, staircase plateau {sc.loss[-1]:.3e}",
        f"  eps -> 0 event solver (staircase): {t_stair:.2f} s",
        "",
    ]


def main() -> str:
    torch.set_num_threads(2)
    lines = [f"nqf dynamics-speed benchmark, torch {torch.__version__}, numpy {np.__version__}, "
             f"{torch.get_num_threads()} torch threads", ""]
    mflow_section(lines)
    glv_section(lines)
    return "\n".join(lines)


if __name__ == "__main__":
    text = main()
    print(text, end="")
    out = Path(__file__).resolve().parent / "results" / "dynamics_speed.txt"
    out.write_text(text)
