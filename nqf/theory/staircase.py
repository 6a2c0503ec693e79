"""The eps -> 0 limit of the Lotka-Volterra dynamics as a sequence of events (SCIENCE.md sec. 5).

With z_k(0) ~ eps^{-x_k(0)} and time in units of ln(1/eps), tau = t / ln(1/eps), the log-amplitudes
x_k = ln z_k / ln(1/eps) move piecewise linearly. Modes at x = 0 ("ignited", the set S) sit at the
stable equilibrium of the GLV restricted to S, which for C = (8/m) Lambda^T Lambda and
r = (8/m) Lambda^T y is the non-negative least-squares solution

    z*(S) = argmin_{z >= 0, supp z in S} (1/2) z^T C z - r^T z   (= argmin |Lambda z - y|^2).

Every other mode moves at dx_k/dtau = g_k = r_k - (C z*(S))_k: the transients between equilibria
take O(1) time, which is nothing on the tau scale. An event is the first x_k to reach 0; the mode
joins S, z* is recomputed, and a mode of S that the new equilibrium sets to zero while g_k < 0 is
suppressed: it leaves S and its x_k falls at rate g_k. Between events the loss sits on a plateau
L(z*) = L(0) - r^T z* / 8 (complementary slackness gives z*^T C z* = r^T z*).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nqf import validate


@dataclass
class Event:
    """Mode ``mode`` ignites (reaches x = 0) or is suppressed (leaves S) at rescaled time ``tau``."""

    tau: float
    mode: int
    kind: str


@dataclass
class Staircase:
    """Plateau i lasts from ``tau_start[i]`` to ``tau_start[i+1]`` (the last one forever).

    ``x_start[i]`` are the log-amplitudes when plateau i begins, ``rates[i]`` their slopes
    (0 for ignited modes), ``z[i]`` the equilibrium amplitudes and ``loss[i]`` the loss on it.
    For diagonal C these three arrays are None and ``diagonal`` = (r, C_kk, x0) instead: use
    :meth:`x`, :meth:`z_at` and :attr:`ignition_level`, which work for both.
    """

    tau_start: np.ndarray
    x_start: np.ndarray | None
    rates: np.ndarray | None
    z: np.ndarray | None
    loss: np.ndarray
    events: list[Event] = field(default_factory=list)
    diagonal: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def modes(self) -> int:
        return self.diagonal[0].size if self.diagonal is not None else self.x_start.shape[1]

    def _first(self, kind: str) -> np.ndarray:
        out = np.full(self.modes, np.inf)
        for ev in reversed(self.events):
            if ev.kind == kind:
                out[ev.mode] = ev.tau
        return out

    @property
    def ignition_tau(self) -> np.ndarray:
        """First tau at which each mode ignites (inf: never; 0: ignited from the start)."""
        return self._first("ignite")

    @property
    def suppression_tau(self) -> np.ndarray:
        """First tau at which each mode is suppressed (inf: never)."""
        return self._first("suppress")

    @property
    def order(self) -> np.ndarray:
        """Modes in the order of their first ignition."""
        tau = self.ignition_tau
        ignited = np.flatnonzero(np.isfinite(tau))
        return ignited[np.argsort(tau[ignited], kind="stable")]

    @property
    def suppressed(self) -> np.ndarray:
        """Modes that ignite and are later pushed back to zero."""
        return np.flatnonzero(np.isfinite(self.suppression_tau))

    @property
    def ignition_level(self) -> np.ndarray:
        """z*_k on the plateau that mode k's first ignition opens (NaN if it never ignites)."""
        out = np.full(self.modes, np.nan)
        tau = self.ignition_tau
        if self.diagonal is not None:
            r, c, _ = self.diagonal
            ok = np.isfinite(tau)
            out[ok] = r[ok] / c[ok]
            return out
        for k in np.flatnonzero(np.isfinite(tau)):
            i = int(np.searchsorted(self.tau_start, tau[k], side="right") - 1)
            out[k] = self.z[i, k]
        return out

    def _plateau(self, tau) -> np.ndarray:
        tau = np.asarray(tau, float)
        return np.clip(np.searchsorted(self.tau_start, tau, side="right") - 1, 0, None)

    def x(self, tau) -> np.ndarray:
        """Log-amplitudes x_k(tau), shape (len(tau), K)."""
        tau = np.atleast_1d(np.asarray(tau, float))
        if self.diagonal is not None:  # x_k = min(x0_k + r_k tau, 0) for rising modes
            r, _, x0 = self.diagonal
            with np.errstate(invalid="ignore"):
                x = x0 + np.multiply.outer(tau, r)
            return np.where(np.isneginf(x0), -np.inf, np.where(r > 0, np.minimum(x, 0.0), x))
        i = self._plateau(tau)
        with np.errstate(invalid="ignore"):
            x = self.x_start[i] + self.rates[i] * (tau - self.tau_start[i])[:, None]
        return np.where(np.isneginf(self.x_start[i]), -np.inf, x)

    def loss_at(self, tau) -> np.ndarray:
        """The limiting loss curve: plateau values, shape (len(tau),)."""
        return self.loss[self._plateau(np.atleast_1d(tau))]

    def z_at(self, tau) -> np.ndarray:
        """The limiting amplitudes (z* of the current plateau), shape (len(tau), K)."""
        tau = np.atleast_1d(np.asarray(tau, float))
        if self.diagonal is not None:
            on = self.ignition_tau[None, :] <= tau[:, None]
            return np.where(on, self.ignition_level[None, :], 0.0)
        return self.z[self._plateau(tau)]


class _Equilibrium:
    """z*(S) for the quadratic program min (1/2) z^T C z - r^T z over z >= 0, supp z in S."""

    def __init__(self, r: np.ndarray, C: np.ndarray):
        self.r = r
        self.diagonal = C.ndim == 1
        if self.diagonal:
            self.c = C
            return
        evals, evecs = np.linalg.eigh((C + C.T) / 2)
        if evals[0] < -1e-10 * max(evals[-1], 1e-300):
            raise ValueError("C must be positive semi-definite (a Gram matrix (8/m) Lambda^T Lambda).")
        keep = evals > 1e-12 * max(evals[-1], 1e-300)
        V, e = evecs[:, keep], evals[keep]
        self.U = np.sqrt(e)[:, None] * V.T  # C = U^T U
        self.b = (V.T @ r) / np.sqrt(e)     # U^T b = r when r lies in range(C)
        outside = r - V @ (V.T @ r)
        if np.linalg.norm(outside) > 1e-8 * max(np.linalg.norm(r), 1e-300):
            raise ValueError("r has a component outside the range of C, so the GLV has no finite "
                             "equilibrium; r and C must come from one Lambda (r = (8/m) Lambda^T y).")

    def __call__(self, S: np.ndarray) -> np.ndarray:
        z = np.zeros(self.r.size)
        if not np.any(S):
            return z
        if self.diagonal:
            ok = S & (self.c > 0)
            z[ok] = np.maximum(self.r[ok], 0.0) / self.c[ok]
            return z
        from scipy.optimize import nnls

        idx = np.flatnonzero(S)
        z[idx] = nnls(self.U[:, idx], self.b, maxiter=50 * idx.size + 100)[0]
        return z

    def rates(self, z: np.ndarray) -> np.ndarray:
        return self.r - (self.c * z if self.diagonal else self.U.T @ (self.U @ z))


def reducible_loss(r, C) -> float:
    """r^T C^+ r / 8: the part of L(0) that any z (of any sign) can remove, i.e. L(0) minus the
    least-squares floor min_z (1/n) |Lambda z - y|^2 (r = (8/n) Lambda^T y, C = (8/n) Lambda^T
    Lambda). It equals L(0) = (1/n) sum y^2 when y lies in the span of Lambda's columns."""
    r, C = np.asarray(r, float), np.asarray(C, float)
    if C.ndim == 1:
        live = C > 0
        return float(np.sum(r[live] ** 2 / C[live]) / 8.0)
    sol = np.linalg.lstsq(C, r, rcond=1e-12)[0]
    return float(max(r @ sol, 0.0) / 8.0)


def staircase(r, C, x0=-1.0, *, loss0: float | None = None, max_events: int | None = None) -> Staircase:
    """Solve the eps -> 0 event dynamics of dz/dt = z (r - C z) from x(0) = ``x0``.

    ``C`` is (K, K) PSD or the vector of a diagonal C. ``x0`` = ln z(0) / ln(1/eps) (scalar or
    per mode; -1 for z(0) = eps c_k in the limit, -inf for modes that start at exactly 0).
    ``loss0`` = L(z = 0) = (1/n) sum y^2 (nqf.theory.losses) makes ``loss`` the absolute training loss.
    Without it (r and C do not determine y) L(0) is taken as :func:`reducible_loss` (r, C), so
    ``loss`` is the loss above the least-squares floor: never negative, and the absolute loss
    when the targets are realisable (y in the span of Lambda, e.g. a teacher's).
    """
    r = validate.array("r", r, ndim=1, nonempty=True)
    K = r.size
    C = validate.interaction_matrix(C, K)
    loss0 = reducible_loss(r, C) if loss0 is None else validate.scalar("loss0", loss0)
    if max_events is not None:
        max_events = validate.integer("max_events", max_events, minimum=0)
    if C.ndim == 2 and not np.any(C - np.diag(np.diagonal(C))):
        C = np.diagonal(C).copy()
    x = validate.array("x0", x0, ndim=(0, 1), finite=False)
    if x.ndim == 1 and x.shape[0] != K:
        raise ValueError(f"x0 must be a scalar or have one entry per mode ({K}); got {x.shape[0]}.")
    if np.any(np.isposinf(x)):
        raise ValueError("x0 = ln z(0) / ln(1/eps) must be finite or -inf (a mode that starts at zero); got +inf.")
    x = np.broadcast_to(x, (K,)).copy()
    x = np.minimum(x, 0.0)
    if C.ndim == 1:
        return _diagonal_staircase(r, C, x, loss0)
    eq = _Equilibrium(r, C)
    tol = 1e-10 * max(float(np.max(np.abs(r), initial=0.0)), 1e-300)
    S = x == 0
    events = [Event(0.0, int(k), "ignite") for k in np.flatnonzero(S)]
    taus, xs, rates, zs = [], [], [], []
    tau = 0.0
    limit = max_events if max_events is not None else 10 * K + 10
    while True:
        z = eq(S)
        g = eq.rates(z)
        zero = S & (z <= 1e-12 * max(float(np.max(z, initial=0.0)), 1e-300))
        z[zero] = 0.0
        leave = zero & (g < -tol)
        events += [Event(tau, int(k), "suppress") for k in np.flatnonzero(leave)]
        S = S & ~leave
        slope = np.where(S | np.isneginf(x), 0.0, g)
        taus.append(tau)
        xs.append(x.copy())
        rates.append(slope)
        zs.append(z)
        rising = ~S & np.isfinite(x) & (g > tol)
        if not np.any(rising) or len(taus) > limit:
            break
        dt = np.full(K, np.inf)
        dt[rising] = -x[rising] / g[rising]
        step = float(np.min(dt))
        x = np.where(np.isfinite(x), x + slope * step, x)
        tau += step
        hit = rising & (dt <= step + 1e-12 * max(step, 1e-300) + 1e-14)
        x[hit] = 0.0
        S = S | hit
        events += [Event(tau, int(k), "ignite") for k in np.flatnonzero(hit)]
    zs = np.array(zs)
    loss = loss0 - zs @ r / 8.0
    return Staircase(np.array(taus), np.array(xs), np.array(rates), zs, loss, events)


def _diagonal_staircase(r: np.ndarray, c: np.ndarray, x0: np.ndarray, loss0: float) -> Staircase:
    """C diagonal (Theorem 6): mode k ignites at -x0_k / r_k if r_k > 0 and is never suppressed.

    Closed form, O(K log K), and no (plateau x mode) arrays: for 10^4 modes those would hold
    10^8 numbers, so x, z and the ignition levels are computed from (r, c, x0) on demand.
    """
    if np.any((c <= 0) & (r > 0)):
        raise ValueError("A mode with r_k > 0 and C_kk <= 0 grows without bound; r and C must "
                         "come from one Lambda (r = (8/m) Lambda^T y, C = (8/m) Lambda^T Lambda).")
    rising = (r > 0) & np.isfinite(x0)
    tau = np.full(r.size, np.inf)
    tau[rising] = -x0[rising] / r[rising]
    order = np.flatnonzero(rising)[np.argsort(tau[rising], kind="stable")]
    starts, first = np.unique(tau[order], return_index=True)
    drop = np.cumsum(r[order] ** 2 / (8 * c[order]))
    last = np.append(first[1:], order.size) - 1
    loss = np.concatenate([[loss0], loss0 - drop[last]]) if order.size else np.array([loss0])
    tau_start = np.concatenate([[0.0], starts])
    if starts.size and starts[0] == 0.0:  # modes ignited from the start: no empty first plateau
        tau_start, loss = tau_start[1:], loss[1:]
    events = [Event(float(tau[k]), int(k), "ignite") for k in order]
    return Staircase(tau_start, None, None, None, loss, events, diagonal=(r, c, x0))


def staircase_from_init(r, C, z0, eps: float, *, loss0: float | None = None) -> Staircase:
    """Staircase with x(0) = ln z0 / ln(1/eps): the finite-eps starting point, exact as eps -> 0.

    eps must lie in (0, 1): ln(1/eps) is the time unit and must be positive; ``loss0`` as in
    :func:`staircase`."""
    eps = validate.scalar("eps", eps, low=0.0, high=1.0, low_open=True, high_open=True)
    z0 = validate.array("z0", z0, ndim=(0, 1))
    validate.nonnegative("z0", z0)
    r = validate.array("r", r, ndim=1, nonempty=True)
    if z0.ndim == 1 and z0.shape[0] != r.shape[0]:
        raise ValueError(f"z0 must be a scalar or have one entry per mode ({r.shape[0]}); got {z0.shape[0]}.")
    with np.errstate(divide="ignore"):
        x0 = np.log(z0) / np.log(1.0 / eps)
    return staircase(r, C, x0, loss0=loss0)
