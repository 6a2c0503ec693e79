"""Power laws in training time: predicted exponents, fits with confidence intervals, and a test
for curves that are not power laws (paper Section 6, Theorems 9 and 11, App. A.17 and C).

When mode k switches on at t*_k and removes its share V_k of the excess loss, the loss is a
staircase E(t) = sum_{k: t*_k > t} V_k. With zeta_k ~ k^-alpha2 and V_k ~ k^-alpha1 the steps merge,
as eps -> 0 and the number of modes grows, into E ~ t^-(alpha1 - 1)/alpha2 (Theorem 9; Theorem 11
is the same law with V_mu = y_mu^2/m, alpha1 = 2 gamma1, alpha2 = gamma2). At finite eps the log
factor in t*_k = ln(zeta_k / (C_k z_k0)) / (a zeta_k) varies with k, which steepens the law
(App. C, Eq. 292); with finitely many modes the tail is cut off. Three predictions are reported:

* ``asymptotic``  (alpha1 - 1) / alpha2, with alpha1, alpha2 regressed from V and zeta;
* ``corrected``   App. C's k_eff generalised to any init profile and averaged over the fitting
                  window: (alpha1 - 1) d ln k / d ln t*, i.e. (alpha1 - 1) ln(k_hi/k_lo) / ln(t_hi/t_lo)
                  with k(t) read off the predicted ignition times (Eq. 292 when z_k0 = eps);
* ``staircase``   the slope of the discrete staircase itself, ln E_k against ln t*_k over the
                  window's modes (finite size and discreteness included, no asymptotics).

The fitting window comes from the theory: it starts where consecutive drops stop being resolved
(their gap in t is below their width, ``resolution`` / (a zeta_k); ln 81 is the 10 %-90 % rise of a
logistic) and ends at the finite-size cutoff, where the missing tail beyond the last mode would
exceed the fraction ``cutoff`` of the excess loss, or at the training horizon.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from nqf import validate
from nqf.theory.ignition import predicted_ignition_times

RESOLUTION = math.log(81.0)  # 10 % -> 90 % rise time of a logistic, in units of 1 / (a zeta)

# power_law_test thresholds (see its docstring).
MIN_EXPONENT = 0.05
MAX_DRIFT = 0.3
MAX_SPREAD = 0.5
MAX_REL_RMS = 0.05


def excess_tail(V) -> np.ndarray:
    """Staircase levels E_k = sum_{j > k} V_j (k = 1..K): the excess loss once modes 1..k are learnt."""
    V = np.asarray(V, float)
    return np.concatenate([np.cumsum(V[::-1])[::-1][1:], [0.0]])


def loglog_slope(x, y) -> tuple[float, float]:
    """Least-squares slope and intercept of ln y against ln x (positive entries only)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2:
        return math.nan, math.nan
    slope, intercept = np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)
    return float(slope), float(intercept)


@dataclass(frozen=True)
class Window:
    """A fitting window in time and the modes whose drops fall inside it (1-based)."""

    t_lo: float
    t_hi: float
    k_lo: int
    k_hi: int
    note: str = ""


@dataclass(frozen=True)
class ExponentPrediction:
    """Predicted power-law exponent of the excess loss against training time."""

    asymptotic: float
    corrected: float
    staircase: float
    alpha1: float
    alpha2: float
    window: Window
    t_star: np.ndarray
    k_eff: np.ndarray
    resolved: np.ndarray
    modes: np.ndarray = field(repr=False)

    def as_dict(self) -> dict:
        return {"asymptotic": self.asymptotic, "corrected": self.corrected, "staircase": self.staircase,
                "alpha1": self.alpha1, "alpha2": self.alpha2, "t_lo": self.window.t_lo,
                "t_hi": self.window.t_hi, "k_lo": self.window.k_lo, "k_hi": self.window.k_hi}


def _check_modes(zeta, V, t_star) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    zeta, V = validate.array("zeta", zeta), validate.array("V", V)
    t_star = validate.array("t_star", t_star, finite=False)
    if not (zeta.ndim == V.ndim == t_star.ndim == 1 and zeta.size == V.size == t_star.size):
        raise ValueError(f"zeta, V and t_star must be 1-D arrays of one length (modes k = 1..K); got "
                         f"shapes {zeta.shape}, {V.shape}, {t_star.shape}.")
    if zeta.size < 3:
        raise ValueError(f"A power law needs at least 3 modes; got {zeta.size}.")
    if np.any(~(zeta > 0)):
        raise ValueError(f"Every mode of a power law must switch on (zeta_k > 0); modes "
                         f"{(np.nonzero(~(zeta > 0))[0] + 1).tolist()} never do: leave them out.")
    if np.any(V < 0) or np.any(~np.isfinite(V)):
        raise ValueError("V (the target strengths V_k) must be finite and non-negative.")
    return zeta, V, t_star


def _check_order(t_star: np.ndarray, saturation: np.ndarray | None = None) -> None:
    """Refuse modes whose ignition times fall somewhere in k, naming the first such mode, its
    t* and the likely cause; ``saturation`` = C_k z0_k / zeta_k when t* comes from Theorem 8."""
    fin = np.flatnonzero(np.isfinite(t_star))
    falls = np.flatnonzero(np.diff(t_star[fin]) < 0)
    sat = None if saturation is None else np.broadcast_to(saturation, t_star.shape)
    if not falls.size:
        late = np.flatnonzero(np.isnan(t_star))
        if sat is not None and late.size:
            k = late[0]
            raise ValueError(f"Theorem 8 gives no ignition time for mode {k + 1} ({late.size} modes in all): its "
                             f"initial amplitude is {sat[k]:.2g} of its saturation level zeta_k / C_k, past the "
                             f"ignition threshold at t = 0, so lower z0 (a smaller init) or keep only modes "
                             f"1..{k} of the power law.")
        return
    j, k = fin[falls[0]], fin[falls[0] + 1]
    if sat is not None and not sat[k] > 0.05:
        cause = ("its initial amplitude z0 (or its rate zeta) lets it overtake (t* ~ ln(zeta / (C z0)) / (a zeta)), "
                 "e.g. random per-mode amplitudes: pass one z0 for every mode (their typical value) or modes "
                 "sorted by t*")
    elif sat is not None:
        cause = (f"its initial amplitude is {sat[k]:.2g} of its saturation level zeta_k / C_k (Theorem 8's "
                 f"t* = ln((zeta - C z0) / (C z0)) / (a zeta) shrinks as z0 nears it), so lower z0 (a smaller "
                 f"init) or keep only modes 1..{k} of the power law")
    else:
        cause = ("sort the modes by t_star, or, if t_star comes from Theorem 8, the mode starts near its "
                 f"saturation level zeta_k / C_k: lower z0 or keep only modes 1..{k}")
    raise ValueError(f"Modes must be ordered by ignition time (t*_k increasing in k) for a power-law window, "
                     f"but mode {k + 1} ignites at t* = {t_star[k]:.4g}, before mode {j + 1} "
                     f"(t* = {t_star[j]:.4g}): {cause}.")


def resolved_drops(t_star, zeta, *, a: float = 1.0, resolution: float = RESOLUTION) -> np.ndarray:
    """For each mode (in the given order), whether its drop is separated from the next mode's.

    Two consecutive switch-ons are resolved when their gap exceeds the mean of their widths
    ``resolution`` / (a zeta_k). The last mode has no successor and counts as resolved.
    """
    t_star, zeta = np.asarray(t_star, float), np.asarray(zeta, float)
    with np.errstate(divide="ignore"):
        width = resolution / (a * np.where(zeta > 0, zeta, 0.0))
    gap = np.diff(t_star)
    ok = gap > 0.5 * (width[:-1] + width[1:])
    return np.append(ok, True)


def count_resolved(t_star, zeta, *, a: float = 1.0, resolution: float = RESOLUTION) -> int:
    """Number of distinct drops predicted from the ignition times alone: consecutive switch-ons
    closer than their widths merge into one drop (a cluster counts once)."""
    t_star, zeta = np.asarray(t_star, float), np.asarray(zeta, float)
    ok = np.isfinite(t_star) & (zeta > 0)
    order = np.argsort(t_star[ok])
    res = resolved_drops(t_star[ok][order], zeta[ok][order], a=a, resolution=resolution)
    return int(res.sum())


def theory_window(t_star, zeta, V, *, a: float = 1.0, t_max: float | None = None,
                  resolution: float = RESOLUTION, cutoff: float = 0.1, min_modes: int = 4) -> Window:
    """The fitting window the theory assigns to a staircase of drops (modes k = 1..K in order).

    Start: the ignition of the first mode whose drop is not resolved from the next one (below it
    the curve is a visible staircase, not a power law). End: the last mode k_hi whose missing
    tail, sum_{j > K} V_j extrapolated with the fitted V ~ k^-alpha1, is at most ``cutoff`` of the
    excess loss E_k + tail (beyond it the finite number of modes steepens the curve), or the
    training horizon ``t_max``. If fewer than ``min_modes`` modes remain, the start moves down to
    keep that many and the window's note says so.
    """
    zeta, V, t_star = _check_modes(zeta, V, t_star)
    cutoff = validate.scalar("cutoff", cutoff, low=0.0, high=1.0, low_open=True, high_open=True)
    a = validate.scalar("a", a, low=0.0, low_open=True)
    resolution = validate.scalar("resolution", resolution, low=0.0, low_open=True)
    min_modes = validate.integer("min_modes", min_modes, minimum=2)
    if t_max is not None:
        t_max = validate.scalar("t_max", t_max, low=0.0, low_open=True)
    K = zeta.size
    k = np.arange(1, K + 1)
    _check_order(t_star)
    notes = []
    # Missing tail beyond the last mode, from the power law fitted to all modes (Euler-Maclaurin
    # midpoint: sum_{j > K} c j^-alpha1 ~ c (K + 1/2)^(1 - alpha1) / (alpha1 - 1)).
    slope, intercept = loglog_slope(k, V)
    alpha1 = -slope
    if not alpha1 > 1:
        raise ValueError(f"V_k must fall faster than 1/k for a finite excess loss (alpha1 > 1); fitted alpha1 = {alpha1:.3g}.")
    tail = math.exp(intercept) * (K + 0.5) ** (1 - alpha1) / (alpha1 - 1)
    E = excess_tail(V)
    deficit = tail / (E + tail)
    within = np.nonzero(deficit <= cutoff)[0]
    k_hi = int(k[within[-1]]) if within.size else 1
    if t_max is not None:
        reached = np.nonzero(t_star <= t_max)[0]
        if reached.size == 0:
            raise ValueError(f"No mode switches on before the horizon t_max = {t_max:g} (first t* = {t_star[0]:.4g}).")
        if int(k[reached[-1]]) < k_hi:
            k_hi = int(k[reached[-1]])
            notes.append(f"window ends at the training horizon t = {t_max:g} (mode {k_hi})")
    res = resolved_drops(t_star, zeta, a=a, resolution=resolution)
    unresolved = np.nonzero(~res[:-1])[0]
    k_lo = int(k[unresolved[0]]) if unresolved.size else K
    if k_hi - k_lo + 1 < min_modes:
        new_lo = max(1, k_hi - min_modes + 1)
        notes.append(f"fewer than {min_modes} unresolved modes before the cutoff: window starts at mode "
                     f"{new_lo} instead of {k_lo} (drops there are still partly resolved)")
        k_lo = new_lo
    t_lo = float(t_star[k_lo - 1])
    t_hi = float(t_star[k_hi - 1])
    if not t_hi > t_lo:
        raise ValueError(f"Empty fitting window: modes {k_lo}..{k_hi}, t in [{t_lo:.4g}, {t_hi:.4g}]: the missing "
                         f"tail beyond the last of the {K} modes is above cutoff = {cutoff:g} of the excess loss from "
                         f"mode {k_hi + 1} on, and the drops are resolved up to mode {k_lo}, so these modes show a "
                         f"staircase, not a power law: more modes are needed (or a longer horizon t_max).")
    return Window(t_lo, t_hi, k_lo, k_hi, "; ".join(notes))


def predict_exponent(zeta, V, *, t_star=None, C=None, z0=None, a: float = 1.0, t_max: float | None = None,
                     resolution: float = RESOLUTION, cutoff: float = 0.1, min_modes: int = 4) -> ExponentPrediction:
    """Theorems 9 and 11's exponent from the data's growth rates ``zeta`` and strengths ``V``.

    Ignition times come from ``t_star`` or, if omitted, from Theorem 8 with ``C`` (C_k) and the
    initial amplitudes ``z0`` (rho = 1/2). Modes are k = 1..K in the given order. See the module
    docstring for the three values returned and the window.
    """
    zeta = validate.array("zeta", zeta)
    a = validate.positive("a", a)
    resolution = validate.scalar("resolution", resolution, low=0.0, low_open=True)
    min_modes = validate.integer("min_modes", min_modes, minimum=2)
    if t_max is not None:
        t_max = validate.scalar("t_max", t_max, low=0.0, low_open=True)
    if t_star is None:
        if C is None or z0 is None:
            raise ValueError("Give either t_star or both C and z0 (for Theorem 8's ignition times).")
        validate.positive("z0", z0, what=" (the initial amplitudes of Theorem 8)")
        validate.positive("C", C, what=" (C_k of every mode of a power law)")
        t_star = predicted_ignition_times(zeta, C, z0, a=a)
        with np.errstate(divide="ignore", invalid="ignore"):
            _check_order(t_star, np.asarray(C, float) * np.asarray(z0, float) / zeta)
    zeta, V, t_star = _check_modes(zeta, V, t_star)
    win = theory_window(t_star, zeta, V, a=a, t_max=t_max, resolution=resolution, cutoff=cutoff,
                        min_modes=min_modes)
    k = np.arange(1, zeta.size + 1)
    sel = (k >= win.k_lo) & (k <= win.k_hi)
    alpha1 = -loglog_slope(k[sel], V[sel])[0]
    alpha2 = -loglog_slope(k[sel], zeta[sel])[0]
    if not alpha2 > 0:
        raise ValueError(f"zeta must fall with k over the fitting window (zeta_k ~ k^-alpha2 with alpha2 > 0); "
                         f"fitted alpha2 = {alpha2:.3g} over modes {win.k_lo}..{win.k_hi}, so the exponent "
                         "(alpha1 - 1) / alpha2 is not finite.")
    asymptotic = (alpha1 - 1) / alpha2
    # Local k_eff = (alpha1 - 1) / (d ln t* / d ln k) per mode (central differences), and its
    # window average in the measure d ln t (what a log-log fit over the window weighs).
    with np.errstate(divide="ignore", invalid="ignore"):
        dlnt = np.gradient(np.log(t_star), np.log(k))
        k_eff = (alpha1 - 1) / dlnt
        corrected = (alpha1 - 1) * math.log(win.k_hi / win.k_lo) / math.log(win.t_hi / win.t_lo)
    # Staircase: level half-way through each drop, E_k + V_k / 2, against t*_k.
    E_mid = excess_tail(V) + V / 2
    staircase = -loglog_slope(t_star[sel], E_mid[sel])[0]
    return ExponentPrediction(asymptotic=float(asymptotic), corrected=float(corrected),
                              staircase=float(staircase), alpha1=float(alpha1), alpha2=float(alpha2),
                              window=win, t_star=t_star, k_eff=k_eff,
                              resolved=resolved_drops(t_star, zeta, a=a, resolution=resolution), modes=k[sel])


# --------------------------------------------------------------------------------------------
# Fitting measured curves
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PowerLawFit:
    """A power-law fit loss ~ t^-exponent over a window, with its confidence interval."""

    exponent: float
    ci_low: float
    ci_high: float
    ci_method: str
    intercept: float
    per_seed: np.ndarray
    window: tuple[float, float]
    residual_rms: float
    slope_drift: float
    subwindow_spread: float
    is_power_law: bool
    reason: str

    @property
    def ci_halfwidth(self) -> float:
        return 0.5 * (self.ci_high - self.ci_low)


def _window_bounds(window) -> tuple[float, float]:
    if isinstance(window, Window):
        return window.t_lo, window.t_hi
    if isinstance(window, (str, bytes)) or not hasattr(window, "__len__") or len(window) != 2:
        raise ValueError(f"window must be a Window or a pair (t_lo, t_hi) of times; got {validate.describe(window)}.")
    lo, hi = (validate.scalar("window", v) for v in window)
    if not 0 < lo < hi:
        raise ValueError(f"A window needs 0 < t_lo < t_hi; got ({lo}, {hi}).")
    return lo, hi


def _log_curves(t, loss, window, n_grid: int) -> tuple[np.ndarray, np.ndarray]:
    """ln t on a grid uniform in ln t inside the window, and ln loss interpolated there (S, n)."""
    t = validate.array("t", t, ndim=1)
    if t.size < 2:
        raise ValueError(f"t must hold at least 2 recorded times for a fit; got {t.size}.")
    L = np.atleast_2d(validate.array("loss", loss, ndim=(1, 2), finite=None))
    if L.shape[-1] != t.size:
        raise ValueError(f"loss has {L.shape[-1]} time points but t has {t.size}.")
    lo, hi = _window_bounds(window)
    keep = t > 0
    t, L = t[keep], L[:, keep]
    if t.size < 2 or lo < t[0] * (1 - 1e-12) or hi > t[-1] * (1 + 1e-12):
        raise ValueError(f"The window [{lo:.4g}, {hi:.4g}] is not inside the recorded times "
                         f"[{t[0] if t.size else np.nan:.4g}, {t[-1] if t.size else np.nan:.4g}].")
    if np.any(np.diff(t) <= 0):
        raise ValueError("t must be strictly increasing (no repeated times).")
    inside = (t >= lo) & (t <= hi)
    if np.any(L[:, inside] <= 0) or not np.all(np.isfinite(L[:, inside])):
        raise ValueError("The loss must be finite and positive inside the fitting window "
                         "(subtract the loss floor before fitting the excess loss, not after).")
    u = np.linspace(math.log(lo), math.log(hi), n_grid)
    with np.errstate(divide="ignore"):
        lnL = np.log(np.where(L > 0, L, np.nan))
    lt = np.log(t)
    curves = np.empty((L.shape[0], n_grid))
    for s in range(L.shape[0]):  # a handful of seeds: the loop is over replicas, not samples
        ok = np.isfinite(lnL[s])
        curves[s] = np.interp(u, lt[ok], lnL[s][ok])
    return u, curves


def _shape_stats(u, y) -> dict:
    """Slope b (loss ~ t^-b), relative residual rms, slope drift and sub-window spread of one curve."""
    slope, intercept = np.polyfit(u, y, 1)
    b = -slope
    resid = y - (slope * u + intercept)
    span = abs(slope) * (u[-1] - u[0])
    rel_rms = float(np.sqrt(np.mean(resid ** 2)) / span) if span > 0 else math.inf
    c2 = np.polyfit(u, y, 2)[0]
    drift = float(abs(2 * c2 * (u[-1] - u[0])) / abs(b)) if b != 0 else math.inf
    parts = np.array_split(np.arange(u.size), 4)
    local = np.array([-np.polyfit(u[p], y[p], 1)[0] for p in parts if p.size >= 2])
    spread = float((local.max() - local.min()) / abs(b)) if b != 0 else math.inf
    return {"exponent": float(b), "intercept": float(intercept), "rel_rms": rel_rms, "drift": drift,
            "spread": spread, "local_exponents": local}


def power_law_test(t, loss, window, *, n_grid: int = 64, min_exponent: float = MIN_EXPONENT,
                   max_drift: float = MAX_DRIFT, max_spread: float = MAX_SPREAD,
                   max_rel_rms: float = MAX_REL_RMS) -> tuple[bool, dict]:
    """Is ``loss`` (one curve, or the geometric mean over seeds) a power law of t in ``window``?

    On a grid uniform in ln t the curve is a power law when all of these hold:
    * it decays: fitted exponent b >= ``min_exponent``;
    * its log-log slope does not drift: a quadratic fit's slope changes across the window by at
      most ``max_drift`` * b (a pure power law gives 0; a plateau followed by a drop, or an
      exponential, gives O(1) or more);
    * the slopes fitted on four equal sub-windows differ by at most ``max_spread`` * b (catches
      a staircase of resolved drops and broken power laws that the quadratic averages away);
    * the residual rms about the straight line is at most ``max_rel_rms`` of the line's own drop
      b * ln(t_hi / t_lo).
    The defaults are the test's definition: they accept a staircase whose drops have merged
    (a few per cent rms ripple) and reject a curve whose local exponent changes by a third.
    Returns (verdict, statistics including the reasons it failed).
    """
    n_grid = validate.integer("n_grid", n_grid, minimum=8)
    min_exponent = validate.scalar("min_exponent", min_exponent)
    max_drift = validate.scalar("max_drift", max_drift, low=0.0)
    max_spread = validate.scalar("max_spread", max_spread, low=0.0)
    max_rel_rms = validate.scalar("max_rel_rms", max_rel_rms, low=0.0)
    u, curves = _log_curves(t, loss, window, n_grid)
    st = _shape_stats(u, curves.mean(axis=0))
    fails = []
    if not st["exponent"] >= min_exponent:
        fails.append(f"does not decay (exponent {st['exponent']:.3g} < {min_exponent})")
    else:
        if st["drift"] > max_drift:
            fails.append(f"log-log slope drifts by {st['drift']:.2f} of itself across the window (> {max_drift})")
        if st["spread"] > max_spread:
            fails.append(f"sub-window exponents {np.round(st['local_exponents'], 3).tolist()} spread by "
                         f"{st['spread']:.2f} of the exponent (> {max_spread})")
        if st["rel_rms"] > max_rel_rms:
            fails.append(f"residual rms {st['rel_rms']:.3f} of the fitted drop (> {max_rel_rms})")
    st.update(thresholds={"min_exponent": min_exponent, "max_drift": max_drift, "max_spread": max_spread,
                          "max_rel_rms": max_rel_rms},
              reason="power law" if not fails else "not a power law: " + "; ".join(fails))
    return (not fails), st


def fit_power_law(t, loss, window, *, n_boot: int = 2000, seed: int = 0, n_grid: int = 64,
                  confidence: float = 0.95) -> PowerLawFit:
    """Fit loss ~ t^-b over ``window`` (a :class:`Window` or (t_lo, t_hi)).

    ``loss`` is (T,) or (S, T) for S seeds. Each curve is interpolated in log-log onto ``n_grid``
    points uniform in ln t (so a dense recording at late times does not dominate) and fitted by
    least squares; the reported exponent is that of the geometric mean over seeds, which equals
    the mean of the per-seed exponents. Confidence interval: percentile bootstrap over seeds
    (S >= 2), or, for one curve, a moving-block bootstrap of the fit's residuals (blocks of
    n_grid/8 points keep their correlation). :func:`power_law_test` gives ``is_power_law``.
    """
    n_boot = validate.integer("n_boot", n_boot, minimum=0)
    seed = validate.seed("seed", seed)
    n_grid = validate.integer("n_grid", n_grid, minimum=8)
    confidence = validate.scalar("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    u, curves = _log_curves(t, loss, window, n_grid)
    X = np.vstack([u, np.ones_like(u)]).T
    coef, *_ = np.linalg.lstsq(X, curves.T, rcond=None)
    per_seed = -coef[0]
    mean_curve = curves.mean(axis=0)
    ok, st = power_law_test(t, loss, window, n_grid=n_grid)
    rng = np.random.default_rng(seed)
    q = (1 - confidence) / 2
    S = curves.shape[0]
    if n_boot == 0:  # checked above: an integer >= 0; 0 means no interval
        lo = hi = math.nan
        method = "none"
    elif S >= 2:
        # scipy.stats.bootstrap(method="percentile") draws the same resamples from the same Generator;
        # its ends differ from these in the last bits (percentile vs quantile position; tests/theory/test_scaling.py)
        idx = rng.integers(0, S, size=(n_boot, S))
        boots = per_seed[idx].mean(axis=1)
        lo, hi = np.quantile(boots, [q, 1 - q])
        method = f"percentile bootstrap over {S} seeds ({n_boot} resamples)"
    else:  # a moving-block bootstrap: scipy.stats.bootstrap resamples points independently, not blocks
        slope, intercept = np.polyfit(u, mean_curve, 1)
        fitted = slope * u + intercept
        resid = mean_curve - fitted
        block = max(2, n_grid // 8)
        n_blocks = int(math.ceil(n_grid / block))
        starts = rng.integers(0, n_grid - block + 1, size=(n_boot, n_blocks))
        idx = (starts[:, :, None] + np.arange(block)).reshape(n_boot, -1)[:, :n_grid]
        ys = fitted + resid[idx]
        boots = -np.linalg.lstsq(X, ys.T, rcond=None)[0][0]
        lo, hi = np.quantile(boots, [q, 1 - q])
        method = f"moving-block bootstrap of residuals, one curve ({n_boot} resamples, blocks of {block})"
    return PowerLawFit(exponent=float(per_seed.mean()), ci_low=float(lo), ci_high=float(hi), ci_method=method,
                       intercept=float(st["intercept"]), per_seed=per_seed, window=_window_bounds(window),
                       residual_rms=st["rel_rms"], slope_drift=st["drift"], subwindow_spread=st["spread"],
                       is_power_law=ok, reason=st["reason"])


def window_sensitivity(t, loss, window, *, factor: float = 2.0, n_grid: int = 64) -> dict[str, float]:
    """Exponents refitted with each end of the window shifted by ``factor`` (out and in).

    Keys 'lo/2', 'lo*2', 'hi/2', 'hi*2' (for factor 2); NaN where the shifted window leaves the
    recorded times or becomes narrower than a factor 2 in t.
    """
    lo, hi = _window_bounds(window)
    factor = validate.scalar("factor", factor, low=1.0, low_open=True)
    t = validate.array("t", t, ndim=1, nonempty=True)
    tpos = t[t > 0]
    name = f"{factor:g}"
    out = {}
    for key, (a, b) in {f"lo/{name}": (lo / factor, hi), f"lo*{name}": (lo * factor, hi),
                        f"hi/{name}": (lo, hi / factor), f"hi*{name}": (lo, hi * factor)}.items():
        if a < tpos[0] or b > tpos[-1] or b < 2 * a:
            out[key] = math.nan
            continue
        u, curves = _log_curves(t, loss, (a, b), n_grid)
        out[key] = float(-np.polyfit(u, curves.mean(axis=0), 1)[0])
    return out


def count_drops(t, excess_loss, *, depth: float = 0.5, min_slope: float = 0.05, floor: float = 1e-12) -> int:
    """Number of distinct drops of one excess-loss curve, i.e. the plateaus a reader can see.

    The local exponent s = -d ln E / d ln t is taken between consecutive recorded points (record
    on a log-spaced grid). Every drop is a peak of s; a drop counts as distinct when s falls by at
    least the fraction ``depth`` of its peak value between it and any higher neighbouring peak
    (scipy's peak prominence; 1/2 is a Rayleigh-like criterion) and the peak exceeds
    ``min_slope``. Points where E has fallen below ``floor`` times its initial value are ignored
    (round-off), as is the final exponential approach to the minimum (no peak there).
    """
    from scipy.signal import find_peaks

    depth = validate.scalar("depth", depth, low=0.0, high=1.0, low_open=True)
    min_slope = validate.scalar("min_slope", min_slope, low=0.0)
    floor = validate.scalar("floor", floor, low=0.0)
    t = validate.array("t", t, ndim=1, finite=None)
    E = validate.array("excess_loss", excess_loss, finite=None)
    if E.ndim != 1 or E.size != t.size:
        raise ValueError(f"count_drops takes one curve with one value per time; got shapes {E.shape}, {t.shape}.")
    keep = (t > 0) & np.isfinite(E) & (E > floor * np.nanmax(np.abs(E)))
    t, E = t[keep], E[keep]
    if t.size < 3:
        return 0
    s = -np.diff(np.log(E)) / np.diff(np.log(t))
    # pad with zeros so that a drop at either end of the record can still be a peak
    s = np.concatenate([[0.0], s, [0.0]])
    peaks, props = find_peaks(s, prominence=0.0)
    heights = s[peaks]
    distinct = (props["prominences"] >= depth * heights) & (heights >= min_slope)
    return int(distinct.sum())
