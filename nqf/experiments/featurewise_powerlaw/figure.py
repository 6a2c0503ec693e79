"""Figure stage of experiment kind ``featurewise_powerlaw``, apart from its other stages
(nqf.experiments.featurewise_powerlaw, which never imports this module): the normalised excess
loss on log-log axes with its fitted and predicted slopes (paper Figure 3 right), and the number
of distinct drops against ln(1/eps).
"""
from __future__ import annotations

import math

import numpy as np
import xarray as xr

from nqf.experiments.powerlaw_figure import loss_figure


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Left: normalised excess loss on log-log axes with the fitted and predicted slopes. Right: the
    number of distinct drops against ln(1/eps), predicted, measured and the asymptotic line."""
    from nqf import plotting

    with plotting.style(font_size, dpi):
        fig, ax, axc = loss_figure(run_ds["seeds"], theory_ds, fit_ds, ylabel=r"normalised excess loss $E(t)/E(0)$",
                                   law=r"$(\alpha_1-1)/\alpha_2$")
        ax.set_title(f"$\\epsilon$ = {cfg['eps']:g}: excess loss (Thm 9)")
        grid = theory_ds["eps_grid"].values
        xg = np.log(1.0 / grid)
        axc.step(xg, theory_ds["drops_grid"].values, where="mid", color="k", linewidth=1.2,
                 label="exact theory (count_drops)")
        x = np.log(1.0 / fit_ds["eps"].values)
        axc.plot(x, fit_ds["drops_measured"].values, color="tab:blue", linestyle="none", marker="o",
                 markersize=5, markerfacecolor="none", label="GD (count_drops)")
        w = float(theory_ds["drop_width_fit"])
        axc.plot(xg, float(theory_ds["drops_slope"]) * xg + float(theory_ds["drops_intercept"]),
                 color="tab:red", label=f"linear law $\\alpha_2\\ln(1/\\epsilon)/w$ + c, w = {w:.2f} (fitted)",
                 **plotting.THEORY)
        axc.plot(xg, theory_ds["alpha2_fit"].item() * xg / math.log(81.0), color="0.5", linestyle=(0, (1, 2)),
                 label=r"$\alpha_2\ln(1/\epsilon)/\ln 81$ (gap > width)")
        axc.set_xlabel(r"$\ln(1/\epsilon)$")
        axc.set_ylabel("distinct loss drops (resolved plateaus)")
        axc.set_title("resolved-to-merged crossover")
        plotting.legend(axc, locations=("upper left", "lower right"), fontsize="small")
        fig.suptitle(f"{cfg['description']} (flow step c lr = {float(fit_ds['flow_lr']):g})", fontsize=font_size + 1)
        plotting.save(fig, paths)
