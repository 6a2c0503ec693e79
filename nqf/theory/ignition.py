"""Switch-on ("ignition") times: measured from trajectories and predicted by Theorem 8."""
from __future__ import annotations

import numpy as np

from nqf import validate


def ignition_times(t, z, *, rho: float = 0.5, saturation=None) -> np.ndarray:
    """First time each mode reaches the fraction ``rho`` of its saturation value.

    ``t`` has shape (T,), ``z`` shape (T, ...) with time first. ``saturation`` defaults to the
    last recorded value (train long enough for it to be reached). Between recorded points the
    logit ln(z / (sat - z)) is interpolated linearly in t: exact for the logistic solutions of
    Theorems 6-7 and second-order accurate for any smooth sigmoidal switch-on (ln z is used if a
    recorded point overshoots the saturation value). Modes that never cross, or start above the
    threshold, give NaN.
    """
    t = validate.time_grid("t", t)
    z = validate.array("z", z)
    if z.ndim == 0 or z.shape[0] != t.shape[0]:
        raise ValueError(f"z must have time first, one row per entry of t ({t.shape[0]}); got shape {z.shape}.")
    rho = validate.scalar("rho", rho, low=0.0, high=1.0, low_open=True, high_open=True)
    flat = z.reshape(z.shape[0], -1)
    if saturation is None:
        sat = flat[-1]
    else:
        # NaN or +inf: no level for that mode (nqf.theory.staircase's ignition_level of a mode that never
        # ignites), which gives NaN like a mode that never crosses
        sat = validate.array("saturation", saturation, finite=None)
        try:
            sat = np.broadcast_to(sat, z.shape[1:]).reshape(-1)
        except ValueError:
            raise ValueError(f"saturation must be a scalar or have the shape of one time slice of z "
                             f"{z.shape[1:]} (one level per mode); got shape {sat.shape}.") from None
    out = np.full(flat.shape[1], np.nan)
    for k in range(flat.shape[1]):
        level = rho * sat[k]
        if not np.isfinite(level) or level <= 0 or flat[0, k] >= level:
            continue
        above = np.nonzero(flat[:, k] >= level)[0]
        if above.size == 0:
            continue
        i = above[0]
        z_lo, z_hi = flat[i - 1, k], flat[i, k]
        if z_lo <= 0:
            out[k] = t[i]
            continue
        if z_hi < sat[k]:
            def g(v):
                return np.log(v) - np.log(sat[k] - v)
        else:
            g = np.log
        frac = (g(level) - g(z_lo)) / (g(z_hi) - g(z_lo))
        out[k] = t[i - 1] + frac * (t[i] - t[i - 1])
    return out.reshape(z.shape[1:])


def predicted_ignition_times(zeta, C_k, eps, *, c=1.0, a: float = 1.0, rho: float = 0.5) -> np.ndarray:
    """Theorem 8: t*_k for initial amplitudes z_k0 = eps * c_k.

        t*_k = (1/(a zeta_k)) [ ln(1/eps) - ln( C_k c_k / (zeta_k - C_k c_k eps) * (1-rho)/rho ) ]

    a = 1, zeta = r, C_k = C_kk for Theorem 6; a = 2, zeta = gamma, C_k = 4c for Theorem 7.
    With rho = 1/2 and Theorem 6 this is the exact half-saturation time of the logistic solution,
    (1/r_k) ln((r_k - C_kk eps)/(C_kk eps)). Modes that never switch on (zeta_k <= 0) give inf;
    modes already past the threshold at t = 0 give NaN. A mode with c_k = 0 starts at exactly 0, a
    fixed point, and never switches on either (inf); a growing mode (zeta_k > 0) needs C_k > 0.

    Domain: eps > 0 and finite (eps = 0 would be an init at exactly 0, which never switches on;
    eps >= 1 is allowed: the formula is the exact logistic time for any z_k0 below the threshold,
    and the fits pass eps = 1 with the amplitudes in ``c``); C_k >= 0 and c >= 0 (a Gram diagonal
    and amplitudes); a > 0; 0 < rho < 1; every array finite and of broadcastable shapes.
    """
    arrays = {name: validate.array(name, v) for name, v in (("zeta", zeta), ("C_k", C_k), ("c", c), ("eps", eps))}
    for name in ("C_k", "c"):
        validate.nonnegative(name, arrays[name])
    if arrays["eps"].size and not arrays["eps"].min() > 0:
        raise ValueError(f"eps must be > 0 (z_k0 = eps c_k is a positive initial amplitude); got {validate.describe(eps)}.")
    a = validate.positive("a", a, what=" (1 for Theorem 6, 2 for Theorem 7)")
    rho = validate.scalar("rho", rho, low=0.0, high=1.0, low_open=True, high_open=True)
    try:
        np.broadcast_shapes(*(v.shape for v in arrays.values()), a.shape)
        zeta, C_k, c, eps = np.broadcast_arrays(*arrays.values())
    except ValueError:
        arrays["a"] = a
        shapes = ", ".join(f"{name} {v.shape}" for name, v in arrays.items())
        raise ValueError(f"zeta, C_k, c, eps and a must have broadcastable shapes; got {shapes}.") from None
    out = np.full(zeta.shape, np.inf)
    grow = zeta > 0
    if np.any(grow & (C_k == 0) & (c > 0)):
        raise ValueError(f"C_k must be > 0 for a mode with zeta > 0 ({int(np.sum(grow & (C_k == 0) & (c > 0)))} "
                         "mode(s) have C_k = 0: such a mode grows without saturating, so it has no "
                         "half-saturation time; Theorem 6's C_kk = 0 forces r_k = 0).")
    grow &= c > 0  # a mode that starts at exactly 0 (c_k = 0) stays there: it never switches on (inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        head = zeta - C_k * c * eps
        ok = grow & (head > 0) & (C_k * c > 0)
        log_term = np.log(C_k * c) - np.log(np.where(ok, head, 1.0)) + np.log((1 - rho) / rho)
        val = (np.log(1.0 / eps) - log_term) / (a * zeta)
    out[ok] = val[ok]
    out[grow & ~ok] = np.nan
    out[ok & (val < 0)] = np.nan
    return out


def predicted_seed_scatter(zeta, d: int, *, a: float = 1.0) -> np.ndarray:
    """Std over seeds of ignition times for Gaussian init with d units (beyond the paper).

    With W0 entries N(0, sigma^2), each mode amplitude z_k0 = (P^T W0 W0^T P)_kk is sigma^2 times a
    chi-square with d degrees of freedom, whose logarithm has variance psi'(d/2) (trigamma). Since
    t*_k = (ln(1/z_k0) + const) / (a zeta_k) for small init, std(t*_k) = sqrt(psi'(d/2)) / (a zeta_k).
    Modes with zeta_k <= 0 never ignite and give inf.
    """
    from scipy.special import polygamma

    d = validate.integer("d (the number of units)", d, minimum=1)
    a = validate.positive("a", a)
    zeta = validate.array("zeta", zeta, nonempty=True)
    spread = float(np.sqrt(polygamma(1, d / 2.0)))
    with np.errstate(divide="ignore"):
        return np.where(zeta > 0, spread / (a * np.where(zeta > 0, zeta, 1.0)), np.inf)


def mode_ignition_times(t, M, basis=None, *, rho: float = 0.5, saturation=None) -> np.ndarray:
    """Ignition times measured from any trajectory of M = W W^T (shape (..., T, p, p), time axis -3).

    With a ``basis`` P (e.g. the shared eigenbasis of Assumption 1) the modes are
    z_k = (P^T M P)_kk; without one they are the eigenvalues of M(t) in decreasing order, which
    needs no structure at all (the k-th largest eigenvalue switches on at the k-th ignition).
    Leading axes (seeds) are kept: returns (..., K).
    """
    M = validate.array("M", M)
    if M.ndim < 3 or M.shape[-1] != M.shape[-2]:
        raise ValueError(f"M must have shape (..., T, p, p); got {M.shape}.")
    if basis is not None:
        P = validate.array("basis", basis, ndim=2)
        if P.shape[0] != M.shape[-1]:
            raise ValueError(f"basis must have p = {M.shape[-1]} rows (shape (p, K)); got {P.shape}.")
        z = np.einsum("pk,...pq,qk->...k", P, M, P)
    else:
        z = np.linalg.eigvalsh((M + np.swapaxes(M, -1, -2)) / 2)[..., ::-1]
    z = np.moveaxis(z, -2, 0)  # time first, as ignition_times expects
    return ignition_times(t, z, rho=rho, saturation=saturation)


def level_crossing(t, f, level: float) -> float:
    """First time a decreasing positive curve ``f`` falls to ``level``, with ln f interpolated
    linearly in t between recorded points; NaN if it never does (or starts below it)."""
    t, f = np.asarray(t, float), np.asarray(f, float)
    below = np.flatnonzero(f <= level)
    if level <= 0 or below.size == 0 or below[0] == 0:
        return float("nan")
    i = int(below[0])
    lo, hi = f[i - 1], f[i]
    if hi <= 0:
        return float(t[i])
    frac = (np.log(lo) - np.log(level)) / (np.log(lo) - np.log(hi))
    return float(t[i - 1] + frac * (t[i] - t[i - 1]))
