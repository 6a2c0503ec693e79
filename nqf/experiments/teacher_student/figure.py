"""Figure stage of experiment kind ``teacher_student``, apart from its other stages
(nqf.experiments.teacher_student, which never imports this module): paper Figure 6: probe losses
of module and NQF under online SGD with their seed bands, and the relative gaps.
"""
from __future__ import annotations

import math

import numpy as np
import xarray as xr

from nqf.architectures import title
from nqf.experiments.teacher_student import FIGURE, loss_gap


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Figure 6 as the paper draws it: per architecture, probe MSE of module (solid) and NQF
    (dashed), mean +- 1 std over seeds (top); below, the relative gap of the seed-mean MSEs with
    the threshold, and this project's output measure RMS(f_mod - f_NQF)/RMS(f_mod). Vertical
    lines: the paper's step 100 (grey), the sustained loss parting (red), the band separation
    (blue dash-dot), the NQF's predicted ignition (black dotted)."""
    from nqf import plotting
    from nqf.theory.losses import FORMULAS_MATH

    archs = list(cfg["architectures"])
    n_agree = int(fit_ds.attrs.get("min_agree_steps", 100))
    with plotting.style(font_size, dpi):
        fig, axes = plotting.plt.subplots(2, len(archs), figsize=(3.8 * len(archs), 5.4), squeeze=False,
                                          sharex="col", layout="constrained")
        for i, a in enumerate(archs):
            run = run_ds[a]
            step = run["step"].values[1:]
            for name, col, style, label in (("probe_loss_module", "C0", plotting.EXPERIMENT, "module"),
                                            ("probe_loss_nqf", "k", plotting.THEORY, "its NQF")):
                v = run[name].values[:, 1:]
                mu, sd = v.mean(0), v.std(0)
                axes[0, i].plot(step, mu, color=col, label=label, **style)
                axes[0, i].fill_between(step, np.maximum(mu - sd, mu * 1e-3), mu + sd, color=col, alpha=0.2, linewidth=0)
            axes[1, i].plot(step, loss_gap(run)[1:], color="k", label="seed-mean MSEs: |L_NQF - L_mod| / L_mod",
                            **plotting.EXPERIMENT)
            rel = run["rel_output"].values[:, 1:]
            axes[1, i].plot(step, rel.mean(0), color="C3", linewidth=0.9, alpha=0.8,
                            label="outputs: RMS($f_{mod} - f_{NQF}$) / RMS($f_{mod}$) (ours)")
            axes[1, i].axhline(cfg["threshold"], color="0.4", linewidth=0.8, linestyle="--",
                               label=f"threshold {cfg['threshold']:g}")
            marks = ((float(fit_ds["loss_parting_step"].sel(arch=a)), "C3", "-", "losses part (sustained)"),
                     (float(fit_ds["band_separation_step"].sel(arch=a)), "C0", "-.", "$\\pm$1 std bands separate"),
                     (float(theory_ds["ignition_step"].sel(arch=a)), "k", ":", "NQF ignition (Thm 8)"),
                     (float(n_agree), "0.6", (0, (1, 1)), f"paper: agree for {n_agree} steps"))
            for ax in axes[:, i]:
                for x, col, ls, label in marks:
                    if math.isfinite(x) and x > 0:
                        ax.axvline(x, color=col, linestyle=ls, linewidth=1.0, label=label if ax is axes[0, i] else None)
                ax.set_xscale("log")
            axes[0, i].set_yscale("log")
            axes[1, i].set_yscale("log")
            lp = float(fit_ds["loss_parting_step"].sel(arch=a))
            axes[0, i].set_title(title(a, FIGURE) + ("\nlosses part at step " + f"{lp:.0f}" if math.isfinite(lp)
                                                     else "\nlosses do not part"))
            axes[1, i].set_xlabel("online SGD step")
            if i == 0:
                axes[0, i].set_ylabel("probe MSE vs teacher (Eq. 26)")
                axes[1, i].set_ylabel("relative difference")
        # one legend for both rows, below the panels (inside, it covered curves and step marks)
        top, bottom = axes[0, 0].get_legend_handles_labels(), axes[1, 0].get_legend_handles_labels()
        fig.legend(top[0] + bottom[0], top[1] + bottom[1], loc="outside lower center", ncol=2 if len(archs) < 2 else 3)
        loss = cfg.get("loss", "mean")
        fig.suptitle(f"{cfg['description']}: loss {loss} ({FORMULAS_MATH.get(loss, loss)}); mean $\\pm$ 1 std over "
                     f"{run_ds[archs[0]].sizes['seed']} seeds", fontsize=font_size + 1)
        plotting.save(fig, paths)
