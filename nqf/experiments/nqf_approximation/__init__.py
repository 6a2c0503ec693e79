"""Experiment kind ``nqf_approximation``: each real module beside its NQF (paper Figure 2).

For every architecture (MLP, CNN, QK-only head, MHA, MoE) the targets are the outputs of a
width-r NQF teacher (r = 4 singular values in the paper) whose effective matrix E
(nqf.architectures.effective) has singular values s_k; the module and its NQF start from the same Gaussian W0
(std sigma) and are trained side by side with the same optimizer (GD, Polyak momentum, Adam).
Seeds and eps values of one architecture and optimizer are one tensor program
(nqf.training.approximation). The recovered spectrum s_k(E(W(t))) / s_k of both is compared by
D = max over t and k of |s_k,module - s_k,NQF| / s_k.

Readings (Sec. 7: "The input is chosen to be Gaussian"; nothing about its scale):

* ``input_norm``: ``standard`` (the paper's: standard Gaussian entries, so the vector one unit
  reads, x, a token or a patch, has E|x|^2 = its dimension) or a number (this project's reading
  1: E|x|^2 = 1, which keeps every learned state inside the quadratic regime);
* ``teacher_scale``: the teacher's E has the stated singular values in the units of the inputs
  (``as_stated``), or those of the unit-norm problem carried to these inputs (``matched``: E
  scaled by input_norm^-q, so the targets are those of the unit-norm problem). q is the degree of
  A(x) in the input scale, measured (nqf.architectures.input_degree: 1 for the MLP, CNN and MHA,
  2 for the MoE, 3 for the QK head, whose A holds x and Sigma_X).

Learning rates (the paper: "Learning rates differ in each setting", none given) are those of the
unit-norm reference problem (``lr``), carried to the reading so that the NQF's trajectory in steps
is the reference one: with inputs scaled by a = input_norm, A -> a^q A; ``as_stated`` keeps M and
scales the targets by a^q, so the Eq. 27 flow is a^(2q) faster and GD and momentum step lr a^(-2q)
(Adam, invariant to the gradient's scale, keeps lr); ``matched`` keeps the targets and scales M
by a^(-q), so GD and momentum step lr a^(-q) and Adam lr a^(-q/2) (its step moves W, which scales
by a^(-q/2)). GD and momentum must also be stable where they start: each replica's step is capped at
1 / lambda_max (momentum: (1 + beta) / lambda_max), half the linear stability bound, with
lambda_max the largest eigenvalue of the NQF loss's Hessian at its W0 (nqf.theory.stability.top_curvature),
so that D measures the NQF approximation and not GD's instability. The run file records every lr.

Verdicts (Fig. 2, Sec. 7): 'The NQF tracks the original almost exactly across every architecture
and optimizer' is judged at the smallest eps as the figure shows it: D at most ``threshold`` (a
deviation visible on the figure's axes); beside it, as Theorem 1's check, D within an error budget
times ``tolerances.safety_factor``: the module's own O(|W|^2) relative truncation error (estimated
at the module's recorded weights from f(W) and f(W/2), nqf.training.approximation, independent of the NQF
compared), its maximum over steps and seeds, plus the rounding of the training dtype (eps x
steps). 'At large initialization, the NQF visibly departs from the original' is a bound: D at each
larger scale at least ``departure_ratio`` times D at the smallest. A miss names its measured cause:
the module's truncation error at its initial and learned weights at each scale.

Loss convention (``loss``, nqf.theory.losses, n = n_samples): both models minimise c L_Eq.26; GD and
momentum run the Eq. 26 dynamics with step c lr (``time`` = c lr step). For Adam the convention
changes only Adam's eps term; Adam has no closure and no flow clock.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import xarray as xr

from nqf.architectures import title, unit_input_dim
from nqf.experiments.contract import PaperFigure
from nqf.experiments.nqf_approximation import fitting as fits
from nqf.experiments.nqf_approximation.fitting import DEPARTS_SOURCE, TRACKS_SOURCE  # noqa: F401 (the claims' sources)
from nqf.experiments.verify_runs import check_runs

if TYPE_CHECKING:
    from nqf.architectures import UnitModule

KIND = "nqf_approximation"
# facts the generic checks and reports read (nqf.experiments.contract.OPTIONAL)
PAPER_FIGURE = PaperFigure("Fig. 2", "NQF approximation across architectures, optimizers and init scales", order=1)
READING_KEYS = ("input_norm", "teacher_scale")  # unstated by the paper (module docstring)
READING_CHOICES = {"input_norm": ("standard", 1.0), "teacher_scale": ("as_stated", "matched")}
SEED_BLOCKS = True  # results depend on each seed alone; see nqf.experiments (seed blocks)
FIGURE = PAPER_FIGURE.label  # the architectures' titles are this figure's (nqf.architectures.title)
_DATA = ("architectures", "sizes", "n_samples", "n_outputs", "singular_values", "input_norm",
         "teacher_scale", "data_seed")
STAGE_KEYS = {
    "data": _DATA,
    "structure": ("architectures", "sizes", "data_seed"),
    "train": _DATA + ("optimizers", "loss", "lr", "steps", "eps", "seeds", "momentum", "n_record",
                      "record_M_max_p", "dtype"),
    "theory": ("singular_values",),
    "fit": ("architectures", "optimizers", "eps", "singular_values", "threshold", "tolerances"),
    "figure": ("description", "architectures", "optimizers", "eps", "singular_values", "input_norm", "teacher_scale"),
}


# The config lists the run ids are made of (nqf.experiments.ids refuses a value listed twice).
RUN_ID_KEYS = ("architectures",)


def runs(cfg: dict) -> list[str]:
    """One run (one training job) per architecture; it holds every optimizer, seed and eps."""
    return list(cfg["architectures"])


def run_config(cfg: dict, run: str) -> dict:
    """The keys one run reads: its architecture's sizes, learning rates and steps only."""
    if run not in cfg["architectures"]:
        raise ValueError(f"Run {run!r} is not one of this experiment's runs ({', '.join(runs(cfg))}).")
    shared = ("optimizers", "n_samples", "n_outputs", "singular_values", "input_norm", "teacher_scale", "data_seed",
              "loss", "eps", "seeds", "momentum", "n_record", "record_M_max_p", "dtype")
    return {"architecture": run, "size": cfg["sizes"][run], "steps": cfg["steps"][run],
            "lr": {o: cfg["lr"][run][o] for o in cfg["optimizers"]}, **{k: cfg[k] for k in shared}}


def estimate(cfg: dict) -> dict:
    """A floor for the largest run (nqf.experiments.machine.module_run): each architecture's
    inputs, the replicas (eps x the seeds of a job) of its module and NQF, their activations and
    the recorded M where p <= record_M_max_p."""
    from nqf.experiments.machine import job_seeds, largest_run, module_run

    R, n = job_seeds(cfg) * len(cfg["eps"]), int(cfg["n_samples"])
    return largest_run([module_run(a, cfg["sizes"][a], R, n, n, "n_samples", {"n_outputs": int(cfg["n_outputs"])},
                                   record=(int(cfg["n_record"]), int(cfg["record_M_max_p"])))
                        for a in cfg["architectures"]], max(int(cfg["steps"][a]) for a in cfg["architectures"]))


def work(cfg: dict, run: str) -> dict:
    """What run ``run`` computes (nqf.experiments.work.run_work): one block of steps per optimizer,
    each step the replicas of its module (counted on the meta device) and of its NQF (as many
    operations, far fewer FLOPs), and each record about RECORD_STEPS steps."""
    from nqf.experiments.machine import job_seeds
    from nqf.experiments.work import RECORD_STEPS, module_work

    flops, ops, nbytes = module_work(run, cfg["sizes"][run], job_seeds(cfg) * len(cfg["eps"]), int(cfg["n_samples"]),
                             {"n_outputs": int(cfg["n_outputs"])})
    blocks = len(cfg["optimizers"])
    return {"steps": blocks * (int(cfg["steps"][run]) + RECORD_STEPS * int(cfg["n_record"])), "flops": flops,
            "ops": 2 * ops, "bytes": nbytes}


def check(cfg: dict) -> list[tuple[str, str]]:
    """Sizes that must fit together: each module must build, and the rank-r teacher needs
    r <= the student's width d, r <= the output dimension and r <= the input dimension."""
    # torch is imported where needed: the theory, fit and figure jobs run without it
    import torch

    from nqf.architectures import ARCHITECTURES
    from nqf.architectures.effective import teacher_weights

    opts = list(cfg["optimizers"])
    if len(set(opts)) < len(opts):  # the schema refuses it; a library caller may not have used it
        return [("optimizers", f"lists an optimizer twice ({opts}); give each once (one block of the run each).")]
    s = list(cfg["singular_values"])
    if any(a < b for a, b in zip(s, s[1:])):
        # s_k is compared with the k-th largest singular value of E (nqf.theory.spectra.deviation)
        return [("singular_values", f"must be listed from largest to smallest (s_1 >= s_2 >= ...), as the "
                                    f"learned spectrum is compared with them in that order; got {s}.")]
    problems = []
    r = len(cfg["singular_values"])
    for arch in cfg["architectures"]:
        try:
            module = build_module(arch, cfg["sizes"][arch], cfg["n_outputs"], cfg["data_seed"])
        except (ValueError, TypeError) as exc:
            problems.append((f"sizes.{arch}", f"the {arch} module cannot be built: {exc}"))
            continue
        # A perceptron, CNN kernel or MoE expert unit adds one rank-one term to E; an attention
        # head can add up to d_k (or d_v) of them, so only the former need r units.
        if ARCHITECTURES[arch].rank_one_units and r > module.width:
            problems.append(("singular_values", f"a rank-{r} teacher needs at least {r} units, but the "
                             f"{arch} student has width {module.width}; shorten singular_values or "
                             f"widen sizes.{arch}."))
            continue
        try:
            teacher_weights(module, cfg["singular_values"], torch.Generator().manual_seed(0))
        except ValueError as exc:
            problems.append(("singular_values", f"no rank-{r} teacher fits the {arch} module: {exc}"))
    return problems


def build_module(arch: str, size: dict, n_outputs: int, data_seed: int) -> UnitModule:
    """The float64 module of one architecture (its own parameters are never used: W is)."""
    from nqf.architectures import build

    return build(arch, size, n_outputs=n_outputs, seed=data_seed)


def input_norm_of(module: UnitModule, input_norm) -> float:
    """The RMS norm of the vector one unit reads: sqrt(its dimension) for ``standard`` inputs."""
    return math.sqrt(unit_input_dim(module)) if input_norm == "standard" else float(input_norm)


def teacher_factor(norm: float, q: int, teacher_scale: str) -> float:
    """The factor on the stated singular values: 1 ``as_stated``; norm^-q ``matched``."""
    return 1.0 if teacher_scale == "as_stated" else norm ** (-q)


def lr_factor(norm: float, q: int, teacher_scale: str, optimizer: str) -> float:
    """The factor that carries a learning rate of the unit-norm problem to inputs of RMS norm
    ``norm`` (module docstring): the NQF then takes the reference trajectory, step for step."""
    if optimizer == "adam":
        return 1.0 if teacher_scale == "as_stated" else norm ** (-q / 2)
    return norm ** (-2 * q) if teacher_scale == "as_stated" else norm ** (-q)


def stable_lr_scale(module: UnitModule, x, y, W0, lr: float, *, optimizer: str, momentum: float,
                    loss: str) -> np.ndarray:
    """Per replica, the factor (<= 1) that keeps GD or momentum stable where it starts: the step
    c lr (c: the loss convention's factor) is capped at 1 / lambda_max (momentum (1 + beta) /
    lambda_max), half the linear stability bound, lambda_max the top eigenvalue of the NQF loss's
    Hessian at that replica's W0 (each replica its own, so a seed's run does not depend on the
    other seeds trained beside it)."""
    import torch

    from nqf.theory.losses import flow_lr
    from nqf.theory.stability import top_curvature
    from nqf.training.loop import mse_per_replica

    form = module.structure(x)
    target = torch.as_tensor(np.asarray(y), dtype=W0.dtype)
    shape = (W0.shape[0],) + tuple(target.shape)
    lam = top_curvature(lambda W: mse_per_replica(form.outputs(W).reshape(W.shape[0], *shape[1:]), target), W0)
    step = flow_lr(lr, loss, target.shape[0])
    bound = (1.0 if optimizer == "gd" else 1.0 + momentum) / np.maximum(lam, 1e-300)
    return np.minimum(1.0, bound / step)


def inputs_of(data: xr.Dataset, arch: str):
    """The inputs of one architecture stored by :func:`make_data`, as the module takes them."""
    from nqf.architectures import read_inputs

    return read_inputs(arch, data, prefix=f"{arch}_")


def make_data(cfg: dict) -> xr.Dataset:
    """Per architecture: Gaussian inputs, the teacher W*, its E* and the targets f(0) + f_NQF*."""
    import torch

    from nqf.architectures import input_degree, input_variables, scale_inputs
    from nqf.architectures.effective import effective_matrix, teacher_weights

    m, k, s = cfg["n_samples"], cfg["n_outputs"], cfg["singular_values"]
    variables: dict = {}
    attrs = {"experiment_kind": KIND, "architectures": ",".join(cfg["architectures"]),
             "data_seed": cfg["data_seed"]}
    for arch in cfg["architectures"]:
        module = build_module(arch, cfg["sizes"][arch], k, cfg["data_seed"])
        gen = torch.Generator().manual_seed(cfg["data_seed"])
        norm = input_norm_of(module, cfg["input_norm"])
        std = norm / math.sqrt(unit_input_dim(module))
        x = scale_inputs(module.sample_inputs(m, gen), std)
        q = input_degree(module, x)
        W_star = teacher_weights(module, [v * teacher_factor(norm, q, cfg["teacher_scale"]) for v in s], gen)
        with torch.no_grad():
            f0 = module.forward_with(torch.zeros(module.p, module.width, dtype=torch.float64), x)
            y = f0 + module.structure(x).outputs(W_star).reshape(m, k)
            E = effective_matrix(module, W_star)
        label = title(arch, FIGURE)
        for name, (dims, val) in input_variables(arch, x, prefix=f"{arch}_", sample_dim="sample").items():
            variables[name] = (dims, val, {"units": "1", "long_name": f"{label} inputs"})
        variables[f"{arch}_y"] = (("sample", "output"), y.numpy(), {
            "units": "1", "long_name": f"{label} targets f(0) + Tr[W* W*^T A(x)]"})
        variables[f"{arch}_f0"] = (("sample", "output"), f0.numpy(), {
            "units": "1", "long_name": f"{label} output at W = 0 (shared by teacher and student)"})
        variables[f"{arch}_teacher_W"] = ((f"{arch}_param", "teacher_unit"), W_star.numpy(), {
            "units": "1", "long_name": f"{label} teacher unit weights W*"})
        variables[f"{arch}_teacher_E"] = ((f"{arch}_E_row", f"{arch}_E_col"), E.numpy(), {
            "units": "1", "long_name": f"{label} teacher effective matrix E(W*)"})
        if hasattr(module, "readout"):
            variables[f"{arch}_readout"] = ((f"{arch}_feature", "output"), module.readout.numpy(), {
                "units": "1", "long_name": "fixed readout Cr of the query-key head"})
        attrs.update({f"{arch}_input_std": std, f"{arch}_input_norm": norm, f"{arch}_input_degree": q})
    return xr.Dataset(variables, coords={"sample": np.arange(m), "output": np.arange(k),
                                         "teacher_unit": np.arange(len(s))}, attrs=attrs)


def structure(data: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Lotka-Volterra coefficients of the teacher's modes (the structure stage of this kind).

    The data matrices are never densified (p = 880 for MHA): with psi_a the normalised teacher
    units, lambda_mu,a = psi_a^T A_mu psi_a comes from the factored form, r_a = (8/m) sum
    lambda_mu,a (y_mu - f0_mu) and C_ab = (8/m) sum lambda_mu,a lambda_mu,b (sums over samples
    and outputs, m samples). This is the GLV of Eq. 32 projected on the teacher's modes; its
    fixed point r_a / C_aa is |w*_a|^2 when the modes decouple.
    """
    import torch

    archs = list(cfg["architectures"])
    n_modes = data.sizes["teacher_unit"]
    m = data.sizes["sample"]
    r = np.zeros((len(archs), n_modes))
    C = np.zeros((len(archs), n_modes, n_modes))
    unit_norm2 = np.zeros((len(archs), n_modes))
    s_target = np.zeros((len(archs), n_modes))
    for i, arch in enumerate(archs):
        module = build_module(arch, cfg["sizes"][arch], data.sizes["output"], int(cfg["data_seed"]))
        _set_readout(module, data, arch)
        x = inputs_of(data, arch)
        W_star = torch.as_tensor(data[f"{arch}_teacher_W"].values)
        norms = W_star.norm(dim=0)
        lam = module.structure(x).outputs((W_star / norms).T[:, :, None]).numpy()
        target = (data[f"{arch}_y"] - data[f"{arch}_f0"]).values.reshape(-1)
        r[i] = 8.0 / m * lam @ target
        C[i] = 8.0 / m * lam @ lam.T
        unit_norm2[i] = norms.numpy() ** 2
        s_target[i] = np.linalg.svd(data[f"{arch}_teacher_E"].values, compute_uv=False)[:n_modes]
    return xr.Dataset(
        {"r": (("arch", "mode"), r, {"units": "1", "long_name": "growth rate of teacher mode a, r_a = (8/m) sum lambda_mu,a (y_mu - f0_mu)"}),
         "C": (("arch", "mode", "mode_j"), C, {"units": "1", "long_name": "interaction C_ab = (8/m) sum lambda_mu,a lambda_mu,b on the teacher modes"}),
         "teacher_unit_norm2": (("arch", "mode"), unit_norm2, {"units": "1", "long_name": "|w*_a|^2, the teacher's z_a"}),
         "s_target": (("arch", "mode"), s_target, {"units": "1", "long_name": "singular values s_k of the teacher's "
                                                                        "effective matrix (in the inputs' units)"})},
        coords={"arch": archs, "mode": np.arange(n_modes), "mode_j": np.arange(n_modes)},
        attrs={"experiment_kind": KIND})


def _set_readout(module: UnitModule, data: xr.Dataset, arch: str) -> None:
    """Use the data file's readout, so teacher, module and NQF share it by construction."""
    if f"{arch}_readout" in data:
        module.set_readout(data[f"{arch}_readout"].values)


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """The module and its NQF for every optimizer, seed and eps of one architecture (one tensor
    program per optimizer), at the learning rate carried to this reading's inputs and capped where
    GD would start unstable (module docstring); every replica's lr is recorded. The run file has
    an ``optimizer`` dimension; its ``time`` coordinate is per optimizer."""
    from nqf.architectures import initial_weights, input_degree

    rc = cfg if "architecture" in cfg else run_config(cfg, run)
    arch = rc["architecture"]
    module = build_module(arch, rc["size"], rc["n_outputs"], rc["data_seed"])
    _set_readout(module, data, arch)
    x = inputs_of(data, arch)
    W0 = initial_weights(module, rc["seeds"], rc["eps"])
    norm, q = input_norm_of(module, rc["input_norm"]), input_degree(module, x)
    parts = [_train_optimizer(module, x, data[f"{arch}_y"].values, W0, rc, opt, norm, q, device)
             for opt in rc["optimizers"]]
    ds = xr.concat(parts, dim=pd.Index(list(rc["optimizers"]), name="optimizer"), coords="different", compat="equals",
                   combine_attrs="drop_conflicts")
    index = pd.MultiIndex.from_product([np.asarray(rc["eps"], float), np.asarray(rc["seeds"])],
                                       names=["eps", "seed"])
    ds = ds.assign_coords(xr.Coordinates.from_pandas_multiindex(index, "replica")).unstack("replica")
    ds = ds.transpose("optimizer", "eps", "seed", "step", ...)
    ds["eps"].attrs.update(units="1", long_name="eps: std (the paper's sigma) of the Gaussian initial weights")
    ds["k"].attrs.update(long_name="singular value index (1 = largest)")
    ds["optimizer"].attrs.update(long_name="optimizer of module and NQF (gd, momentum, adam)")
    ds["time"].attrs.update(units="1", long_name="Eq. 26 gradient-flow time c lr step of each optimizer's reference lr")
    s_target = np.linalg.svd(data[f"{arch}_teacher_E"].values, compute_uv=False)[:len(rc["singular_values"])]
    ds["s_target"] = ("k", s_target, {"units": "1", "long_name": "singular values of the teacher's effective matrix"})
    ds["lr_config"] = ("optimizer", [float(rc["lr"][o]) for o in rc["optimizers"]], {
        "units": "1", "long_name": "the config's learning rate (unit-norm reference problem)"})
    for key in ("optimizer", "lr"):
        ds.attrs.pop(key, None)
    ds.attrs.update(run=run, experiment_kind=KIND, architecture=arch, p=module.p, width=module.width,
                    singular_values=list(rc["singular_values"]), input_norm=norm, input_degree=q,
                    teacher_scale=rc["teacher_scale"])
    return ds


def _train_optimizer(module: UnitModule, x, y, W0, rc: dict, opt: str, norm: float, q: int,
                     device: str) -> xr.Dataset:
    """One optimizer's side-by-side training of every replica (nqf.training.approximation)."""
    import torch

    from nqf.training.approximation import train_side_by_side

    module = module.to(device="cpu", dtype=torch.float64)  # the previous optimizer's run moved it
    steps = int(rc["steps"])
    dtype = torch.float64 if rc["dtype"] == "float64" else torch.float32
    lr = float(rc["lr"][opt]) * lr_factor(norm, q, rc["teacher_scale"], opt)
    scale = None
    if opt in ("gd", "momentum"):
        target = y - module.forward_with(torch.zeros(module.p, module.width, dtype=torch.float64), x).numpy()
        scale = stable_lr_scale(module, x, target, W0, lr, optimizer=opt, momentum=float(rc["momentum"]),
                                loss=rc["loss"])
        scale = None if np.all(scale == 1.0) else scale
    ds = train_side_by_side(module, x, y, W0, lr=lr, steps=steps, optimizer=opt, loss=rc["loss"],
                            n_singular=len(rc["singular_values"]), momentum=rc["momentum"],
                            record_steps=np.linspace(0, steps, rc["n_record"]).round().astype(int),
                            record_M=module.p <= rc["record_M_max_p"], device=device,
                            dtype=dtype, lr_scale=scale)
    if "lr" not in ds:
        ds["lr"] = ("replica", np.full(ds.sizes["replica"], lr), {"units": "1"})
    ds["lr"].attrs.update(long_name=f"learning rate: the config's (unit-norm reference) x {lr / float(rc['lr'][opt]):.4g} "
                                    f"(carried to inputs of norm {norm:.4g}, A of degree {q}, teacher "
                                    f"{rc['teacher_scale']}), capped at half GD's stability bound at W0 where lower")
    return ds


def theory(structure_ds: xr.Dataset, cfg: dict) -> xr.Dataset:
    """What s_k(t) must reach (the teacher's spectrum), and the projected GLV of the modes."""
    r, C = structure_ds["r"], structure_ds["C"]
    diag = np.diagonal(C.values, axis1=-2, axis2=-1)
    return xr.Dataset(
        {"s_target": structure_ds["s_target"],
         "r": r, "C": C,
         "z_end": (("arch", "mode"), r.values / diag, {"units": "1", "long_name": "end point r_a / C_aa of the decoupled projected GLV"}),
         "learning_order": (("arch", "rank"), np.argsort(-r.values, axis=-1), {"long_name": "modes by decreasing r_a (order of ignition)"})},
        coords={"arch": structure_ds["arch"].values, "mode": structure_ds["mode"].values,
                "rank": np.arange(structure_ds.sizes["mode"])},
        attrs={"experiment_kind": KIND})


def fit(structure_ds: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """D per architecture x optimizer x eps x seed, and the claims of Figure 2
    (nqf.experiments.nqf_approximation.fitting), on run files checked against the config."""
    check_runs(run_ds, {a: {"experiment_kind": KIND, "architecture": a, "eps": cfg["eps"],
                            "singular_values": cfg["singular_values"]} for a in cfg["architectures"]})
    _check_optimizers(run_ds, list(cfg["architectures"]), list(cfg["optimizers"]))
    return fits.fit(structure_ds, theory_ds, run_ds, cfg)


def _check_optimizers(run_ds: dict, archs: list, opts: list) -> None:
    """Every run holds the config's optimizers (else it is another config's file)."""
    from nqf.errors import ResultFileError

    for a in archs:
        have = [str(o) for o in run_ds[a]["optimizer"].values] if "optimizer" in run_ds[a].coords else []
        if not set(opts) <= set(have):
            path = run_ds[a].encoding.get("source")
            raise ResultFileError(f"Run {a!r} holds the optimizers {have}, but the config asks for {opts}: it is not "
                                  f"the run of this experiment's config (rule 'train', run {a!r}).", path,
                                  unusable=path is not None)
