"""Fit stage of experiment kind ``nqf_approximation`` (paper Figure 2): the deviation D of the
recovered spectra of module and NQF per architecture, optimizer, init scale and seed, and the
module's truncation error (:func:`measure`), judged against the figure's claims (:func:`judge`).
nqf.experiments.nqf_approximation.fit checks the run files and calls :func:`fit`; this module
imports no kind module (nqf.experiments.nqf_approximation describes the verdicts).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import xarray as xr

from nqf.architectures import higher_order
from nqf.experiments.claims import Claim, ErrorBudget, claims_dataset
from nqf.theory.spectra import deviation

KIND = __name__.split(".")[-2]  # the kind folder this fit stage sits in (it does not import the kind module)
TRACKS_SOURCE = "Fig. 2 (Sec. 7): 'The NQF tracks the original almost exactly across every architecture and optimizer'"
DEPARTS_SOURCE = ("Fig. 2 (Sec. 7): 'At large initialization, the NQF visibly departs from the original, showing "
                  "that the NQF approximation is only valid in the small-initialization regime'")


# -- measuring -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """The fit's measurements: ``D`` (arch, optimizer, eps, seed) = max over t and k of
    |s_k,module - s_k,NQF| / s_k, and the module's relative O(|W|^2) truncation error, its maximum
    over steps and seeds (``truncation``) and at W0 (``truncation_init``, max over seeds), both
    (arch, optimizer, eps); ``seeds`` the runs' seeds."""

    D: np.ndarray
    truncation: np.ndarray
    truncation_init: np.ndarray
    seeds: np.ndarray

    @property
    def D_max(self) -> np.ndarray:
        """D, worst seed (arch, optimizer, eps)."""
        return self.D.max(axis=-1)


def measure(theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], archs: list, opts: list,
            scales: np.ndarray) -> Measurement:
    """:class:`Measurement` of the runs of ``archs`` x ``opts`` at the init scales ``scales``."""
    seeds = run_ds[archs[0]]["seed"].values
    D = np.full((len(archs), len(opts), scales.size, seeds.size), np.nan)
    trunc = np.full((len(archs), len(opts), scales.size), np.nan)
    trunc0 = np.full((len(archs), len(opts), scales.size), np.nan)
    for i, a in enumerate(archs):
        s_target = np.asarray(theory_ds["s_target"].sel(arch=a).values, float)
        for j, o in enumerate(opts):
            run = run_ds[a].sel(optimizer=o, eps=scales)
            D[i, j] = deviation(run["s_module"].values, run["s_nqf"].values, s_target[:run.sizes["k"]])
            trunc[i, j] = run["truncation"].max(dim=("seed", "step")).values
            trunc0[i, j] = run["truncation"].isel(step=0).max(dim="seed").values
    return Measurement(D, trunc, trunc0, seeds)


def truncation_budget(run: xr.Dataset, truncation: float, factor: float) -> ErrorBudget:
    """Theorem 1's error budget of D at one init scale of one optimizer's ``run``: the module's
    largest truncation error ``truncation`` there plus the rounding of the training dtype (eps x
    steps), times ``factor``."""
    eps = float(np.finfo(run["s_module"].dtype).eps) if run["s_module"].dtype.kind == "f" else 0.0
    steps = int(run["step"].values.max())
    return ErrorBudget({
        "NQF truncation O(|W|^2): max over steps and seeds of the module's relative remainder at its weights":
            float(truncation),
        f"rounding: eps({run['s_module'].dtype}) x steps": eps * steps}, factor)


# -- judging -------------------------------------------------------------------------------------


def judge_pair(arch: str, opt: str, run: xr.Dataset, scales: np.ndarray, D_max: np.ndarray, trunc: np.ndarray,
               trunc0: np.ndarray, *, factor: float, ratio: float, threshold: float) -> tuple[list[Claim], float]:
    """The claims of one architecture and optimizer (``run`` its run file at that optimizer;
    ``D_max``, ``trunc``, ``trunc0`` its measurements per init scale) and the tolerance of D at the
    smallest scale: D there below ``threshold`` (the paper's 'tracks') and within Theorem 1's
    budget, at each larger scale at least ``ratio`` times it (the paper's 'departs')."""
    a, o, thr = arch, opt, threshold
    order = np.argsort(scales)
    small, large = order[0], order[1:]
    budget = truncation_budget(run, trunc[small], factor)
    d0 = float(D_max[small])
    where = (f"{_lr_text(run, scales[small])}; the module's truncation error (its relative O(|W|^2) remainder) "
             f"is {trunc0[small]:.2g} at W0 and at most {trunc[small]:.2g} over training")
    adam = "; Adam: no closure, and the loss convention changes only its eps term" if o == "adam" else ""
    claims = [Claim(
        f"D({a} {o} sigma={scales[small]:g}) <= {thr:g}: the NQF tracks the module", thr, d0, math.nan,
        comparison="at_most", checks="paper", source=TRACKS_SOURCE,
        tolerance_source=(f"bound: 'tracks almost exactly' read as a deviation of the recovered spectrum below "
                          f"{thr:g} of s_k (threshold: visible on the figure's axes); Theorem 1's budget is "
                          f"the next row"),
        note=(f"max over t, k and seeds of |s_k,module - s_k,NQF| / s_k; {where}" + adam if d0 <= thr else
              f"MISS: D = {d0:.3g}; the learned state is outside the quadratic regime: {where} "
              f"({higher_order(a)})"))]
    claims.append(budget.claim(
        f"D({a} {o} sigma={scales[small]:g}) within the module's truncation budget", 0.0, d0, relative=False,
        checks="theorem", source="Theorem 1: the NQF's error is the module's O(|W|^2) remainder at its weights",
        note=(f"{where}" + adam if d0 <= budget.tolerance else
              f"MISS: the module leaves its NQF by more than its truncation error explains ({higher_order(a)}); "
              f"{where}")))
    for l in large:
        dl = float(D_max[l])
        ok = dl >= ratio * d0
        cause = (f"at sigma={scales[l]:g} the module's truncation error is {trunc0[l]:.2g} at W0 and at most "
                 f"{trunc[l]:.2g} over training (at sigma={scales[small]:g}: {trunc0[small]:.2g} and "
                 f"{trunc[small]:.2g}); {_lr_text(run, scales[l])}")
        claims.append(Claim(
            f"D({a} {o} sigma={scales[l]:g}) >= {ratio:g} D(sigma={scales[small]:g})",
            ratio * d0, dl, math.nan, comparison="at_least", checks="paper", source=DEPARTS_SOURCE,
            tolerance_source=(f"bound: 'visibly departs' read as at least departure_ratio ({ratio:g}) times the "
                              f"sigma={scales[small]:g} D of the same architecture and optimizer (two deviations "
                              f"measured on the same grid and seeds), so no error budget enters"),
            note=(f"ratio {dl / max(d0, 1e-300):.3g}; departure at large init ({higher_order(a)}); {cause}" if ok else
                  f"MISS: ratio {dl / max(d0, 1e-300):.3g}; {_miss_reason(trunc0, trunc, small, l, thr)}; "
                  f"{cause}")))
    return claims, budget.tolerance


def judge(m: Measurement, run_ds: dict[str, xr.Dataset], archs: list, opts: list, scales: np.ndarray, *,
          factor: float, ratio: float, threshold: float) -> tuple[list[Claim], np.ndarray]:
    """The claims of every architecture and optimizer (:func:`judge_pair`) and the tolerances of D
    at the smallest scale (arch, optimizer)."""
    D_max = m.D_max
    tolerance = np.full((len(archs), len(opts)), np.nan)
    claims = []
    for i, a in enumerate(archs):
        for j, o in enumerate(opts):
            rows, tolerance[i, j] = judge_pair(a, o, run_ds[a].sel(optimizer=o), scales, D_max[i, j],
                                               m.truncation[i, j], m.truncation_init[i, j], factor=factor,
                                               ratio=ratio, threshold=threshold)
            claims += rows
    return claims, tolerance


def _lr_text(run: xr.Dataset, sigma: float) -> str:
    """'lr 0.02' of one optimizer's runs at init scale ``sigma`` (the largest over seeds; 'capped'
    where a seed's step was capped at half GD's stability bound)."""
    lr = np.asarray(run["lr"].sel(eps=sigma).values, float)
    capped = lr.min() < lr.max() * (1 - 1e-9) or float(run["lr"].max()) > lr.max() * (1 + 1e-9)
    return f"lr {lr.max():.3g}" + (" (capped at half GD's stability bound at W0)" if capped else "")


def _miss_reason(trunc0: np.ndarray, trunc: np.ndarray, small: int, large: int, threshold: float) -> str:
    """Why a large init did not take the module further from its NQF than learning did: the
    measured truncation errors at the two scales."""
    if trunc[small] > threshold:
        return (f"the learned state is outside the quadratic regime at both scales (largest truncation error "
                f"{trunc[small]:.2g} and {trunc[large]:.2g}), so learning, not the init, sets D at both")
    if trunc[large] <= 2 * trunc[small]:
        return (f"the larger init leaves the module in its quadratic regime: its largest truncation error "
                f"({trunc[large]:.2g}) is within twice the small init's ({trunc[small]:.2g})")
    return (f"the module leaves its quadratic regime at the larger init (truncation {trunc[large]:.2g} against "
            f"{trunc[small]:.2g}), yet the recovered spectra of module and NQF stay closer than the departure ratio")


# -- the fit -------------------------------------------------------------------------------------


def fit_dataset(m: Measurement, tolerance: np.ndarray, archs: list, opts: list, scales: np.ndarray,
                threshold: float) -> xr.Dataset:
    """The fit's variables beside the claims: D, its worst seed, the truncation errors and the tolerances."""
    return xr.Dataset(
        {"D": (("arch", "optimizer", "eps", "seed"), m.D, {"units": "1", "long_name": "max over t and k of |s_k,module - s_k,NQF| / s_k"}),
         "D_max": (("arch", "optimizer", "eps"), m.D_max, {"units": "1", "long_name": "D, worst seed"}),
         "truncation_max": (("arch", "optimizer", "eps"), m.truncation, {
             "units": "1", "long_name": "max over steps and seeds of the module's relative O(|W|^2) truncation error"}),
         "truncation_init": (("arch", "optimizer", "eps"), m.truncation_init, {
             "units": "1", "long_name": "the module's relative O(|W|^2) truncation error at W0 (max over seeds)"}),
         "small_init_tolerance": (("arch", "optimizer"), tolerance, {
             "units": "1", "long_name": "error budget of D at the smallest eps, times the safety factor"})},
        coords={"arch": archs, "optimizer": opts, "eps": scales, "seed": m.seeds},
        attrs={"experiment_kind": KIND, "threshold": threshold})


def fit(structure_ds: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """D per architecture x optimizer x eps x seed, and the claims of Figure 2: at the smallest
    eps D within the visibility threshold (the paper's 'tracks almost exactly') and within the
    module's truncation budget (Theorem 1); at the larger ones the departure bound."""
    archs, opts = list(cfg["architectures"]), list(cfg["optimizers"])
    scales = np.asarray(cfg["eps"], float)
    tol = cfg["tolerances"]
    factor, ratio, thr = float(tol["safety_factor"]), float(tol["departure_ratio"]), float(cfg["threshold"])
    m = measure(theory_ds, run_ds, archs, opts, scales)
    claims, tolerance = judge(m, run_ds, archs, opts, scales, factor=factor, ratio=ratio, threshold=thr)
    return xr.merge([fit_dataset(m, tolerance, archs, opts, scales, thr), claims_dataset(claims)])
