"""Pieces shared by the kinds that train the quadratic model on diagonal data matrices (``A_diag``)
by full-batch gradient descent from W(0) = sqrt(eps) I: ``featurewise`` and ``samplewise`` (one
run ``gd`` of ``steps`` steps, whose stages read the same keys but the data stage's) and
``competition`` (one run per eps, the same model).
"""
from __future__ import annotations

import numpy as np
import xarray as xr

from nqf.theory.losses import flow_lr
from nqf.training.loop import log_step_grid, train

INIT = "W(0) = sqrt(eps) I"
# The keys each stage of a one-run kind reads (featurewise, samplewise), every stage's but the data's.
GD_RUN_STAGE_KEYS = {
    "structure": (),
    "train": ("eps", "loss", "lr", "steps", "n_record", "dtype"),
    "theory": ("eps", "loss", "lr", "steps", "n_record"),
    "fit": ("eps", "loss", "lr", "tolerances"),
    "figure": ("description", "eps", "loss"),
}


def identity_init_model(data: xr.Dataset, eps: float, dtype: str, device: str = "auto"):
    """The quadratic model (nqf.training.quadratic) of the data's diagonal matrices ``A_diag`` from
    W(0) = sqrt(eps) I, in ``dtype`` ("float64" or "float32")."""
    # torch is imported where needed: the theory, fit and figure jobs run without it
    import torch

    from nqf.theory.forms import DiagonalForm
    from nqf.training.quadratic import QuadraticModel

    form = DiagonalForm(torch.as_tensor(data["A_diag"].values))
    tdtype = torch.float64 if dtype == "float64" else torch.float32
    return QuadraticModel(form, np.sqrt(eps) * np.eye(form.p), device=device, dtype=tdtype)


def train_gd_run(data: xr.Dataset, cfg: dict, run: str, kind: str, device: str = "auto",
                 record=None) -> xr.Dataset:
    """The run ``gd``: ``steps`` full-batch GD steps of ``lr`` on the targets ``y`` under the
    ``loss`` convention from W(0) = sqrt(eps) I, ``n_record`` records (with ``record``'s extra
    quantities, nqf.train), and the run's provenance attributes."""
    model = identity_init_model(data, cfg["eps"], cfg["dtype"], device)
    ds = train(model, data["y"].values, lr=cfg["lr"], steps=cfg["steps"], optimizer="gd",
               loss=cfg.get("loss", "mean"), n_record=cfg["n_record"], record=record)
    ds.attrs.update(run=run, experiment_kind=kind, model="quadratic", eps=cfg["eps"], init=INIT,
                    device=str(model.W.device))
    return ds


def flow_times(cfg: dict, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The recorded steps of a run of ``steps`` GD steps (log-spaced, ``n_record``) and their Eq. 26
    flow times c lr step (c: the ``loss`` convention's factor for m samples)."""
    steps = log_step_grid(cfg["steps"], cfg["n_record"])
    return steps, flow_lr(cfg["lr"], cfg["loss"], m) * steps.astype(float)
