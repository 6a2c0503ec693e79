"""Helpers shared by the power-law kinds (``featurewise_powerlaw``, ``samplewise_powerlaw``):
seeded and deterministic initial weights, a loss-only GD trainer of many replicas, the exponent
refitted over shifted windows, the theory-stage exponent variables, the exponent claims with their
error budgets (their log-log figure panel is in nqf.experiments.powerlaw_figure).

Verdicts (summary rows): the paper's claim (e.g. Fig. 3 right), the theorem (9 or 11) with App. C's
finite-eps correction, and the exact curve (Theorem 6 or Eq. 36) are each compared with the GD exponent within a tolerance built from the run's
error budget (nqf.experiments.claims.ErrorBudget) times ``tolerances.safety_factor``:

* GD's O(lr) error: a GD step multiplies W_k by 1 + h g_k / 2 where the flow has exp(h g_k / 2),
  so ln z_k grows at r_k (1 - h r_k / 4): mode k ignites late by the fraction h r_k / 4. Over a
  window [t_lo, t_hi] this steepens the fitted exponent by the relative amount
  (h / 4)(r(t_lo) - r(t_hi)) / ln(t_hi / t_lo) (first order; r(t) the rate of the mode igniting at t);
* the seeds' bootstrap 95% CI half-width (relative);
* the staircase ripple of the exact curve: the block-bootstrap CI half-width of the exponent
  fitted on the exact curve over the same window (the seed mean smooths the ripple the exact
  curve keeps, so the two fits may differ by that much);
* against the asymptotic exponent also the finite-eps correction (App. C Eq. 292:
  |corrected - asymptotic|), and against both asymptotic and corrected the finite size and
  discreteness of the staircase (|exact-curve exponent - corrected|). These two are computed
  exactly from the theory's own solution, so they enter once, without the safety factor (a known
  bias, not an uncertainty): the asymptotic rows can only be as sharp as the finite-size
  deviation, and the exact-curve row is the sharp test of the theory.

The rows need the run to reach twice the window's end (the window-shift row hi*2 refits up to
there): ``window_reach_problems`` refuses fewer steps before any job starts, and a shifted window
that leaves the record says "not reached: run too short" and is not judged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from nqf.experiments.claims import Claim, ErrorBudget, reach_problems, run_too_short, steps_to_reach
from nqf.theory.scaling import PowerLawFit, fit_power_law, window_sensitivity
from nqf.training.loop import train

if TYPE_CHECKING:
    from nqf.theory.forms import DiagonalForm

SHIFTS = ("lo/2", "lo*2", "hi/2", "hi*2")


def seeded_init(z0, seeds, width: int, seed: int) -> np.ndarray:
    """Gaussian W0 of shape (len(seeds), p, width) with E|W_k|^2 = z0_k.

    ``seeds`` is a list of integer seeds: seed s is row s of the draws of the generator seeded by
    ``seed`` (init_seed); numpy draws rows in order, so the same s gives the same W0 whatever the
    other seeds, and [0, ..., n-1] gives what the old count n gave.
    Row k has i.i.d. N(0, z0_k / width) entries, so z_k(0) = |W_k|^2 = z0_k chi^2_width / width:
    seeds differ in their initial amplitudes only (Assumption 1 data keep the rows independent).
    """
    z0 = np.asarray(z0, float)
    seeds = [int(s) for s in seeds]
    rng = np.random.default_rng(seed)
    draws = rng.standard_normal((max(seeds) + 1, z0.size, width))
    return draws[seeds] * np.sqrt(z0 / width)[None, :, None]


def deterministic_init(z0_rows) -> np.ndarray:
    """W0 of shape (R, p, 1) with W_k = sqrt(z0_k): every replica starts exactly on its profile."""
    return np.sqrt(np.atleast_2d(np.asarray(z0_rows, float)))[:, :, None]


def train_loss_only(form: DiagonalForm, W0: np.ndarray, y, *, lr: float, steps: int, n_record: int,
                    device: str, dtype: str, replica_dim: str, replica_coords,
                    loss: str = "mean") -> tuple[xr.Dataset, str]:
    """Full-batch GD of R replicas (one tensor program) recording only the loss per replica.

    ``loss`` is the convention GD minimises (nqf.theory.losses, n = the m samples); the recorded loss
    is Eq. 26's and ``time`` = c lr step, the Eq. 26 flow time.

    Recording M = W W^T (R p^2 numbers per point) would dwarf the computation for p ~ 10^3; the
    power-law fits need only the loss, which here is the excess loss (the minimum is 0). Runs on
    one CPU thread: the products have only R rows, and a second thread on a busy 2-core machine
    made the step 18x slower (measured: 108 s against 5.9 s for m = 300, 6 seeds).
    """
    # torch is imported where needed: the theory, fit and figure jobs run without it
    import torch

    from nqf.training.quadratic import QuadraticModel

    tdtype = torch.float64 if dtype == "float64" else torch.float32
    model = QuadraticModel(form, W0, device=device, dtype=tdtype)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ds = train(model, y, lr=lr, steps=steps, optimizer="gd", loss=loss, n_record=n_record,
                   record=lambda mod: {}, replica_dim=replica_dim, replica_coords=replica_coords,
                   divergence_hint=" (c lr max_k r_k must stay below about 2, c the loss convention's factor)")
    finally:
        torch.set_num_threads(threads)
    return ds, str(model.W.device)


def shifted_exponents(t, loss, window) -> np.ndarray:
    """Exponents refitted with the window's ends shifted by a factor 2 (order of ``SHIFTS``)."""
    sens = window_sensitivity(t, loss, window)
    return np.array([sens[k] for k in SHIFTS])


def shifted_windows(window) -> list[tuple[float, float]]:
    """The windows of ``SHIFTS``: one end shifted by a factor 2 (as nqf.theory.scaling.window_sensitivity)."""
    lo, hi = window
    return [(lo / 2, hi), (lo * 2, hi), (lo, hi / 2), (lo, hi * 2)]


def shifted_ci_halves(t, loss, window, n_boot: int) -> np.ndarray:
    """Bootstrap 95% CI half-widths of the exponent over each shifted window (order of ``SHIFTS``);
    NaN where :func:`shifted_exponents` is NaN (the shifted window leaves the record or gets narrower
    than a factor 2)."""
    exps = shifted_exponents(t, loss, window)
    out = np.full(len(SHIFTS), math.nan)
    for i, (win, b) in enumerate(zip(shifted_windows(window), exps)):
        if np.isfinite(b):
            out[i] = fit_power_law(t, loss, win, n_boot=n_boot).ci_halfwidth
    return out


def gd_exponent_bias(h: float, rates, t_star, t_lo: float, t_hi: float) -> float:
    """First-order relative bias of GD's exponent over the window [t_lo, t_hi].

    A GD step of the Eq. 26 flow (step h) grows ln z_k at r_k (1 - h r_k / 4), so the ignition
    of mode k comes late by the fraction h r_k / 4, i.e. ln t*_k moves up by h r_k / 4. Over the
    window the fitted slope of ln E against ln t changes by the relative amount
    (h / 4)(r(t_lo) - r(t_hi)) / ln(t_hi / t_lo), with r(t) the rate of the last mode that
    ignites at or before t (the theory's window starts and ends at an ignition, so these are its
    first and last modes).
    """
    rates, t_star = np.asarray(rates, float), np.asarray(t_star, float)
    order = np.argsort(t_star)
    ts, rs = t_star[order], rates[order]

    def rate_at(t):
        return float(rs[max(int(np.searchsorted(ts, t, side="right")) - 1, 0)])

    return abs(h / 4.0 * (rate_at(t_lo) - rate_at(t_hi))) / math.log(t_hi / t_lo)


def flow_step(run: xr.Dataset) -> float:
    """h = c lr, the Eq. 26 flow time per GD step, read from the run's time and step coordinates."""
    step, time = run["step"].values.astype(float), run["time"].values.astype(float)
    return float(time[-1] / step[-1])


def exponent_variables(pred, t, curve, n_boot: int, prefix: str = "theory") -> dict:
    """Theory-stage variables: the three predicted exponents, the window, and the exponent fitted
    on the exact theory curve over that window (with its sensitivity to moving the window)."""
    win = pred.window
    fit = fit_power_law(t, curve, win, n_boot=n_boot)
    one = {"units": "1"}
    return {
        "exponent_asymptotic": ((), pred.asymptotic, {**one, "long_name": "(alpha1 - 1) / alpha2 (Theorems 9/11)"}),
        "exponent_corrected": ((), pred.corrected, {**one, "long_name": "finite-eps exponent (alpha1 - 1) ln(k_hi/k_lo) / ln(t*_hi/t*_lo) (App. C Eq. 292 generalised)"}),
        "exponent_staircase": ((), pred.staircase, {**one, "long_name": "slope of ln(E_k + V_k/2) against ln t*_k over the window's modes"}),
        "alpha1_fit": ((), pred.alpha1, {**one, "long_name": "alpha1 regressed from V_k over the window"}),
        "alpha2_fit": ((), pred.alpha2, {**one, "long_name": "alpha2 regressed from zeta_k over the window"}),
        "window_t_lo": ((), win.t_lo, {**one, "long_name": "fitting window start (gradient-flow time)"}),
        "window_t_hi": ((), win.t_hi, {**one, "long_name": "fitting window end (gradient-flow time)"}),
        "window_k_lo": ((), win.k_lo, {**one, "long_name": "first mode of the fitting window (1-based)"}),
        "window_k_hi": ((), win.k_hi, {**one, "long_name": "last mode of the fitting window (1-based)"}),
        f"{prefix}_exponent": ((), fit.exponent, {**one, "long_name": "exponent fitted on the exact theory curve over the window"}),
        f"{prefix}_exponent_ci_low": ((), fit.ci_low, {**one, "long_name": "lower 95% bound, block bootstrap of the theory curve's residuals"}),
        f"{prefix}_exponent_ci_high": ((), fit.ci_high, {**one, "long_name": "upper 95% bound, block bootstrap of the theory curve's residuals"}),
        f"{prefix}_shifted_exponent": ("shift", shifted_exponents(t, curve, win), {
            **one, "long_name": "theory curve's exponent with one window end shifted by a factor 2"}),
        f"{prefix}_shifted_ci_half": ("shift", shifted_ci_halves(t, curve, (win.t_lo, win.t_hi), n_boot), {
            **one, "long_name": "block-bootstrap 95% CI half-width of that exponent (the staircase ripple)"}),
    }


@dataclass
class SeedFit:
    """The exponent of a seed run's loss fitted over the theory's window (:func:`fit_seeds`), with
    the exponents and CI half-widths over the shifted windows and the run's flow step h = c lr."""

    run: xr.Dataset
    fit: PowerLawFit
    shifted: np.ndarray
    shifted_half: np.ndarray
    h: float

    def variables(self, theory_ds: xr.Dataset, what: str) -> tuple[dict, dict]:
        """The fit stage's variables of this fit, in two groups (the kinds place ``flow_lr``
        between or after them): the exponent with its CI, per seed and over the shifted windows
        (beside the theory's), and power_law_test's measures. ``what`` names the fitted curve."""
        pl, one = self.fit, {"units": "1"}
        exponent = {
            "exponent": ((), pl.exponent, {**one, "long_name": f"exponent b of the {what} ~ t^-b (seed mean)"}),
            "exponent_ci_low": ((), pl.ci_low, {**one, "long_name": "lower 95% bound (percentile bootstrap over seeds)"}),
            "exponent_ci_high": ((), pl.ci_high, {**one, "long_name": "upper 95% bound (percentile bootstrap over seeds)"}),
            "exponent_per_seed": ("seed", pl.per_seed, {**one, "long_name": "exponent fitted on each seed"}),
            "shifted_exponent": ("shift", self.shifted, {**one, "long_name": "GD exponent with one window end shifted by a factor 2"}),
            "shifted_ci_half": ("shift", self.shifted_half, {**one, "long_name": "bootstrap 95% CI half-width of that exponent"}),
            "theory_shifted_exponent": theory_ds["theory_shifted_exponent"],
        }
        test = {
            "residual_rms": ((), pl.residual_rms, {**one, "long_name": "residual rms / fitted drop (power_law_test)"}),
            "slope_drift": ((), pl.slope_drift, {**one, "long_name": "change of the log-log slope across the window / b"}),
            "is_power_law": ((), bool(pl.is_power_law), {"long_name": "nqf.theory.scaling.power_law_test verdict"}),
        }
        return exponent, test

    def flow_variable(self) -> dict:
        """The fit file's ``flow_lr``: h = c lr, the Eq. 26 flow time per GD step."""
        return {"flow_lr": ((), self.h, {"units": "1", "long_name": "Eq. 26 flow time per GD step, c lr"})}

    def coords(self, theory_ds: xr.Dataset) -> dict:
        """The fit file's seed and shift coordinates."""
        return {"seed": ("seed", self.run["seed"].values, {"long_name": "initialisation seed"}),
                "shift": theory_ds["shift"]}

    def attrs(self, kind: str) -> dict:
        """The fit file's attributes: its kind, the flow step and power_law_test's verdict."""
        return {"experiment_kind": kind, "flow_lr": self.h, "power_law_test": self.fit.reason,
                "ci_method": self.fit.ci_method}


def fit_seeds(run: xr.Dataset, theory_ds: xr.Dataset, min_loss: float, n_boot: int) -> SeedFit:
    """The exponent of the run's loss above ``min_loss`` over the theory's fitting window, over its
    seeds (nqf.theory.scaling.fit_power_law), and over the shifted windows."""
    t = run["time"].values
    loss = run["loss"].values - min_loss
    win = (float(theory_ds["window_t_lo"]), float(theory_ds["window_t_hi"]))
    pl = fit_power_law(t, loss, win, n_boot=n_boot)
    shifted = shifted_exponents(t, loss, win)
    shifted_half = shifted_ci_halves(t, loss, win, n_boot)
    return SeedFit(run, pl, shifted, shifted_half, flow_step(run))


def systematic_claim(quantity: str, predicted: float, measured: float, systematic: dict, budget: ErrorBudget,
                     **kwargs) -> Claim:
    """A 'close' Claim whose tolerance is the sum of ``systematic`` deviations (computed exactly
    from the theory's own solution, e.g. the finite-eps and finite-size distance of the exact
    curve from the asymptotic law: counted once, a known bias needs no safety factor) plus the
    ``budget``'s tolerance (first-order and statistical terms times its safety factor)."""
    sys_total = float(sum(abs(float(v)) for v in systematic.values()))
    parts = " + ".join(f"{name} {float(v):.3g}" for name, v in systematic.items())
    source = (f"{parts} (computed from the exact solution, counted once) + [{budget.describe()}] "
              f"= {sys_total + budget.tolerance:.3g}")
    return Claim(quantity, predicted, measured, sys_total + budget.tolerance, tolerance_source=source, **kwargs)


def window_reach_problems(pred, h: float, steps: int) -> list[tuple[str, str]]:
    """(key, sentence) where ``steps`` of flow step ``h`` end before twice the end of the window the
    theory assigns without a horizon (``pred`` of nqf.theory.scaling.predict_exponent): the exponent rows
    refit the window with its end doubled (SHIFTS), so the record must cover that far."""
    w = pred.window
    return reach_problems("steps", h * int(steps), [2.0 * w.t_hi], [w.t_hi], h,
                          [f"the fitting window's end (mode {w.k_hi}, window t in [{w.t_lo:.4g}, {w.t_hi:.4g}])"],
                          event="the latest time",
                          margin="twice the window's end, where the window-shift row hi*2 refits")


def exponent_claims(theory_ds: xr.Dataset, fit, shifted_gd: np.ndarray, shifted_half: np.ndarray, *,
                    h: float, rates, factor: float, what: str, asymptotic_checks: str,
                    asymptotic_source: str, theorem: str,
                    asymptotic_name: str = "(alpha1-1)/alpha2", t_end: float | None = None) -> list[Claim]:
    """Claims on a measured exponent, each with a tolerance from its error budget (module
    docstring) times ``factor``: against the asymptotic, finite-eps corrected and exact-curve
    predictions, against the exact curve over each shifted window, and the power-law test.

    ``fit`` is the GD fit over the theory's window; ``shifted_gd`` and ``shifted_half`` are GD's
    exponents and CI half-widths over the shifted windows (order of ``SHIFTS``); ``h`` is the flow
    step c lr and ``rates`` the modes' growth rates (for GD's O(lr) term, ordered as the theory's
    ``t_star``); ``t_end`` the run's end (a shifted window beyond it is not judged). ``asymptotic_checks``/``asymptotic_source`` label the asymptotic claim (the
    paper's figure, or the theorem where the paper has no figure), ``asymptotic_name`` is its
    formula; ``theorem`` names the theorem.
    """
    b = fit.exponent
    asym = float(theory_ds["exponent_asymptotic"])
    corr = float(theory_ds["exponent_corrected"])
    th = float(theory_ds["theory_exponent"])
    th_half = 0.5 * (float(theory_ds["theory_exponent_ci_high"]) - float(theory_ds["theory_exponent_ci_low"]))
    th_shift = theory_ds["theory_shifted_exponent"].values
    th_shift_half = theory_ds["theory_shifted_ci_half"].values
    t_star = theory_ds["t_star"].values
    t_lo, t_hi = float(theory_ds["window_t_lo"]), float(theory_ds["window_t_hi"])
    win = (f"window t in [{t_lo:.4g}, {t_hi:.4g}] "
           f"(modes {int(theory_ds['window_k_lo'])}..{int(theory_ds['window_k_hi'])})")
    ci = f"95% CI [{fit.ci_low:.4f}, {fit.ci_high:.4f}] ({fit.ci_method})"
    finite = (f"the exact curve itself fits {th:.4f} over this window "
              f"(staircase prediction {float(theory_ds['exponent_staircase']):.4f})")

    def common_terms(t_a, t_b, half, th_half_, th_value):
        return {"GD O(lr) (h/4)(rate(t_lo) - rate(t_hi))/ln(t_hi/t_lo)": gd_exponent_bias(h, rates, t_star, t_a, t_b),
                "seed 95% CI half-width": half / abs(b),
                "staircase ripple (exact curve's block-bootstrap CI)": th_half_ / abs(th_value)}

    base = ErrorBudget(common_terms(t_lo, t_hi, fit.ci_halfwidth, th_half, th), factor)
    finite_eps = {"finite eps (App. C Eq. 292, |corrected - asymptotic|)": abs(corr - asym) / abs(asym)}
    finite_size = {"finite size and discreteness (|exact curve - corrected|)": abs(th - corr) / abs(corr)}
    claims = [
        systematic_claim(f"{what} exponent vs asymptotic {asymptotic_name}", asym, b, {**finite_eps, **finite_size},
                         base, checks=asymptotic_checks, source=asymptotic_source, note=f"{win}; {ci}; {finite}"),
        systematic_claim(f"{what} exponent vs finite-eps corrected", corr, b, finite_size, base, checks="theorem",
                         source=f"{theorem} with App. C Eq. 292 (finite-initialization correction, generalised "
                                f"to the init profile)", note=f"{win}; {finite}"),
        base.claim(
            f"{what} exponent vs exact theory curve (same window)", th, b, checks="theorem",
            source=f"{theorem}: exponent of the exact solution over the theory's window",
            note=f"{win}; {ci}"),
    ]
    for name, g, g_half, (a_, b_), t_s, t_s_half in zip(SHIFTS, shifted_gd, shifted_half,
                                                        shifted_windows((t_lo, t_hi)), th_shift, th_shift_half):
        budget = ErrorBudget(common_terms(a_, b_, g_half, t_s_half, t_s), factor)
        if not np.isfinite(g):
            note = (f"the window shifted by {name} leaves the recorded times: train longer (steps) so that "
                    f"the record covers twice the window's end")
        else:
            note = (f"moving the window ({name}) changes GD's exponent by {abs(g - b):.4f} and the exact "
                    f"curve's by {abs(t_s - th):.4f}: the local exponent drifts (resolved drops at the lower "
                    f"end, the finite-size cutoff at the upper end), which the theory predicts")
        claim = budget.claim(f"{what} exponent, window end {name}: GD vs exact theory", float(t_s), float(g),
                             checks="theorem", source=f"{theorem}: exact solution over a shifted window", note=note)
        if not np.isfinite(g) and t_end is not None and b_ > t_end:  # the run stops before the window's end
            claim = replace(claim, note="").not_judged(
                run_too_short(t_end, b_, steps_to_reach(b_, h), what="the shifted window ends at"))
        claims.append(claim)
    claims.append(Claim(f"{what}: power_law_test on the seed-mean curve (1 = power law)", 1.0,
                        float(fit.is_power_law), math.nan, comparison="at_least", checks="ours",
                        source="the GD curve is a power law over the theory's window (nqf.theory.scaling.power_law_test)",
                        tolerance_source="a yes/no verdict: power_law_test's thresholds define a power law "
                                         "(no prediction to compare with, so no error budget)",
                        note=fit.reason))
    return claims
