"""Claims: the rows of results/summary.csv. A kind's fit judges measurements against predictions
with a stated error budget (:class:`ErrorBudget`) into :class:`Claim` rows, says when a run was too
short to judge, and writes them as the claims of its fit file."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

if TYPE_CHECKING:

    pass


SUMMARY_COLUMNS = ("experiment", "quantity", "checks", "source", "reading", "predicted", "measured",
                   "rel_error", "tolerance", "tolerance_source", "passed", "judged", "note")


# What a summary row checks: a claim of the paper (its figure and sentence in ``source``), a
# theorem of the paper checked against training (the theorem in ``source``), a claim of this
# project (stricter measures, quantities the paper does not report), or "construction": a
# condition that holds by construction of the data or the config (e.g. Assumption 1 for diagonal
# data matrices, a run length chosen from the window it must reach), which no run could fail. Such
# a row stays in the summary, so that the condition is stated beside the rows that rely on it,
# with a ``source`` that begins "holds by construction (...)"; it is not evidence, and counts of
# checked rows leave it out.
CHECKS = ("paper", "theorem", "ours", "construction")


# A row whose measured quantity the run could not reach (a crossing time beyond its end, a window
# it stops before) is written with judged = False, passed = False and a note that begins with
# NOT_REACHED: it is neither a pass nor a miss, counts of checked rows leave it out, and a figure
# whose paper rows were not reached says it was not judged at this run length (nqf.experiments.
# reproduction), never that its claim does not hold.
NOT_REACHED = "not reached: run too short"


# How far past a predicted crossing a run must go, in units of GD's first-order lag (eta / 4) ln(z / z0)
# there: GD crosses about one lag late, and the margin keeps the crossing inside the run.
LAG_MARGIN = 2.0


# The words for a row whose tolerance is as large as the range of the quantity it bounds: such a
# row cannot tell a right theory from a wrong one, so it is not judged either.
TOLERANCE_OFF_SCALE = "not judged: the tolerance is off the scale"


@dataclass
class ErrorBudget:
    """A tolerance built from the known error terms of one run, times a stated safety factor.

    ``terms`` maps a short name of each error source (e.g. "GD O(lr): lr r_k / 4", "seed s.e.")
    to its size, in the units of the claim's error (relative for a relative claim): estimated
    sizes, which the factor covers. ``systematic`` holds terms the theory computes exactly (a
    finite-eps or finite-size correction of known size), added once without the factor. The
    tolerance is factor * sum(terms) + sum(systematic): a bound that assumes no cancellation.
    """

    terms: dict
    factor: float
    systematic: dict = field(default_factory=dict)

    @property
    def tolerance(self) -> float:
        return (float(self.factor) * float(sum(abs(float(v)) for v in self.terms.values()))
                + float(sum(abs(float(v)) for v in self.systematic.values())))

    def describe(self) -> str:
        parts = " + ".join(f"{name} {float(v):.3g}" for name, v in self.terms.items())
        text = f"{float(self.factor):g} x ({parts})"
        if self.systematic:
            text += " + " + " + ".join(f"{name} {float(v):.3g} (exact)" for name, v in self.systematic.items())
        return f"{text} = {self.tolerance:.3g}"

    def claim(self, quantity: str, predicted: float, measured: float, *, scale: float | None = None,
              scale_what: str = "the quantity's range over the run", **kwargs) -> "Claim":
        """A 'close' Claim whose tolerance and tolerance_source come from this budget.

        ``scale`` is the size of the quantity itself (e.g. how far ln z moves over the run): a
        tolerance at or above it would let any prediction pass, so the row is then not judged
        (:data:`TOLERANCE_OFF_SCALE`), whatever was measured."""
        c = Claim(quantity, predicted, measured, self.tolerance, tolerance_source=self.describe(), **kwargs)
        if scale is not None and not self.tolerance < abs(float(scale)):
            c = c.not_judged(f"{TOLERANCE_OFF_SCALE} ({self.tolerance:.3g} is at least {scale_what}, "
                             f"{abs(float(scale)):.3g}: any prediction would pass)")
        return c


@dataclass
class Claim:
    """One checked claim: a row of results/summary.csv.

    ``checks`` says what the row is (see CHECKS) and ``source`` where the claim comes from (for a
    paper claim, the figure and its sentence; for a "construction" row, why it holds by
    construction). ``tolerance_source`` says how the tolerance was set: the error budget of the
    run (GD's O(lr) error, finite-eps terms, seed standard errors) times a stated factor, or why a
    bound needs none. ``reading`` is filled by the fit stage with
    the conventions the experiment ran under (loss convention, preprocessing).
    """

    quantity: str
    predicted: float
    measured: float
    tolerance: float
    note: str = ""
    relative: bool = True
    # "close": |measured - predicted| (relative unless relative=False) <= tolerance;
    # "at_most" / "at_least": measured <= / >= predicted (a bound; tolerance is not used).
    comparison: str = "close"
    checks: str = "ours"
    source: str = ""
    tolerance_source: str = ""
    reading: str = ""
    # False: the run could not reach what this row measures (NOT_REACHED), or its tolerance is off
    # the scale (TOLERANCE_OFF_SCALE); the row is then neither passed nor missed.
    judged: bool = True

    def __post_init__(self):
        if self.checks not in CHECKS:
            raise ValueError(f"Claim.checks must be one of {', '.join(CHECKS)}; got {self.checks!r}.")
        if self.comparison not in ("close", "at_most", "at_least"):
            raise ValueError(f"Claim.comparison must be close, at_most or at_least; got {self.comparison!r}.")

    @property
    def rel_error(self) -> float:
        if not (math.isfinite(self.predicted) and math.isfinite(self.measured)):
            return math.nan
        if not self.relative:
            return abs(self.measured - self.predicted)
        return abs(self.measured - self.predicted) / max(abs(self.predicted), 1e-300)

    def not_judged(self, reason: str) -> "Claim":
        """This row, not judged: ``reason`` (e.g. :func:`run_too_short`'s sentence) heads its note."""
        from dataclasses import replace

        note = f"{reason}; {self.note}" if self.note else reason
        return replace(self, judged=False, note=note)

    @property
    def passed(self) -> bool:
        if not self.judged:
            return False
        if self.comparison == "at_most":
            return bool(math.isfinite(self.measured) and self.measured <= self.predicted)
        if self.comparison == "at_least":
            return bool(math.isfinite(self.measured) and self.measured >= self.predicted)
        err = self.rel_error
        return bool(math.isfinite(err) and err <= self.tolerance)


def steps_to_reach(t: float, flow_step: float) -> int:
    """The fewest optimizer steps whose flow time flow_step * steps reaches ``t``."""
    # the 1e-9 absorbs rounding in the flow step, as nqf.experiments.competition.steps_for does
    return int(math.ceil(float(t) / float(flow_step) - 1e-9))


def run_too_short(t_end: float, t_pred: float, steps: int | None = None, *,
                  what: str = "the prediction is", key: str = "steps", clock: str = "t") -> str:
    """The note of a row whose measured time lies beyond the run: "not reached: run too short
    (the run ends at t = 40, the prediction is t = 690.8; steps >= 34540 would reach it)".
    ``steps`` is the smallest value of config key ``key`` that would reach it (None: no sentence
    about it); ``clock`` names the time axis (t, the flow time; step; tau)."""
    text = f"{NOT_REACHED} (the run ends at {clock} = {float(t_end):.4g}"
    if t_pred is not None and math.isfinite(float(t_pred)):
        text += f", {what} {clock} = {float(t_pred):.4g}"
    if steps is not None:
        text += f"; {key} >= {_key_value(steps)} would reach it"
    return text + ")"


def _key_value(value) -> str:
    """A config value as a sentence writes it: an integer in full (1234567 steps), else %g."""
    return str(int(value)) if float(value).is_integer() and abs(float(value)) >= 1 else f"{float(value):g}"


def reach_problems(key: str, t_end: float, needed, predicted, flow_step: float | None, names,
                   *, to_key=None, clock: str = "t = c lr steps", unit: str = "t",
                   event: str = "the slowest ignition", margin: str = "the kind's margin") -> list[tuple[str, str]]:
    """(key, sentence) for a run that ends (at flow time ``t_end``) before the time one of its
    rows needs: ``needed`` per mode (the kind's prediction plus its own margin; inf or NaN for a
    mode that never ignites, which no run reaches), ``predicted`` the predictions the rows judge
    (quoted), ``names`` what each mode is. The sentence names the slowest mode, its predicted
    time, the run's end and the smallest value of ``key`` that reaches the needed time:
    ``to_key(t)`` where given, else the steps ceil(t / flow_step); ``margin`` says what the needed
    time adds to the prediction, ``unit`` names the time axis (t; tau for tau = t / ln(1/eps)),
    ``clock`` how the run's end is computed, ``event`` what is reached last."""
    needed = np.asarray(needed, float)
    ok = np.isfinite(needed)
    if not ok.any() or float(t_end) >= float(needed[ok].max()):
        return []
    k = int(np.flatnonzero(ok)[np.argmax(needed[ok])])
    smallest = to_key(needed[k]) if to_key is not None else steps_to_reach(needed[k], flow_step)
    return [(key, f"the run ends at {clock} = {float(t_end):.4g}, before {event} its rows judge: "
                  f"{names[k]} is predicted at {unit} = {float(np.asarray(predicted, float)[k]):.4g} and needs the "
                  f"run to reach {unit} = {needed[k]:.4g} ({margin}); {key} >= {_key_value(smallest)} would reach it, "
                  f"anything shorter leaves its rows not judged.")]


def reached(t_end: float, t_pred: float, measured: float = math.nan) -> bool:
    """Whether a crossing predicted at ``t_pred`` lies within a run that ends at ``t_end``: a
    measured crossing counts as reached whatever the prediction (the run saw it); a crossing that
    was not measured is not reached when the prediction lies beyond the run's end (or is not
    finite, as a prediction evaluated on the run's own times is when the run stops first)."""
    if math.isfinite(float(measured)):
        return True
    return math.isfinite(float(t_pred)) and float(t_pred) <= float(t_end)


def claims_dataset(claims: list[Claim]) -> xr.Dataset:
    """Claims as variables along a ``claim`` dimension (they travel inside the fit file)."""
    text = lambda name: ("claim", np.array([getattr(c, name) for c in claims], dtype=object))  # noqa: E731
    return xr.Dataset(
        {
            "claim_quantity": text("quantity"),
            "claim_checks": text("checks"),
            "claim_source": text("source"),
            "claim_reading": text("reading"),
            "claim_predicted": ("claim", np.array([c.predicted for c in claims], float)),
            "claim_measured": ("claim", np.array([c.measured for c in claims], float)),
            "claim_rel_error": ("claim", np.array([c.rel_error for c in claims], float)),
            "claim_tolerance": ("claim", np.array([c.tolerance if c.comparison == "close" else np.nan
                                                   for c in claims], float)),
            "claim_tolerance_source": text("tolerance_source"),
            "claim_passed": ("claim", np.array([c.passed for c in claims], bool)),
            "claim_judged": ("claim", np.array([c.judged for c in claims], bool)),
            "claim_note": text("note"),
        },
        coords={"claim": np.arange(len(claims))},
    )


def with_reading(fit: xr.Dataset, reading: str) -> xr.Dataset:
    """The fit file's claims with their reading set (claims a kind labelled itself keep theirs)."""
    if fit.sizes.get("claim", 0) == 0:
        return fit
    current = fit["claim_reading"].values if "claim_reading" in fit else np.full(fit.sizes["claim"], "", dtype=object)
    values = np.array([str(v) if str(v) else reading for v in current], dtype=object)
    return fit.assign(claim_reading=("claim", values))


def summary_csv(rows: list[dict]) -> str:
    """``rows`` (of :func:`summary_rows`) as the text of results/summary.csv or a claims table."""
    import csv
    import io

    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=SUMMARY_COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def summary_rows(exp_id: str, fit: xr.Dataset) -> list[dict]:
    """Rows of results/summary.csv from a fit file's claims (older fit files without the
    checks/source/reading columns give empty strings there, without claim_judged every row is
    judged)."""
    rows = []
    n = fit.sizes.get("claim", 0)

    def text(name, i):
        return str(fit[name].values[i]) if name in fit else ""

    for i in range(n):
        rows.append({
            "experiment": exp_id,
            "quantity": text("claim_quantity", i),
            "checks": text("claim_checks", i),
            "source": text("claim_source", i),
            "reading": text("claim_reading", i),
            "predicted": float(fit["claim_predicted"].values[i]),
            "measured": float(fit["claim_measured"].values[i]),
            "rel_error": float(fit["claim_rel_error"].values[i]),
            "tolerance": float(fit["claim_tolerance"].values[i]),
            "tolerance_source": text("claim_tolerance_source", i),
            "passed": bool(fit["claim_passed"].values[i]),
            "judged": bool(fit["claim_judged"].values[i]) if "claim_judged" in fit else True,
            "note": text("claim_note", i),
        })
    return rows
