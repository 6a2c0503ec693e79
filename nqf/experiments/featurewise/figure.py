"""Figure stage of experiment kind ``featurewise``, apart from its other stages
(nqf.experiments.featurewise, which never imports this module): paper Figure 3 (left, middle):
the modes z_k(t) of GD beside Theorem 6, and the excess loss with its plateaus.
"""
from __future__ import annotations

import numpy as np
import xarray as xr


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Figure 3 (left, middle): z_k(t) of GD on Theorem 6, and the excess loss with plateaus."""
    from nqf import plotting

    gd = run_ds["gd"].isel(seed=0)
    t, z = gd["time"].values, gd["z"].values
    tt = theory_ds["time"].values
    t_star = theory_ds["t_star"].values
    colors = plotting.mode_colors(z.shape[1])
    loss_min = float(theory_ds["loss"].values[-1] - theory_ds["excess_loss"].values[-1])
    with plotting.style(font_size, dpi):
        fig, (ax_z, ax_l) = plotting.plt.subplots(1, 2, figsize=(7.2, 2.9), constrained_layout=True)
        keep = t > 0
        # Thin the markers to about 60 per mode, evenly in t, so the theory line stays visible.
        idx = np.unique(np.searchsorted(t, np.linspace(t[keep][0], t[-1], 60)))
        for k, col in enumerate(colors):
            ax_z.plot(tt[1:], theory_ds["z_closed_form"].values[1:, k], color=col, linewidth=1.1)
            ax_z.plot(t[idx], z[idx, k], color=col, **plotting.MARKERS,
                      label=f"$r_{k + 1}$ = {fit_ds['r'].values[k]:.4g}")
            for ax in (ax_z, ax_l):
                ax.axvline(t_star[k], color=col, **plotting.IGNITION)
        ax_z.set_yscale("log")
        ax_z.set_xlabel(r"gradient-flow time $t = c\,\eta \cdot$step")
        ax_z.set_ylabel(r"eigenvalue $z_k$ of $WW^\top$")
        ax_z.set_title(r"modes: GD (markers), Theorem 6 (lines)")
        plotting.legend(ax_z, locations=("lower right", "center right", "upper left"), ncol=1, handlelength=1.0)
        ax_l.plot(t[keep], gd["loss"].values[keep] - loss_min, color="k", label="GD", **plotting.EXPERIMENT)
        ax_l.plot(tt[1:], theory_ds["excess_loss"].values[1:], color="tab:red", label="GLV theory",
                  **plotting.THEORY)
        for level in theory_ds["plateau_loss"].values[:-1] - loss_min:
            ax_l.axhline(level, color="0.6", linewidth=0.6, linestyle=(0, (1, 3)))
        ax_l.set_yscale("log")
        ax_l.set_xlabel(r"gradient-flow time $t = c\,\eta \cdot$step")
        ax_l.set_ylabel(r"excess loss $L - L_{\min}$")
        ax_l.set_title(r"loss plateaus; dashed: $t^*_k$ (Thm 8)")
        plotting.legend(ax_l, locations=("lower left", "upper right", "center right", "lower right"))
        fig.suptitle(f"{cfg['description']} ($\\epsilon$ = {cfg['eps']:g}, "
                     f"lr = {fit_ds.attrs['lr']:g}, loss {cfg.get('loss', 'mean')})", fontsize=font_size + 1)
        plotting.save(fig, paths)
