"""Figure stage of experiment kind ``init_scaling``, apart from its other stages
(nqf.experiments.init_scaling, which never imports this module): t*_k against ln(1/eps) per
architecture (GD beside Theorem 8) and the seed scatter of t*_k.
"""
from __future__ import annotations

import numpy as np
import xarray as xr


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """t*_k against ln(1/eps) per architecture (GD markers, Theorem 8 dashed) and the seed scatter."""
    from nqf import plotting

    archs = list(fit_ds["architecture"].values)
    K = fit_ds.sizes["mode"]
    x = np.log(1.0 / fit_ds["eps"].values)
    colors = plotting.mode_colors(K)
    ncols = 4
    nrows = -(-(len(archs) + 1) // ncols)
    with plotting.style(font_size, dpi):
        fig, axes = plotting.plt.subplots(nrows, ncols, figsize=(1.95 * ncols, 2.3 * nrows + 0.9),
                                          constrained_layout=True, squeeze=False)
        for ax, arch in zip(axes.flat, archs):
            for k, col in enumerate(colors):
                ax.plot(x, fit_ds["t_star_theorem8"].sel(architecture=arch).values[:, k], color=col, **plotting.THEORY)
                ax.plot(x, fit_ds["t_star_module"].sel(architecture=arch).values[:, k], color=col, linestyle="none",
                        marker="x", markersize=3.5, alpha=0.8)
                ax.plot(x, fit_ds["t_star_measured"].sel(architecture=arch).values[:, k], color=col, **plotting.MARKERS,
                        label=f"{float(fit_ds['slope_measured'].sel(architecture=arch)[k]):.3f} / "
                              f"{float(fit_ds['slope_predicted'].sel(architecture=arch)[k]):.3f}")
            top = np.nanmax([fit_ds[v].sel(architecture=arch).values for v in ("t_star_theorem8", "t_star_measured")])
            if np.isfinite(top):
                ax.set_ylim(0.0, 1.7 * top)  # headroom: the slope legend sits above the lines
            ax.set_title(f"{arch} ({theory_ds['regime'].sel(architecture=arch).item()})", fontsize=font_size - 1)
            plotting.legend(ax, locations=("upper left", "lower right", "center left", "upper center"),
                            title="slope GD / theory", title_fontsize=font_size - 2, fontsize=font_size - 2,
                            handlelength=0.8)
        for ax in axes[-1]:
            ax.set_xlabel(r"$\ln(1/\epsilon)$")
        for ax in axes[:, 0]:
            ax.set_ylabel(r"ignition time $t^*_k$")
        ax = axes.flat[len(archs)]
        pred, contract = fit_ds["scatter_predicted"].values, fit_ds["scatter_contract"].values
        meas = fit_ds["scatter_measured"].values
        if np.any(np.isfinite(meas)):
            lo, hi = np.nanmin([pred, meas]) / 1.5, np.nanmax([pred, meas, contract]) * 1.5
            line = np.array([lo, hi])
            band = float(np.nanmedian(fit_ds["scatter_tolerance"].values)) if "scatter_tolerance" in fit_ds else 0.2
            ax.fill_between(line, line * (1 - band), line * (1 + band), color="0.9",
                            label=rf"$\pm {100 * band:.0f}\%$ (median tolerance)")
            ax.plot(line, line, color="k", linewidth=0.8)
            for k, col in enumerate(colors):
                ax.plot(contract[:, k], meas[:, k], linestyle="none", marker="x", color="0.55", markersize=4,
                        label=r"vs $\sqrt{\psi'(d/2)}/(a\zeta_k)$" if k == 0 else None)
                ax.plot(pred[:, k], meas[:, k], color=col, **plotting.MARKERS,
                        label=r"vs $\sqrt{\psi'((d-j_k)/2)}/(a\zeta_k)$" if k == 0 else None)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(r"predicted std $t^*_k$")
            ax.set_ylabel(r"measured std $t^*_k$")
            ax.set_title(f"seed scatter, {fit_ds.attrs['seeds']} seeds", fontsize=font_size - 1)
            plotting.legend(ax, locations=("lower right", "upper left"), fontsize=font_size - 2, handlelength=0.8)
        for extra in axes.flat[len(archs) + 1:]:
            extra.axis("off")
        fig.suptitle(f"{cfg['description']}\ncircles: GD on the NQF; x: real module (where trained); "
                     f"dashed: Theorem 8; colours: modes 1..{K}",
                     fontsize=font_size + 1)
        plotting.save(fig, paths)
