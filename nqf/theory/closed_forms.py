"""Exact solutions of Section 5 and App. B.7: Theorems 4, 5 (implicit integrals), 7 (Riccati), 16.

Theorems 4 and 5 reduce the flow to scalar equations xi' = F(xi) = sum_j a_j exp(-b_j xi) - c
with xi(0) = 0 and a_j b_j >= 0, so F never increases and xi runs monotonically to the root
xi* of F (or to infinity when there is none). Their "implicit integral" t = int_0^xi ds / F(s)
(Eq. 34, Eq. 36) is evaluated here by quadrature in the variable u = ln|xi* - xi|: with
F(xi) = F(xi) - F(xi*) written through expm1, the integrand dt/du = -1/D(u) is smooth and
bounded all the way to saturation, so t(xi) and its inverse xi(t) come out to rounding error
instead of losing digits to the logarithmic divergence at the root.
"""
from __future__ import annotations

import numpy as np

from nqf import validate
from nqf.theory.losses import flat_targets
from nqf.theory.lotka_volterra import _mode_vectors, logistic_solution


def _sample_modes(lam, y, z0) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """lam (m, K), y (m,) or (n, n_out) sample-major, z0 (K,) or a scalar: finite, matching,
    z0 >= 0 (Theorems 4 and 5); returns y flat and n = y.shape[0], the loss's 1/n (nqf.theory.losses)."""
    lam = validate.array("lam", lam, ndim=2, nonempty=True)
    y, n = flat_targets(y, lam.shape[0])
    z0 = validate.array("z0", z0, ndim=(0, 1))
    if z0.ndim == 1 and z0.shape[0] != lam.shape[1]:
        raise ValueError(f"z0 must be a scalar or have one entry per mode ({lam.shape[1]}); got {z0.shape[0]}.")
    validate.nonnegative("z0", z0, what=" (z_k are eigenvalues of M = W W^T)")
    return lam, y, z0, n

_GL_X, _GL_W = np.polynomial.legendre.leggauss(12)


def _log_phi(x: np.ndarray) -> np.ndarray:
    """ln(expm1(x)/x), overflow-free for any real x (= 0 at x = 0)."""
    x = np.asarray(x, float)
    out = np.zeros_like(x)
    small = np.abs(x) < 1e-6
    xs = x[small]
    out[small] = xs / 2 + xs * xs / 24
    pos, neg = (x >= 1e-6), (x <= -1e-6)
    xp = x[pos]
    out[pos] = xp + np.log(-np.expm1(-xp)) - np.log(xp)
    xn = x[neg]
    out[neg] = np.log(-np.expm1(xn)) - np.log(-xn)
    return out


def _logsumexp(v: np.ndarray, axis: int = -1) -> np.ndarray:
    top = np.max(v, axis=axis, keepdims=True)
    return np.squeeze(top, axis) + np.log(np.sum(np.exp(v - top), axis=axis))


class ScalarFlow:
    """xi' = sum_j a_j exp(-b_j xi) - c, xi(0) = 0, solved through its implicit integral.

    Requires a_j b_j >= 0 for every j (true for Theorems 4 and 5, where a_j b_j is a square
    times a non-negative amplitude). ``root`` is xi* (None when xi runs off to infinity).
    """

    def __init__(self, a, b, c: float):
        a, b = np.broadcast_arrays(validate.array("a", a), validate.array("b", b))
        c = validate.scalar("c", c)
        if np.any(a * b < 0):
            raise ValueError("ScalarFlow needs a_j * b_j >= 0 (a non-increasing F).")
        const = (b == 0) & (a != 0)
        c = float(c) - float(np.sum(a[const]))
        keep = (a != 0) & (b != 0)
        self.a, self.b, self.c = a[keep], b[keep], c
        F0 = float(np.sum(self.a)) - c
        self.sign = float(np.sign(F0))
        self.root: float | None = None
        self._edges = self._cum = None
        if self.sign == 0:
            return
        s = self.sign
        blows_up = np.any(s * self.b < 0)
        if blows_up or s * c > 0:
            hi = 1.0 / max(np.max(np.abs(self.b), initial=1.0), 1e-300)
            while s * self.F(s * hi) > 0:
                hi *= 2.0
            lo_hi = sorted((0.0, s * hi))
            from scipy.optimize import brentq

            self.root = brentq(self.F, *lo_hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)

    def F(self, xi) -> np.ndarray:
        """The right-hand side sum_j a_j exp(-b_j xi) - c."""
        xi = np.asarray(xi, float)
        with np.errstate(over="ignore"):
            return np.sum(self.a * np.exp(-np.multiply.outer(xi, self.b)), axis=-1) - self.c

    # --- quadrature machinery: t(v) = int_0^v h(v') dv' on panels, h > 0 -----------------
    def _h(self, v: np.ndarray) -> np.ndarray:
        if self.root is not None:  # v = ln|xi*| - ln|xi* - xi|; h = 1 / D
            u = np.log(abs(self.root)) - v
            x = self.sign * np.multiply.outer(np.exp(u), self.b)
            logw = np.log(self.a * self.b) - self.b * self.root
            return np.exp(-_logsumexp(logw + _log_phi(x)))
        # no root: v = |xi|, h = 1/|F(sign * v)|
        with np.errstate(over="ignore"):
            return 1.0 / np.abs(self.F(self.sign * np.asarray(v, float)))

    def _build(self, t_max: float) -> None:
        bmax = float(np.max(np.abs(self.b), initial=1.0))
        edges, v = [0.0], 0.0
        if self.root is not None:
            u0 = np.log(abs(self.root))
            while bmax * np.exp(u0 - v) > 1e-17:
                v += min(0.5, 0.5 / (bmax * np.exp(u0 - v)))
                edges.append(v)
        edges = np.asarray(edges)
        cum = np.zeros(1)
        if edges.size > 1:
            cum = np.concatenate([[0.0], np.cumsum(self._panel_integrals(edges[:-1], edges[1:]))])
        if self.root is None:
            # March in |xi|. With c != 0 the integrand tends to 1/|c|: stop once the exponentials
            # are below rounding (the tail is then linear). With c = 0 it grows exponentially:
            # cover t_max with panels of fixed width.
            width, e, total = 0.5 / bmax, [0.0], [0.0]
            while True:
                tail = np.sum(np.abs(self.a) * np.exp(-np.abs(self.b) * e[-1]))
                if (tail < 1e-17 * abs(self.c)) if self.c != 0 else (total[-1] >= t_max):
                    break
                lo = np.asarray([e[-1]])
                total.append(total[-1] + float(self._panel_integrals(lo, lo + width)[0]))
                e.append(e[-1] + width)
                if self.c != 0:
                    width *= 1.25
            edges, cum = np.asarray(e), np.asarray(total)
        self._edges, self._cum = edges, cum

    def _panel_integrals(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        nodes = (lo[:, None] + hi[:, None]) / 2 + np.multiply.outer((hi - lo) / 2, _GL_X)
        return (hi - lo) / 2 * (self._h(nodes.ravel()).reshape(nodes.shape) @ _GL_W)

    def _tail_rate(self) -> float:
        """dt/dv beyond the last panel (h is constant there to rounding)."""
        if self.root is not None:
            return float(np.exp(-_logsumexp(np.log(self.a * self.b) - self.b * self.root)))
        return 1.0 / abs(self.c) if self.c != 0 else np.inf

    def _v_of_t(self, t: np.ndarray) -> np.ndarray:
        edges, cum = self._edges, self._cum
        v = np.empty_like(t)
        beyond = t >= cum[-1]
        rate = self._tail_rate()
        v[beyond] = edges[-1] + (t[beyond] - cum[-1]) / rate
        inside = ~beyond
        if np.any(inside):
            ti = t[inside]
            i = np.clip(np.searchsorted(cum, ti, side="right") - 1, 0, edges.size - 2)
            lo, hi = edges[i], edges[i + 1]
            x = lo + (ti - cum[i]) / self._h(lo)
            for _ in range(30):
                x = np.clip(x, lo, hi)
                val = cum[i] + self._panel_integrals(lo, x) - ti
                step = val / self._h(x)
                x = x - step
                if np.all(np.abs(step) <= 1e-15 * np.maximum(np.abs(x), 1.0)):
                    break
            v[inside] = np.clip(x, lo, hi)
        return v

    def xi(self, t) -> np.ndarray:
        """xi(t) for times t >= 0 (any shape)."""
        t = np.asarray(t, float)
        if self.sign == 0 or t.size == 0:
            return np.zeros(t.shape)
        if self._edges is None or (self.root is None and self.c == 0 and self._cum[-1] < np.max(t)):
            self._build(float(np.max(t)))
        v = self._v_of_t(t.ravel())
        if self.root is not None:
            xi = self.root - self.sign * np.exp(np.log(abs(self.root)) - v)
        else:
            xi = self.sign * v
        return xi.reshape(t.shape)

    def time_of(self, xi) -> np.ndarray:
        """t(xi) = int_0^xi ds / F(s), the implicit integral itself (inf at or past the root)."""
        xi = np.atleast_1d(np.asarray(xi, float))
        if self.sign == 0:
            return np.where(xi == 0, 0.0, np.inf)
        if self.root is not None:
            gap = (self.root - xi) * self.sign
            with np.errstate(divide="ignore"):
                v = np.log(abs(self.root)) - np.log(np.where(gap > 0, gap, np.nan))
        else:
            v = self.sign * xi
        if self._edges is None:
            self._build(1.0)
        while self.root is None and np.nanmax(v, initial=0.0) > self._edges[-1] and self.c == 0:
            self._build(2 * self._cum[-1] + 1.0)
        edges, cum = self._edges, self._cum
        out = np.full(v.shape, np.inf)
        ok = np.isfinite(v) & (v >= 0)
        vi = v[ok]
        i = np.clip(np.searchsorted(edges, vi, side="right") - 1, 0, max(edges.size - 2, 0))
        res = np.where(vi >= edges[-1], cum[-1] + (vi - edges[-1]) * self._tail_rate(), 0.0)
        inner = vi < edges[-1]
        if np.any(inner):
            res[inner] = cum[i[inner]] + self._panel_integrals(edges[i[inner]], vi[inner])
        out[ok] = res
        return out


def theorem4(lam, cmu, y, z0, t) -> np.ndarray:
    """Theorem 4 (proportional samples A_mu = c_mu A, A = P diag(lam) P^T): z_j(t), shape (T, p).

    z_j(t) = z_j(0) exp(-2 lam_j xi(t)) with xi from the implicit integral Eq. 34,
    alpha = (4/n) sum c_mu^2, beta = (4/n) sum c_mu y_mu; ``cmu`` has one entry per data matrix,
    ``y`` is (m,) or (n, n_out) sample-major, n = y.shape[0] (nqf.theory.losses).
    """
    lam = validate.array("lam", lam, ndim=1, nonempty=True)
    cmu = validate.array("cmu", cmu, ndim=1, nonempty=True)
    y, m = flat_targets(y, cmu.shape[0])
    z0 = validate.array("z0", z0, ndim=(0, 1))
    if z0.ndim == 1 and z0.shape[0] != lam.shape[0]:
        raise ValueError(f"z0 must be a scalar or have one entry per mode ({lam.shape[0]}); got {z0.shape[0]}.")
    validate.nonnegative("z0", z0)
    z0 = np.broadcast_to(z0, lam.shape)
    t = validate.time_grid("t", t, increasing=False, nonempty=False)
    alpha, beta = 4.0 / m * np.sum(cmu ** 2), 4.0 / m * np.sum(cmu * y)
    flow = ScalarFlow(alpha * lam * z0, 2 * lam, beta)
    xi = flow.xi(np.asarray(t, float))
    return _amplitudes(z0, 2 * lam, xi)


def _amplitudes(z0: np.ndarray, b: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """z0 exp(-b xi) for every time (rows) and mode (columns); z0 = 0 stays 0."""
    with np.errstate(divide="ignore", over="ignore"):
        logz = np.log(np.where(z0 > 0, z0, 1.0)) - np.multiply.outer(xi, b)
        return np.where(z0 > 0, np.exp(logz), 0.0)


def theorem5_flows(lam, y, z0, n: int | None = None) -> tuple[list[ScalarFlow], np.ndarray]:
    """One :class:`ScalarFlow` per data matrix (Eq. 36) and the row owning each mode (-1: none).

    Under Theorem 5 each mode k has a non-zero eigenvalue in at most one row; the owner is
    the row with the largest |lambda_mu,k| (exact when the rows are orthogonal). ``n`` is the
    number of samples of the loss (default: one per row; vector outputs: see nqf.theory.losses).
    """
    lam, y = np.asarray(lam, float), np.asarray(y, float).reshape(-1)
    rows, K = lam.shape
    m = rows if n is None else int(n)
    z0 = np.broadcast_to(np.asarray(z0, float), (K,))
    owner = np.where(np.any(lam != 0, axis=0), np.argmax(np.abs(lam), axis=0), -1)
    flows = []
    for mu in range(rows):
        ks = owner == mu
        flows.append(ScalarFlow(lam[mu, ks] * z0[ks], 8.0 / m * lam[mu, ks], y[mu]))
    return flows, owner


def theorem5(lam, y, z0, t) -> np.ndarray:
    """Theorem 5 (orthogonal samples): z_k(t) = z_k(0) exp(-(8/n) lam_mu,k xi_mu(t)), (T, K);
    ``y`` (m,) or (n, n_out) sample-major, n = y.shape[0] (nqf.theory.losses)."""
    lam, y, z0, m = _sample_modes(lam, y, z0)
    K = lam.shape[1]
    z0 = np.broadcast_to(z0, (K,))
    t = validate.time_grid("t", t, increasing=False, nonempty=False)
    flows, owner = theorem5_flows(lam, y, z0, m)
    z = np.broadcast_to(z0, (t.size, K)).copy()
    for mu, flow in enumerate(flows):
        ks = owner == mu
        if np.any(ks):
            z[:, ks] = _amplitudes(z0[ks], 8.0 / m * lam[mu, ks], flow.xi(t))
    return z


def theorem5_ignition_times(lam, y, z0, rho: float = 0.5) -> np.ndarray:
    """Time at which sample mu's output sum_k lam_mu,k z_k reaches rho * y_mu (exact, Eq. 36).

    NaN for samples whose output never reaches that level. One time per data matrix (row of
    ``lam``); ``y`` (m,) or (n, n_out) sample-major (nqf.theory.losses).
    """
    lam, y, z0, n = _sample_modes(lam, y, z0)
    rho = validate.scalar("rho", rho, low=0.0, high=1.0, low_open=True, high_open=True)
    flows, _ = theorem5_flows(lam, y, z0, n)
    from scipy.optimize import brentq

    out = np.full(len(flows), np.nan)
    for mu, flow in enumerate(flows):
        target = -(1 - rho) * y[mu]  # residual F(xi) = f_mu - y_mu at the crossing
        if flow.root is None or flow.sign == 0 or np.sign(target - flow.F(0.0)) != -flow.sign:
            continue
        xi_h = brentq(lambda v, fl=flow: fl.F(v) - target, *sorted((0.0, flow.root)),
                      xtol=1e-300, rtol=4 * np.finfo(float).eps)
        out[mu] = float(flow.time_of(xi_h)[0])
    return out


def theorem7(Y, c: float, t, *, M0=None, W0=None) -> np.ndarray:
    """Theorem 7 (isotropic second moment, Eq. 41): M(t), shape (T, p, p).

    M(t) = e^{Yt} M0 [I + 8c Phi(t) M0]^{-1} e^{Yt}, Phi = int_0^t e^{2Ys} ds, evaluated in the
    eigenbasis of Y as F B^{-1} F^T with F = e^{Yt} G, B = I + 8c F^T Psi F (Cholesky),
    G G^T = M0 and Psi = e^{-Yt} Phi e^{-Yt} = (1 - e^{-2 gamma t}) / (2 gamma) bounded. The
    flow is a semigroup, so long times are reached by composing the exact map over segments
    with e^{2 max|gamma| dt} <= e^4: B then stays well conditioned (a single step over a long
    time would make it singular to rounding once a mode saturates), nothing overflows, and the
    factor G is carried along (never re-factorised), so tiny modes keep their relative accuracy.
    """
    Y = validate.square("Y", Y)
    if Y.size == 0:
        raise ValueError("Y (the target moment, p x p) must not be empty; got shape (0, 0).")
    validate.symmetric("Y", Y, context=" (the target moment (4/m) sum y_mu A_mu)")
    c = validate.scalar("c", c, low=0.0)
    validate.initial_state(M0, W0, Y.shape[0])  # checks only: the factor below keeps the given W0 exactly
    gam, Q = np.linalg.eigh((Y + Y.T) / 2)
    if W0 is not None:
        G = Q.T @ np.asarray(W0, float)
    else:
        ev, V = np.linalg.eigh(Q.T @ np.asarray(M0, float) @ Q)
        G = V * np.sqrt(np.clip(ev, 0.0, None))
    t = validate.time_grid("t", t, increasing=False, nonempty=False)
    seg = 2.0 / max(float(np.max(np.abs(gam))), 1e-300)

    from scipy.linalg import cho_factor, solve_triangular

    def advance(G, dt):
        if dt == 0:
            return G
        with np.errstate(divide="ignore", invalid="ignore"):
            psi = np.where(gam != 0, -np.expm1(-2 * gam * dt) / (2 * np.where(gam != 0, gam, 1.0)), dt)
        F = np.exp(gam * dt)[:, None] * G
        B = np.eye(G.shape[1]) + 8 * c * F.T @ (psi[:, None] * F)
        L, _ = cho_factor(B, lower=True)
        return solve_triangular(np.tril(L), F.T, lower=True).T

    order = np.argsort(t)
    out = np.empty((t.size, Y.shape[0], Y.shape[0]))
    base_t, base_G = 0.0, G
    for j in order:
        while t[j] - base_t > seg:
            base_G, base_t = advance(base_G, seg), base_t + seg
        X = Q @ advance(base_G, t[j] - base_t)
        out[j] = X @ X.T
    return out


def _named_logistic(rate, cap, start, t, scale_rate: float, scale_cap: float) -> np.ndarray:
    """logistic_solution(scale_rate * rate, scale_cap * cap, start, t) with each argument checked
    under its own name ((name, value) pairs: finite, one length, cap and start non-negative)."""
    r, c, z0 = _mode_vectors(rate, cap, start)
    if c.size and c.min() < -1e-12 * float(np.max(np.abs(c))):
        raise ValueError(f"{cap[0]} must be non-negative (a negative {cap[0]} makes the amplitude negative or "
                         f"blow up); got smallest {cap[0]} = {c.min():.3g}.")
    validate.nonnegative(start[0], z0, what=" (an initial amplitude)")
    return logistic_solution(scale_rate * r, scale_cap * c, z0, t)


def theorem7_modes(gamma, c: float, z0, t) -> np.ndarray:
    """Eq. 42: eigenvalues of M(t) when M(0) and Y commute, logistic with rate 2 gamma_k."""
    c = validate.scalar("c", c, low=0.0)
    return _named_logistic(("gamma", gamma), ("c", c), ("z0", z0), t, 2.0, 8.0)


def theorem16(gamma, kappa, z0, t) -> np.ndarray:
    """Theorem 16 (Eq. 256-257): z_a' = 2 z_a (gamma_a - kappa_a z_a), shape (T, r)."""
    return _named_logistic(("gamma", gamma), ("kappa", kappa), ("z0", z0), t, 2.0, 2.0)


def corollary4(tau, c, rho0, t) -> np.ndarray:
    """Corollary 4 (Eq. 271-272): rho_a' = 4 rho_a (tau_a - c_a rho_a), the Saxe solution."""
    return _named_logistic(("tau", tau), ("c", c), ("rho0", rho0), t, 4.0, 4.0)


def corollary4_modes(S, y) -> dict:
    """Singular modes of T = (1/n) sum y_mu S_mu and the residual of Eq. 268.

    ``S`` is (m, n_out, n_in), one block per data matrix; ``y`` is (m,) or (n, outputs) in the
    same sample-major order, n = y.shape[0] the samples of the loss (nqf.theory.losses).
    Returns tau (singular values), u (n_out, r), v (n_in, r), c_a = <u_a v_a^T, C(u_a v_a^T)> and
    ``residual`` = max_a |C(u_a v_a^T) - c_a u_a v_a^T| / |C(u_a v_a^T)| with
    C(Q) = (1/n) sum <S_mu, Q> S_mu (zero when every singular mode is an eigenmatrix of C).
    """
    S = validate.array("S", S, ndim=3, nonempty=True)
    y, m = flat_targets(y, S.shape[0])
    T = np.einsum("m,mij->ij", y, S) / m
    u, tau, vt = np.linalg.svd(T, full_matrices=False)
    Qa = np.einsum("ia,aj->aij", u, vt)
    CQ = np.einsum("mij,aij,mkl->akl", S, Qa, S) / m
    c = np.einsum("aij,aij->a", Qa, CQ)
    norms = np.maximum(np.linalg.norm(CQ, axis=(1, 2)), 1e-300)
    residual = float(np.max(np.linalg.norm(CQ - c[:, None, None] * Qa, axis=(1, 2)) / norms))
    return {"tau": tau, "u": u, "v": vt.T, "c": c, "residual": residual}


def corollary4_init(u, v, rho0, d: int, seed: int = 0) -> np.ndarray:
    """Balanced, aligned W0 = [U0; V0] (Eq. 269) with random orthonormal directions r_a in R^d."""
    rho0 = validate.array("rho0", rho0, ndim=1, nonempty=True)
    validate.nonnegative("rho0", rho0, what=" (singular-mode strengths rho_a(0))")
    u = validate.array("u", u, ndim=2, shape=(None, rho0.size))
    v = validate.array("v", v, ndim=2, shape=(None, rho0.size))
    d = validate.integer("d", d, minimum=1)
    seed = validate.seed("seed", seed)
    if d < rho0.size:
        raise ValueError(f"Balanced aligned init needs d >= {rho0.size} units for orthonormal r_a; got {d}.")
    R, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, rho0.size)))
    root = np.sqrt(rho0)
    return np.vstack([(u * root) @ R.T, (v * root) @ R.T])
