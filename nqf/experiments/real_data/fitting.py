"""Fit stage of experiment kind ``real_data`` (paper Figure 7): module and NQF compared as the
paper compares them, with the claims and their error budgets.
nqf.experiments.real_data.fit calls :func:`fit`; this module imports no kind module.

The paper: "the original models and their corresponding NQFs exhibit indistinguishable
trajectories in both training loss and test accuracy" over the training it shows. Judged here on
the seed-mean curves of each pair (:func:`judge`):

* agreement horizon: the last recorded step up to which, at every recorded step, the relative
  train-loss gap |L_NQF - L_module| / L_module stays within ``threshold`` (a separation visible
  on the figure's log axes) and the test-accuracy gap within its error budget (the binomial
  standard error of an accuracy on the test set, times ``tolerances.safety_factor``);
* learned step: the first recorded step at which the NQF's test accuracy reaches the
  least-squares NQF's (the best this NQF can do on the training set), less the same budget;
* the paper's claim holds for the pair when the learned step comes at or before the horizon:
  the two are indistinguishable until the NQF has learned what it can learn. A reading under
  which that learned level is within the budget of the NQF's accuracy at W0 (the least-squares
  NQF no better than chance, say) has nothing to learn, and the claim is not shown (a miss with
  that cause).

Beside it, as this project's own stricter measure: the same horizon against the step at which the
NQF's train loss has covered all but ``floor_fraction`` of its way to its least-squares floor, and
the steps from which the losses and the accuracies part (outside their budgets at 3 consecutive
records). A ``screen`` run (readings screened with the module evaluated at the NQF's weights) is
judged by the same :func:`judge`, its rows labelled as a screen.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import xarray as xr

from nqf.architectures import higher_order
from nqf.experiments.claims import NOT_REACHED, Claim, ErrorBudget, claims_dataset

KIND = __name__.split(".")[-2]  # the kind folder this fit stage sits in (it does not import the kind module)
PAPER_SOURCE = ("Fig. 7 / App. C: 'the original models and their corresponding NQFs exhibit indistinguishable "
                "trajectories in both training loss and test accuracy'")
SCREEN_SOURCE = ("screen (this project's, not the paper's comparison): the NQF trained alone, the module "
                 "evaluated at the NQF's weights")
N_LASTING = 3  # a parting must hold at 3 consecutive (log-spaced) records


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


@dataclass
class Judgement:
    """One pair's trajectories judged as the paper compares them (see the module docstring)."""

    horizon: float  # last step of the agreement horizon; NaN when they differ from the first record
    learned: float  # first step at which the NQF has learned what it can; NaN: not within the run
    nothing_to_learn: bool  # the least-squares NQF is no better than the NQF at W0
    loss_part: float
    accuracy_part: float
    accuracy_at_horizon: float  # NQF test accuracy at the horizon
    share_at_horizon: float  # share of the NQF's way from L(0) to its floor covered at the horizon
    max_loss_gap: float  # over the horizon
    max_accuracy_gap: float

    @property
    def holds(self) -> bool:
        return bool(np.isfinite(self.learned) and np.isfinite(self.horizon) and self.learned <= self.horizon)

    def describe(self, ls_accuracy: float, end: int) -> str:
        fmt = lambda v: "never" if not np.isfinite(v) else f"step {v:.0f}"  # noqa: E731
        horizon = ("none (they differ at the first record)" if not np.isfinite(self.horizon) else
                   f"through step {self.horizon:.0f}" + (" (the run's end)" if self.horizon >= end else ""))
        learned = ("never: nothing to learn, the least-squares NQF's test accuracy less the budget is within the "
                   "budget of the NQF's at W0" if self.nothing_to_learn else
                   f"at step {self.learned:.0f}" if np.isfinite(self.learned) else f"not within the run ({end} steps)")
        return (f"agree {horizon}; the NQF reaches the least-squares NQF's test accuracy {ls_accuracy:.3f} "
                f"(within the budget) {learned}; at the horizon the NQF's test accuracy is "
                f"{self.accuracy_at_horizon:.3f} and " + (
                    f"it has covered {self.share_at_horizon:.0%} of its way to its loss floor"
                    if np.isfinite(self.share_at_horizon) else "its loss starts at its floor (no way to cover)")
                + f"; losses part {fmt(self.loss_part)}, accuracies {fmt(self.accuracy_part)}")


def judge(steps, loss_module, loss_nqf, acc_module, acc_nqf, *, floor: float, ls_accuracy: float,
          threshold: float, accuracy_tolerance: float) -> Judgement:
    """Judge one pair's seed-mean curves (arrays over the recorded ``steps``); see the module
    docstring for the horizon, the learned step and the parting steps."""
    steps = np.asarray(steps, float)
    lm, ln, am, an = (np.asarray(v, float) for v in (loss_module, loss_nqf, acc_module, acc_nqf))
    gap = np.abs(ln - lm) / np.maximum(lm, np.finfo(float).tiny)
    acc_gap = np.abs(an - am)
    ok = (gap <= threshold) & (acc_gap <= accuracy_tolerance)
    k = len(ok) if ok.all() else int(np.argmin(ok))  # records 0..k-1 all agree
    horizon = float(steps[k - 1]) if k > 0 else math.nan
    # something to learn: the learned level (the least-squares accuracy less the budget) lies more
    # than the budget above where the NQF starts, so reaching it is not a fluctuation
    nothing = bool(ls_accuracy - accuracy_tolerance - an[0] <= accuracy_tolerance)
    learned_at = np.flatnonzero(an >= ls_accuracy - accuracy_tolerance)
    learned = math.nan if nothing or learned_at.size == 0 else float(steps[learned_at[0]])
    h = max(k - 1, 0)
    share = (ln[0] - ln[h]) / (ln[0] - floor) if ln[0] > floor else math.nan
    return Judgement(horizon=horizon, learned=learned, nothing_to_learn=nothing,
                     loss_part=first_lasting(steps, gap > threshold, N_LASTING),
                     accuracy_part=first_lasting(steps, acc_gap > accuracy_tolerance, N_LASTING),
                     accuracy_at_horizon=float(an[h]), share_at_horizon=float(share),
                     max_loss_gap=float(gap[:max(k, 1)].max()), max_accuracy_gap=float(acc_gap[:max(k, 1)].max()))


def accuracy_budget(accuracy: float, n_test: int, factor: float) -> ErrorBudget:
    """The binomial standard error of a test accuracy near ``accuracy`` on ``n_test`` images,
    times ``factor``: how far two test accuracies may differ and still be indistinguishable."""
    acc = float(np.clip(accuracy, 1e-3, 1 - 1e-3))
    return ErrorBudget({f"binomial s.e. of a test accuracy on {n_test} test images": math.sqrt(acc * (1 - acc) / n_test)},
                       factor)


DEGENERATE = ("not judged: the NQF is f(0) on every training image under this reading (its features vanish on "
              "all of them, e.g. a query token that is zero in every image), so module and NQF have nothing to "
              "compare")


def vanishing_note(share: float) -> str:
    """The note's clause on the share of training images where the NQF's features vanish ('' for none)."""
    return f"; the NQF's features vanish on {share:.1%} of the training images" if 0 < share < 1 else ""


def _paper_claim(label: str, j: Judgement, note: str, why: str, tolerance_source: str, *, checks="paper",
                 source=PAPER_SOURCE, end: float = math.inf, vanishing: float = 0.0) -> Claim:
    """The row of the claim 'module and NQF indistinguishable until the NQF has learned' for one
    pair or screened reading; not judged where the NQF is f(0) on every training image
    (``vanishing``, the share of :func:`nqf.architectures.effective.vanishing_share`, is 1) or the
    run ends before the NQF has learned (:func:`not_reached`). ``note`` carries the share's clause
    (:func:`vanishing_note`) where the caller adds it."""
    claim = Claim(
        f"{label}: module and NQF indistinguishable until the NQF has learned (agreement horizon >= learned step)",
        j.learned, j.horizon, math.nan, comparison="at_least", checks=checks, source=source,
        tolerance_source=tolerance_source,
        note=note if j.holds else f"MISS under this reading: {why}: {note}")
    if vanishing >= 1:
        return replace(claim, note=note).not_judged(DEGENERATE)
    if not_reached(j, end):
        # they agree through the whole run, which stops before the NQF has learned: not a miss
        claim = replace(claim, note=note).not_judged(
            f"{NOT_REACHED} (the run ends at step {end:.0f} before the NQF reaches the least-squares NQF's test "
            f"accuracy, with module and NQF agreeing throughout; no closed form predicts that step: raise steps)")
    return claim


def not_reached(j: Judgement, end: float) -> bool:
    """Whether the pair agrees through the whole run and the NQF has something to learn but has not
    learned it by the run's end: the paper's comparison is then not reached at this length."""
    return bool(not j.holds and not j.nothing_to_learn and not np.isfinite(j.learned)
                and np.isfinite(j.horizon) and j.horizon >= end)


def _why(j: Judgement, what: str, end: float) -> str:
    """Why a pair (or a screened reading) misses the paper's claim, in a clause."""
    if j.nothing_to_learn:
        return ("the NQF has nothing to learn under this reading (its least-squares test accuracy, less the budget, is "
                "within the budget of its accuracy at W0)")
    if not np.isfinite(j.horizon):
        return f"{what} differ from the first record"
    if not np.isfinite(j.learned):
        if j.horizon < end:
            return f"{what} part after step {j.horizon:.0f}, before the NQF has learned (it has not within the run)"
        return "the NQF has not learned within the run (run longer: steps)"
    return f"{what} part after step {j.horizon:.0f}, before the NQF has learned (step {j.learned:.0f})"


FINALS = ("loss_module", "loss_nqf", "test_accuracy_module", "test_accuracy_nqf")
PER_ARCH = ("horizon", "learned_step", "floor_step", "max_loss_gap", "max_accuracy_gap", "loss_part_step",
            "accuracy_part_step", "accuracy_tolerance", "accuracy_at_horizon", "share_at_horizon", "min_nqf_loss")


# -- measuring -----------------------------------------------------------------------------------


@dataclass
class PairMeasurement:
    """One architecture's pair measured: the final values per seed (``finals``, :data:`FINALS`),
    the :class:`Judgement` of its seed-mean curves, the numbers of :data:`PER_ARCH` (``per``),
    and what the claims' notes state (the NQF's loss floor and least-squares test accuracy, the
    run's end, train images, optimizer and dtype, the NQF's number of features)."""

    finals: dict
    judgement: Judgement
    per: dict
    floor: float
    ls_accuracy: float
    end: int
    n_train: int
    n_features: int
    optimizer: str
    dtype: str
    vanishing: float = 0.0  # share of training images on which the NQF's features vanish


def measure_pair(run: xr.Dataset, theory_ds: xr.Dataset, arch: str, cfg: dict) -> PairMeasurement:
    """:class:`PairMeasurement` of architecture ``arch``'s run against its least-squares NQF."""
    factor, thr, frac = float(cfg["tolerances"]["safety_factor"]), float(cfg["threshold"]), float(cfg["floor_fraction"])
    last = run.isel(step=-1)
    finals = {k: last[k].values.astype(np.float64) for k in FINALS}  # means in float64, as the fit table holds them
    steps = run["step"].values
    mean = {k: run[k].values.mean(0) for k in FINALS}
    floor = float(theory_ds["loss_floor"].sel(arch=arch))
    ls_acc = float(theory_ds["ls_test_accuracy"].sel(arch=arch))
    n_test = int(run.attrs.get("n_test", 0)) or int(cfg["n_test"])
    budget = accuracy_budget(ls_acc, n_test, factor)
    j = judge(steps, mean["loss_module"], mean["loss_nqf"], mean["test_accuracy_module"], mean["test_accuracy_nqf"],
              floor=floor, ls_accuracy=ls_acc, threshold=thr, accuracy_tolerance=budget.tolerance)
    per = {"horizon": j.horizon, "learned_step": j.learned, "floor_step": floor_step(run, floor, frac),
           "max_loss_gap": j.max_loss_gap, "max_accuracy_gap": j.max_accuracy_gap, "loss_part_step": j.loss_part,
           "accuracy_part_step": j.accuracy_part, "accuracy_tolerance": budget.tolerance,
           "accuracy_at_horizon": j.accuracy_at_horizon, "share_at_horizon": j.share_at_horizon,
           "min_nqf_loss": float(run["loss_nqf"].values.min())}
    features = int(theory_ds["n_features"].sel(arch=arch)) if "n_features" in theory_ds else 0
    vanishing = float(theory_ds["nqf_vanishing_share"].sel(arch=arch)) if "nqf_vanishing_share" in theory_ds else 0.0
    return PairMeasurement(finals, j, per, floor, ls_acc, int(steps[-1]), int(run.attrs.get("n_train", 0)), features,
                           run.attrs["optimizer"], run.attrs.get("dtype", "float"), vanishing)


# -- judging -------------------------------------------------------------------------------------


def pair_claims(arch: str, m: PairMeasurement, seeds: int, cfg: dict) -> list[Claim]:
    """One architecture's rows: the paper's (agreement horizon against the learned step), ours
    (against the floor step) and the floor bound of the NQF's train loss."""
    a, j, end, floor, fs = arch, m.judgement, m.end, m.floor, m.per["floor_step"]
    factor, thr, frac = float(cfg["tolerances"]["safety_factor"]), float(cfg["threshold"]), float(cfg["floor_fraction"])
    gap_source = (f"loss: relative gap of the seed means <= threshold {thr:g} (a separation visible on the figure's "
                  f"log axes, as for Fig. 6); accuracy: binomial s.e. on the test set x safety_factor {factor:g}")
    n_train, features = m.n_train, m.n_features
    regime = (f" (not the paper's regime: no more images than the NQF's {features} features, so it "
              f"interpolates)" if features and n_train and n_train <= features else "")
    note = (f"{seeds} seeds, {end} {m.optimizer} steps, {n_train or '?'} train images"
            f"{regime}; " + j.describe(m.ls_accuracy, end) + f"; NQF loss floor {floor:.4g} (least squares); final train "
            f"loss module {m.finals['loss_module'].mean():.4g}, NQF {m.finals['loss_nqf'].mean():.4g}; final test "
            f"accuracy module {m.finals['test_accuracy_module'].mean():.3f}, NQF "
            f"{m.finals['test_accuracy_nqf'].mean():.3f}" + vanishing_note(m.vanishing))
    why = _why(j, "module and NQF", end)
    if np.isfinite(j.horizon) and j.horizon < end and not j.nothing_to_learn:
        why += f" (the module leaves its NQF: {higher_order(a)})"
    claims = [_paper_claim(a, j, note, why, gap_source, end=end, vanishing=m.vanishing)]
    fmt = "never" if not np.isfinite(fs) else f"step {fs:.0f}"
    horizon_text = ('before the first record' if not np.isfinite(j.horizon) else f'at step {j.horizon:.0f}')
    floor_claim = Claim(
        f"{a}: agreement horizon >= the step the NQF reaches {1 - frac:.0%} of its way to its loss floor (ours, "
        f"stricter)", fs, j.horizon, math.nan, comparison="at_least", checks="ours",
        source="this project's stricter measure: indistinguishable until the NQF has nearly reached its floor",
        tolerance_source=f"bound: the floor step ({fmt}); gaps as for the paper's row",
        note=(f"floor step {fmt}; " + note) if np.isfinite(fs) and np.isfinite(j.horizon) and j.horizon >= fs else
        (f"MISS (ours): the NQF reaches {1 - frac:.0%} of its way to the floor at {fmt}, the horizon ends "
         f"{horizon_text}: " + note) if np.isfinite(fs) else
        (f"MISS (ours): the horizon ends {horizon_text}, before the NQF reaches {1 - frac:.0%} of its way to the "
         f"floor (after the run's end at step {end}): " + note))
    if m.vanishing >= 1:
        floor_claim = replace(floor_claim, note=note).not_judged(DEGENERATE)
    elif not np.isfinite(fs) and np.isfinite(j.horizon) and j.horizon >= end:
        # the pair agrees through the whole run, which stops before the NQF nears its floor: the
        # floor step is not reached, so the row is not judged at this length (neither pass nor miss)
        floor_claim = replace(floor_claim, note=note).not_judged(
            f"{NOT_REACHED} (the run ends at step {end} before the NQF reaches {1 - frac:.0%} of its way to "
            f"its loss floor; no closed form predicts that step: raise steps.{a})")
    claims.append(floor_claim)
    claims.append(Claim(
        f"{a}: the NQF's train loss stays at or above its least-squares floor", floor * (1 - 1e-5),
        m.per["min_nqf_loss"], math.nan, comparison="at_least", checks="ours",
        source="the NQF is linear in its effective matrix E(W), so least squares bounds its loss",
        tolerance_source=f"bound: the floor, less 1e-5 relative for {m.dtype} rounding",
        note=note))
    return claims


def pairs_dataset(archs: list, seeds: np.ndarray, measured: list[PairMeasurement], cfg: dict) -> xr.Dataset:
    """The final values per architecture and seed and the numbers of :data:`PER_ARCH` per architecture."""
    thr, frac = float(cfg["threshold"]), float(cfg["floor_fraction"])
    vals = {k: np.full((len(archs), seeds.size), np.nan) for k in FINALS}
    per = {k: np.full(len(archs), np.nan) for k in PER_ARCH}
    for i, m in enumerate(measured):
        for k in FINALS:
            vals[k][i] = m.finals[k]
        for k in PER_ARCH:
            per[k][i] = m.per[k]
    ds = xr.Dataset(
        {k: (("arch", "seed"), v, {"units": "1", "long_name": f"final {k.replace('_', ' ')}"}) for k, v in vals.items()},
        coords={"arch": archs, "seed": seeds}, attrs={"experiment_kind": KIND, "threshold": thr, "floor_fraction": frac})
    long = {"horizon": "agreement horizon: last recorded step through which the loss gap and the accuracy gap stay within their budgets (NaN: none)",
            "learned_step": "first recorded step at which the NQF's test accuracy reaches the least-squares NQF's less the budget (NaN: not within the run)",
            "floor_step": f"first recorded step at which the NQF's loss is within {frac:g} of its way to the least-squares floor (NaN: not within the run)",
            "max_loss_gap": "max over the horizon of |L_NQF - L_module| / L_module (seed means)",
            "max_accuracy_gap": "max over the horizon of |acc_NQF - acc_module| (seed means)",
            "loss_part_step": f"first recorded step from which the relative loss gap exceeds {thr:g} at {N_LASTING} consecutive records",
            "accuracy_part_step": f"first recorded step from which the accuracy gap exceeds its budget at {N_LASTING} consecutive records",
            "accuracy_tolerance": "error budget of a test-accuracy gap (binomial s.e. x safety factor)",
            "accuracy_at_horizon": "NQF test accuracy at the horizon (seed mean)",
            "share_at_horizon": "share of the NQF's way from L(0) to its loss floor covered at the horizon",
            "min_nqf_loss": "lowest NQF train loss over steps and seeds"}
    for k, ln_ in long.items():
        ds[k] = ("arch", per[k], {"units": "1", "long_name": ln_})
    return ds


# -- the fit -------------------------------------------------------------------------------------


def fit(structure_ds: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """Figure 7 judged as the paper compares (module docstring): per architecture the agreement
    horizon against the NQF's learned step (the paper's claim), against its floor step (ours),
    and the floor bound; per screened reading the same judgement of the screen."""
    archs = list(cfg["architectures"])
    seeds = run_ds[archs[0]]["seed"].values
    measured = [measure_pair(run_ds[a], theory_ds, a, cfg) for a in archs]
    claims = [c for a, m in zip(archs, measured) for c in pair_claims(a, m, seeds.size, cfg)]
    ds = pairs_dataset(archs, seeds, measured, cfg)
    screen = run_ds.get("screen")
    if screen is not None:
        sds, screen_claims = judge_screen(screen, cfg)
        ds = xr.merge([ds, sds])
        claims += screen_claims
    return xr.merge([ds, claims_dataset(claims)])


def judge_screen(screen: xr.Dataset, cfg: dict) -> tuple[xr.Dataset, list[Claim]]:
    """Per screened reading: the judgement of :func:`judge` on the module at the NQF's weights
    against the NQF, as rows of this project's (the screen is not the paper's comparison)."""
    factor, thr = float(cfg["tolerances"]["safety_factor"]), float(cfg["threshold"])
    steps = screen["step"].values
    labels = [str(v) for v in screen["reading"].values]
    out = {k: np.full(len(labels), np.nan) for k in ("screen_horizon", "screen_learned_step")}
    claims = []
    n_test = int(screen.attrs.get("n_test", 0)) or int(cfg["n_test"])
    for r, label in enumerate(labels):
        sel = screen.isel(reading=r)
        mean = {k: sel[k].values.mean(0) for k in ("loss_module", "loss_nqf", "test_accuracy_module", "test_accuracy_nqf")}
        ls_acc, floor = float(sel["ls_test_accuracy"]), float(sel["ls_floor"])
        budget = accuracy_budget(ls_acc, n_test, factor)
        j = judge(steps, mean["loss_module"], mean["loss_nqf"], mean["test_accuracy_module"], mean["test_accuracy_nqf"],
                  floor=floor, ls_accuracy=ls_acc, threshold=thr, accuracy_tolerance=budget.tolerance)
        out["screen_horizon"][r], out["screen_learned_step"][r] = j.horizon, j.learned
        note = (f"{screen.sizes['seed']} seeds, {int(steps[-1])} steps of the NQF alone, {screen.attrs.get('n_train', '?')} "
                f"train images; {j.describe(ls_acc, int(steps[-1]))}; least-squares floor {floor:.4g}, "
                f"RMS f(0) {float(sel['f0_rms']):.3g}")
        vanishing = float(sel["nqf_vanishing_share"]) if "nqf_vanishing_share" in sel else 0.0
        claims.append(_paper_claim(f"screen {label}", j, note + vanishing_note(vanishing),
                                   _why(j, "the module at the NQF's weights and the NQF", float(steps[-1])),
                                   f"as for the paper's row of the side-by-side run; {budget.describe()}",
                                   checks="ours", source=SCREEN_SOURCE, end=float(steps[-1]), vanishing=vanishing))
    ds = xr.Dataset({k: ("reading", v, {"units": "1", "long_name": f"{k.replace('screen_', '').replace('_', ' ')} of "
                                                                  "the screen (module at the NQF's weights)"})
                     for k, v in out.items()}, coords={"reading": labels})
    return ds, claims
