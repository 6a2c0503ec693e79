"""What a sweep does when a training run diverges (the config's top-level ``on_divergence``).

``stop`` (default): the training job fails with one sentence giving the step, the loss, and the
largest stable learning rate the structure statistics predict. ``record``: the job writes the run
marked diverged (attribute ``diverged = 1``) and the sweep goes on; the experiment's fit then holds
one failing summary row per diverged run instead of its measurements, and its figure says which
runs diverged instead of drawing partial results.
"""
from __future__ import annotations

import numpy as np
import xarray as xr

from nqf.errors import TrainingDiverged
from nqf.experiments.claims import Claim, claims_dataset


def stable_lr_clause(structure: xr.Dataset | None, cfg: dict) -> str:
    """' The structure statistics predict ... lr < X ...' from the experiment's structure file
    (see :func:`structure_for_hint`), or '' if it holds no shared-eigenbasis reduction to read
    it from."""
    from nqf.theory.stability import stability_hint

    if structure is None or "C" not in structure or "z_final" not in structure or structure["C"].ndim != 2:
        return ""
    try:
        clause = stability_hint(structure["C"].values, structure["z_final"].values,
                                str(cfg["optimizer"]) if "optimizer" in cfg else "gd")
    except Exception:  # the hint is a courtesy; never mask the divergence itself
        return ""
    return f" {clause}" if clause else ""


def unstable_lr(lr: float, loss: str, m: int, C, z_star) -> list[tuple[str, str]]:
    """('lr', sentence) when GD's flow step c lr is at or above the largest step at which it can
    settle at the end point z* of the mode dynamics (nqf.theory.stability: 2 / the largest eigenvalue of
    the weight-space Hessian there); a kind whose C and z* follow from its config refuses such an
    lr before any job instead of training a run that oscillates or overflows."""
    from nqf.theory.stability import max_stable_lr

    return lr_at_or_above(lr, loss, m, max_stable_lr(np.asarray(C, float), np.asarray(z_star, float)))


def lr_at_or_above(lr: float, loss: str, m: int, eta_max: float | None) -> list[tuple[str, str]]:
    """('lr', sentence) when the flow step c lr of the ``loss`` convention over ``m`` samples is at
    or above ``eta_max`` (2 / the largest Hessian eigenvalue at the end point), else []."""
    from nqf.theory.losses import loss_factor

    c = loss_factor(loss, m)
    if eta_max is None or not np.isfinite(eta_max) or c * float(lr) < eta_max:
        return []
    return [("lr", f"is {float(lr):g}, a flow step c lr = {c * float(lr):.4g} (loss {loss}) at or above "
                   f"{eta_max:.4g}, the largest at which gradient descent can settle at the minimum (2 / the "
                   f"largest Hessian eigenvalue there, nqf.theory.stability); use lr below {eta_max / c:.4g}.")]


def structure_for_hint(data: xr.Dataset, exp_cfg: dict) -> xr.Dataset | None:
    """The structure stage's result for a divergence message when its file is not there yet (the
    training job does not wait for that stage); None when it cannot be computed."""
    from nqf.experiments import stage_config, structure_of

    try:
        return structure_of(data, stage_config(exp_cfg, "structure"))
    except Exception:  # the hint is a courtesy; never mask the divergence itself
        return None


def diverged_run(exc: TrainingDiverged, run: str, message: str) -> xr.Dataset:
    """The file a diverged run leaves under ``on_divergence: record``."""
    loss = np.atleast_1d(np.asarray(exc.loss, float))
    return xr.Dataset(
        {"loss_at_divergence": ("replica", loss, {"units": "1", "long_name": "training loss at the step it became non-finite"})},
        coords={"replica": np.arange(loss.size)},
        attrs={"diverged": 1, "diverged_step": int(exc.step), "lr": float(exc.lr), "run": run,
               "divergence_message": message},
    )


def diverged_runs(runs: dict[str, xr.Dataset]) -> dict[str, xr.Dataset]:
    """The runs marked diverged."""
    return {name: ds for name, ds in runs.items() if int(ds.attrs.get("diverged", 0))}


def divergence_fit(runs: dict[str, xr.Dataset]) -> xr.Dataset:
    """A fit file holding one failing claim per diverged run (measured = the step it diverged)."""
    claims = [Claim(f"run {name} diverged (recorded; fit skipped)", float("nan"),
                    float(ds.attrs["diverged_step"]), 0.0, relative=False,
                    note=str(ds.attrs.get("divergence_message", "")))
              for name, ds in sorted(diverged_runs(runs).items())]
    out = claims_dataset(claims)
    out.attrs.update(diverged_runs=", ".join(sorted(diverged_runs(runs))),
                     note="measurements skipped: at least one run diverged (on_divergence: record)")
    return out


def divergence_figure(runs: dict[str, xr.Dataset], cfg: dict, paths, *, font_size: float = 9,
                      dpi: int = 150) -> None:
    """A figure that says which runs diverged, instead of partial results."""
    from nqf import plotting

    lines = [f"{name}: diverged at step {int(ds.attrs['diverged_step'])} (lr = {float(ds.attrs['lr']):g})"
             for name, ds in sorted(diverged_runs(runs).items())]
    with plotting.style(font_size, dpi):
        fig, ax = plotting.plt.subplots(figsize=(6.0, 1.2 + 0.25 * len(lines)))
        ax.axis("off")
        ax.text(0.0, 1.0, f"{cfg.get('description', cfg['kind'])}: not drawn, runs diverged\n"
                "(on_divergence: record; lower the learning rate)\n\n" + "\n".join(lines),
                va="top", ha="left", transform=ax.transAxes)
        plotting.save(fig, paths)
