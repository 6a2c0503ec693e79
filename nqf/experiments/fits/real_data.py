"""Fit stage of experiment kind ``real_data`` (paper Figure 7): the train-loss and test-accuracy
trajectories of each module and of its NQF compared as the paper compares them, up to the step
at which the NQF reaches its least-squares floor, with the claims and their error budgets.
nqf.experiments.real_data.fit calls :func:`fit`; this module imports no kind module.
"""
from __future__ import annotations

import math

import numpy as np
import xarray as xr

from nqf.architectures import higher_order
from nqf.experiments.common import Claim, ErrorBudget, claims_dataset

KIND = __name__.rpartition(".")[2]  # the kind whose fit stage this is (this module imports no kind)
PAPER_SOURCE = ("Fig. 7 / App. C: 'the original models and their corresponding NQFs exhibit indistinguishable "
                "trajectories in both training loss and test accuracy'")


def final_values(run: xr.Dataset) -> dict[str, np.ndarray]:
    """Last recorded train loss and test accuracy of module and NQF, per seed."""
    last = run.isel(step=-1)
    return {k: last[k].values for k in ("loss_module", "loss_nqf", "test_accuracy_module", "test_accuracy_nqf")}


def floor_step(run: xr.Dataset, floor: float, fraction: float) -> float:
    """First recorded step at which the seed-mean NQF train loss has covered all but ``fraction``
    of its way from the start to its least-squares floor, L - floor <= fraction (L(0) - floor);
    NaN if it does not within the run."""
    ln = run["loss_nqf"].values.mean(0)
    reached = ln - floor <= fraction * (ln[0] - floor)
    return float(run["step"].values[np.argmax(reached)]) if reached.any() else math.nan


def first_lasting(steps: np.ndarray, flags: np.ndarray, n: int) -> float:
    """First recorded step from which ``flags`` holds at ``n`` consecutive records; NaN if never."""
    run = 0
    for i, flag in enumerate(np.asarray(flags, bool)):
        run = run + 1 if flag else 0
        if run >= n:
            return float(steps[i - n + 1])
    return math.nan


def fit(structure_ds: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """Figure 7 judged as the paper compares: the train-loss and test-accuracy trajectories of each
    module and its NQF (seed means), up to the step at which the NQF reaches its least-squares
    floor (beyond it the NQF cannot follow a module that keeps learning); the steps where they
    part are reported beside it."""
    archs = list(cfg["architectures"])
    tol = cfg["tolerances"]
    factor, thr, frac = float(tol["safety_factor"]), float(cfg["threshold"]), float(cfg["floor_fraction"])
    n_last = 3  # a parting must hold at 3 consecutive (log-spaced) records
    seeds = run_ds[archs[0]]["seed"].values
    vals = {k: np.full((len(archs), seeds.size), np.nan) for k in
            ("loss_module", "loss_nqf", "test_accuracy_module", "test_accuracy_nqf")}
    per = {k: np.full(len(archs), np.nan) for k in ("floor_step", "scored_until", "max_loss_gap", "max_accuracy_gap",
                                                    "loss_part_step", "accuracy_part_step", "accuracy_se", "min_nqf_loss")}
    claims = []
    for i, a in enumerate(archs):
        run = run_ds[a]
        for k, v in final_values(run).items():
            vals[k][i] = v
        steps = run["step"].values
        lm, ln = run["loss_module"].values.mean(0), run["loss_nqf"].values.mean(0)
        am, an = run["test_accuracy_module"].values.mean(0), run["test_accuracy_nqf"].values.mean(0)
        floor = float(theory_ds["loss_floor"].sel(arch=a))
        fs = floor_step(run, floor, frac)
        until = fs if np.isfinite(fs) else float(steps[-1])
        sel = steps <= until
        gap, acc_gap = np.abs(ln - lm) / lm, np.abs(an - am)
        n_test = int(run.attrs.get("n_test", 0)) or int(cfg.get("n_test", 0)) or 1
        acc_ref = float(np.clip(am[sel][-1], 1e-3, 1 - 1e-3))
        se = math.sqrt(acc_ref * (1 - acc_ref) / n_test)
        budget = ErrorBudget({"binomial s.e. of a test accuracy on the test set": se}, factor)
        lp = first_lasting(steps, gap > thr, n_last)
        ap = first_lasting(steps, acc_gap > budget.tolerance, n_last)
        per["floor_step"][i], per["scored_until"][i] = fs, until
        per["max_loss_gap"][i], per["max_accuracy_gap"][i] = float(gap[sel].max()), float(acc_gap[sel].max())
        per["loss_part_step"][i], per["accuracy_part_step"][i], per["accuracy_se"][i] = lp, ap, se
        per["min_nqf_loss"][i] = float(run["loss_nqf"].values.min())
        fmt = lambda v: "never" if not np.isfinite(v) else f"step {v:.0f}"  # noqa: E731
        covered = (ln[0] - ln[sel][-1]) / (ln[0] - floor) if ln[0] > floor else math.nan
        note = (f"{seeds.size} seeds, {int(steps[-1])} {run.attrs['optimizer']} steps; NQF floor {floor:.4g} "
                f"(least squares), reached (within {frac:g} of the way) at {fmt(fs)}"
                + ("" if np.isfinite(fs) else f" (the run ends {covered:.0%} of the way there)")
                + f"; scored up to step {until:.0f}: "
                f"max loss gap {per['max_loss_gap'][i]:.3f}, max accuracy gap {per['max_accuracy_gap'][i]:.3f}; "
                f"losses part (gap > {thr:g} at {n_last} records) at {fmt(lp)}, accuracies (gap > {budget.tolerance:.3f}) "
                f"at {fmt(ap)}; final train loss module {vals['loss_module'][i].mean():.4g}, NQF "
                f"{vals['loss_nqf'][i].mean():.4g}; final test accuracy module {vals['test_accuracy_module'][i].mean():.3f}, "
                f"NQF {vals['test_accuracy_nqf'][i].mean():.3f} (least-squares NQF "
                f"{float(theory_ds['ls_test_accuracy'].sel(arch=a)):.3f})")
        why = (f"; the module leaves its NQF ({higher_order(a)}) before the NQF reaches its floor")
        ok_loss = per["max_loss_gap"][i] <= thr
        claims.append(Claim(
            f"{a}: train losses agree up to the NQF's floor step (max relative gap <= {thr:g})", 0.0,
            per["max_loss_gap"][i], thr, relative=False, checks="paper", source=PAPER_SOURCE,
            tolerance_source=(f"threshold {thr:g}: a separation visible on the figure's log axes (as for Fig. 6); "
                              f"a difference in the seed means"),
            note=(note if ok_loss else "MISS under this reading" + why + ": " + note)))
        claims.append(budget.claim(
            f"{a}: test accuracies agree up to the NQF's floor step (max absolute gap)", 0.0, per["max_accuracy_gap"][i],
            relative=False, checks="paper", source=PAPER_SOURCE,
            note=note if per["max_accuracy_gap"][i] <= budget.tolerance else "MISS under this reading" + why + ": " + note))
        ls_acc = float(theory_ds["ls_test_accuracy"].sel(arch=a))
        learned = ErrorBudget({"binomial s.e. of a test accuracy": se}, factor)
        claims.append(Claim(
            f"{a}: the pair is scored after the NQF has learned (its test accuracy at the scored step >= "
            f"the least-squares NQF's, less {factor:g} s.e.)", ls_acc - learned.tolerance, float(an[sel][-1]), math.nan,
            comparison="at_least", checks="ours",
            source="no pair is scored at chance because its run stopped early",
            tolerance_source=f"bound: the least-squares NQF's test accuracy {ls_acc:.3f} less {learned.describe()}",
            note=note if float(an[sel][-1]) >= ls_acc - learned.tolerance else
            "MISS: the NQF has not learned yet at the scored step; run longer (steps): " + note))
        claims.append(Claim(
            f"{a}: the NQF's train loss stays at or above its least-squares floor", floor * (1 - 1e-5),
            per["min_nqf_loss"][i], math.nan, comparison="at_least", checks="ours",
            source="the NQF is linear in its effective matrix E(W), so least squares bounds its loss",
            tolerance_source=f"bound: the floor, less 1e-5 relative for {run.attrs.get('dtype', 'float')} rounding",
            note=note))
    ds = xr.Dataset(
        {k: (("arch", "seed"), v, {"units": "1", "long_name": f"final {k.replace('_', ' ')}"}) for k, v in vals.items()},
        coords={"arch": archs, "seed": seeds}, attrs={"experiment_kind": KIND, "threshold": thr, "floor_fraction": frac})
    long = {"floor_step": ("1", f"first recorded step at which the NQF's loss is within {frac:g} of its way to the least-squares floor (NaN: not within the run)"),
            "scored_until": ("1", "last step at which the pair is scored (the floor step, or the run's end)"),
            "max_loss_gap": ("1", "max over scored steps of |L_NQF - L_module| / L_module (seed means)"),
            "max_accuracy_gap": ("1", "max over scored steps of |acc_NQF - acc_module| (seed means)"),
            "loss_part_step": ("1", f"first recorded step from which the relative loss gap exceeds {thr:g} at {n_last} consecutive records"),
            "accuracy_part_step": ("1", f"first recorded step from which the accuracy gap exceeds the tolerance at {n_last} consecutive records"),
            "accuracy_se": ("1", "binomial standard error of a test accuracy at the scored step"),
            "min_nqf_loss": ("1", "lowest NQF train loss over steps and seeds")}
    for k, (units, ln_) in long.items():
        ds[k] = ("arch", per[k], {"units": units, "long_name": ln_})
    return xr.merge([ds, claims_dataset(claims)])
