"""Figure stage of experiment kind ``fourier_powerlaw``, apart from its other stages
(nqf.experiments.fourier_powerlaw, which never imports this module): paper Figure 5: the loss
curves of the Fourier MLP, its NQF and the raw-input MLP at the main theta, and the fitted
exponents against theta.
"""
from __future__ import annotations

import math

import numpy as np
import xarray as xr

from nqf.experiments.fourier_powerlaw.fitting import geo_mean


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Paper Fig. 5. Left: L(t)/L(0) at the main theta (Fourier MLP with its seed band, its NQF,
    the raw-input MLP, the predicted slope over the shaded window). Right: exponent against theta,
    fits with 95% intervals beside the asymptotic (dashed) and finite-eps corrected (dotted) values."""
    from nqf import plotting

    thetas = theory_ds["theta"].values
    j = int(np.argmin(np.abs(thetas - float(cfg["main_theta"]))))
    theta = thetas[j]
    lo, hi = float(theory_ds["t_lo"][j]), float(theory_ds["t_hi"][j])
    with plotting.style(font_size, dpi):
        fig, (ax, ax_b) = plotting.plt.subplots(1, 2, figsize=(7.4, 3.0), constrained_layout=True)
        for name, color, style, label in (("fourier_mlp", "tab:blue", plotting.EXPERIMENT, "Fourier MLP"),
                                          ("nqf", "k", plotting.THEORY, "its NQF (GD)"),
                                          ("raw_mlp", "tab:red", plotting.EXPERIMENT, "tanh MLP on raw $x$")):
            run = run_ds[name]
            loss = run["loss"].values if name == "raw_mlp" else run["loss"].values[j]
            norm = loss / loss[:, :1]
            t = run["time"].values
            keep = t > 0
            ax.plot(t[keep], geo_mean(norm)[keep], color=color, label=label, **style)
            if name == "fourier_mlp":
                ax.fill_between(t[keep], norm.min(0)[keep], norm.max(0)[keep], color=color, alpha=0.2, linewidth=0,
                                label=f"seed range ({norm.shape[0]} seeds)")
        tt = theory_ds["time"].values
        exact = theory_ds["loss_seeds"].values[j]
        ax.plot(tt[tt > 0], geo_mean(exact / exact[:, :1])[tt > 0], color="0.55", linestyle=(0, (1, 1.5)),
                linewidth=1.0, label="exact NQF flow (Thm 6)")
        ax.axvspan(lo, hi, color="0.92", zorder=0, label="fitting window")
        # predicted slope through the Fourier MLP's curve at the window's centre, offset by 1/2
        mlp = run_ds["fourier_mlp"]
        tm = mlp["time"].values
        curve = geo_mean(mlp["loss"].values[j] / mlp["loss"].values[j][:, :1])
        mid = math.sqrt(lo * hi)
        level = 0.5 * np.exp(np.interp(math.log(mid), np.log(tm[1:]), np.log(curve[1:])))
        b = float(theory_ds["exponent_asymptotic"][j])
        line_t = np.geomspace(lo, hi, 20)
        ax.plot(line_t, level * (line_t / mid) ** -b, color="tab:green", linestyle=":", linewidth=2.0,
                label=f"predicted slope $t^{{-{b:.3g}}}$ (offset)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(r"Eq. 26 flow time $t = c \cdot \mathrm{lr} \cdot$ step")
        ax.set_ylabel(r"normalised loss $L(t)/L(0)$")
        beta = float(theory_ds.attrs["beta"])
        ax.set_title(f"$\\theta$ = {theta:g}, $\\beta$ = {beta:g}")
        plotting.legend(ax, locations=("lower left", "upper right", "lower right"), fontsize=font_size - 2, handlelength=1.6)
        # right: exponent against theta
        grid = np.linspace(thetas.min() - 0.1, thetas.max() + 0.1, 50)
        ax_b.plot(grid, (2 * beta - 1) / (grid + beta), color="k", label=r"asymptotic $(2\beta-1)/(\theta+\beta)$",
                  **plotting.THEORY)
        ax_b.plot(thetas, theory_ds["exponent_corrected"].values, color="tab:green", linestyle=":", marker="x",
                  markersize=4, label="finite-$\\epsilon$ corrected (App. C)")
        ax_b.plot(thetas, theory_ds["exponent_staircase"].values, color="0.5", linestyle="-.", linewidth=0.9,
                  label="finite staircase ($P$, $\\epsilon$)")
        for i, (name, color, marker, dx) in enumerate((("fourier_mlp", "tab:blue", "o", -0.015),
                                                       ("nqf", "k", "s", 0.015))):
            b = fit_ds["exponent"].sel(model=name).values
            err = np.array([b - fit_ds["exponent_ci_low"].sel(model=name).values,
                            fit_ds["exponent_ci_high"].sel(model=name).values - b])
            ax_b.errorbar(thetas + dx, b, yerr=err, color=color, marker=marker, linestyle="none", markersize=4,
                          markerfacecolor="none", capsize=2,
                          label=("Fourier MLP" if name == "fourier_mlp" else "NQF") + " fit, 95% CI")
        ax_b.set_xlabel(r"feature-scale exponent $\theta$")
        ax_b.set_ylabel(r"loss exponent $b$ ($L \propto t^{-b}$)")
        ax_b.set_title("fitted vs predicted exponent")
        plotting.legend(ax_b, locations=("upper right", "upper left", "lower right"), fontsize=font_size - 2, handlelength=1.6)
        fig.suptitle(f"{cfg['description']}: loss {fit_ds.attrs.get('loss_convention', 'mean')}, lr = "
                     f"{fit_ds.attrs['lr']:g} (c lr = {fit_ds.attrs.get('flow_lr', float('nan')):g}), "
                     f"$\\epsilon$ = {fit_ds.attrs['eps']:g}; raw MLP step {fit_ds.attrs['raw_lr']:g}",
                     fontsize=font_size + 1)
        plotting.save(fig, paths)
