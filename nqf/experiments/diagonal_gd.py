"""Pieces shared by the kinds that train the quadratic model on diagonal data matrices (``A_diag``)
by full-batch gradient descent from W(0) = sqrt(eps) I: ``featurewise`` and ``samplewise`` (one
run ``gd`` of ``steps`` steps, whose stages read the same keys but the data stage's, and whose
fits measure and judge crossings the same way) and ``competition`` (one run per eps, the same
model).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import xarray as xr

from nqf.experiments.claims import Claim, ErrorBudget, reached, run_too_short, steps_to_reach
from nqf.experiments.verify_runs import check_runs
from nqf.theory.ignition import level_crossing
from nqf.theory.losses import flow_lr
from nqf.theory.lotka_volterra import GLV_ATOL, GLV_RTOL
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


# -- the fits of the one-run kinds (featurewise, samplewise) ------------------------------------

def gd_run(run_ds: dict[str, xr.Dataset], cfg: dict, kind: str) -> xr.Dataset:
    """Seed 0 of the run ``gd``, once its recorded kind, eps, lr and loss convention are checked
    against the config (nqf.experiments.verify_runs.check_runs)."""
    check_runs(run_ds, {"gd": {"experiment_kind": kind, "eps": cfg["eps"], "lr": cfg["lr"], "loss": cfg["loss"]}})
    return run_ds["gd"].isel(seed=0)


def gd_fit_attrs(kind: str, cfg: dict, eta: float) -> dict:
    """The attributes of a one-run kind's fit file: its kind, lr, loss convention and flow step."""
    return {"experiment_kind": kind, "lr": float(cfg["lr"]), "loss_convention": cfg["loss"], "flow_lr": eta}


def level_crossings(t: np.ndarray, curve: np.ndarray, levels) -> np.ndarray:
    """The times ``curve`` (on the times ``t``) falls through each of ``levels``
    (nqf.theory.ignition.level_crossing; NaN where it does not within ``t``)."""
    return np.array([level_crossing(t, curve, lev) for lev in levels])


def crossings_beyond(need, curve_at: Callable[[np.ndarray], np.ndarray], levels) -> np.ndarray:
    """The same crossings of the theory's curve ``curve_at(t)`` on a grid of 4001 times that runs
    past every finite needed time (1.5 x the largest): the predictions of drops a run stops before."""
    finite = np.asarray(need, float)[np.isfinite(need)]
    grid = np.linspace(0.0, 1.5 * float(finite.max()) if finite.size else 1.0, 4001)
    return level_crossings(grid, curve_at(grid), levels)


def glv_error_budget(z: np.ndarray, factor: float) -> ErrorBudget:
    """The budget of the numerical GLV against a closed form of the same flow: the Radau
    integrator's local error control on ln z, rtol max|ln z| + atol (the flow is non-expansive in
    ln z, so local errors do not grow)."""
    log_z = np.log(np.maximum(z, np.finfo(float).tiny))
    return ErrorBudget({"Radau rtol x max|ln z|": GLV_RTOL * float(np.max(np.abs(log_z))), "atol": GLV_ATOL},
                       factor)


@dataclass(frozen=True)
class RunReach:
    """What one gd run reaches: its end ``t_end`` (flow time), the flow time ``need[k]`` the rows
    of mode or sample k need it to reach (the kind's needed_times), and its flow step ``eta``."""

    t_end: float
    need: np.ndarray
    eta: float

    def too_short(self, t_pred: float, k: int) -> str:
        """The note of a row of k not reached: the run's end, the prediction, and the steps that
        would reach k's needed time (when it is finite)."""
        need = self.need[k]
        return run_too_short(self.t_end, t_pred, steps_to_reach(need, self.eta) if np.isfinite(need) else None)

    def judged_if_reached(self, claim: Claim, t_pred: float, k: int) -> Claim:
        """The claim, not judged when its crossing was not measured and its prediction (plus the
        tolerance) lies beyond the run: a run too short is not a miss."""
        # a crossing not measured is a miss once the run has passed either the latest time a passing
        # crossing could come (the tolerance) or the time the kind says a run must reach (need)
        latest = t_pred * (1 + claim.tolerance) if np.isfinite(claim.tolerance) else t_pred
        need = self.need[k]
        if reached(self.t_end, min(latest, need) if np.isfinite(need) else latest, claim.measured):
            return claim
        return claim.not_judged(self.too_short(t_pred, k))

    def not_ignited_note(self, t_pred: np.ndarray, unit: str) -> str:
        """'; not ignited within the run: mode 2, 3' when some but not all of ``t_pred`` lie beyond
        the run's end ('' otherwise); ``unit`` names what is numbered (mode, sample)."""
        ignited = np.flatnonzero(t_pred <= self.t_end)
        if not 0 < ignited.size < t_pred.size:
            return ""
        return f"; not ignited within the run: {unit} {', '.join(str(k + 1) for k in range(t_pred.size) if k not in ignited)}"

    def trajectory_reached(self, claim: Claim, t_pred: np.ndarray, unit: str, argmin=np.nanargmin) -> Claim:
        """A trajectory row, not judged when nothing ignites within the run (it then saw only the
        exponential rise, not the switch-ons the figure shows); ``argmin`` picks the first ignition."""
        if np.flatnonzero(t_pred <= self.t_end).size or not claim.judged:
            return claim
        first = int(argmin(t_pred))
        return claim.not_judged(run_too_short(
            self.t_end, float(t_pred[first]), steps_to_reach(self.need[first], self.eta),
            what=f"the first ignition ({unit} {first + 1}) is at"))
