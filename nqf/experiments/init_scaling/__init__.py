"""Experiment kind ``init_scaling``: ignition time against ln(1/eps) for every architecture.

Theorem 8: a mode starting at z_k(0) = eps c_k reaches half saturation at
t*_k = (1/(a zeta_k)) [ln(1/eps) - ln(C_k c_k / (zeta_k - C_k c_k eps))], so t*_k is a line in
ln(1/eps) with slope 1/(a zeta_k). For each architecture, nqf.architectures.mode_designs builds inputs and an
NQF teacher on which the architecture's NQF has K decoupled modes with the configured rates
a zeta_k; the structure stage measures (a, zeta_k, C_k) on the architecture's own factored A(x)
(nqf.theory.mode_theory, checking the conditions). One training job per architecture then runs
full-batch GD on the NQF with two kinds of replicas in one tensor program:

* aligned: W(0) = sum_k sqrt(eps z*_k) q_k r_k^T (orthonormal r_k in unit space), one replica
  per eps. c_k = z*_k, the saturation value, so eps is the initial fraction of saturation and
  the finite-eps term of Theorem 8 is ln(1 - eps) for every mode and architecture.
* gaussian: W(0) entries N(0, seed_scale / d), one replica per seed, for the seed scatter.

Architectures listed under ``modules`` also train their real (nonlinear) module from the aligned
inits, for comparison only: once the first modes saturate, W is O(1) and the module leaves its
NQF (its later modes can be switched on by the O(|W|^4) terms instead of their own amplitude).

Loss convention (``loss``, nqf.theory.losses): one GD step of lr advances the Eq. 26 flow by
eta = c lr, with n = m, the (sample, output) pairs the NQF's loss averages over (the m of the
structure statistics); runs record time in that clock, so Theorem 8's times apply as they are.

Claims and their tolerances (``tolerances.safety_factor`` times the run's error budget,
nqf.experiments.claims.ErrorBudget). GD multiplies z_k by (1 + eta g / 2)^2 per step where the
flow multiplies it by exp(eta g) (g = d ln z_k / dt <= r_k = a zeta_k), so it reaches a level z
later by (eta / 4) ln(z / z_k(0)):

* slope of t*_k against ln(1/eps) (aligned inits, t*_k measured at z*_k / 2, the saturation GD
  shares with the flow) vs 1/(a zeta_k) (Theorem 8): GD's exact per-step growth rescales the
  slope by eta r / (2 ln(1 + eta r / 2)) (about 1 + eta r / 4), and Theorem 8's own
  least-squares slope over the configured eps differs from 1/(a zeta_k) by its ln(1 - eps)
  term, which the theory computes exactly: the tolerance is the safety factor times the GD
  term plus that finite-eps term (ErrorBudget's systematic part, without the factor).
* max over eps and modes of |t*_GD / t*_Thm8 - 1|: the delay (eta / 4) ln(1 / (2 eps)) / t*_k.
* std of t*_k over Gaussian seeds vs the std of Theorem 8 on each seed's own (projected)
  amplitude (the same draws, no sampling error): GD stretches every seed's ln z_k(0)-dependent
  time by 1 + eta r_k / 4, so the budget is eta r_k / 4; for modes with coupled faster modes
  (j_k > 0) the projection onto the complement of their directions (Bartlett) is a leading-order
  picture whose own error is not derived here, so it enters as the measured constant
  ``tolerances.projection_model_error`` (at the default config the own-init std departs from
  GD's eta r / 4 by at most 2.9 %, the QK head's third mode; 0.1 % for decoupled modes).
* std of t*_k over seeds vs nqf.theory.mode_theory's ordered_seed_scatter sqrt(psi'((d - j_k)/2)) / r_k
  (SCIENCE.md's sqrt(psi'(d/2)) / (a zeta_k) for decoupled modes, reported beside it): the
  budget is the std's relative standard error over the seeds (kurtosis of ln chi^2 included)
  plus eta r_k / 4 (plus the projection model error for coupled modes).
* Theorem 16's residuals on the designed data: exact by construction, so a fixed rounding
  allowance ``tolerances.reduction_residual``.

A run too short for an ignition is not a miss: an aligned replica or a Gaussian seed whose
ignition was not measured because its Theorem 8 time (plus the row's tolerance) lies beyond the
run's end makes the rows that need it say "not reached: run too short" with the steps that would
reach it (nqf.experiments.claims.run_too_short) and not judged. ``check`` refuses steps below the
slowest aligned ignition before any job starts (:func:`needed_times`).
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from nqf.errors import ConfigError
from nqf.experiments.init_scaling import fitting as fits
from nqf.experiments.machine import generic_estimate, seed_draw
from nqf.experiments.verify_runs import check_runs
from nqf.theory.ignition import predicted_ignition_times, predicted_seed_scatter
from nqf.theory.mode_theory import ordered_seed_scatter, reduce_modes, slope_fit
from nqf.training.loop import train

if TYPE_CHECKING:
    import torch

    from nqf.architectures.mode_designs import Design

KIND = "init_scaling"
TRAIN_KEYS = ("eps", "loss", "lr", "steps", "n_record", "seeds", "seed_scale", "dtype", "data_seed", "width")
STAGE_KEYS = {
    "data": ("architectures", "rates", "width", "data_seed"),
    "structure": ("architectures", "width", "data_seed"),
    "train": ("architectures", "modules") + TRAIN_KEYS,
    "theory": ("eps",),
    "fit": ("eps", "loss", "lr", "tolerances"),
    "figure": ("description", "eps"),
}


# The config lists the run ids are made of (nqf.experiments.ids refuses a value listed twice).
RUN_ID_KEYS = ("architectures",)


def runs(cfg: dict) -> list[str]:
    """One run per architecture (eps values and seeds are replicas of one tensor program)."""
    return list(cfg["architectures"])


def run_config(cfg: dict, run: str) -> dict:
    """A run reads only its architecture and the training keys: adding one trains only it."""
    if run not in cfg["architectures"]:
        raise ValueError(f"Run {run!r} is not one of this experiment's architectures "
                         f"({', '.join(cfg['architectures'])}).")
    return {"architecture": run, "module": run in cfg.get("modules", ()), **{k: cfg[k] for k in TRAIN_KEYS}}


def check(cfg: dict) -> list[tuple[str, str]]:
    """Cross-key problems found before any job starts: a module to train that is not one of the
    experiment's architectures (it would never be trained, and its rows never written), and steps
    that end the runs before the slowest aligned mode ignites (:func:`needed_times`; under the
    mean and half_mean conventions, whose clock does not depend on each design's sample count)."""
    extra = [m for m in cfg.get("modules", ()) if m not in cfg["architectures"]]
    if extra:
        return [("modules", f"lists {', '.join(map(repr, extra))}, not among the experiment's architectures "
                            f"({', '.join(cfg['architectures'])}); a module is trained beside its architecture's "
                            f"NQF, so list it under architectures too or remove it from modules.")]
    loss = cfg.get("loss", "mean")
    if loss not in ("mean", "half_mean"):  # c = m or m/2: m is the design's, known once it is built
        return []
    from nqf.experiments.claims import LAG_MARGIN, reach_problems
    from nqf.theory.losses import flow_lr

    rates, eps = np.asarray(cfg["rates"], float), np.asarray(cfg["eps"], float)
    eta = flow_lr(cfg["lr"], loss, 1)
    t_star, need = needed_times(rates, eps, eta)
    names = [f"mode {k + 1} (rate {rates[k]:.4g}) at eps {e:.0e}" for e in eps for k in range(rates.size)]
    return reach_problems("steps", eta * int(cfg["steps"]), need.ravel(), t_star.ravel(), eta, names,
                          margin=f"Theorem 8 for the aligned init delayed by {LAG_MARGIN:g} x GD's O(lr) lag")


def needed_times(rates, eps, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """(Theorem 8's ignition time of each aligned replica, the flow time a run must reach to see
    it), both (eps, mode). The aligned init starts z_k at eps z*_k, so t*_k = ln((1 - eps) / eps) / r_k
    in every regime (r_k = a zeta_k, the configured rate); the run must reach t*_k delayed by
    LAG_MARGIN times GD's first-order lag (eta / 4) ln(1 / (2 eps))."""
    from nqf.experiments.claims import LAG_MARGIN

    rates, eps = np.asarray(rates, float), np.asarray(eps, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_star = np.log((1 - eps) / eps)[:, None] / rates[None, :]
        lag = eta * np.log(1 / (2 * eps))[:, None] / 4 * np.ones_like(rates)[None, :]
    return t_star, t_star + LAG_MARGIN * lag


def estimate(cfg: dict) -> dict:
    """A floor for the largest run (nqf.experiments.machine): the recorded losses, and the one
    Gaussian draw of max(seeds) + 1 rows of p x width weights (p >= the K modes; the unit's exact
    p needs its design)."""
    base = generic_estimate(cfg)
    draw, drawn = seed_draw(cfg, len(cfg["rates"]) * int(cfg["width"]))
    return {**base, "bytes": base["bytes"] + draw, "key": "seeds", "what": f"{base['what']}, {drawn}"}


# -- data -----------------------------------------------------------------------------------
def make_data(cfg: dict) -> xr.Dataset:
    """Per architecture: designed inputs, the NQF teacher's targets, the mode directions q_k."""
    # torch is imported where needed: the theory, fit and figure jobs run without it
    from nqf.architectures.mode_designs import design, teacher

    rates = np.asarray(cfg["rates"], float)
    K = rates.size
    if cfg["width"] < K:  # Theorem 16 needs M(0) diagonal in the q basis: one unit per mode
        raise ConfigError(f"Config key 'width' ({cfg['width']}) must be at least the number of modes, "
                          f"len(rates) = {K}.")
    variables, attrs = {}, {"experiment_kind": KIND, "architectures": ",".join(cfg["architectures"]),
                            "rates": rates, "data_seed": cfg["data_seed"]}
    for arch in cfg["architectures"]:
        des = design(arch, K, cfg["width"], cfg["data_seed"])
        form = des.module.structure(des.x)
        y, z_star = teacher(form, des.modes, rates)
        n_samples = des.inputs[0].shape[0]
        for i, inp in enumerate(des.inputs):
            dims = (f"{arch}_sample",) + tuple(f"{arch}_input{i}_dim{j}" for j in range(1, inp.ndim))
            variables[f"{arch}_input{i}"] = (dims, inp.numpy(), {"units": "1", "long_name": f"{arch} input {i}"})
        variables[f"{arch}_y"] = ((f"{arch}_sample", f"{arch}_output"), y.reshape(n_samples, -1).numpy(), {
            "units": "1", "long_name": f"{arch} targets of the NQF teacher sum_k z*_k q_k^T A q_k"})
        variables[f"{arch}_modes"] = ((f"{arch}_param", "mode"), des.modes.numpy(), {
            "units": "1", "long_name": f"{arch} mode directions q_k in a unit's parameter space"})
        variables[f"{arch}_z_star"] = ("mode", z_star.numpy(), {
            "units": "1", "long_name": f"{arch} teacher strengths z*_k (saturation of z_k)"})
        attrs[f"{arch}_design"] = des.note
    return xr.Dataset(variables, coords={"mode": np.arange(K)}, attrs=attrs)


def design_of(data: xr.Dataset, arch: str, cfg: dict) -> tuple[Design, torch.Tensor, np.ndarray]:
    """(design, flattened targets, z*) of ``arch``: the module as the config builds it (width,
    data_seed), with the inputs, mode directions and targets the data file holds."""
    import torch

    from nqf.architectures.mode_designs import design

    des = design(arch, data.sizes["mode"], int(cfg["width"]), int(cfg["data_seed"]))
    des.inputs = tuple(torch.as_tensor(data[f"{arch}_input{i}"].values) for i in range(len(des.inputs)))
    des.modes = torch.as_tensor(data[f"{arch}_modes"].values)
    return des, torch.as_tensor(data[f"{arch}_y"].values.reshape(-1)), data[f"{arch}_z_star"].values


_STRUCTURE_VARS = (  # name, ModeReduction attribute, per mode?, long name
    ("r", "rate", True, "growth rate of z_k, r_k = a zeta_k = 2 gamma_k"),
    ("gamma", "gamma", True, "q_k^T Y q_k"),
    ("kappa", "kappa", True, "q_k^T K(q_k q_k^T) q_k"),
    ("zeta", "zeta", True, "Theorem 8 zeta_k in the regime's variables"),
    ("C_k", "C_k", True, "Theorem 8 C_k in the regime's variables"),
    ("z_saturation", "saturation", True, "z_k at the fixed point, gamma_k / kappa_k"),
    ("a", "a", False, "Theorem 8 factor a of the regime"),
    ("amplitude_unit", "amplitude_unit", False, "regime variable per unit of z (rho = z/2 in Cor. 4)"),
    ("eigen_residual", "eigen_residual", False, "max_k |Y q_k - gamma_k q_k| / max gamma"),
    ("decoupling_residual", "decoupling_residual", False,
     "max_ab |K(q_b q_b^T) q_a - kappa_a delta_ab q_a| / max kappa (Theorem 16)"),
    ("commutator_residual", "commutator_residual", False, "Assumption 1 residual"),
    ("other_growth", "other_growth", False, "largest eigenvalue of Y off the modes / min gamma"),
)


def structure(data: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Each architecture's modes reduced on its own factored A(x) (nqf.theory.mode_theory)."""
    archs = list(cfg["architectures"])
    reds, sizes = [], []
    for arch in archs:
        des, y, _ = design_of(data, arch, cfg)
        form = des.module.structure(des.x)
        reds.append(reduce_modes(form, y, des.modes))
        sizes.append((des.module.width, form.p, form.m))
    variables = {name: (("architecture", "mode") if per_mode else "architecture",
                        np.array([getattr(r, attr) for r in reds]), {"units": "1", "long_name": long_name})
                 for name, attr, per_mode, long_name in _STRUCTURE_VARS}
    variables["predecessors"] = (("architecture", "mode"), np.array([r.predecessors() for r in reds]), {
        "units": "1", "long_name": "faster modes coupled to mode k through K (seed scatter)"})
    for j, (name, long_name) in enumerate((("width", "units d"), ("p", "parameters per unit"),
                                           ("m", "(sample, output) pairs"))):
        variables[name] = ("architecture", np.array([s[j] for s in sizes]), {"units": "1", "long_name": long_name})
    variables["C"] = (("architecture", "mode", "mode_j"), np.array([r.C for r in reds]), {
        "units": "1", "long_name": "GLV interaction among the modes, C_kj = (8/m) sum u_mu,k u_mu,j"})
    variables["coupling"] = (("architecture", "mode", "mode_j"), np.array([r.coupling for r in reds]), {
        "units": "1", "long_name": "q_l^T K(sym(q_l q_k^T)) q_k (rows l, columns k)"})
    variables["regime"] = ("architecture", np.array([r.regime for r in reds], dtype=object))
    K = data.sizes["mode"]
    return xr.Dataset(variables, coords={"architecture": archs, "mode": np.arange(K), "mode_j": np.arange(K)},
                      attrs={"experiment_kind": KIND})


# -- training -------------------------------------------------------------------------------
@contextlib.contextmanager
def single_thread():
    """p < 50 here: a second thread costs more than it computes, and under `snakemake --cores 2`
    two training jobs would oversubscribe the cores (measured: 25x slower). Restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """GD on the architecture's NQF: every eps (aligned) and every seed (Gaussian) as replicas;
    with ``module`` also the real module from the aligned inits (targets f(0) + y)."""
    import torch

    from nqf.architectures.mode_designs import initial_weights
    from nqf.theory.forms import as_tensor
    from nqf.training.approximation import ModuleReplicas
    from nqf.training.quadratic import QuadraticModel, resolve_device

    arch = cfg.get("architecture", run)
    des, y, z_star = design_of(data, arch, cfg)
    aligned, gaussian = initial_weights(des, z_star, cfg["eps"], cfg["seeds"], cfg["seed_scale"], cfg["data_seed"])
    n_eps = aligned.shape[0]
    dtype = torch.float64 if cfg["dtype"] == "float64" else torch.float32
    dev = resolve_device(device)
    Q = as_tensor(des.modes, dtype=dtype, device=dev)
    grid = np.unique(np.rint(np.linspace(0, cfg["steps"], cfg["n_record"])).astype(np.int64))

    def record(mod):
        return {"z": (torch.einsum("pk,rpd->rkd", Q, mod.W) ** 2).sum(-1)}

    class FlatModuleReplicas(ModuleReplicas):
        """The real module for R weight replicas, outputs flattened over (sample, output) pairs, so
        that with flattened targets the loss averages over m = samples x outputs as the NQF's does."""

        def forward(self) -> torch.Tensor:
            return super().forward().flatten(1)

    def run_gd(model, targets):
        # n of the loss convention: the (sample, output) pairs the loss averages over (the NQF's m)
        return train(model, targets, lr=cfg["lr"], steps=cfg["steps"], loss=cfg.get("loss", "mean"),
                     loss_samples=len(targets), record_steps=grid, record=record,
                     divergence_hint=" (the largest stable lr is about 2 / (largest eigenvalue of H))")

    with single_thread():
        model = QuadraticModel(des.module.structure(des.x), torch.cat([aligned, gaussian]), device=dev, dtype=dtype)
        ds = run_gd(model, y.numpy())
        if cfg.get("module"):
            module = des.module.to(device=dev, dtype=dtype)
            x = tuple(as_tensor(t, dtype=dtype, device=dev) for t in des.inputs)
            x = x[0] if len(x) == 1 else x
            f0 = module.forward_with(torch.zeros(module.p, module.width, dtype=dtype, device=dev), x).reshape(-1)
            mod_ds = run_gd(FlatModuleReplicas(module, x, aligned.to(device=dev, dtype=dtype)),
                            (f0.detach().cpu() + y).numpy())
    z, loss = ds["z"].values, ds["loss"].values
    out = xr.Dataset(
        {"z_aligned": (("eps", "step", "mode"), z[:n_eps], {"units": "1", "long_name": "z_k = |W^T q_k|^2, aligned init"}),
         "loss_aligned": (("eps", "step"), loss[:n_eps], {"units": "1", "long_name": "training loss, aligned init"}),
         "z_gaussian": (("seed", "step", "mode"), z[n_eps:], {"units": "1", "long_name": "z_k = |W^T q_k|^2, Gaussian init"}),
         "loss_gaussian": (("seed", "step"), loss[n_eps:], {"units": "1", "long_name": "training loss, Gaussian init"}),
         "g0_gaussian": (("seed", "mode", "unit"), torch.einsum("pk,spd->skd", des.modes, gaussian).numpy(), {
             "units": "1", "long_name": "g_k = W(0)^T q_k, Gaussian init (z_k(0) = |g_k|^2)"}),
         "z_star": ("mode", z_star, {"units": "1", "long_name": "teacher strength z*_k (c_k of the aligned init)"})},
        coords={"step": ds["step"], "time": ds["time"], "eps": np.asarray(cfg["eps"], float),
                "seed": np.asarray(cfg["seeds"], dtype=np.int64), "mode": np.arange(z_star.size),
                "unit": np.arange(gaussian.shape[-1])},
    )
    if cfg.get("module"):
        out["z_module"] = (("eps", "step", "mode"), mod_ds["z"].values, {"units": "1", "long_name": "z_k of the real module"})
        out["loss_module"] = (("eps", "step"), mod_ds["loss"].values, {"units": "1", "long_name": "loss of the real module"})
    out.attrs.update(run=run, architecture=arch, experiment_kind=KIND, width=des.module.width, p=des.module.p,
                     lr=cfg["lr"], steps=cfg["steps"], seed_scale=cfg["seed_scale"], device=str(dev),
                     module_trained=int(bool(cfg.get("module"))),
                     init_aligned="W(0) = sum_k sqrt(eps z*_k) q_k r_k^T",
                     init_gaussian="W(0) ~ N(0, seed_scale / d)", loss="(1/m) sum over (sample, output) pairs",
                     loss_convention=cfg.get("loss", "mean"), loss_factor=float(ds.attrs["loss_factor"]))
    return out


# -- theory and fit -------------------------------------------------------------------------
def theory(structure: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Theorem 8 per (architecture, mode, eps), its slope, and the seed-scatter predictions."""
    eps = np.sort(np.asarray(cfg["eps"], float))[::-1]
    a = structure["a"].values[:, None, None]
    zeta, C_k = structure["zeta"].values[:, :, None], structure["C_k"].values[:, :, None]
    c = (structure["amplitude_unit"].values[:, None] * structure["z_saturation"].values)[:, :, None]
    t_star = predicted_ignition_times(zeta, C_k, eps[None, None, :], c=c, a=a)
    d = structure["width"].values.astype(int)
    contract = np.array([predicted_seed_scatter(z, n, a=a_) for z, n, a_ in
                         zip(structure["zeta"].values, d, structure["a"].values)])
    ordered = np.array([ordered_seed_scatter(r, n, j) for r, n, j in
                        zip(structure["r"].values, d, structure["predecessors"].values)])
    dims = ("architecture", "mode")
    return xr.Dataset(
        {"t_star": (dims + ("eps",), t_star, {"units": "1", "long_name": "Theorem 8 ignition time, z_k(0) = eps z*_k"}),
         "slope": (dims, 1.0 / (structure["a"].values[:, None] * structure["zeta"].values), {
             "units": "1", "long_name": "1 / (a zeta_k): slope of t*_k against ln(1/eps)"}),
         "slope_theorem8": (dims, slope_fit(eps, np.moveaxis(t_star, -1, 0)), {
             "units": "1", "long_name": "least-squares slope of Theorem 8's t*_k over the configured eps"}),
         "scatter_contract": (dims, contract, {"units": "1", "long_name": "sqrt(psi'(d/2)) / (a zeta_k) (SCIENCE.md)"}),
         "scatter_ordered": (dims, ordered, {"units": "1", "long_name": "sqrt(psi'((d - j_k)/2)) / (a zeta_k)"}),
         "dof": (dims, d[:, None] - structure["predecessors"].values, {"units": "1", "long_name": "chi^2 degrees of freedom d - j_k"}),
         "regime": structure["regime"], "a": structure["a"], "zeta": structure["zeta"], "r": structure["r"]},
        coords={"architecture": structure["architecture"].values, "mode": structure["mode"].values, "eps": eps},
        attrs={"experiment_kind": KIND},
    )


def fit(structure: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """Fitted slopes and seed scatter per architecture and mode beside the predictions, with claims."""
    check_runs(run_ds, {a: {"experiment_kind": KIND, "architecture": a, "eps": cfg["eps"], "lr": cfg["lr"],
                            "loss": cfg["loss"]} for a in theory_ds["architecture"].values})
    return fits.fit(structure, theory_ds, run_ds, cfg)
