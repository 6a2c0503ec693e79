"""Full-batch training of batched models with trajectories on a log-spaced step grid.

One call trains R replicas (seeds, init scales) as one tensor program: the model's forward
returns outputs of shape (R, m), the loss of replica r is (1/m) sum_mu (f_r,mu - y_mu)^2 (Eq. 26)
times the factor c of the chosen loss convention (nqf.theory.losses: mean, half_mean, sum, half_sum),
and the summed loss is differentiated once, so replicas never mix. Gradient descent with step
eta samples the Eq. 26 gradient flow at t = c * eta * step; every recorded step carries both
coordinates, and the recorded loss is in Eq. 26 units whatever the convention.
"""
from __future__ import annotations

import collections
import logging
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from nqf import validate
from nqf.errors import NQFWarning, TrainingDiverged
from nqf.theory.losses import describe, loss_factor
from nqf.theory.step_grid import log_step_grid, record_grid
from nqf.training import heap

if TYPE_CHECKING:
    import torch

log = logging.getLogger("nqf.train")

OPTIMIZERS = ("gd", "momentum", "adam")


def make_optimizer(name: str, params, lr: float, momentum: float = 0.9,
                   weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """'gd' (plain), 'momentum' (Polyak heavy ball, v <- beta v + g, w <- w - lr v), 'adam'."""
    # torch is imported where needed: theory/fit/figure jobs use log_step_grid, TrainingDiverged without it
    import torch

    if name == "gd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(_unknown_optimizer(name))


def _unknown_optimizer(name) -> str:
    return f"optimizer must be one of {', '.join(OPTIMIZERS)}; got {name!r}."


def mse_per_replica(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(1/n) sum_mu sum_c (f_mu,c - y_mu,c)^2 for each replica (Eq. 26, nqf.theory.losses): f (R, n) or
    (R, n, k), y (n,) or (n, k); n = y.shape[0], the samples (outputs are summed)."""
    residual = f - y
    return residual.pow(2).flatten(1).sum(1) / y.shape[0]


def _check_targets(model, y, replica_coords=None) -> tuple[np.ndarray, int]:
    """y as a finite array whose shape matches the model's outputs (R, ...) without broadcasting:
    y.shape == outputs.shape[1:] (shared by the replicas), or (samples, outputs) flattened into
    the form's m entries, or outputs.shape (one row per replica) for models that declare
    ``per_replica_targets`` (their own loss_and_grad handles it).
    Costs one forward pass, once per training run; ``replica_coords`` (if given) must have one
    entry per replica (checked here, before training, not when the Dataset is built). Returns y and
    the number of replicas."""
    import torch

    y_np = validate.array("y", y, nonempty=True)
    with torch.no_grad():
        full = tuple(model().shape)
    if replica_coords is not None and (np.ndim(replica_coords) != 1 or len(replica_coords) != full[0]):
        raise ValueError(f"replica_coords must have one entry per replica ({full[0]}); got "
                         f"{validate.describe(replica_coords)}.")
    out_shape = full[1:]
    flat_ok = y_np.ndim == 2 and len(out_shape) == 1 and y_np.size == out_shape[0]
    per_replica = getattr(model, "per_replica_targets", False)
    if not (y_np.shape == out_shape or flat_ok or (per_replica and y_np.shape == full)):
        also = f" (or {full}: one row per replica)" if per_replica else ""
        raise ValueError(f"y must have one target per model output, shape {out_shape}{also}; got shape "
                         f"{y_np.shape} (no broadcasting: a target of another length would be repeated silently).")
    return y_np, full[0]


def _numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor as a numpy array on the host; half precision as float32 (numpy has no bfloat16)."""
    t = t.detach().cpu()
    return (t.float() if validate.half_precision(t.dtype) else t).numpy()


def _record_memory(probe: dict, n_rep: int, n_points: int) -> None:
    """Refuse, before training, a trajectory whose records (loss and ``record``'s values, kept per
    recorded step and stacked at the end: twice their size) do not fit in memory."""
    per = 8 * n_rep + sum(8 * v.numel() for v in probe.values())
    what = ", ".join(f"{k} {tuple(v.shape)}" for k, v in probe.items())
    validate.memory(f"train's recorded trajectory ({n_points} records of the loss ({n_rep},)" + (f", {what}" if what else "")
                   + ")", 2 * per * n_points, "lower n_record (the records are log-spaced over the steps) or pass fewer "
                   "record_steps, or a record= that keeps less")


def _half_precision_warning(model, y, dtype) -> None:
    import torch

    eps = float(torch.finfo(dtype).eps)
    with torch.no_grad():
        value = model.loss_and_grad(y)[0] if hasattr(model, "loss_and_grad") else mse_per_replica(model(), y)
        loss0 = float(value.float().max())
    warnings.warn(f"train: the model's parameters are {dtype}, whose machine epsilon {eps:.2g} floors the loss "
                  f"(it stops decreasing at the order of eps x its initial loss, here {eps * loss0:.2g}); train in "
                  "torch.float32 or torch.float64 to go below that.", NQFWarning, stacklevel=3)


def _warn_unsettled(model, y, tail, first, *, lr, factor, scale, loss, dtype) -> None:
    """NQFWarning when plain GD ended oscillating (nqf.theory.stability.unsettled_message), naming the
    bound 2 / (c r_1) for models with a structure form."""
    import torch

    from nqf.theory.forms import StructureForm
    from nqf.theory.stability import first_growth_rate, unsettled_message

    form = getattr(model, "form", None)
    rate = (lambda: first_growth_rate(form, y)) if isinstance(form, StructureForm) else None  # noqa: E731
    message = unsettled_message(np.stack([_numpy(v) for v in tail]), _numpy(first), lr=lr, factor=factor,
                                scale=None if scale is None else _numpy(scale), loss=loss,
                                eps=float(torch.finfo(dtype).eps), rate=rate)
    if message:
        warnings.warn(message, NQFWarning, stacklevel=3)


def progress_message(done: int, total: int, elapsed: float) -> str:
    """'step done/total (pct%), elapsed, ~time left' for a training loop's log, the time left
    extrapolated at the mean rate so far."""
    frac = done / total if total else 1.0
    left = elapsed * (1.0 - frac) / frac if frac > 0 else float("nan")
    return f"step {done}/{total} ({100 * frac:.0f}%), {elapsed:.1f} s elapsed, ~{left:.1f} s left"


def optimizer_attrs(optimizer: str, momentum: float) -> dict:
    """The optimizer's own settings a trajectory records: ``momentum`` (beta) for Polyak momentum
    only; GD and Adam runs carry none of it."""
    return {"momentum": momentum} if optimizer == "momentum" else {}


def train(model: torch.nn.Module, y, *, x=None, units=None, lr: float, steps: int, optimizer: str = "gd",
          loss: str = "mean", loss_samples: int | None = None,
          momentum: float = 0.9, weight_decay: float = 0.0,
          record_steps: Sequence[int] | None = None, n_record: int = 400,
          record: Callable[[torch.nn.Module], dict[str, torch.Tensor]] | None = None,
          replica_dim: str = "seed", replica_coords: Sequence | None = None,
          progress_seconds: float = 10.0, divergence_hint: str = "", lr_scale=None) -> xr.Dataset:
    """Train ``model`` (forward() -> (R, m) outputs) on targets ``y`` and record trajectories.

    Returns a Dataset with ``loss`` over (``replica_dim``, ``step``) and, for each entry of
    ``record(model)`` (default: ``M`` = W W^T if the model has ``order_parameter``), a variable
    over (``replica_dim``, ``step``, ...). ``loss`` is the convention the optimizer minimises
    (nqf.theory.losses; ``loss_samples`` is the n of its sum conventions, by default ``len(y)``, the
    samples of targets shaped (n,) or (n, k)); the recorded ``loss`` is always Eq. 26's,
    (1/n) sum over samples and outputs with n = y.shape[0] (the convention nqf.predict, nqf.theory.mflow
    and SecondMoment use for the same y), and the ``step`` dimension carries the coordinate
    ``time`` = c * lr * step, the Eq. 26 flow time.
    ``lr_scale`` (gd and momentum only): one factor per replica, so replica r steps with
    ``lr * lr_scale[r]`` (its loss is scaled before differentiation: both updates are linear in
    the gradient, so this is exactly a per-replica learning rate); ``time`` is then c lr step of
    the unscaled lr, and the Dataset carries ``lr`` per replica.
    Raises :class:`TrainingDiverged` at the first non-finite loss (exactly on the CPU; within
    32 steps on other devices).

    An ordinary module whose ``forward(x)`` takes a batch trains on its data ``x``: one replica,
    outputs ``model(x)`` of shape (n,) or (n, k) against ``y`` of the same shape. With ``units``
    (which parameters hold the units, nqf.architectures.module_units) the default record is
    M = W W^T of its unit weights W (p, d), over (``replica_dim``, ``step``, ``row``, ``col``); a
    ``record`` of your own is called with your module.
    """
    import torch

    validate.torch_module("model", model)
    if x is not None:
        model, record = _on_data(model, x, units, record)
    elif units is not None:
        raise TypeError("units names the unit parameters of a module trained on data: pass the inputs as x= too.")
    else:
        _needs_no_inputs(model)
    lr = validate.scalar("lr", lr, low=0.0, low_open=True)
    steps = validate.integer("steps", steps, minimum=1)
    n_record = validate.integer("n_record", n_record, minimum=2)
    progress_seconds = validate.scalar("progress_seconds", progress_seconds, low=0.0, allow_inf=True)
    momentum = validate.scalar("momentum", momentum, low=0.0, high=1.0, high_open=True)
    weight_decay = validate.scalar("weight_decay", weight_decay, low=0.0)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model must have at least one trainable parameter (requires_grad=True).")
    device, dtype = params[0].device, params[0].dtype
    y, n_rep = _check_targets(model, y, replica_coords)
    y = torch.as_tensor(y, dtype=dtype, device=device)
    n_samples = (validate.integer("loss_samples", loss_samples, minimum=1) if loss_samples is not None
                 else int(y.shape[0]))
    factor = loss_factor(loss, n_samples)
    record = record or _order_parameter_record
    with torch.no_grad():  # step 0's record, taken now to size the trajectory before any grid is built
        probe = record(model)
    n_points = min(n_record, steps + 1) if record_steps is None else int(np.size(record_steps))
    _record_memory(probe, n_rep, n_points)
    if validate.half_precision(dtype):
        _half_precision_warning(model, y, dtype)
    grid = log_step_grid(steps, n_record) if record_steps is None else record_grid(record_steps, steps)
    # Plain GD with an analytic gradient is one in-place update per step (_run_steps): no
    # torch.optim object, whose first construction in a process imports torch._dynamo (~2.5 s)
    direct = _direct_gd(model, params, optimizer, weight_decay)
    opt = None if direct else make_optimizer(optimizer, params, lr, momentum, weight_decay)
    scale = _replica_lr_scale(lr_scale, optimizer, dtype, device)
    losses, recorded, (tail, first) = _run_steps(
        model, y, params, opt, grid, record, probe, steps=steps, lr=lr, factor=factor, scale=scale,
        direct=direct, progress_seconds=progress_seconds, divergence_hint=divergence_hint)
    if optimizer == "gd" and weight_decay == 0.0:
        _warn_unsettled(model, y, tail, first, lr=lr, factor=factor, scale=scale, loss=loss, dtype=dtype)
    ds = _trajectory_dataset(grid, losses, recorded, lr=lr, factor=factor, scale=scale,
                             replica_dim=replica_dim, replica_coords=replica_coords)
    ds.attrs.update(optimizer=optimizer, lr=lr, steps=steps, **optimizer_attrs(optimizer, momentum),
                    weight_decay=weight_decay, loss_convention=loss, loss_factor=factor,
                    loss_convention_formula=describe(loss, n_samples))
    return ds


def _on_data(model, x, units, record):
    """The module on its data as one replica (nqf.architectures.module_units; with ``units`` its
    order_parameter() M = W W^T is train's default record), and ``record`` (if given) called
    with the user's module."""
    from nqf.architectures.module_units import OnData, UnitsOnData

    wrapped = OnData(model, x) if units is None else UnitsOnData(model, x, units)
    return wrapped, (None if record is None else lambda m: record(m.module))


def _needs_no_inputs(model) -> None:
    """A module whose forward() needs inputs, refused with the way to pass them."""
    import inspect

    try:
        required = [p for p in inspect.signature(model.forward).parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return
    if required:
        raise TypeError(f"the {type(model).__name__}'s forward takes inputs ({', '.join(p.name for p in required)}): "
                        f"pass them as train(model, y, x=inputs, ...), or give a model whose forward() takes none.")


def _analytic(model, params) -> bool:
    """Whether the model gives the exact gradient of its one parameter itself (``loss_and_grad``)."""
    return hasattr(model, "loss_and_grad") and len(params) == 1


def _direct_gd(model, params, optimizer: str, weight_decay: float) -> bool:
    """Whether training is plain GD (no weight decay) of a model with an analytic gradient
    (:func:`_analytic`): then each step is ``w -= c lr grad`` in place."""
    if optimizer not in OPTIMIZERS:  # refused here too: no optimizer object is made for GD
        raise ValueError(_unknown_optimizer(optimizer))
    return optimizer == "gd" and weight_decay == 0.0 and _analytic(model, params)


def _order_parameter_record(model) -> dict:
    """train's default record: ``M`` = W W^T where the model has ``order_parameter``."""
    return {"M": model.order_parameter()} if hasattr(model, "order_parameter") else {}


def _replica_lr_scale(lr_scale, optimizer: str, dtype, device):
    """lr_scale as a tensor of per-replica factors (None where not given), refused for optimizers
    whose update is not linear in the gradient."""
    import torch

    if lr_scale is None:
        return None
    if optimizer not in ("gd", "momentum"):
        raise ValueError(f"lr_scale (a learning rate per replica) applies to gd and momentum, whose update is "
                         f"linear in the gradient; got optimizer {optimizer!r}.")
    factors = validate.array("lr_scale", lr_scale, ndim=1, nonempty=True)
    if np.any(factors <= 0):
        raise ValueError(f"lr_scale must be > 0 for every replica; got {validate.describe(factors)}.")
    return torch.as_tensor(factors, dtype=dtype, device=device)


def _run_steps(model, y, params, opt, grid, record, probe, *, steps: int, lr: float, factor: float, scale,
               direct: bool, progress_seconds: float, divergence_hint: str):
    """The training loop: steps 0..steps, the loss and ``record(model)`` kept at the steps of
    ``grid``. With ``direct`` (:func:`_direct_gd`; ``opt`` is then None) each step is GD's
    in-place update, else ``opt.step()``. Returns (losses, recorded, (tail, first)): the
    recorded losses and values as lists of host arrays, and GD's last per-step losses and its
    first one (for the settling check)."""
    import torch

    losses, recorded = [], {}
    # GD's last per-step losses (device tensors, no sync): a rise there means it did not settle
    tail, first = collections.deque(maxlen=4), None
    next_idx, t0, last_report = 0, time.perf_counter(), time.perf_counter()
    last_memory_check = t0  # the resident size against the process's budget (nqf.training.heap)
    # The loss is checked for finiteness at every step on the CPU (so the reported step is the
    # first bad one); elsewhere every 32 steps, to avoid a host-device sync per step.
    check_every = 1 if params[0].device.type == "cpu" else 32
    analytic = _analytic(model, params)
    # Plain GD with an analytic gradient is one in-place update: torch.optim's bookkeeping would
    # double the cost of a step for the small models of the power-law experiments.
    for step in range(steps + 1):
        if analytic:
            value, grad = model.loss_and_grad(y)
        else:
            opt.zero_grad(set_to_none=True)
            value = mse_per_replica(model(), y)
        if step % check_every == 0 and not bool(torch.isfinite(value.detach()).all()):
            raise TrainingDiverged(step, _numpy(value), lr, divergence_hint)
        tail.append(value.detach())
        first = tail[0] if first is None else first
        if next_idx < len(grid) and step == grid[next_idx]:
            losses.append(_record_step(model, value, record, probe if step == 0 else None, recorded, step, lr,
                                       divergence_hint))
            next_idx += 1
            heap.keep_within_budget()
        if step == steps:
            break
        if direct:
            with torch.no_grad():
                if scale is not None:
                    grad = grad * scale.reshape(-1, *[1] * (grad.ndim - 1))
                params[0].sub_(grad, alpha=lr * factor)
        else:
            if analytic:
                if scale is not None:
                    grad = grad * scale.reshape(-1, *[1] * (grad.ndim - 1))
                params[0].grad = grad if factor == 1.0 else grad * factor
            elif scale is not None:
                ((value * scale).sum() * factor).backward()
            else:
                (value.sum() * factor).backward()
            opt.step()
        now = time.perf_counter()
        if now - last_memory_check >= 1.0:
            last_memory_check = now
            heap.keep_within_budget()
        if now - last_report >= progress_seconds:
            last_report = now
            cur = value.detach()
            if not torch.all(torch.isfinite(cur)):
                raise TrainingDiverged(step, _numpy(cur), lr, divergence_hint)
            log.info("%s, mean loss %.4g", progress_message(step + 1, steps, now - t0), float(cur.mean()))
    log.info("trained %d steps in %.2f s", steps, time.perf_counter() - t0)
    return losses, recorded, (tail, first)


def _record_step(model, value, record, probe, recorded: dict, step: int, lr: float, divergence_hint: str):
    """The loss of a recorded step as a host array (refused where not finite), and the values of
    ``record(model)`` (``probe`` where already taken) appended to ``recorded``."""
    import torch

    loss_np = _numpy(value)
    if not np.all(np.isfinite(loss_np)):
        raise TrainingDiverged(step, loss_np, lr, divergence_hint)
    with torch.no_grad():
        for key, val in (probe if probe is not None else record(model)).items():
            if key not in recorded and (val.ndim == 0 or val.shape[0] != loss_np.shape[0]):
                raise ValueError(f"record's {key!r} must have one row per replica, shape ({loss_np.shape[0]}, ...), "
                                 f"like the loss; got shape {tuple(val.shape)} (add a leading axis: value[None]).")
            recorded.setdefault(key, []).append(_numpy(val))
    return loss_np


def _trajectory_dataset(grid, losses: list, recorded: dict, *, lr: float, factor: float, scale, replica_dim: str,
                        replica_coords) -> xr.Dataset:
    """train's result: the recorded loss and values over (replica, step), with the flow time."""
    n_rep = losses[0].shape[0]
    coords = {"step": ("step", grid.astype(np.int64)),
              "time": ("step", factor * lr * grid.astype(np.float64), {
                  "units": "1", "long_name": "Eq. 26 gradient-flow time c * eta * step (c: loss convention factor)"}),
              replica_dim: np.arange(n_rep) if replica_coords is None else np.asarray(replica_coords)}
    ds = xr.Dataset(coords=coords)
    ds["loss"] = ((replica_dim, "step"), np.stack(losses, axis=1),
                  {"units": "1", "long_name": "training loss (1/m) sum (f - y)^2"})
    for key, vals in recorded.items():
        arr = np.stack(vals, axis=1)
        extra = ["row", "col"] if key == "M" else [f"{key}_dim{i}" for i in range(arr.ndim - 2)]
        ds[key] = ((replica_dim, "step", *extra), arr)
    if "M" in ds:
        ds["M"].attrs.update(units="1", long_name="order parameter M = W W^T")
    if scale is not None:
        ds["lr"] = (replica_dim, lr * scale.cpu().numpy().astype(float), {
            "units": "1", "long_name": "learning rate of each replica (lr x lr_scale)"})
    return ds
