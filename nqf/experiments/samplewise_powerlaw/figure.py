"""Figure stage of experiment kind ``samplewise_powerlaw``, apart from its other stages
(nqf.experiments.samplewise_powerlaw, which never imports this module): the normalised loss on
log-log axes with its fitted and predicted slopes, and the exact ignition times t*_mu against mu.
"""
from __future__ import annotations

import xarray as xr

from nqf.experiments.powerlaw_figure import loss_figure


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Left: normalised loss on log-log axes with the fitted and predicted slopes. Right: the exact
    ignition times t*_mu against mu with the eps -> 0 law ln(1/z_mu(0)) / zeta_mu."""
    from nqf import plotting

    pred = (cfg["gamma1"] * 2 - 1) / cfg["gamma2"]
    with plotting.style(font_size, dpi):
        fig, ax, axt = loss_figure(run_ds["seeds"], theory_ds, fit_ds, ylabel=r"normalised loss $L(t)/L(0)$",
                                   law=r"$(2\gamma_1-1)/\gamma_2$")
        ax.set_title(f"(2$\\gamma_1$-1)/$\\gamma_2$ = {pred:.3f} (Thm 11)")
        mu = theory_ds["sample"].values
        axt.plot(mu, theory_ds["t_star"].values, color="k", label=r"Eq. 36: $f_\mu = y_\mu/2$", linewidth=1.2)
        axt.plot(mu, theory_ds["t_star_asymptotic"].values, color="tab:red",
                 label=r"$\ln(1/z_\mu(0))/\zeta_\mu$ (Eq. 47)", **plotting.THEORY)
        k_lo, k_hi = int(theory_ds["window_k_lo"]), int(theory_ds["window_k_hi"])
        axt.axvspan(k_lo, k_hi, color="0.88", zorder=0, label="window's samples")
        axt.set_xscale("log")
        axt.set_yscale("log")
        axt.set_xlabel(r"sample index $\mu$")
        axt.set_ylabel(r"ignition time $t^*_\mu$")
        axt.set_title(r"ignitions: $t^*_\mu \propto \mu^{\gamma_2}$")
        plotting.legend(axt, locations=("upper left", "lower right"), fontsize="small")
        fig.suptitle(f"{cfg['description']} (flow step c lr = {float(fit_ds['flow_lr']):g})", fontsize=font_size + 1)
        plotting.save(fig, paths)
