"""Experiment kind ``nqf_approximation``: each real module beside its NQF (paper Figure 2).

For every architecture (MLP, CNN, QK-only head, MHA, MoE) the targets are the outputs of a
width-r NQF teacher (r = 4 singular values in the paper) whose effective matrix E
(nqf.effective) has singular values s_k; the
module and its NQF start from the same Gaussian W0 (std sigma) and are trained side by side with
the same optimizer (GD, Polyak momentum, Adam). Seeds and eps values of one architecture and
optimizer are one tensor program (nqf.approximation). The recovered spectrum s_k(E(W(t))) / s_k
of both is compared by D = max over t and k of |s_k,module - s_k,NQF| / s_k.

Inputs are Gaussian with E|x|^2 = input_norm^2 per unit input (a token, a patch, or x): with
input_norm = 1 a unit's pre-activation at the teacher's solution is O(sqrt(s_k)), which keeps
the learned state inside the quadratic regime, so the small-init deviation measures the
approximation and not the data scale. The QK head's f(0) = d Cr^T x_avg is not zero: the
teacher shares the student's f(0), and the NQF is trained on y - f(0).

Verdicts (Fig. 2, Sec. 7): 'The NQF tracks the original almost exactly across every architecture
and optimizer' is judged at the smallest eps within an error budget times
``tolerances.safety_factor``: the module's own O(|W|^2) relative truncation error (Theorem 1,
estimated at the module's recorded weights from f(W) and f(W/2), nqf.approximation, so it does not
depend on the NQF being compared), its maximum over steps and seeds (to first order the NQF's
learned spectrum is shifted by the remainder the module carries, relative to its quadratic term),
plus the rounding of the training dtype (eps x steps). 'At large initialization, the NQF visibly
departs from the original' is a bound: D at each larger scale at least ``departure_ratio`` times
D at the smallest.

Loss convention (``loss``, nqf.losses, n = n_samples): both models minimise c L_Eq.26; GD and
momentum run the Eq. 26 dynamics with step c lr (``time`` = c lr step). For Adam the convention
changes only Adam's eps term; Adam has no closure and no flow clock.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import xarray as xr

from nqf.architectures import higher_order, title, unit_input_dim
from nqf.experiments.common import Claim, ErrorBudget, claims_dataset, grid_cell, grid_runs
from nqf.experiments.matching import check_runs
from nqf.spectra import deviation

if TYPE_CHECKING:
    from nqf.architectures import UnitModule

KIND = "nqf_approximation"
TRACKS_SOURCE = "Fig. 2 (Sec. 7): 'The NQF tracks the original almost exactly across every architecture and optimizer'"
DEPARTS_SOURCE = ("Fig. 2 (Sec. 7): 'At large initialization, the NQF visibly departs from the original, showing "
                  "that the NQF approximation is only valid in the small-initialization regime'")
SEED_BLOCKS = True  # results depend on each seed alone; see nqf.experiments (seed blocks)
FIGURE = "Fig. 2"  # the architectures' titles are this figure's (nqf.architectures.title)
_DATA = ("architectures", "sizes", "n_samples", "n_outputs", "singular_values", "input_norm",
         "data_seed")
STAGE_KEYS = {
    "data": _DATA,
    "structure": ("architectures", "sizes", "data_seed"),
    "train": _DATA + ("optimizers", "loss", "lr", "steps", "eps", "seeds", "momentum", "n_record",
                      "record_M_max_p", "dtype"),
    "theory": ("singular_values",),
    "fit": ("architectures", "optimizers", "eps", "singular_values", "tolerances"),
    "figure": ("description", "architectures", "optimizers", "eps", "singular_values"),
}


def run_id(arch: str, optimizer: str) -> str:
    return f"{arch}_{optimizer}"


# The config lists the run ids are made of (nqf.experiments.ids refuses a value listed twice).
RUN_ID_KEYS = ("architectures", "optimizers")


def runs(cfg: dict) -> list[str]:
    """One run per architecture x optimizer; it holds every seed and eps."""
    return grid_runs(cfg, run_id, "architectures", "optimizers")


def run_config(cfg: dict, run: str) -> dict:
    """The keys one run reads: its architecture's sizes, learning rate and steps only."""
    arch, opt = grid_cell(cfg, run, run_id, "architectures", "optimizers")
    shared = ("n_samples", "n_outputs", "singular_values", "input_norm", "data_seed", "loss",
              "eps", "seeds", "momentum", "n_record", "record_M_max_p", "dtype")
    return {"architecture": arch, "optimizer": opt, "size": cfg["sizes"][arch], "lr": cfg["lr"][arch][opt],
            "steps": cfg["steps"][arch], **{k: cfg[k] for k in shared}}


def estimate(cfg: dict) -> dict:
    """A floor for the largest run (nqf.experiments.machine.module_run): each architecture's
    inputs, the replicas (eps x the seeds of a job) of its module and NQF, their activations and
    the recorded M where p <= record_M_max_p."""
    from nqf.experiments.machine import job_seeds, largest_run, module_run

    R, n = job_seeds(cfg) * len(cfg["eps"]), int(cfg["n_samples"])
    return largest_run([module_run(a, cfg["sizes"][a], R, n, n, "n_samples", {"n_outputs": int(cfg["n_outputs"])},
                                   record=(int(cfg["n_record"]), int(cfg["record_M_max_p"])))
                        for a in cfg["architectures"]], max(int(cfg["steps"][a]) for a in cfg["architectures"]))


def check(cfg: dict) -> list[tuple[str, str]]:
    """Sizes that must fit together: each module must build, and the rank-r teacher needs
    r <= the student's width d, r <= the output dimension and r <= the input dimension."""
    # torch is imported where needed: the theory, fit and figure jobs run without it
    import torch

    from nqf.architectures import ARCHITECTURES
    from nqf.effective import teacher_weights

    s = list(cfg["singular_values"])
    if any(a < b for a, b in zip(s, s[1:])):
        # s_k is compared with the k-th largest singular value of E (nqf.spectra.deviation)
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


def inputs_of(data: xr.Dataset, arch: str):
    """The inputs of one architecture stored by :func:`make_data`, as the module takes them."""
    from nqf.architectures import read_inputs

    return read_inputs(arch, data, prefix=f"{arch}_")


def make_data(cfg: dict) -> xr.Dataset:
    """Per architecture: Gaussian inputs, the teacher W*, its E* and the targets f(0) + f_NQF*."""
    import torch

    from nqf.architectures import input_variables
    from nqf.effective import effective_matrix, teacher_weights

    m, k, s = cfg["n_samples"], cfg["n_outputs"], cfg["singular_values"]
    variables: dict = {}
    attrs = {"experiment_kind": KIND, "architectures": ",".join(cfg["architectures"]),
             "data_seed": cfg["data_seed"]}
    for arch in cfg["architectures"]:
        module = build_module(arch, cfg["sizes"][arch], k, cfg["data_seed"])
        gen = torch.Generator().manual_seed(cfg["data_seed"])
        std = cfg["input_norm"] / math.sqrt(unit_input_dim(module))
        x = module.sample_inputs(m, gen)
        x = tuple(t * std for t in x) if isinstance(x, tuple) else x * std
        W_star = teacher_weights(module, s, gen)
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
        attrs[f"{arch}_input_std"] = std
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
    return xr.Dataset(
        {"r": (("arch", "mode"), r, {"units": "1", "long_name": "growth rate of teacher mode a, r_a = (8/m) sum lambda_mu,a (y_mu - f0_mu)"}),
         "C": (("arch", "mode", "mode_j"), C, {"units": "1", "long_name": "interaction C_ab = (8/m) sum lambda_mu,a lambda_mu,b on the teacher modes"}),
         "teacher_unit_norm2": (("arch", "mode"), unit_norm2, {"units": "1", "long_name": "|w*_a|^2, the teacher's z_a"})},
        coords={"arch": archs, "mode": np.arange(n_modes), "mode_j": np.arange(n_modes)},
        attrs={"experiment_kind": KIND})


def _set_readout(module: UnitModule, data: xr.Dataset, arch: str) -> None:
    """Use the data file's readout, so teacher, module and NQF share it by construction."""
    if f"{arch}_readout" in data:
        module.set_readout(data[f"{arch}_readout"].values)


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """The module and its NQF for every seed and eps of one architecture x optimizer."""
    import torch

    from nqf.approximation import train_side_by_side
    from nqf.architectures import initial_weights

    rc = cfg if "architecture" in cfg else run_config(cfg, run)
    arch, opt = rc["architecture"], rc["optimizer"]
    module = build_module(arch, rc["size"], rc["n_outputs"], rc["data_seed"])
    _set_readout(module, data, arch)
    W0 = initial_weights(module, rc["seeds"], rc["eps"])
    steps = int(rc["steps"])
    dtype = torch.float64 if rc["dtype"] == "float64" else torch.float32
    ds = train_side_by_side(module, inputs_of(data, arch), data[f"{arch}_y"].values, W0,
                            lr=float(rc["lr"]), steps=steps, optimizer=opt, loss=rc.get("loss", "mean"),
                            n_singular=len(rc["singular_values"]), momentum=rc["momentum"],
                            record_steps=np.linspace(0, steps, rc["n_record"]).round().astype(int),
                            record_M=module.p <= rc["record_M_max_p"], device=device, dtype=dtype)
    index = pd.MultiIndex.from_product([np.asarray(rc["eps"], float), np.asarray(rc["seeds"])],
                                       names=["eps", "seed"])
    ds = ds.assign_coords(xr.Coordinates.from_pandas_multiindex(index, "replica")).unstack("replica")
    ds = ds.transpose("eps", "seed", "step", ...)
    ds["eps"].attrs.update(units="1", long_name="eps: std (the paper's sigma) of the Gaussian initial weights")
    ds["k"].attrs.update(long_name="singular value index (1 = largest)")
    ds.attrs.update(run=run, experiment_kind=KIND, architecture=arch, p=module.p, width=module.width,
                    singular_values=list(rc["singular_values"]))
    return ds


def theory(structure_ds: xr.Dataset, cfg: dict) -> xr.Dataset:
    """What s_k(t) must reach (the teacher's spectrum), and the projected GLV of the modes."""
    s = np.asarray(cfg["singular_values"], float)
    r, C = structure_ds["r"], structure_ds["C"]
    diag = np.diagonal(C.values, axis1=-2, axis2=-1)
    return xr.Dataset(
        {"s_target": ("mode", s, {"units": "1", "long_name": "teacher singular values s_k"}),
         "r": r, "C": C,
         "z_end": (("arch", "mode"), r.values / diag, {"units": "1", "long_name": "end point r_a / C_aa of the decoupled projected GLV"}),
         "learning_order": (("arch", "rank"), np.argsort(-r.values, axis=-1), {"long_name": "modes by decreasing r_a (order of ignition)"})},
        coords={"arch": structure_ds["arch"].values, "mode": np.arange(s.size), "rank": np.arange(s.size)},
        attrs={"experiment_kind": KIND})


def fit(structure_ds: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """D per architecture x optimizer x eps x seed, and the two claims of Figure 2 (the
    small-init one within its error budget, the large-init one a bound; module docstring)."""
    check_runs(run_ds, {run_id(a, o): {"experiment_kind": KIND, "architecture": a, "optimizer": o, "eps": cfg["eps"],
                                         "singular_values": cfg["singular_values"]}
                          for a in cfg["architectures"] for o in cfg["optimizers"]})
    archs, opts = list(cfg["architectures"]), list(cfg["optimizers"])
    scales = np.asarray(cfg["eps"], float)
    s = np.asarray(cfg["singular_values"], float)
    tol = cfg["tolerances"]
    factor, ratio = float(tol["safety_factor"]), float(tol["departure_ratio"])
    seeds = run_ds[run_id(archs[0], opts[0])]["seed"].values
    D = np.full((len(archs), len(opts), scales.size, seeds.size), np.nan)
    trunc = np.full((len(archs), len(opts), scales.size), np.nan)
    for i, a in enumerate(archs):
        for j, o in enumerate(opts):
            run = run_ds[run_id(a, o)].sel(eps=scales)
            D[i, j] = deviation(run["s_module"].values, run["s_nqf"].values, s)
            trunc[i, j] = run["truncation"].max(dim=("seed", "step")).values
    D_max = D.max(axis=-1)
    order = np.argsort(scales)
    small, large = order[0], order[1:]
    tolerance = np.full((len(archs), len(opts)), np.nan)
    claims = []
    for i, a in enumerate(archs):
        for j, o in enumerate(opts):
            run = run_ds[run_id(a, o)]
            eps = float(np.finfo(run["s_module"].dtype).eps) if run["s_module"].dtype.kind == "f" else 0.0
            steps = int(run["step"].values.max())
            budget = ErrorBudget({
                "NQF truncation O(|W|^2): max over steps and seeds of the module's relative remainder at its weights":
                    float(trunc[i, j, small]),
                f"rounding: eps({run['s_module'].dtype}) x steps": eps * steps}, factor)
            tolerance[i, j] = budget.tolerance
            d0 = float(D_max[i, j, small])
            adam = ("; Adam: no closure, and the loss convention changes only its eps term" if o == "adam" else "")
            claims.append(budget.claim(
                f"D({a} {o} sigma={scales[small]:g}) within the NQF's error budget", 0.0, d0, relative=False,
                checks="paper", source=TRACKS_SOURCE,
                note=("max over t, k and seeds of |s_k,module - s_k,NQF| / s_k; NQF tracks the module" + adam
                      if d0 <= budget.tolerance else
                      f"MISS: the module leaves its NQF by more than its truncation error explains ({higher_order(a)})")))
            for l in large:
                dl = float(D_max[i, j, l])
                s1_init = float(run["s_module"].sel(eps=scales[l]).isel(step=0, k=0).mean())
                ok = dl >= ratio * d0
                claims.append(Claim(
                    f"D({a} {o} sigma={scales[l]:g}) >= {ratio:g} D(sigma={scales[small]:g})",
                    ratio * d0, dl, math.nan, comparison="at_least", checks="paper", source=DEPARTS_SOURCE,
                    tolerance_source=(f"bound: 'visibly departs' read as at least departure_ratio ({ratio:g}) times the "
                                      f"sigma={scales[small]:g} D of the same architecture and optimizer (two deviations "
                                      f"measured on the same grid and seeds), so no error budget enters"),
                    note=(f"ratio {dl / max(d0, 1e-300):.3g}; departure at large init ({higher_order(a)}); the module's "
                          f"truncation error there reaches {trunc[i, j, l]:.3g}" if ok else
                          f"MISS: ratio {dl / max(d0, 1e-300):.3g}; {_miss_reason(a, s1_init, s[0])}")))
    ds = xr.Dataset(
        {"D": (("arch", "optimizer", "eps", "seed"), D, {"units": "1", "long_name": "max over t and k of |s_k,module - s_k,NQF| / s_k"}),
         "D_max": (("arch", "optimizer", "eps"), D_max, {"units": "1", "long_name": "D, worst seed"}),
         "truncation_max": (("arch", "optimizer", "eps"), trunc, {
             "units": "1", "long_name": "max over steps and seeds of the module's relative O(|W|^2) truncation error"}),
         "small_init_tolerance": (("arch", "optimizer"), tolerance, {
             "units": "1", "long_name": "error budget of D at the smallest eps, times the safety factor"})},
        coords={"arch": archs, "optimizer": opts, "eps": scales, "seed": seeds},
        attrs={"experiment_kind": KIND})
    return xr.merge([ds, claims_dataset(claims)])


def _miss_reason(arch: str, s1_init: float, s1: float) -> str:
    """Why a large init did not take the module further from its NQF than learning did."""
    where = (f"at the large init s_1(E(W0)) = {s1_init:.2g} against the teacher's s_1 = {s1:g}, so "
             f"the module starts no further from its NQF than the learned state is ({higher_order(arch)})")
    if arch == "qk_head":
        return ("the logit matrix E = W^K^T W^Q / sqrt(d_k) is quadratic in the weights: " + where +
                "; D is set by the learned state at both scales")
    return where
