"""Your own layer, from its unit function to its predicted training curve, beside real training.

    python examples/own_layer.py OUTDIR [--small]

The layer is one nqf does not ship, an ordinary torch.nn.Module: f(x) = V sin(U x), k outputs,
d units. One line tells nqf where its units are, ``UNITS = {"U": 0, "V": 1}`` (unit i: w_i =
[U[i, :]; V[:, i]], p = D + k); the unit function is derived from the module's forward, never
written again. The path, each step a library call:

1. A(x) by autograd from the module, and the checks Theorem 1 needs (nqf.expansion:
   smoothness, ZGZ, the Z2 symmetry that makes the error O(|W|^4)).
2. The data's statistics and the regime: nqf.predict picks the exact solution whose condition
   holds (here a generic Gaussian init: the closed M-flow) and returns M(t) and the loss.
3. The modes: eigenvectors q_a of Y = (4/n) sum y A with positive eigenvalue (the directions the
   flow grows), reduced by nqf.theory.mode_theory.reduce_modes to Theorem 8's constants; Theorem 8
   predicts each ignition time from the seed's own initial amplitudes; predict_exponent gives
   the loss's power-law exponent where the spectrum allows one (a power-law teacher here).
4. The real module trained by gradient descent on its data (nqf.train(layer, y, x=x, units=UNITS),
   which records M = W W^T of its unit weights), its loss and mode amplitudes q_a^T W W^T q_a
   beside the prediction, plotted to OUTDIR.

Targets are (n, k): the loss is (1/n) sum over samples and outputs, the convention of every
entry point (nqf.theory.losses), so train's clock t = lr step is predict's t.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

import nqf
from nqf.architectures.mode_designs import whitened
from nqf.theory.ignition import mode_ignition_times
from nqf.theory.mflow import SecondMoment
from nqf.theory.mode_theory import coupled_faster, effective_amplitudes, reduce_modes


class SinLayer(torch.nn.Module):
    """f(x) = V sin(U x): U (d, D) input weights, V (k, d) readout; an ordinary module."""

    def __init__(self, D: int, k: int, d: int, scale: float, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.U = torch.nn.Parameter(scale * torch.randn(d, D, generator=g, dtype=torch.float64))
        self.V = torch.nn.Parameter(scale * torch.randn(k, d, generator=g, dtype=torch.float64))

    def forward(self, x):
        return torch.sin(x @ self.U.T) @ self.V.T


UNITS = {"U": 0, "V": 1}  # the parameters holding the units, and the axis that indexes them


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="where own_layer.png and own_layer.json are written")
    parser.add_argument("--small", action="store_true", help="a small size (the test's)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    K = 5 if args.small else 8           # modes = outputs (the teacher's singular values)
    D, k, d = K + 2, K, K + 2            # inputs, outputs, units (d >= K: every mode can be learned)
    n = 8 * D                            # samples
    lr, eps = 0.05, 1e-3                 # GD step; initial weights ~ sqrt(eps)
    gen = torch.Generator().manual_seed(1)

    # data: exactly whitened inputs, a power-law linear teacher y = B x (2-D targets (n, k))
    x = whitened(torch.randn(n, D, generator=gen, dtype=torch.float64))
    s = np.arange(1, K + 1, dtype=float) ** -1.0
    left = torch.linalg.qr(torch.randn(k, K, generator=gen, dtype=torch.float64))[0]
    right = torch.linalg.qr(torch.randn(D, K, generator=gen, dtype=torch.float64))[0]
    B = 0.5 * left @ torch.diag(torch.as_tensor(s)) @ right.T
    y = (x @ B.T).numpy()

    # 1. A(x) and the expansion checks, from the module itself
    p = D + k
    layer = SinLayer(D, k, d, scale=np.sqrt(eps / p))
    info = nqf.expansion(layer, x[:2], units=UNITS)
    A = nqf.structure_matrix(layer, x, units=UNITS)            # (n, k, p, p)
    form = nqf.DenseForm(A.reshape(n * k, p, p))               # rows sample-major: (sample, output)
    print(f"A(x): p = {p}, ZGZ {info.zgz_holds}, Z2 {info.z2_symmetric} -> error O(|W|^{info.error_order})")

    # 2. the regime and the predicted curve
    W0 = nqf.ModuleUnits(layer, UNITS).unit_weights().detach().numpy()
    stats = SecondMoment.from_form(form, y)
    gamma, vecs = np.linalg.eigh(stats.Y)
    Q = vecs[:, np.argsort(-gamma)[:K]]                        # the K growing directions of Y
    red = reduce_modes(form, y, Q)
    z0 = effective_amplitudes(Q.T @ W0, coupled_faster(red.rate, red.coupling))
    t_theory = nqf.predicted_ignition_times(red.zeta, red.C_k, 1.0, c=red.amplitude_unit * z0, a=red.a)
    t_end = 1.6 * float(np.nanmax(t_theory))
    steps = int(np.ceil(t_end / lr))
    t = lr * nqf.training.loop.log_step_grid(steps, 200)
    sol = nqf.predict(form, y, t, W0=W0)
    print(f"predict: method {sol.method} (condition residual {sol.residual:.1e}); regime of the modes "
          f"{red.regime}, decoupling residual {red.decoupling_residual:.1e}")

    # 3. ignition times and the exponent
    sat = red.saturation
    t_flow = mode_ignition_times(t, sol.M, Q, saturation=sat)
    V = red.gamma ** 2 / (4 * red.kappa)                       # the loss mode a removes
    k_idx = np.arange(1, K + 1)
    alpha1, alpha2 = -nqf.theory.scaling.loglog_slope(k_idx, V)[0], -nqf.theory.scaling.loglog_slope(k_idx, red.zeta)[0]
    print(f"spectrum: V_a ~ a^-{alpha1:.3g}, zeta_a ~ a^-{alpha2:.3g}: Theorem 9's exponent as K -> inf "
          f"(alpha1 - 1) / alpha2 = {(alpha1 - 1) / alpha2:.3g}")
    try:  # one typical amplitude for all modes
        pred = nqf.predict_exponent(red.zeta, V, C=red.C_k, z0=red.amplitude_unit * float(np.mean(z0)),
                                    a=red.a, min_modes=3)
        print(f"predicted exponent over these {K} modes: loss ~ t^-{pred.asymptotic:.3g} "
              f"(finite-eps corrected {pred.corrected:.3g})")
    except ValueError as exc:  # too few modes, or a spectrum without a power law
        pred = None
        print(f"no power law over these {K} modes: {exc}")

    # 4. the real module, trained by GD from the same W0
    run = nqf.train(layer, y, x=x, units=UNITS, lr=lr, steps=steps, record_steps=np.rint(t / lr).astype(int))
    t_run, M_run = run["time"].values, run["M"].values[0]
    t_trained = mode_ignition_times(t_run, M_run, Q, saturation=sat)
    # the NQF under the same GD steps (exact recursion): separates GD's O(lr) lag from the module's error
    gd = nqf.discrete_flow(form, W0=W0, y=y, lr=lr, steps=steps, record_steps=run["step"].values)
    t_gd = mode_ignition_times(gd["time"].values, gd["M"].values, Q, saturation=sat)
    print("mode  t* Theorem 8  t* predicted (M-flow)  t* NQF under GD  t* trained module  trained/predicted - 1")
    for a in range(K):
        print(f"{a:4d}  {t_theory[a]:12.3f}  {t_flow[a]:21.3f}  {t_gd[a]:15.3f}  {t_trained[a]:17.3f}  "
              f"{t_trained[a] / t_flow[a] - 1:+20.3f}")
    _plot(args.outdir, t, sol.loss, run["loss"].values[0], np.einsum("pa,tpq,qa->ta", Q, sol.M, Q),
          np.einsum("pa,tpq,qa->ta", Q, M_run, Q), t_flow)
    seconds = time.perf_counter() - start
    result = {"method": sol.method, "regime": red.regime, "t_theorem8": t_theory.tolist(),
              "t_predicted": t_flow.tolist(), "t_nqf_gd": t_gd.tolist(), "t_trained": t_trained.tolist(),
              "exponent": None if pred is None else pred.asymptotic, "seconds": seconds}
    (args.outdir / "own_layer.json").write_text(json.dumps(result, indent=1))
    print(f"plot: {args.outdir / 'own_layer.png'}; run time {seconds:.1f} s")
    return result


def _plot(outdir: Path, t, loss_pred, loss_run, z_pred, z_run, t_star) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4))
    ax0.loglog(t[1:], loss_pred[1:], "k-", label="predicted (NQF flow)")
    ax0.loglog(t[1:], loss_run[1:], "r--", label="trained module (GD)")
    ax0.set(xlabel="t = lr step", ylabel="loss (1/n) sum (f - y)^2", title="loss")
    ax0.legend()
    for a in range(z_pred.shape[1]):
        line, = ax1.semilogy(t, z_pred[:, a], "-", label=f"mode {a}")
        ax1.semilogy(t, z_run[:, a], "--", color=line.get_color())
        if np.isfinite(t_star[a]):
            ax1.axvline(t_star[a], color=line.get_color(), lw=0.5)
    ax1.set(xlabel="t = lr step", ylabel="z_a = q_a^T W W^T q_a",
            title="modes: predicted (solid), trained (dashed)")
    ax1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(outdir / "own_layer.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main(sys.argv[1:])
