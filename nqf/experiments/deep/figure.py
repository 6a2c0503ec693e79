"""Figure stage of experiment kind ``deep``, apart from its other stages (nqf.experiments.deep,
which never imports this module): paper Figure 8: train and test losses of the deep networks and
of their 2-layer and 1-layer NQFs.
"""
from __future__ import annotations

import numpy as np
import xarray as xr

from nqf.experiments.deep import LABELS, MODELS, TITLES, run_id

COLORS = {"deep": "k", "nqf2": "C1", "nqf1": "C4"}


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Figure 8: rows architecture x optimizer, columns small / large init; train loss solid,
    test loss dashed, for the original (black), 2-layer NQF (orange), 1-layer NQF (purple); first seed."""
    from nqf import plotting

    archs, opts = list(cfg["architectures"]), list(cfg["optimizers"])
    names = {"gd": "GD", "momentum": "momentum", "adam": "Adam"}
    rows = [(a, o) for a in archs for o in opts]
    with plotting.style(font_size, dpi):
        fig, axes = plotting.plt.subplots(len(rows), 2, figsize=(6.4, 2.0 * len(rows) + 0.8), squeeze=False,
                                          layout="constrained")
        for r, (a, o) in enumerate(rows):
            run = run_ds[run_id(a, o)]
            for c, v in enumerate(sorted(cfg["init_variance"][a])[:2]):
                ax = axes[r, c]
                sel = run.sel(init_variance=v).isel(seed=0)
                step = np.maximum(sel["step"].values, 0) + 1
                for n in MODELS:
                    ax.plot(step, sel[f"train_{n}"], color=COLORS[n], label=f"{LABELS[n]} train", **plotting.EXPERIMENT)
                    ax.plot(step, sel[f"test_{n}"], color=COLORS[n], label=f"{LABELS[n]} test", **plotting.THEORY)
                ax.set_xscale("log")
                ax.set_yscale("log")
                d2 = float(fit_ds["D"].sel(model="nqf2", arch=a, optimizer=o, init=["small", "large"][c]))
                d1 = float(fit_ds["D"].sel(model="nqf1", arch=a, optimizer=o, init=["small", "large"][c]))
                ax.set_title(f"{TITLES[a]}, {names[o]}, var {v:g}\n$D_2$ = {d2:.2g}, $D_1$ = {d1:.2g}", fontsize=font_size)
                if c == 0:
                    ax.set_ylabel("MSE")
                if r == len(rows) - 1:
                    ax.set_xlabel("step + 1")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=3)
        fig.suptitle(f"{cfg['description']}: train (solid) and test (dashed) loss, first seed")
        plotting.save(fig, paths)
