"""Figure code shared by the power-law kinds (``featurewise_powerlaw``, ``samplewise_powerlaw``):
their two-panel figure whose left panel is the normalised loss on log-log axes beside the exact
theory and the predicted slopes. The figure-side companion of nqf.experiments.powerlaw (their
shared fitting code).
"""
from __future__ import annotations

import math

import numpy as np


def loglog_panel(ax, t, curves, tt, theory, theory_ds, fit_ds, *, xlabel: str, ylabel: str, label: str) -> None:
    """Normalised loss on log-log axes: GD seed-mean (band over seeds), exact theory dashed, the
    predicted asymptotic and corrected slopes dotted, the fitting window shaded."""
    from nqf import plotting

    keep, tkeep = t > 0, tt > 0
    norm = theory[0]
    lnc = np.log(curves[:, keep] / norm)
    ax.fill_between(t[keep], np.exp(lnc.min(0)), np.exp(lnc.max(0)), color="tab:blue", alpha=0.25, linewidth=0,
                    label=f"GD, {curves.shape[0]} seed(s): range")
    b, lo, hi = (float(fit_ds[k]) for k in ("exponent", "exponent_ci_low", "exponent_ci_high"))
    ax.plot(t[keep], np.exp(lnc.mean(0)), color="tab:blue",
            label=f"{label}: fitted $t^{{-b}}$, b = {b:.3f} [{lo:.3f}, {hi:.3f}]", **plotting.EXPERIMENT)
    ax.plot(tt[tkeep], theory[tkeep] / norm, color="k", label="exact theory", **plotting.THEORY)
    t_lo, t_hi = float(theory_ds["window_t_lo"]), float(theory_ds["window_t_hi"])
    ax.axvspan(t_lo, t_hi, color="0.88", zorder=0, label="fitting window")
    # Predicted slopes through the theory curve at the window's geometric middle, drawn over
    # the window widened by 2 at each end.
    tm = math.sqrt(t_lo * t_hi)
    Em = float(np.exp(np.interp(math.log(tm), np.log(tt[tkeep]), np.log(theory[tkeep] / norm))))
    seg = np.geomspace(t_lo / 2, t_hi * 2, 20)
    # (offset above and below the curve so that equal slopes stay distinguishable)
    for key, col, ls, shift, name in (("exponent_asymptotic", "tab:red", (0, (1, 1.5)), 2.5, "asymptotic"),
                                      ("exponent_corrected", "tab:orange", (0, (1, 3)), 0.4, "finite-eps corrected")):
        s = float(theory_ds[key])
        ax.plot(seg, shift * Em * (seg / tm) ** -s, color=col, linestyle=ls, linewidth=1.6,
                label=f"{name} slope {s:.3f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=max(1e-6, 0.3 * float(np.exp(lnc.min()))), top=1.5)
    ax.set_xlim(left=max(float(t[keep][0]), t_lo / 30), right=float(t[-1]) * 1.1)
    ax.legend(loc="lower left", fontsize="small")


def loss_figure(run, theory_ds, fit_ds, *, ylabel: str):
    """The power-law kinds' figure, drawn inside nqf.plotting.style: two panels, the left one the
    seed run's normalised loss (:func:`loglog_panel`). Returns (figure, left axes, right axes)."""
    from nqf import plotting

    fig, (ax, right) = plotting.plt.subplots(1, 2, figsize=(7.6, 3.3), constrained_layout=True,
                                             gridspec_kw={"width_ratios": [1.35, 1]})
    loglog_panel(ax, run["time"].values, run["loss"].values, theory_ds["time"].values,
                 theory_ds["excess_loss"].values, theory_ds, fit_ds,
                 xlabel=r"gradient-flow time $t = c\,\eta\cdot$step (Eq. 26)", ylabel=ylabel, label="GD")
    return fig, ax, right
