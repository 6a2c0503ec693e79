"""Figure stage of experiment kind ``collapse``, apart from its other stages
(nqf.experiments.collapse, which never imports this module): the loss against tau = t / ln(1/eps)
for every architecture and eps, and the ignition times against 1 / ln(1/eps).
"""
from __future__ import annotations

import numpy as np
import xarray as xr

from nqf.experiments.collapse import run_id


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Loss against tau for every architecture and eps (seed 0), and ignition times against 1/ln(1/eps)."""
    from nqf import plotting

    archs = list(fit_ds["architecture"].values)
    eps_list = list(fit_ds["eps"].values)
    colors = dict(zip(archs, ["tab:blue", "tab:orange", "tab:green", "tab:purple"]))
    styles = ["-", "--", ":", "-."]
    with plotting.style(font_size, dpi):
        fig, (ax_l, ax_t) = plotting.plt.subplots(1, 2, figsize=(7.4, 3.0), constrained_layout=True)
        for e, eps in enumerate(eps_list):
            for arch in archs:
                run = run_ds[run_id(arch, eps)].isel(seed=0)
                keep = run["tau"].values > 0
                ax_l.plot(run["tau"].values[keep], run["loss"].values[keep], color=colors[arch],
                          linestyle=styles[e % 4], linewidth=1.2,
                          label=f"{arch}" if e == 0 else None)
        tau_star = np.sort(theory_ds["tau_star"].values[np.isfinite(theory_ds["tau_star"].values)])
        edges = np.concatenate([[0.0], tau_star, [ax_l.get_xlim()[1]]])
        plateaus = theory_ds["plateau_loss"].values[:edges.size - 1]
        floor = 1e-6 * plateaus[0]  # the last plateau is 0: draw it at the axis floor
        ax_l.stairs(np.maximum(plateaus, floor), edges, baseline=None, color="k", linewidth=1.0,
                    linestyle=(0, (2, 2)), label=r"$\epsilon \to 0$ limit")
        ax_l.set_yscale("log")
        ax_l.set_ylim(bottom=floor)
        ax_l.set_xlabel(r"rescaled time $\tau = t / \ln(1/\epsilon)$")
        ax_l.set_ylabel("training loss")
        ax_l.set_title("loss: " + ", ".join(f"{s} $\\epsilon$={e:.0e}" for s, e in zip(styles, eps_list)),
                       fontsize=font_size - 1)
        plotting.legend(ax_l, locations=("lower left", "upper right", "lower right"))
        inv_log = 1 / np.log(1 / np.array(eps_list))
        mode_colors = plotting.mode_colors(fit_ds.sizes["mode"])
        for k, col in enumerate(mode_colors):
            for arch, marker in zip(archs, "osD^"):
                vals = fit_ds["tau_star_measured"].sel(architecture=arch).values[:, :, k]
                ax_t.plot(inv_log, vals.mean(axis=1), marker=marker, color=col, linestyle="none",
                          markerfacecolor="none", label=arch if k == 0 else None)
            ax_t.axhline(fit_ds["tau_star_limit"].values[k], color=col, **plotting.THEORY)
        ax_t.set_xlim(left=0)
        ax_t.set_xlabel(r"$1 / \ln(1/\epsilon)$")
        ax_t.set_ylabel(r"ignition time $t^*_k / \ln(1/\epsilon)$")
        ax_t.set_title(r"GD (markers) $\to 1/r_k$ (dashed) as $\epsilon \to 0$")
        plotting.legend(ax_t, locations=("upper right", "center right", "center left", "upper left"))
        fig.suptitle(cfg["description"], fontsize=font_size + 1)
        plotting.save(fig, paths)
