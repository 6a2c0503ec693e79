"""Figure stage of experiment kind ``nqf_approximation``, apart from its other stages
(nqf.experiments.nqf_approximation, which never imports this module): paper Figure 2: the
recovered singular values of each module and of its NQF, per eps, optimizer and architecture.
"""
from __future__ import annotations

import numpy as np
import xarray as xr

from nqf.architectures import title
from nqf.experiments.nqf_approximation import FIGURE, run_id


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Figure 2: one block per eps, rows optimizers, columns architectures; s_k(t)/s_k of
    the module (coloured, solid) and of its NQF (black, dashed) for the first seed, D per panel."""
    from nqf import plotting

    archs, opts = list(cfg["architectures"]), list(cfg["optimizers"])
    scales = list(map(float, cfg["eps"]))
    s = np.asarray(cfg["singular_values"], float)
    colors = plotting.mode_colors(s.size)
    names = {"gd": "GD", "momentum": "momentum 0.9", "adam": "Adam"}
    with plotting.style(font_size, dpi):
        fig = plotting.plt.figure(figsize=(1.7 * len(archs) * len(scales) + 0.8, 1.55 * len(opts) + 1.2),
                                  layout="constrained")
        for block, sigma in zip(fig.subfigures(1, len(scales), wspace=0.04), scales):
            axes = block.subplots(len(opts), len(archs), squeeze=False, sharex="col", sharey=True)
            block.suptitle(f"init $\\sigma$ = {sigma:g}", fontsize=font_size + 1)
            for j, o in enumerate(opts):
                for i, a in enumerate(archs):
                    ax = axes[j, i]
                    run = run_ds[run_id(a, o)].sel(eps=sigma).isel(seed=0)
                    for kk, col in enumerate(colors):
                        ax.plot(run["step"], run["s_module"].values[:, kk] / s[kk], color=col,
                                label=f"$k$ = {kk + 1}", **plotting.EXPERIMENT)
                        ax.plot(run["step"], run["s_nqf"].values[:, kk] / s[kk], color="k", **plotting.THEORY)
                    d = float(fit_ds["D_max"].sel(arch=a, optimizer=o, eps=sigma))
                    ax.text(0.97, 0.04, f"D = {d:.2g}", transform=ax.transAxes, ha="right", va="bottom",
                            fontsize=font_size - 2)
                    ax.axhline(1.0, color="0.7", linewidth=0.6, zorder=0)
                    ax.set_yscale("log")
                    if j == 0:
                        ax.set_title(title(a, FIGURE))
                    if j == len(opts) - 1:
                        ax.set_xlabel("step")
                    if i == 0:
                        ax.set_ylabel(f"{names[o]}\n$\\hat s_k(t) / s_k$")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        handles = handles[:s.size] + [plotting.plt.Line2D([], [], color="k", **plotting.THEORY)]
        labels = [f"module, $k$ = {kk + 1}" for kk in range(s.size)] + ["NQF (every $k$)"]
        fig.legend(handles, labels, loc="outside lower center", ncol=s.size + 1)
        fig.suptitle(f"{cfg['description']}: recovered singular values, module solid, NQF dashed "
                     "(first seed; D = max over t, k, seeds)", fontsize=font_size + 1)
        plotting.save(fig, paths)
