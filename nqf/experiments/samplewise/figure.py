"""Figure stage of experiment kind ``samplewise``, apart from its other stages
(nqf.experiments.samplewise, which never imports this module): paper Figure 4: per-sample losses
and the total loss with its m plateaus.
"""
from __future__ import annotations

import numpy as np
import xarray as xr


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Figure 4: per-sample losses (left) and the total loss with m plateaus (right)."""
    from nqf import plotting

    gd = run_ds["gd"].isel(seed=0)
    t, tt = gd["time"].values, theory_ds["time"].values
    colors = plotting.mode_colors(gd.sizes["sample"])
    with plotting.style(font_size, dpi):
        fig, (ax_s, ax_l) = plotting.plt.subplots(1, 2, figsize=(7.2, 2.9), constrained_layout=True)
        for mu, col in enumerate(colors):
            ax_s.plot(t[1:], gd["sample_loss"].values[1:, mu], color=col, label=f"sample {mu + 1}",
                      **plotting.EXPERIMENT)
            ax_s.plot(tt[1:], theory_ds["sample_loss"].values[1:, mu], color="k", **plotting.THEORY)
            for ax in (ax_s, ax_l):
                ax.axvline(fit_ds["t_star_asymptotic"].values[mu], color=col, **plotting.IGNITION)
        ax_l.plot(t[1:], gd["loss"].values[1:], color="k", label="GD", **plotting.EXPERIMENT)
        ax_l.plot(tt[1:], theory_ds["loss"].values[1:], color="tab:red", label="theory (Thm 5)",
                  **plotting.THEORY)
        for ax in (ax_s, ax_l):
            ax.set_yscale("log")
            ax.set_xlabel(r"gradient-flow time $t = c\,\eta\cdot$step")
        ax_s.set_ylim(bottom=1e-8 * float(np.max(gd["sample_loss"].values[0])))
        ax_s.set_ylabel(r"per-sample loss $(f_\mu - y_\mu)^2$")
        ax_s.set_title("samples: GD solid, theory dashed")
        plotting.legend(ax_s, locations=("lower left", "lower right", "upper right"))
        ax_l.set_ylabel("training loss")
        ax_l.set_title(r"dashed verticals: $\ln(1/\epsilon)/\zeta_\mu$")
        plotting.legend(ax_l, locations=("lower left", "upper right", "center right"))
        fig.suptitle(f"{cfg['description']} ($\\epsilon$ = {cfg['eps']:g}, lr = {fit_ds.attrs['lr']:g}, "
                     f"loss {cfg.get('loss', 'mean')})",
                     fontsize=font_size + 1)
        plotting.save(fig, paths)
