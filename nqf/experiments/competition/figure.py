"""Figure stage of experiment kind ``competition``, apart from its other stages
(nqf.experiments.competition, which never imports this module): x_k(tau) = ln z_k / ln(1/eps) and
the loss against rescaled time for each eps, beside the eps -> 0 staircase.
"""
from __future__ import annotations

import numpy as np
import xarray as xr

from nqf.experiments.competition import run_id
from nqf.theory.staircase import staircase


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """x_k(tau) = ln z_k / ln(1/eps) and the loss against rescaled time for each eps, with the staircase."""
    from nqf import plotting

    eps_list = [float(e) for e in cfg["eps"]]
    K = theory_ds.sizes["mode"]
    colors = plotting.mode_colors(K)
    tau_max = float(np.nanmax(theory_ds["tau"].values))
    grid = np.linspace(0, tau_max, 600)
    sc = staircase(theory_ds["r"].values, theory_ds["C"].values, -1.0, loss0=theory_ds.attrs["loss0"])
    sc_x = sc.x(grid)
    shades = np.linspace(0.35, 1.0, len(eps_list))
    with plotting.style(font_size, dpi):
        fig, (ax_x, ax_l) = plotting.plt.subplots(1, 2, figsize=(7.4, 3.0), constrained_layout=True)
        for i, eps in enumerate(sorted(eps_list, reverse=True)):
            run = run_ds[run_id(eps)].isel(seed=0)
            tau, z = run["tau"].values, run["z"].values
            keep = tau > 0
            for k, col in enumerate(colors):
                ax_x.plot(tau[keep], np.log(z[keep, k]) / np.log(1 / eps), color=col, alpha=shades[i],
                          linewidth=1.2, label=f"mode {k + 1}" if i == len(eps_list) - 1 else None)
            ax_l.plot(tau[keep], run["loss"].values[keep], color="0.15", alpha=shades[i], linewidth=1.2,
                      label=f"GD, $\\epsilon$ = {eps:.0e}")
        for k, col in enumerate(colors):
            ax_x.plot(grid, sc_x[:, k], color="k", linewidth=0.9, linestyle="--")
        ax_l.step(grid, sc.loss_at(grid), where="post", color="tab:red",
                  label=r"staircase ($\epsilon \to 0$)", **plotting.THEORY)
        ax_x.set_ylim(-1.6, 0.15)
        ax_x.set_xlabel(r"rescaled time $\tau = t / \ln(1/\epsilon)$")
        ax_x.set_ylabel(r"$x_k = \ln z_k / \ln(1/\epsilon)$")
        ax_x.set_title("modes: GD (solid, darker = smaller $\\epsilon$),\nstaircase (black dashed)")
        plotting.legend(ax_x, locations=("lower right", "lower left", "center right"))
        ax_l.set_yscale("log")
        ax_l.set_xlabel(r"rescaled time $\tau = t / \ln(1/\epsilon)$")
        ax_l.set_ylabel("training loss")
        ax_l.set_title("loss approaches the staircase as $\\epsilon \\to 0$")
        plotting.legend(ax_l, locations=("lower left", "upper right", "center left"))
        fig.suptitle(cfg["description"], fontsize=font_size + 1)
        plotting.save(fig, paths)
