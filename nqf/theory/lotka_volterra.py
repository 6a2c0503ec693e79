"""Reduction of a quadratic model to the generalized Lotka-Volterra equation, and its solutions.

If the data matrices share an eigenbasis P (Assumption 1), A_mu = P Lambda_mu P^T, then
z_k = (P^T M P)_kk obeys (Eq. 32)

    dz_k/dt = z_k (r_k - sum_j C_kj z_j),   r = (8/m) Lambda^T y,   C = (8/m) Lambda^T Lambda,

with Lambda the (m, K) matrix of eigenvalues lambda_{mu,k}. The assumption is checked, never
assumed: the reduction reports the commutator residual of the data matrices.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from nqf import validate
from nqf.theory.losses import flat_targets, sample_count

if TYPE_CHECKING:
    from nqf.theory.forms import StructureForm


def lv_coefficients(lam, y) -> tuple[np.ndarray, np.ndarray]:
    """Growth rates r = (8/n) Lambda^T y and interaction matrix C = (8/n) Lambda^T Lambda.

    ``lam`` is (m, K), one row per data matrix; ``y`` is (m,) or, for vector outputs, (n, n_out)
    with n * n_out = m in the rows' sample-major order; n = y.shape[0] is the number of samples
    of the loss (1/n) sum (f - y)^2 (nqf.theory.losses), the same for every entry point.
    """
    lam = validate.array("lam", lam, ndim=2)
    if lam.shape[0] == 0 or lam.shape[1] == 0:
        raise ValueError(f"lam must be (m, K) with at least one sample and one mode; got shape {lam.shape}.")
    y, n = flat_targets(y, lam.shape[0])
    return 8.0 / n * lam.T @ y, 8.0 / n * lam.T @ lam


def mode_order(basis: np.ndarray, r: np.ndarray, diagonal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(permutation, signs) that put the modes of a computed eigenbasis in the reported order.

    Diagonal data (every A_mu diagonal in the user's coordinates): mode k is weight k, basis = I,
    nothing moves. Otherwise the modes are sorted by decreasing growth rate r_k (ties keep the
    eigensolver's order): from a common initial scale z_k(0) = eps the strongest mode ignites
    first (Theorem 8, t*_k ~ ln(1/eps) / r_k), so mode 0 is the first to be learned and modes
    with r_k <= 0, which never ignite, come last. Each direction's sign is fixed so that its
    largest-magnitude entry is positive (z_k and r_k do not depend on it).
    """
    K = r.shape[0]
    if diagonal:
        return np.arange(K), np.ones(K)
    order = np.argsort(-r, kind="stable")
    cols = basis[:, order]
    signs = np.sign(cols[np.argmax(np.abs(cols), axis=0), np.arange(K)])
    return order, np.where(signs == 0, 1.0, signs)


def shared_eigenbasis(form: StructureForm, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict]:
    """A common eigenbasis P of the A_mu, their eigenvalues Lambda (m, p), and residuals.

    For generic dense matrices, P diagonalises a random combination S = sum_mu g_mu A_mu; if
    the A_mu commute, every A_mu is diagonal in that basis (degenerate eigenspaces of S are
    eigenspaces of every A_mu with probability one). Returned residuals:
    ``commutator`` = max_mu |[A_mu, S]|_F / (|A_mu|_F |S|_F) and ``off_diagonal`` =
    max_mu |offdiag(P^T A_mu P)|_F / |A_mu|_F; both vanish (to rounding) exactly under Assumption 1.
    """
    # torch is imported where needed: the theory and fit jobs use this module without it
    import torch

    from nqf.theory.forms import DiagonalForm, StructureForm

    if not isinstance(form, StructureForm):
        raise TypeError(f"form must be a StructureForm (DenseForm, DiagonalForm, ...); got a {type(form).__name__}.")

    if isinstance(form, DiagonalForm):
        lam = form.diag.detach().cpu().numpy().astype(float)
        return np.eye(form.p), lam, {"commutator": 0.0, "off_diagonal": 0.0}
    A = form.dense().detach().cpu().to(torch.float64).numpy()
    g = np.random.default_rng(seed).standard_normal(A.shape[0])
    S = np.einsum("m,mpq->pq", g, A)
    norms = np.linalg.norm(A, axis=(1, 2))
    norms = np.where(norms > 0, norms, 1.0)
    comm = np.einsum("mpq,qr->mpr", A, S) - np.einsum("pq,mqr->mpr", S, A)
    s_norm = max(np.linalg.norm(S), np.finfo(float).tiny)
    commutator = float(np.max(np.linalg.norm(comm, axis=(1, 2)) / (norms * s_norm)))
    _, P = np.linalg.eigh(S)
    rotated = np.einsum("pk,mpq,ql->mkl", P, A, P)
    lam = np.einsum("mkk->mk", rotated)
    off = rotated - np.einsum("mk,kl->mkl", lam, np.eye(P.shape[1]))
    off_diagonal = float(np.max(np.linalg.norm(off, axis=(1, 2)) / norms))
    return P, lam, {"commutator": commutator, "off_diagonal": off_diagonal}


def eigenbasis(form: StructureForm, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict, bool]:
    """:func:`shared_eigenbasis`, with data that are diagonal in the user's coordinates (a
    DiagonalForm, or dense matrices without off-diagonal entries) kept in those coordinates
    (P = I); the last entry says whether they were."""
    import torch

    from nqf.theory.forms import DiagonalForm

    if not isinstance(form, DiagonalForm) and form.m * form.p ** 2 <= 2 ** 26:
        A = form.dense()
        if not bool(torch.any(A - torch.diag_embed(torch.diagonal(A, dim1=1, dim2=2)))):
            form = DiagonalForm(torch.diagonal(A, dim1=1, dim2=2).detach().cpu().clone())
    P, lam, res = shared_eigenbasis(form, seed)
    return P, lam, res, isinstance(form, DiagonalForm)


@dataclass
class LotkaVolterra:
    """The GLV reduction of a quadratic model on data (A_mu, y_mu).

    Mode k: its direction in parameter space is the unit vector ``basis[:, k]`` (z_k =
    basis[:, k]^T M basis[:, k]; A_mu basis[:, k] = lam[mu, k] basis[:, k]), its data direction
    is the column ``lam[:, k]`` (its eigenvalue in every data matrix). :meth:`from_data` orders
    the modes by decreasing r_k, the ignition order from a common initial scale (diagonal data
    keep the coordinate order, basis = I; see :func:`mode_order`). ``samples`` is n of the loss
    (1/n) |Lambda z - y|^2 (nqf.theory.losses); None: one per row of ``lam``.
    """

    r: np.ndarray
    C: np.ndarray
    lam: np.ndarray
    y: np.ndarray
    basis: np.ndarray
    residuals: dict = field(default_factory=dict)
    samples: int | None = None

    def __post_init__(self):
        """Shapes agree (K modes, m samples, p weights) and C is what the reduction can produce:
        a finite symmetric positive semi-definite Gram matrix (8/m) Lambda^T Lambda. An indefinite
        C has no Assumption-1 data behind it and its GLV can blow up in finite time."""
        self.r = validate.array("r", self.r, ndim=1, nonempty=True)
        K = self.r.shape[0]
        self.C = validate.square("C", self.C, K)
        validate.symmetric_psd("C", self.C, context=" (a Gram matrix (8/m) Lambda^T Lambda)")
        self.lam = validate.array("lam", self.lam, ndim=2)
        if self.lam.shape[1] != K:
            raise ValueError(f"lam must have one column per mode (K = {K}); got shape {self.lam.shape}.")
        y, n = flat_targets(self.y, self.lam.shape[0])
        self.y = y
        self.samples = n if self.samples is None else validate.integer("samples", self.samples, minimum=1)
        self.basis = validate.array("basis", self.basis, ndim=2)
        if self.basis.shape[1] != K:
            raise ValueError(f"basis must have one column per mode (K = {K}); got shape {self.basis.shape}.")

    @classmethod
    def from_data(cls, form: StructureForm, y, seed: int = 0) -> "LotkaVolterra":
        """Reduce data matrices ``form`` with targets ``y`` ((m,) or (n, n_out), nqf.theory.losses); checks
        Assumption 1 (see residuals). Modes come ordered by decreasing r_k (diagonal data: by
        coordinate), each with its direction ``basis[:, k]``, see the class docstring."""
        n = sample_count(y)
        y = validate.targets(form, y)
        P, lam, residuals, diagonal = eigenbasis(form, seed)
        r, C = lv_coefficients(lam, y.reshape(n, -1))
        order, signs = mode_order(P, r, diagonal)
        return cls(r=r[order], C=C[np.ix_(order, order)], lam=lam[:, order], y=y,
                   basis=P[:, order] * signs, residuals=residuals, samples=n)

    @property
    def modes(self) -> int:
        return self.r.shape[0]

    @property
    def is_diagonal(self) -> bool:
        """True when C is diagonal (orthogonal features, Theorem 6), to rounding."""
        off = self.C - np.diag(np.diag(self.C))
        return bool(np.max(np.abs(off), initial=0.0) <= 1e-12 * max(np.max(np.abs(self.C)), 1e-300))

    def modes_of(self, M) -> np.ndarray:
        """z_k = (P^T M P)_kk for M of shape (..., p, p)."""
        M = validate.matrices("M", M, self.basis.shape[0])
        return np.einsum("pk,...pq,qk->...k", self.basis, M, self.basis)

    def loss(self, z) -> np.ndarray:
        """Training loss (1/n) |Lambda z - y|^2 of mode amplitudes z (..., K) (off-diagonals
        slaved), n = ``samples`` (nqf.theory.losses)."""
        z = validate.array("z", z, finite=None)
        if z.ndim < 1 or z.shape[-1] != self.modes:
            raise ValueError(f"z must have shape (..., {self.modes}): one amplitude per mode, no broadcasting; "
                             f"got {z.shape}.")
        return np.sum((z @ self.lam.T - self.y) ** 2, axis=-1) / self.samples

    def integrate(self, z0, t, **kwargs) -> np.ndarray:
        """Numerical GLV solution z(t), shape (len(t), K); see :func:`glv`."""
        return glv(self.r, self.C, z0, t, **kwargs)

    def closed_form(self, z0, t) -> np.ndarray:
        """Theorem 6 (orthogonal features, C diagonal); raises if C is not diagonal."""
        if not self.is_diagonal:
            raise ValueError("Theorem 6 needs a diagonal C (orthogonal features); this C is not "
                             "diagonal, so integrate the coupled GLV with .integrate instead.")
        return logistic_solution(self.r, np.diag(self.C), z0, t)


def logistic_solution(r, c, z0, t) -> np.ndarray:
    """Theorem 6: z_k(t) = r_k z_k0 / (c_k z_k0 + (r_k - c_k z_k0) exp(-r_k t)), shape (T, K).

    Evaluated in logarithms so that tiny z0 (eps down to 1e-300) and long times neither
    underflow nor overflow; r_k = 0 gives z_k0 / (1 + c_k z_k0 t), r_k < 0 decays to 0.

    Domain: r, c, z0 finite scalars or vectors of one length K (no other broadcasting); c_k >= 0
    (C_kk of a Gram matrix; -1e-12 max|c| is accepted as rounding of 0); z0 >= 0; t a 1-D array
    of finite times >= 0 (any order).
    """
    r, c, z0 = _mode_vectors(("r", r), ("c", c), ("z0", z0))
    if c.size and c.min() < -1e-12 * float(np.max(np.abs(c))):
        raise ValueError(f"c must be non-negative (c_k = C_kk of a Gram matrix; a negative c_k makes z "
                         f"negative or blow up); got smallest c_k = {c.min():.3g}.")
    validate.nonnegative("z0", z0, what=" (z_k are eigenvalues of M = W W^T)")
    return _logistic(r, c, z0, validate.time_grid("t", t, increasing=False, nonempty=False))


def _mode_vectors(*named) -> list[np.ndarray]:
    """Finite per-mode arrays: each a scalar or 1-D of one common length K (broadcast to K)."""
    arrays = [(name, validate.array(name, value, ndim=(0, 1))) for name, value in named]
    lengths = {a.shape[0] for _, a in arrays if a.ndim == 1}
    if len(lengths) > 1:
        parts = ", ".join(f"{name} has {a.shape[0]}" for name, a in arrays if a.ndim == 1)
        names = ", ".join(name for name, _ in arrays)
        raise ValueError(f"{names} must be scalars or 1-D with one entry per mode; {parts}.")
    K = lengths.pop() if lengths else 1
    if not lengths and all(a.ndim == 0 for _, a in arrays):
        return [a for _, a in arrays]
    return [np.broadcast_to(a, (K,)) for _, a in arrays]


def _logistic(r, c, z0, t) -> np.ndarray:
    """logistic_solution without the checks (callers have validated the arguments)."""
    r, c = np.broadcast_arrays(r, c)
    z0 = np.broadcast_to(z0, r.shape)
    t = np.asarray(t, float)[:, None]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        # 1/z(t) = c/r + (1/z0 - c/r) exp(-r t)  (r != 0); exact and sign-safe in this form.
        rt = r * t
        inv = np.where(r != 0, c / np.where(r != 0, r, 1.0) * -np.expm1(-rt) + np.exp(-rt) / z0,
                       1.0 / z0 + c * t)
        z = 1.0 / inv
    z = np.where(z0 == 0, 0.0, z)
    return z


GLV_RTOL, GLV_ATOL = 1e-10, 1e-12  # glv's local error control on ln z (relative error of z)
_LOG_CAP = 300.0  # ln z cap inside the right-hand side (z ~ 1e130, far above any r_k / C_kk)
_CHUNK = 64  # decoupled modes integrated together (sorted by rate, so their time scales match)


def glv(r, C, z0, t, *, rtol: float = GLV_RTOL, atol: float = GLV_ATOL, method: str | None = None) -> np.ndarray:
    """Integrate dz/dt = z (r - C z) for any C (dense (K, K) or its diagonal (K,)).

    The state is u = ln z, so z0 = 1e-12 (or 1e-300) neither underflows nor stalls the step size;
    ``rtol``/``atol`` therefore bound the *relative* error of z. Modes with z0 = 0 stay at 0.
    Returns z at the times ``t`` (increasing, starting at or after 0), shape (len(t), K).

    ``method``:

    * ``None`` (default): a diagonal C (a vector, or a matrix with zero off-diagonal) decouples the
      modes and each is the logistic of Theorem 6, evaluated exactly in logarithms (``'exact'``);
      any other C is integrated with LSODA (Adams on plateaus, BDF with the analytic Jacobian
      through switch-ons: 10-50x faster than Radau here, which factorises a complex K x K matrix at
      every step-size change).
    * ``'exact'``: Theorem 6's integral (diagonal C only).
    * a ``scipy.integrate.solve_ivp`` method (``'Radau'``, ``'LSODA'``, ``'BDF'``): numerical
      integration, e.g. as an independent check of the exact solution. Each connected component of
      C's sparsity graph integrates on its own (decoupled modes in chunks of similar growth rate),
      since one step size for all modes would have to resolve every component's switch-ons.
    """
    r = validate.array("r", r, ndim=1, nonempty=True)
    K = r.shape[0]
    C = validate.interaction_matrix(C, K, context=" (a Gram matrix (8/m) Lambda^T Lambda; an indefinite C "
                                   "has no quadratic model behind it and can blow up in finite time)")
    z0 = validate.array("z0", z0, ndim=(0, 1))
    if z0.ndim == 1 and z0.shape[0] != K:
        raise ValueError(f"z0 must be a scalar or have one entry per mode ({K}); got {z0.shape[0]}.")
    z0 = np.broadcast_to(z0, r.shape).copy()
    validate.nonnegative("z0", z0, what=" (z_k are eigenvalues of M = W W^T)")
    t = validate.time_grid("t", t)
    rtol = validate.scalar("rtol", rtol, low=0.0, low_open=True)
    atol = validate.scalar("atol", atol, low=0.0, low_open=True)
    if method not in (None, "exact", "Radau", "LSODA", "BDF", "RK45", "RK23", "DOP853"):
        raise ValueError(f"method must be None, 'exact' or a solve_ivp method ('Radau', 'LSODA', 'BDF', "
                         f"'RK45', 'RK23', 'DOP853'); got {validate.describe(method)}.")
    if C.ndim == 2 and not np.any(C - np.diag(np.diagonal(C))):
        C = np.diagonal(C).copy()
    diagonal = C.ndim == 1
    method = method or ("exact" if diagonal else "LSODA")
    if method == "exact":
        if not diagonal:
            raise ValueError("method='exact' needs a diagonal C (Theorem 6); use 'LSODA' or 'Radau'.")
        return _logistic(r, C, z0, t)
    out = np.zeros((t.size, r.size))
    live = np.flatnonzero(z0 > 0)
    if diagonal:
        labels = np.arange(r.size)
    else:
        import scipy.sparse as sp
        from scipy.sparse.csgraph import connected_components

        _, labels = connected_components(sp.csr_matrix(C != 0), directed=False)
    sizes = np.bincount(labels)
    single = live[sizes[labels[live]] == 1]
    single = single[np.argsort(r[single], kind="stable")]
    blocks = [single[i:i + _CHUNK] for i in range(0, single.size, _CHUNK)]
    for comp in np.unique(labels[live]):
        if sizes[comp] > 1:
            blocks.append(live[labels[live] == comp])
    for idx in blocks:
        Cb = C[idx] if diagonal else C[np.ix_(idx, idx)]
        out[:, idx] = _integrate_block(r[idx], Cb, z0[idx], t, method, rtol, atol)
    return out


def _integrate_block(r, C, z0, t, method, rtol, atol) -> np.ndarray:
    """One solve_ivp run of u' = r - C exp(u) for modes that all start above 0."""
    import scipy.sparse as sp
    from scipy.integrate import solve_ivp
    if C.ndim == 2 and not np.any(C - np.diag(np.diagonal(C))):
        C = np.diagonal(C).copy()
    diagonal = C.ndim == 1

    # Newton trial states of the implicit solver can overshoot to absurd ln z; the cap keeps exp
    # finite there (such stages are rejected by the error control, never accepted).
    def rhs(_, u):
        z = np.exp(np.minimum(u, _LOG_CAP))
        return r - (C * z if diagonal else C @ z)

    def jac(_, u):
        z = np.exp(np.minimum(u, _LOG_CAP))
        if diagonal:  # only Radau/BDF take a sparse Jacobian
            return sp.diags(-C * z, format="csc") if method in ("Radau", "BDF") else np.diag(-C * z)
        return -C * z[None, :]

    # Rejected Newton iterations may overflow; the accepted solution is checked to be finite below.
    # solve_ivp needs strictly increasing t_eval: integrate on the distinct times, repeat after.
    times, repeat = np.unique(t, return_inverse=True)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        sol = solve_ivp(rhs, (0.0, float(t[-1])), np.log(z0), method=method, t_eval=times,
                        jac=jac, rtol=rtol, atol=atol)
    if not sol.success or not np.all(np.isfinite(sol.y)):
        raise RuntimeError(f"GLV integration failed: {sol.message}")
    return np.exp(np.minimum(sol.y.T[repeat.ravel()], _LOG_CAP))
