"""Figure stage of experiment kind ``nqf_approximation``, apart from its other stages
(nqf.experiments.nqf_approximation, which never imports this module): paper Figure 2: the
recovered singular values of each module and of its NQF, per eps, optimizer and architecture.

The full grid (architectures x optimizers x init scales, 30 panels at the default) does not print
legibly on one page, so the figure has a main page, which carries the claims at print size, and
one supplementary page per init scale with the whole grid (the PDF's following pages; the PNG is
the main page). Main page: the recovered spectra of one architecture and optimizer at the
smallest and the largest init scale (the pair whose D is largest at the smallest scale, the case
closest to failing 'the NQF tracks'), and D of every architecture and optimizer at every scale
beside the error budget at the smallest.
"""
from __future__ import annotations

import numpy as np
import xarray as xr

from nqf.architectures import title
from nqf.experiments.nqf_approximation import FIGURE

NAMES = {"gd": "GD", "momentum": "momentum 0.9", "adam": "Adam"}
MARKERS = ("o", "s", "^", "D", "v")


def _spectrum(ax, run, s, colors, d: float, font_size: float) -> None:
    """s_k(t)/s_k of the module (coloured, solid) and of its NQF (black, dashed), D in the corner."""
    from nqf import plotting

    for kk, col in enumerate(colors):
        ax.plot(run["step"], run["s_module"].values[:, kk] / s[kk], color=col, label=f"$k$ = {kk + 1}",
                **plotting.EXPERIMENT)
        ax.plot(run["step"], run["s_nqf"].values[:, kk] / s[kk], color="k", **plotting.THEORY)
    ax.text(0.97, 0.04, f"D = {d:.2g}", transform=ax.transAxes, ha="right", va="bottom", fontsize=font_size - 1)
    ax.axhline(1.0, color="0.7", linewidth=0.6, zorder=0)
    ax.set_yscale("log")


def _legend(fig, axes, n: int) -> None:
    from nqf import plotting

    handles, _ = axes.get_legend_handles_labels()
    handles = handles[:n] + [plotting.plt.Line2D([], [], color="k", **plotting.THEORY)]
    labels = [f"module, $k$ = {kk + 1}" for kk in range(n)] + ["NQF (every $k$)"]
    fig.legend(handles, labels, loc="outside lower center", ncol=n + 1)


def _main_page(fit_ds, run_ds, cfg, s, colors, font_size):
    """Two spectra panels (the worst pair at the smallest and at the largest scale) and D of all."""
    from nqf import plotting

    archs, opts = list(cfg["architectures"]), list(cfg["optimizers"])
    scales = sorted(map(float, cfg["eps"]))
    D = fit_ds["D_max"].sel(arch=archs, optimizer=opts)
    small = D.sel(eps=scales[0]).values
    i, j = np.unravel_index(np.nanargmax(small), small.shape)
    a, o = archs[i], opts[j]
    pairs = [(a_, o_) for a_ in archs for o_ in opts]
    fig, axes = plotting.plt.subplots(1, 3, figsize=(6.9, 2.6 + 0.16 * len(pairs)), layout="constrained",
                                      gridspec_kw={"width_ratios": [1, 1, 1.2]})
    for ax, sigma in zip(axes[:2], (scales[0], scales[-1])):
        run = run_ds[a].sel(optimizer=o, eps=sigma).isel(seed=0)
        _spectrum(ax, run, s[a], colors, float(D.sel(arch=a, optimizer=o, eps=sigma)), font_size)
        ax.set_title(f"init $\\sigma$ = {sigma:g}")
        ax.set_xlabel("step")
    axes[0].set_ylabel(f"{title(a, FIGURE)}, {NAMES[o]}\n$\\hat s_k(t) / s_k$ (first seed)")
    # D of every pair, one row each (largest D at the smallest scale: the spectra panels' pair)
    ax = axes[2]
    y = np.arange(len(pairs))
    for n, sigma in enumerate(scales):
        ax.plot(D.sel(eps=sigma).values.ravel(), y, linestyle="none", marker=MARKERS[n % len(MARKERS)],
                markersize=4.5, markerfacecolor="none", color=plotting.mode_colors(len(scales))[n],
                label=f"D at $\\sigma$ = {sigma:g}")
    tolerance = fit_ds["small_init_tolerance"].sel(arch=archs, optimizer=opts).values.ravel()
    ax.plot(tolerance, y, linestyle="none", marker="|", markersize=9, color="C3",
            label=f"Theorem 1's budget of D at $\\sigma$ = {scales[0]:g}")
    if "threshold" in fit_ds.attrs:
        ax.axvline(float(fit_ds.attrs["threshold"]), color="0.4", linestyle=":", linewidth=1.0,
                   label="'tracks' threshold")
    ax.set_xscale("log")
    ax.set_yticks(y, [f"{a_}, {NAMES[o_]}" for a_, o_ in pairs], fontsize=font_size - 1)
    ax.set_ylim(len(pairs) - 0.5, -0.5)
    ax.set_xlabel(r"D = max$_{t,k}$ |$\Delta s_k$| / $s_k$")
    ax.set_title("every architecture, optimizer")
    handles, labels = axes[0].get_legend_handles_labels()
    n = len(colors)
    handles = handles[:n] + [plotting.plt.Line2D([], [], color="k", **plotting.THEORY)]
    labels = [f"module, $k$ = {kk + 1}" for kk in range(n)] + ["NQF (every $k$)"]
    more = ax.get_legend_handles_labels()
    fig.legend(handles + more[0], labels + more[1], loc="outside lower center", ncol=4)
    fig.suptitle(f"{cfg['description']}: module solid, NQF dashed\n{_reading(cfg)}", fontsize=font_size + 1)
    return fig


def _reading(cfg) -> str:
    """The input-scale reading in words, for the titles."""
    inputs = ("standard Gaussian inputs" if cfg["input_norm"] == "standard" else
              f"Gaussian inputs of RMS norm {float(cfg['input_norm']):g} per unit")
    teacher = ("teacher's singular values as stated" if cfg["teacher_scale"] == "as_stated" else
               "teacher matched to the unit-norm problem")
    return f"{inputs}, {teacher}"


def _grid_page(fit_ds, run_ds, cfg, sigma, s, colors, font_size):
    """The supplementary page of one init scale: rows optimizers, columns architectures."""
    from nqf import plotting

    archs, opts = list(cfg["architectures"]), list(cfg["optimizers"])
    fig, axes = plotting.plt.subplots(len(opts), len(archs), squeeze=False, sharex="col", sharey=True,
                                      figsize=(1.6 * len(archs) + 1.0, 1.5 * len(opts) + 1.3), layout="constrained")
    for j, o in enumerate(opts):
        for i, a in enumerate(archs):
            ax = axes[j, i]
            run = run_ds[a].sel(optimizer=o, eps=sigma).isel(seed=0)
            _spectrum(ax, run, s[a], colors, float(fit_ds["D_max"].sel(arch=a, optimizer=o, eps=sigma)), font_size)
            if j == 0:
                ax.set_title(title(a, FIGURE))
            if j == len(opts) - 1:
                ax.set_xlabel("step")
            if i == 0:
                ax.set_ylabel(f"{NAMES[o]}\n$\\hat s_k(t) / s_k$")
    _legend(fig, axes[0, 0], len(colors))
    fig.suptitle(f"{cfg['description']}, init $\\sigma$ = {sigma:g}: every architecture and optimizer "
                 "(first seed; D = max over t, k, seeds)", fontsize=font_size + 1)
    return fig


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Figure 2: the main page (PNG and the PDF's first page) and one page per init scale with
    every architecture and optimizer (the PDF's following pages); see the module docstring."""
    from nqf import plotting

    # the teacher's singular values per architecture, in the units of its inputs (the stated ones
    # unless teacher_scale is matched)
    n = len(cfg["singular_values"])
    s = {a: np.asarray(theory_ds["s_target"].sel(arch=a).values[:n], float) for a in cfg["architectures"]}
    colors = plotting.mode_colors(n)
    with plotting.style(font_size, dpi):
        main = _main_page(fit_ds, run_ds, cfg, s, colors, font_size)
        grids = [_grid_page(fit_ds, run_ds, cfg, sigma, s, colors, font_size) for sigma in map(float, cfg["eps"])]
        plotting.save(main, paths, pdf_pages=grids)
