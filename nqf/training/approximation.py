"""A real module and its NQF trained side by side from the same initial weights (paper Fig. 2;
online, against a teacher, for Fig. 6: :func:`train_online_side_by_side`).

Both are trained by :func:`nqf.train` with the same optimizer, learning rate and steps on the
same data, so the only difference is the model: the module's outputs f(W) against its
quadratic model f(0) + Tr[W W^T A(x)]. R replicas (seeds x init scales) are one tensor program:
the trainable parameter is the unit-weight tensor W of shape (R, p, d), and the module is
evaluated for all replicas at once by ``module.forward_replicas`` (a vmap over ``forward_with``,
or one large kernel call where the module defines one).

Loss normalisation is the same for both: (1/m) sum over the m samples and the k outputs of the
squared residuals (targets of shape (m, k)), which is what ``mse_per_replica`` computes for the
module and what :meth:`QuadraticModel.loss_and_grad` computes for (m, k) targets (Eq. 26). The
optimizer may minimise another convention of it (``loss``, nqf.theory.losses: c = 1, 1/2, m, m/2 for
mean, half_mean, sum, half_sum with n = m samples): GD and momentum then run the Eq. 26 dynamics
with step c lr (``time`` = c lr step, and :func:`closure_recursion` takes the same ``loss``);
for Adam the convention changes only Adam's eps term, and no clock of the theory applies.

The NQF's own truncation error is measured on the run's weights: at every recorded step,
``truncation`` is the relative O(|W|^2) remainder of Theorem 1 at the module's weights W,
RMS(R) / RMS(Q) with f(s W) - f(0) = s^2 Q + s^4 R + O(s^6) (every module here has the per-unit
Z2 symmetry), estimated by Richardson elimination from f(W) and f(W/2): from the module alone,
never from the NQF it is compared with. It is evaluated in float64 whatever the training dtype,
since at small W the remainder is below float32's rounding of f.
"""
from __future__ import annotations

import copy
import logging
import time

import numpy as np
import torch
import xarray as xr

from nqf.architectures.base import UnitModule
from nqf.architectures.effective import singular_values
from nqf.theory.forms import StructureForm
from nqf.theory.losses import flow_lr
from nqf.theory.spectra import deviation  # noqa: F401 (defined there so that fit jobs need no torch)
from nqf.training.loop import optimizer_attrs, progress_message, train
from nqf.training.quadratic import QuadraticModel, resolve_device

Tensor = torch.Tensor
log = logging.getLogger("nqf.train")


def _to(x, device, dtype):
    if isinstance(x, tuple):
        return tuple(_to(t, device, dtype) for t in x)
    return x.to(device=device, dtype=dtype)


class ModuleReplicas(torch.nn.Module):
    """R copies of ``module`` evaluated at unit weights W (R, p, d) on one batch of inputs.

    ``forward()`` returns (R, m, k). The module is not registered as a submodule, so W is the
    only parameter the optimizer sees; the module's own parameters are never touched.
    """

    def __init__(self, module: UnitModule, x, W0: Tensor):
        super().__init__()
        self.x = x
        self.W = torch.nn.Parameter(W0.clone())
        self._batched = module.forward_replicas

    def forward(self) -> Tensor:
        return self._batched(self.W, self.x)

    def order_parameter(self) -> Tensor:
        return self.W @ self.W.transpose(-1, -2)


def order_parameter_spectrum(W: Tensor) -> Tensor:
    """Eigenvalues of M = W W^T, largest first, min(p, d) of them (from the smaller Gram)."""
    gram = W.transpose(-1, -2) @ W if W.shape[-1] <= W.shape[-2] else W @ W.transpose(-1, -2)
    return torch.linalg.eigvalsh(gram).flip(-1)


def truncation_error(module64: UnitModule, x64, f0_64: Tensor, W: Tensor) -> Tensor:
    """The module's relative truncation error at weights W (R, p, d), per replica, in float64.

    Theorem 1 with a per-unit Z2 symmetry (every module here is even in each unit's weights):
    g(s) = f(s W) - f(0) = s^2 Q(W) + s^4 R(W) + O(s^6), Q the NQF term. Richardson's two-point
    elimination gives Q ~ (16 g(1/2) - g(1)) / 3 and R ~ (4/3)(g(1) - 4 g(1/2)); the result is
    RMS(R) / RMS(Q), the O(|W|^2) relative remainder. It is estimated from the module alone (not
    from the NQF it is compared with), so a wrong structure matrix cannot widen its own budget.
    """
    W = W.detach().to(torch.float64)
    g1 = module64.forward_replicas(W, x64) - f0_64
    gh = module64.forward_replicas(0.5 * W, x64) - f0_64
    rest = (4.0 / 3.0) * (g1 - 4.0 * gh)
    quad = (16.0 * gh - g1) / 3.0
    return rest.pow(2).flatten(1).mean(1).sqrt() / quad.pow(2).flatten(1).mean(1).sqrt().clamp_min(1e-300)


def train_side_by_side(module: UnitModule, x, y, W0, *, lr: float, steps: int, optimizer: str,
                       n_singular: int, n_record: int = 100, record_steps=None, momentum: float = 0.9,
                       loss: str = "mean", record_M: bool = True, device: str = "auto",
                       dtype: torch.dtype = torch.float64, lr_scale=None) -> xr.Dataset:
    """Train the module and its NQF from the same W0 (R, p, d) on targets y (m, k).

    ``module`` is moved to ``device`` and ``dtype`` in place. Records at ``record_steps``
    (default: ``n_record`` log-spaced steps). Returns a Dataset over
    (``replica``, ``step``) with ``s_module`` and ``s_nqf`` (the n_singular
    largest singular values of the effective matrix, dim ``k``), ``loss_module``, ``loss_nqf``
    (Eq. 26 units), ``truncation`` (the relative remainder of Theorem 1 at the module's weights,
    :func:`truncation_error`), ``M_eig_nqf`` (eigenvalues of M = W W^T) and, if ``record_M``, ``M_nqf``
    (row, col). The NQF is trained on y - f(0), so both losses are the same function of their
    outputs. ``loss`` is the convention both optimizers minimise (nqf.theory.losses, n = m samples);
    ``time`` = c lr step. ``lr_scale`` (gd, momentum): a learning-rate factor per replica, the
    same for both models (:func:`nqf.train`); the Dataset then has ``lr`` per replica.
    """
    dev = resolve_device(device)
    module = module.to(device=dev, dtype=dtype)
    x = _to(x, dev, dtype)
    W0 = torch.as_tensor(W0).to(device=dev, dtype=dtype)
    y = torch.as_tensor(np.asarray(y)).to(device=dev, dtype=dtype)
    with torch.no_grad():
        f0 = module.forward_with(torch.zeros_like(W0[0]), x)
    nqf_model = QuadraticModel(module.structure(x), W0, device=dev, dtype=dtype)
    mod_model = ModuleReplicas(module, x, W0)
    kwargs = dict(lr=lr, steps=steps, optimizer=optimizer, loss=loss, momentum=momentum, n_record=n_record,
                  record_steps=record_steps, replica_dim="replica", lr_scale=lr_scale)
    # float64 twins for the truncation error (the training module itself stays in ``dtype``)
    if dtype == torch.float64:
        module64, x64, f0_64 = module, x, f0
    else:
        module64 = copy.deepcopy(module).to(dtype=torch.float64)
        x64 = _to(x, dev, torch.float64)
        with torch.no_grad():
            f0_64 = module64.forward_with(torch.zeros_like(W0[0], dtype=torch.float64), x64)

    def record_module(model):
        return {"s": singular_values(module, model.W, n_singular),
                "truncation": truncation_error(module64, x64, f0_64, model.W)}

    def record_nqf(model):
        out = {"s": singular_values(module, model.W, n_singular),
               "M_eig": order_parameter_spectrum(model.W)}
        if record_M:
            out["M"] = model.order_parameter()
        return out

    hint = f" for the {type(module).__name__} with {optimizer}"
    mod = train(mod_model, y, record=record_module, divergence_hint=hint, **kwargs)
    nqf_ds = train(nqf_model, y - f0, record=record_nqf, divergence_hint=hint, **kwargs)
    ds = xr.Dataset(coords={"step": mod["step"], "time": mod["time"], "replica": mod["replica"]})
    ds["s_module"] = (("replica", "step", "k"), mod["s"].values, {
        "units": "1", "long_name": "singular values of the module's effective matrix E(W(t))"})
    ds["s_nqf"] = (("replica", "step", "k"), nqf_ds["s"].values, {
        "units": "1", "long_name": "singular values of the NQF's effective matrix E(W(t))"})
    if "lr" in mod:
        ds["lr"] = mod["lr"]
    ds["loss_module"] = mod["loss"].assign_attrs(long_name="module training loss (1/m) sum (f - y)^2")
    ds["loss_nqf"] = nqf_ds["loss"].assign_attrs(long_name="NQF training loss (1/m) sum (f - y)^2")
    ds["truncation"] = (("replica", "step"), mod["truncation"].values, {
        "units": "1", "long_name": "relative O(|W|^2) remainder of Theorem 1 at the module's weights, "
                                   "RMS(R) / RMS(Q), f(sW) - f(0) = s^2 Q + s^4 R (Richardson from W and W/2)"})
    ds["M_eig_nqf"] = (("replica", "step", "eig"), nqf_ds["M_eig"].values, {
        "units": "1", "long_name": "eigenvalues of the NQF's order parameter M = W W^T"})
    if record_M:
        ds["M_nqf"] = (("replica", "step", "row", "col"), nqf_ds["M"].values, {
            "units": "1", "long_name": "NQF order parameter M = W W^T"})
    # the same index coordinates in every run (row, col of length 0 without M), so that runs of
    # different p or d open as one dataset (xr.open_mfdataset pads them to the largest stored M)
    n_M = nqf_model.form.p if record_M else 0
    ds = ds.assign_coords(eig=np.arange(ds.sizes["eig"]), row=np.arange(n_M), col=np.arange(n_M))
    ds = ds.assign_coords(k=np.arange(1, n_singular + 1))
    ds.attrs.update(optimizer=optimizer, lr=lr, steps=steps, **optimizer_attrs(optimizer, momentum),
                    loss_convention=loss, loss_factor=flow_lr(1.0, loss, y.shape[0]),
                    f0_max_abs=float(f0.abs().max()), device=str(dev))
    return ds


def closure_recursion(form: StructureForm, y, W0, *, lr: float, steps: int, optimizer: str,
                      momentum: float = 0.9, record_steps=None, loss: str = "mean") -> xr.Dataset:
    """M(t) of the trained NQF from Theorem 2 (gd) or Corollary 2 (momentum) alone.

    ``y`` has shape (m, k) and the loss is normalised by the m samples, while
    :func:`nqf.discrete_flow` normalises by the m k (sample, output) pairs: the same dynamics
    with the learning rate multiplied by k (for momentum too: v scales by 1/k, eta v is equal).
    ``loss`` is the convention the optimizer minimised (nqf.theory.losses, n = m samples): its factor c
    multiplies the gradient, i.e. the step (the update is linear in the gradient, so for momentum
    too), and ``time`` = c lr step as in :func:`nqf.train`. Adam has no such closure (its update
    is not linear in the gradient).
    """
    from nqf.theory.recursions import discrete_flow

    y = np.asarray(y, float)
    h = flow_lr(lr, loss, y.shape[0])
    ds = discrete_flow(form, W0=np.asarray(W0, float), y=y, lr=h, steps=steps,
                       optimizer=optimizer, momentum=momentum, record_steps=record_steps)
    return ds.assign_coords(time=("step", h * ds["step"].values.astype(float)))


def _stack_inputs(xs):
    if isinstance(xs[0], tuple):
        return tuple(torch.stack([x[i] for x in xs]) for i in range(len(xs[0])))
    return torch.stack(xs)


def train_online_side_by_side(module: UnitModule, W_star: torch.Tensor, W0: torch.Tensor, probe,
                              *, lr: float, steps: int, batch_size: int, seeds, threshold: float,
                              loss: str = "mean", progress_seconds: float = 10.0) -> xr.Dataset:
    """Online SGD of the module and its NQF from the same W0 (R, p, d), R = len(seeds).

    Every step draws a fresh minibatch per seed (generator seeded by the seed, so a seed's
    stream does not depend on the others), labels it with the teacher W*, and takes one SGD step
    of both models on it; the loss is the ``loss`` convention of (1/B) sum (f - y)^2, summed over
    outputs (nqf.theory.losses,
    c = loss_factor(loss, B)), recorded in Eq. 26 units, and ``time`` = c lr step. Records at
    every step, on the probe set:
    ``rel_output`` = RMS(f_module - f_NQF) / RMS(f_module), ``rel_learned`` (the same for f - f(0)),
    ``probe_loss_module``, ``probe_loss_nqf``, and the minibatch losses; ``parting_step`` is the
    first step with rel_output > threshold (-1 if none).
    """
    from torch.func import vmap

    R = W0.shape[0]
    factor = flow_lr(1.0, loss, batch_size)
    Wm = W0.clone().requires_grad_()
    Wn = W0.clone().requires_grad_()
    opt = torch.optim.SGD([Wm, Wn], lr=lr)
    f_mod = vmap(module.forward_with, in_dims=(0, 0))
    f_nqf = vmap(module.nqf_outputs, in_dims=(0, 0))
    p_mod = vmap(module.forward_with, in_dims=(0, None))
    p_nqf = vmap(module.nqf_outputs, in_dims=(0, None))
    gens = [torch.Generator().manual_seed(10_000 + int(s)) for s in seeds]
    with torch.no_grad():
        y_probe = module.forward_with(W_star, probe)
        f0_probe = module.forward_with(torch.zeros_like(W_star), probe)
    names = ("rel_output", "rel_learned", "probe_loss_module", "probe_loss_nqf", "batch_loss_module",
             "batch_loss_nqf")
    rec = {n: np.full((R, steps + 1), np.nan) for n in names}
    t0 = last = time.perf_counter()
    for step in range(steps + 1):
        with torch.no_grad():
            pm, pn = p_mod(Wm, probe), p_nqf(Wn, probe)
            diff = (pm - pn).pow(2).mean((1, 2)).sqrt()
            rec["rel_output"][:, step] = (diff / pm.pow(2).mean((1, 2)).sqrt()).numpy()
            rec["rel_learned"][:, step] = (diff / (pm - f0_probe).pow(2).mean((1, 2)).sqrt()).numpy()
            rec["probe_loss_module"][:, step] = (pm - y_probe).pow(2).sum(2).mean(1).numpy()
            rec["probe_loss_nqf"][:, step] = (pn - y_probe).pow(2).sum(2).mean(1).numpy()
        if step == steps:
            break
        x = _stack_inputs([module.sample_inputs(batch_size, g) for g in gens])
        with torch.no_grad():
            y = vmap(module.forward_with, in_dims=(None, 0))(W_star, x)
        opt.zero_grad(set_to_none=True)
        lm = (f_mod(Wm, x) - y).pow(2).sum(2).mean(1)  # (1/B) sum over samples and outputs (nqf.theory.losses)
        ln = (f_nqf(Wn, x) - y).pow(2).sum(2).mean(1)
        rec["batch_loss_module"][:, step] = lm.detach().numpy()
        rec["batch_loss_nqf"][:, step] = ln.detach().numpy()
        if not bool(torch.isfinite(lm).all() and torch.isfinite(ln).all()):
            from nqf.errors import TrainingDiverged
            raise TrainingDiverged(step, (lm + ln).detach().numpy(), lr, f" of the {type(module).__name__}")
        ((lm.sum() + ln.sum()) * factor).backward()
        opt.step()
        now = time.perf_counter()
        if now - last >= progress_seconds:
            last = now
            log.info("%s, probe loss module %.4g, NQF %.4g", progress_message(step + 1, steps, now - t0),
                     rec["probe_loss_module"][:, step].mean(), rec["probe_loss_nqf"][:, step].mean())
    log.info("trained %d online SGD steps in %.2f s", steps, time.perf_counter() - t0)
    parted = rec["rel_output"] > threshold
    parting = np.where(parted.any(1), parted.argmax(1), -1)
    ds = xr.Dataset(coords={"seed": np.asarray(seeds), "step": np.arange(steps + 1)})
    long = {"rel_output": "RMS over the probe set of (f_module - f_NQF) / RMS of f_module",
            "rel_learned": "RMS over the probe set of (f_module - f_NQF) / RMS of (f_module - f(0))",
            "probe_loss_module": "module MSE against the teacher on the probe set",
            "probe_loss_nqf": "NQF MSE against the teacher on the probe set",
            "batch_loss_module": "module minibatch loss before the step (NaN at the last step: no step follows)",
            "batch_loss_nqf": "NQF minibatch loss before the step (NaN at the last step: no step follows)"}
    for n in names:
        ds[n] = (("seed", "step"), rec[n], {"units": "1", "long_name": long[n]})
    ds["parting_step"] = ("seed", parting, {"units": "1", "long_name": f"first step with rel_output > {threshold:g} (-1: none)"})
    ds["time"] = ("step", factor * lr * np.arange(steps + 1.0), {
        "units": "1", "long_name": "Eq. 26 flow time c eta step (c: loss convention factor)"})
    ds.attrs.update(lr=lr, steps=steps, batch_size=batch_size, threshold=threshold, loss_convention=loss,
                    loss_factor=factor)
    return ds
