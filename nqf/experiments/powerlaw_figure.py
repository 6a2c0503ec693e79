"""Figure code shared by the power-law kinds (``featurewise_powerlaw``, ``samplewise_powerlaw``):
their two-panel figure whose left panel is the normalised loss on log-log axes beside the exact
theory and the predicted slopes. The figure-side companion of nqf.experiments.powerlaw (their
shared fitting code).
"""
from __future__ import annotations

import math

import numpy as np


def _slope_line(ax, t_lo, t_hi, t_mid, E_mid, slope, shift, over=True, **style) -> None:
    """A reference line of ``slope`` through ``shift`` x (t_mid, E_mid), over the fitting window
    (``over``: widened by 2 at each end)."""
    seg = np.geomspace(t_lo / 2, t_hi * 2, 20) if over else np.geomspace(t_lo, t_hi, 20)
    ax.plot(seg, shift * E_mid * (seg / t_mid) ** -slope, **style)


def loglog_panel(ax, spread_ax, t, curves, tt, theory, theory_ds, fit_ds, *, xlabel: str, ylabel: str,
                 law: str) -> None:
    """Normalised loss on log-log axes: GD seed-mean solid, exact theory dashed, the fitting window
    shaded; above the curve the predicted slope (``law``, asymptotic; the finite-eps corrected
    one beside it where the two differ at the shown precision), below it GD's fitted slope with
    its CI. ``spread_ax`` (below, sharing t): each seed's loss relative to the seed mean, min..max
    band (on the log panel the seeds lie within a line's width of each other)."""
    from nqf import plotting

    keep, tkeep = t > 0, tt > 0
    norm = theory[0]
    lnc = np.log(curves[:, keep] / norm)
    mean = np.exp(lnc.mean(0))
    n = curves.shape[0]
    ax.plot(t[keep], mean, color="tab:blue", label=f"GD, mean of {n} seed(s)", **plotting.EXPERIMENT)
    ax.plot(tt[tkeep], theory[tkeep] / norm, color="k", label="exact theory", **plotting.THEORY)
    t_lo, t_hi = float(theory_ds["window_t_lo"]), float(theory_ds["window_t_hi"])
    ax.axvspan(t_lo, t_hi, color="0.88", zorder=0, label="fitting window")
    # Reference slopes through the curves at the window's geometric middle, offset above (theory)
    # and below (GD's fit) so that they stay apart from the curve and from each other.
    tm = math.sqrt(t_lo * t_hi)
    E_th = float(np.exp(np.interp(math.log(tm), np.log(tt[tkeep]), np.log(theory[tkeep] / norm))))
    E_gd = float(np.exp(np.interp(math.log(tm), np.log(t[keep]), lnc.mean(0))))
    asym, corr = float(theory_ds["exponent_asymptotic"]), float(theory_ds["exponent_corrected"])
    if f"{asym:.3f}" == f"{corr:.3f}":
        lines = [(asym, "tab:red", f"theory slope {law} = {asym:.3f} (finite $\\epsilon$: same)")]
    else:
        lines = [(asym, "tab:red", f"theory slope {law} = {asym:.3f}"),
                 (corr, "tab:orange", f"theory slope at finite $\\epsilon$ = {corr:.3f}")]
    for (s, col, label), shift in zip(lines, (2.5, 5.0)):
        _slope_line(ax, t_lo, t_hi, tm, E_th, s, shift, color=col, linestyle=(0, (1, 1.5)), linewidth=1.6, label=label)
    b, lo, hi = (float(fit_ds[k]) for k in ("exponent", "exponent_ci_low", "exponent_ci_high"))
    _slope_line(ax, t_lo, t_hi, tm, E_gd, b, 0.4, color="tab:blue", linestyle="-.", linewidth=1.2,
                label=f"GD fitted slope {b:.3f} [{lo:.3f}, {hi:.3f}]", over=False)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=max(1e-7, 0.02 * float(np.exp(lnc.min()))), top=1.5)  # room for the legend
    ax.set_xlim(left=max(float(t[keep][0]), t_lo / 30), right=float(t[-1]) * 1.1)
    ax.tick_params(labelbottom=False)
    plotting.legend(ax, locations=("lower left", "upper right", "lower right"), fontsize="small")
    rel = 100.0 * (np.exp(lnc - lnc.mean(0)) - 1.0)
    spread_ax.fill_between(t[keep], rel.min(0), rel.max(0), color="tab:blue", alpha=0.35, linewidth=0)
    spread_ax.axhline(0.0, color="tab:blue", linewidth=0.8)
    spread_ax.axvspan(t_lo, t_hi, color="0.88", zorder=0)
    spread_ax.set_xscale("log")
    spread_ax.set_xlabel(xlabel)
    spread_ax.set_ylabel(f"GD seeds\n(min..max of {n})\nvs mean (%)", fontsize="small")


def loss_figure(run, theory_ds, fit_ds, *, ylabel: str, law: str):
    """The power-law kinds' figure, drawn inside nqf.plotting.style: two panels, the left one the
    seed run's normalised loss (:func:`loglog_panel`, with its seed-spread strip below). Returns
    (figure, left axes, right axes)."""
    from nqf import plotting

    fig = plotting.plt.figure(figsize=(7.6, 4.6), layout="constrained")
    grid = fig.add_gridspec(2, 2, width_ratios=[1.35, 1], height_ratios=[3.4, 1])
    ax = fig.add_subplot(grid[0, 0])
    spread = fig.add_subplot(grid[1, 0], sharex=ax)
    right = fig.add_subplot(grid[:, 1])
    loglog_panel(ax, spread, run["time"].values, run["loss"].values, theory_ds["time"].values,
                 theory_ds["excess_loss"].values, theory_ds, fit_ds,
                 xlabel=r"gradient-flow time $t = c\,\eta\cdot$step (Eq. 26)", ylabel=ylabel, law=law)
    fig.align_ylabels([ax, spread])
    return fig, ax, right
