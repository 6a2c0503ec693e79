"""nqf.theory.ignition.level_crossing: the first time a decreasing curve falls to a level, with ln f
interpolated linearly in t between recorded points (the loss-drop rows of the featurewise and
samplewise kinds are built on it).

Every tolerance below is derived in its test: float64 rounding where ln f is exactly linear in t,
the linear-interpolation error of ln f on the grid elsewhere. Each test also shows that the
answer a plausible bug would give (interpolating f instead of ln f, no interpolation at all,
the bracket one grid interval off, the index -1 wrapping to the end of the record) lies outside
its tolerance, so the test can fail.
"""
import math

import numpy as np
import pytest

from nqf.theory.ignition import level_crossing

U = np.finfo(float).eps / 2  # unit roundoff of float64, 2^-53


def _secant_crossing(t, g, j, target):
    """Where the chord of g on [t_j, t_j+1] reaches target (the interpolation on bracket j)."""
    return t[j] + (target - g[j]) / (g[j + 1] - g[j]) * (t[j + 1] - t[j])


@pytest.mark.parametrize("r", [0.7, 3.0])
def test_exponential_decay_is_exact_to_rounding(r):
    """f = exp(-r t): ln f is linear in t, so log-linear interpolation is exact and the crossing
    of any level is t_c = ln(1/level) / r up to float64 rounding.

    Rounding: each ln f_j and ln(level) is -r t plus an error of at most about (r t_max + 2) u
    (the product r t, exp and log each round once; u = 2^-53); the bracketing differences are
    of size r h, so frac = (ln lo - ln level) / (ln lo - ln hi) carries a relative error of about
    4 (r t_max + 2) u / (r h), i.e. h times that in t, plus t_max u from t_i-1 + frac h:
    |error| <= 4 (r t_max + 2) u / r + 2 t_max u. The tolerance is 4 times that bound."""
    t = np.linspace(0.0, 10.0, 41)  # h = 0.25
    f = np.exp(-r * t)
    t_max = t[-1]
    tol = 4 * (4 * (r * t_max + 2) * U / r + 2 * t_max * U)
    # crossings at the grid's interior points, mid-interval and near each end of an interval
    t_c = np.array([0.1, 0.37, 1.125, 2.5, 4.999, 6.2501, 9.9])
    t_c = t_c[r * t_c < r * t_max - 1e-9]
    for tc in t_c:
        level = math.exp(-r * tc)
        exact = math.log(1.0 / level) / r
        got = level_crossing(t, f, level)
        assert abs(got - exact) <= tol, (tc, got - exact, tol)
        # the test can fail: interpolating f itself (not ln f) or taking the first recorded time
        # at or below the level both miss by far more than rounding (unless t_c is on the grid)
        i = int(np.flatnonzero(f <= level)[0])
        linear_f = _secant_crossing(t, f, i - 1, level)
        if not np.isclose(tc, t[i], rtol=0, atol=1e-6):
            assert abs(linear_f - exact) > 1e3 * tol and abs(t[i] - exact) > 1e3 * tol


def test_logistic_drop_within_the_grid_interpolation_error():
    """A plateau then a drop: f = 1 / (1 + exp(k (t - t0))) crosses the level L at
    t_c = t0 + ln(1/L - 1) / k.

    With g = ln f = -ln(1 + e^(k (t - t0))): g' = -k s and g'' = -k^2 s (1 - s), s = sigma(k (t - t0)).
    The chord l of g on the bracket [t_a, t_b] misses g at t_c by at most
    (t_c - t_a)(t_b - t_c) max|g''| / 2, and l's slope is g'(xi) for some xi in the bracket, so
    |t_interp - t_c| <= (t_c - t_a)(t_b - t_c) max_[t_a, t_b] k^2 s (1 - s) / (2 k s(t_a))
    (s increases with t, so |g'| >= k s(t_a) there). Rounding (1e-14 here) is added on top.
    The chord of either neighbouring interval, i.e. the bracket one grid index off, misses by
    more than this bound at every level tested: the test fails on an off-by-one bracket."""
    k, t0 = 2.0, 5.0
    t = np.linspace(0.0, 10.0, 51)  # h = 0.2
    f = 1.0 / (1.0 + np.exp(k * (t - t0)))
    g = np.log(f)
    sig = lambda x: 1.0 / (1.0 + np.exp(-x))  # noqa: E731
    for tc in (2.1, 3.1, 4.5, 5.3, 6.7, 8.1, 9.5):  # from the plateau's end to the tail
        level = 1.0 / (1.0 + math.exp(k * (tc - t0)))
        exact = t0 + math.log(1.0 / level - 1.0) / k
        b = int(np.searchsorted(t, exact))  # t[b - 1] < t_c < t[b]: the true bracket
        a = b - 1
        s_a, s_b = sig(k * (t[a] - t0)), sig(k * (t[b] - t0))
        curv = 0.25 if s_a <= 0.5 <= s_b else max(s_a * (1 - s_a), s_b * (1 - s_b))  # max s (1 - s)
        bound = (exact - t[a]) * (t[b] - exact) * k ** 2 * curv / (2 * k * s_a) + 1e-14
        got = level_crossing(t, f, level)
        assert abs(got - exact) <= bound, (tc, got - exact, bound)
        off_by_one = [_secant_crossing(t, g, j, math.log(level)) for j in (a - 1, a + 1)]
        assert all(abs(v - exact) > bound for v in off_by_one), (tc, [v - exact for v in off_by_one], bound)


def test_a_curve_that_never_reaches_the_level_gives_nan():
    """exp(-t) recorded to t = 5 never falls to 1e-3 (its last value is 6.7e-3): NaN, not the
    record's last time and not an extrapolation."""
    t = np.linspace(0.0, 5.0, 21)
    assert math.isnan(level_crossing(t, np.exp(-t), 1e-3))
    assert level_crossing(t, np.exp(-t), 7e-3) == pytest.approx(math.log(1 / 7e-3), rel=1e-12)  # just above: found


@pytest.mark.parametrize("level", [2.0, 1.0])
def test_a_curve_that_starts_at_or_below_the_level_gives_nan(level):
    """f(0) = 1 <= level: no crossing is recorded, NaN. Without the check the first index at or
    below the level is 0 and its bracket [t_-1, t_0] wraps to the record's end (f[-1], t[-1]),
    which gives a finite number: the test fails on that bug."""
    t = np.linspace(0.0, 5.0, 21)
    assert math.isnan(level_crossing(t, np.exp(-t), level))


@pytest.mark.parametrize("level", [0.0, -1e-3])
def test_a_level_at_or_below_zero_gives_nan(level):
    """level <= 0 has no logarithm: NaN, even where the curve records values at or below it (an
    excess loss minus its floor can dip below 0 by rounding). Without the check the recorded
    value <= 0 would be returned as a crossing time (t = 3 here): the test fails on that."""
    t = np.arange(6.0)
    f = np.array([1.0, 0.5, 0.25, -0.01, 0.0, 0.0])
    assert math.isnan(level_crossing(t, f, level))


def test_a_recorded_zero_gives_the_first_recorded_time_at_or_below_the_level():
    """A value recorded as 0 (an underflowed loss): ln 0 has no interpolation, and the crossing is
    reported at the first recorded time at or below the level, t[i] (an upper bound: it lies in
    (t[i-1], t[i]]). A level above the last positive value is interpolated as usual."""
    t = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    f = np.array([1.0, 0.5, 0.25, 0.0, 0.0])
    assert level_crossing(t, f, 0.1) == 3.0  # not t[2] = 2 (the chord's limit as f[3] -> 0+), not NaN
    assert level_crossing(t, f, 0.25 * 1e-300) == 3.0
    # 0.5 -> 0.25 halves per unit time: exactly log-linear, crossing 0.3 at 1 + log2(0.5 / 0.3)
    assert level_crossing(t, f, 0.3) == pytest.approx(1.0 + math.log2(0.5 / 0.3), rel=0, abs=1e-14)
