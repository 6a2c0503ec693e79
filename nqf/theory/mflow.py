"""The closed M-flow dM/dt = -H M - M H, integrated from data statistics computed once.

Gradient flow on W (Eq. 27) only ever sees the data through H = (4/n) sum_mu Delta_mu A_mu, and
Delta_mu = <A_mu, M> - y_mu is linear in M. So H(M) = K(M) - Y with the second-moment operator

    K(X) = (4/n) sum_mu <A_mu, X>_F A_mu   and   Y = (4/n) sum_mu y_mu A_mu,

both fixed by the data; the sums run over all data matrices and n = y.shape[0] is the number of
samples of the loss (1/n) sum (f - y)^2 (vector outputs: y of shape (n, n_out), nqf.theory.losses), so
the flow's time t is nqf.train's clock t = c lr step. After one pass over the samples (:class:`SecondMoment`) the flow costs
nothing in m, and nothing in the width d either, because it closes on the p x p matrix M (Eq. 28).
K lives on the p(p+1)/2-dimensional space of symmetric matrices; it is stored in orthonormal
"svec" coordinates (off-diagonal entries weighted by sqrt 2, so Frobenius products are dot
products), as the full matrix or as a factor of its rank (at most min(m, p(p+1)/2)),
whichever is cheaper to apply. When every A_mu is diagonal only diag(M) enters H, and the flow of
the diagonal is a Lotka-Volterra system solved in logarithms (exact for tiny initial scales).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch
import xarray as xr

from nqf import validate
from nqf.theory.forms import DenseForm, DiagonalForm, StructureForm, as_tensor
from nqf.theory.losses import sample_count
from nqf.theory.lotka_volterra import glv

_BASIS_CHUNK_ELEMENTS = 2 ** 24  # basis matrices handed to the form per call (memory bound)
_MAX_FEATURE_ELEMENTS = 2 ** 27  # svec(A_mu) for all samples held at once (1 GiB of float64)


@lru_cache(maxsize=32)
def svec_index(p: int) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """Upper-triangle indices of a p x p matrix and the weights (1 on, sqrt 2 off the diagonal).

    Cached (the flow calls it at every right-hand side); the arrays are read-only.
    """
    iu = np.triu_indices(p)
    w = np.where(iu[0] == iu[1], 1.0, np.sqrt(2.0))
    for a in (*iu, w):
        a.flags.writeable = False
    return iu, w


def svec(X: np.ndarray) -> np.ndarray:
    """Orthonormal coordinates of symmetric matrices (..., p, p) -> (..., p(p+1)/2)."""
    iu, w = svec_index(X.shape[-1])
    return X[..., iu[0], iu[1]] * w


def unsvec(v: np.ndarray, p: int) -> np.ndarray:
    """Inverse of :func:`svec`: (..., p(p+1)/2) -> symmetric (..., p, p)."""
    iu, w = svec_index(p)
    X = np.zeros(v.shape[:-1] + (p, p))
    X[..., iu[0], iu[1]] = v / w
    X[..., iu[1], iu[0]] = v / w
    return X


def _svec_features(form: StructureForm) -> np.ndarray:
    """svec(A_mu) for every sample as the columns of an (s, m) array.

    Uses only ``outputs_from_M`` on the orthonormal basis of symmetric matrices, so it works for
    every structure form (dense, factored, user-defined) without materialising (m, p, p).
    """
    p, m = form.p, form.m
    s = p * (p + 1) // 2
    if s * m > _MAX_FEATURE_ELEMENTS:
        raise ValueError(f"The second moment of m = {m} samples with p = {p} needs {s * m:.2e} "
                         "numbers at once; reduce p (compress with Theorem 3) or the sample count.")
    iu, w = svec_index(p)
    form = form.to(device="cpu", dtype=torch.float64)
    chunk = max(1, _BASIS_CHUNK_ELEMENTS // (p * p))
    out = np.empty((s, m))
    for start in range(0, s, chunk):
        idx = np.arange(start, min(s, start + chunk))
        basis = np.zeros((idx.size, p, p))
        rows, cols = iu[0][idx], iu[1][idx]
        basis[np.arange(idx.size), rows, cols] = 1.0 / w[idx]
        basis[np.arange(idx.size), cols, rows] = 1.0 / w[idx]
        out[idx] = form.outputs_from_M(as_tensor(basis)).detach().cpu().numpy()
    return out


@dataclass
class SecondMoment:
    """Data statistics that close the M-flow: Y, the operator K and the loss constant y2.

    ``m`` is the number of samples n of the loss (1/n) sum_mu sum_c (f_mu,c - y_mu,c)^2 (nqf.theory.losses):
    the targets' first axis, so for vector outputs (n, n_out) it is n, not the n * n_out data
    matrices; K, Y = (4/n) sum ... and y2 = (1/n) sum y^2 use it. ``diagonal``: every A_mu is
    diagonal; then ``kmat`` (p, p) maps diag(X) to diag(K(X)) and ``Y`` is diagonal. Otherwise K
    acts in svec coordinates as ``kmat`` (s, s) or, when the rank is below s/2, as
    ``factor @ factor.T`` with ``factor`` of shape (s, rank). ``data`` (form, flat targets), set
    by :meth:`from_form`, lets :meth:`loss` use the residuals themselves.
    """

    p: int
    m: int
    Y: np.ndarray
    y2: float
    diagonal: bool
    kmat: np.ndarray | None = None
    factor: np.ndarray | None = None
    data: tuple | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_form(cls, form: StructureForm, y, *, rank_rtol: float = 1e-13) -> "SecondMoment":
        """One pass over the data matrices ``form`` with targets ``y``: (m,) or (n, n_out) in the
        form's sample-major order, normalised by n = y.shape[0] (nqf.theory.losses)."""
        n = sample_count(y)
        y = validate.targets(form, y)
        rank_rtol = validate.scalar("rank_rtol", rank_rtol, low=0.0, high=1.0, high_open=True)
        m, p = form.m, form.p
        y2 = float(np.sum(y ** 2) / n)
        if isinstance(form, DiagonalForm):
            form = form.to(device="cpu", dtype=torch.float64)
            D = form.diag.detach().numpy()
            return cls(p, n, np.diag(4.0 / n * D.T @ y), y2, True, kmat=4.0 / n * D.T @ D, data=(form, y))
        feats = _svec_features(form)
        data = (form.to(device="cpu", dtype=torch.float64), y)
        iu, _ = svec_index(p)
        off = iu[0] != iu[1]
        scale = max(float(np.max(np.abs(feats), initial=0.0)), 1e-300)
        if not np.any(np.abs(feats[off]) > 1e-14 * scale):
            D = feats[~off].T  # (m, p): the diagonals
            return cls(p, n, np.diag(4.0 / n * D.T @ y), y2, True, kmat=4.0 / n * D.T @ D,
                       data=(DiagonalForm(torch.as_tensor(D)), y))
        Y = unsvec(4.0 / n * feats @ y, p)
        s = feats.shape[0]
        if m <= s // 2:
            return cls(p, n, Y, y2, False, factor=np.sqrt(4.0 / n) * feats, data=data)
        G = 4.0 / n * feats @ feats.T
        evals, evecs = np.linalg.eigh(G)
        keep = evals > rank_rtol * max(evals[-1], 1e-300)
        if keep.sum() <= s // 2:
            return cls(p, n, Y, y2, False, factor=evecs[:, keep] * np.sqrt(evals[keep]), data=data)
        return cls(p, n, Y, y2, False, kmat=G, data=data)

    @classmethod
    def from_matrices(cls, A, y) -> "SecondMoment":
        """From dense symmetric matrices A of shape (m, p, p)."""
        return cls.from_form(DenseForm(as_tensor(A)), y)

    @property
    def rank(self) -> int:
        """Rank bound of K as stored (columns of the factor, or its side)."""
        if self.factor is not None:
            return self.factor.shape[1]
        return self.kmat.shape[0]

    def K_svec(self, v: np.ndarray) -> np.ndarray:
        """K in svec coordinates, v of shape (..., s) (dense data only)."""
        if self.factor is not None:
            return (v @ self.factor) @ self.factor.T
        return v @ self.kmat  # kmat is symmetric

    def apply_K(self, M: np.ndarray) -> np.ndarray:
        """K(M) for symmetric M of shape (..., p, p)."""
        if not (isinstance(M, np.ndarray) and M.dtype == np.float64 and M.shape[-2:] == (self.p, self.p)):
            M = validate.matrices("M", M, self.p)  # the integrators' float64 (..., p, p) skips the check
        if self.diagonal:
            d = np.diagonal(M, axis1=-2, axis2=-1) @ self.kmat.T
            out = np.zeros(M.shape)
            idx = np.arange(self.p)
            out[..., idx, idx] = d
            return out
        return unsvec(self.K_svec(svec(M)), self.p)

    def hessian(self, M: np.ndarray) -> np.ndarray:
        """H(M) = K(M) - Y = (4/m) sum_mu Delta_mu A_mu, dense (..., p, p)."""
        return self.apply_K(M) - self.Y

    def loss(self, M: np.ndarray) -> np.ndarray:
        """(1/n) sum_mu (<A_mu, M> - y_mu)^2 for M of shape (..., p, p), n = ``m`` samples.

        From the residuals themselves when the data are at hand (:meth:`from_form`): no
        cancellation, so a converged run's loss keeps its relative accuracy far below 1e-16 of
        the initial loss (log plots stay finite). A SecondMoment built from its statistics alone
        uses <M, K(M)>/4 - <Y, M>/2 + y2, accurate only to ~1e-16 of y2, clipped at 0.
        """
        if not (isinstance(M, np.ndarray) and M.dtype == np.float64 and M.shape[-2:] == (self.p, self.p)):
            M = validate.matrices("M", M, self.p)  # the integrators' float64 (..., p, p) skips the check
        if self.data is not None:
            form, y = self.data
            Mt = torch.as_tensor(M.reshape(-1, self.p, self.p))
            out = np.empty(Mt.shape[0])
            step = max(1, _BASIS_CHUNK_ELEMENTS // max(1, form.m))
            for start in range(0, Mt.shape[0], step):
                res = form.outputs_from_M(Mt[start:start + step]).detach().numpy() - y
                out[start:start + step] = np.sum(res ** 2, axis=-1) / self.m
            return out.reshape(M.shape[:-2])
        if self.diagonal:
            d = np.diagonal(M, axis1=-2, axis2=-1)
            quad = np.einsum("...i,ij,...j->...", d, self.kmat, d)
            lin = d @ np.diagonal(self.Y)
        else:
            v = svec(M)
            quad = np.einsum("...i,...i->...", v, self.K_svec(v))
            lin = v @ svec(self.Y)
        return np.maximum(quad / 4.0 - lin / 2.0 + self.y2, 0.0)

    def isotropy(self) -> tuple[float, float]:
        """Assumption 2 (Eq. 40): K(X) = 4c X on symmetric X. Returns (c, relative residual).

        The residual |K - 4c I|_F / |K|_F (svec coordinates, c fitted by least squares) vanishes
        exactly when the second moment tensor is isotropic; computed from the compact form.
        """
        s = self.p * (self.p + 1) // 2
        if self.kmat is not None:  # diagonal data: kmat is K's diagonal block, the rest is 0
            ev = np.linalg.eigvalsh(self.kmat)
        else:
            ev = np.linalg.svd(self.factor, compute_uv=False) ** 2
        ev = np.concatenate([ev, np.zeros(s - ev.size)])
        a = float(np.mean(ev))
        norm = float(np.linalg.norm(ev))
        if norm == 0:
            return 0.0, np.inf
        return a / 4.0, float(np.linalg.norm(ev - a) / norm)


def _factor_psd(M0: np.ndarray) -> np.ndarray:
    """G with G G^T = M0 (eigenvalues clipped at 0; M0 is PSD up to rounding)."""
    evals, evecs = np.linalg.eigh((M0 + M0.T) / 2)
    return evecs * np.sqrt(np.clip(evals, 0.0, None))


def _initial_factor(M0, W0, p: int) -> tuple[np.ndarray, np.ndarray]:
    M0 = validate.initial_state(M0, W0, p)
    return M0, _factor_psd(M0)  # a function of M0 only: the run cannot depend on d


def mflow(data: SecondMoment | StructureForm, M0=None, t=None, *, W0=None, y=None,
          weight_decay: float = 0.0, rtol: float = 1e-10, atol: float | None = None,
          method: str = "DOP853") -> xr.Dataset:
    """Integrate the M-flow dM/dt = -(H + gamma) M - M (H + gamma), H = K(M) - Y.

    ``data`` is a :class:`SecondMoment` or a structure form (then ``y`` is needed). The state is
    the p x p factor G = V sqrt(Lambda) of M0 = V Lambda V^T, evolved by dG/dt = -(H + gamma) G:
    M = G G^T stays positive semi-definite and neither the state nor the cost depends on the
    width d. With diagonal data the state is ln diag(M) (relative accuracy at any scale) and the
    off-diagonal entries follow exactly (Prop. 7). ``weight_decay`` gamma is torch's convention
    (gradient gamma W), i.e. -2 gamma M in dM/dt; the paper's "-gamma M" is the same term for a
    penalty (gamma/4)|W|^2. ``atol`` defaults to 1e-12 times the largest entry of G(0) (dense
    data) or 1e-12 on ln diag(M) (diagonal data), so tiny initial scales keep ``rtol`` accuracy.

    Returns a Dataset with ``M`` (time, row, col) and ``loss`` (time), the loss (1/n) sum (f - y)^2
    over the n = y.shape[0] samples computed from the residuals, on the time of nqf.train's clock
    (t = c lr step, nqf.theory.losses); attrs record the solver and the number of right-hand-side evaluations.
    """
    if not isinstance(data, (SecondMoment, StructureForm)):
        raise TypeError(f"data must be a SecondMoment or a StructureForm (DenseForm, DiagonalForm, ...); "
                        f"got a {type(data).__name__}.")
    if not isinstance(method, type):  # a solve_ivp method name (or an OdeSolver class)
        validate.choice("method", method, ("DOP853", "RK45", "RK23", "Radau", "BDF", "LSODA"))
    stats = data if isinstance(data, SecondMoment) else SecondMoment.from_form(data, y)
    t = validate.time_grid("t", t)
    M0, G0 = _initial_factor(M0, W0, stats.p)
    gamma = validate.scalar("weight_decay", weight_decay, low=0.0)
    rtol = validate.scalar("rtol", rtol, low=0.0, low_open=True)
    if atol is not None:
        atol = validate.scalar("atol", atol, low=0.0, low_open=True)
    start = time.perf_counter()
    if stats.diagonal:
        diag0 = np.diagonal(M0).copy()
        coupled = bool(np.any(stats.kmat - np.diag(np.diagonal(stats.kmat))))
        # the diagonal flow is exactly a GLV, integrated numerically (never Theorem 6's integral)
        diag = glv(2 * np.diagonal(stats.Y) - 2 * gamma, 2 * stats.kmat, diag0, t,
                   rtol=rtol, atol=1e-12 if atol is None else atol, method="LSODA" if coupled else "Radau")
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(diag0 > 0, np.sqrt(diag / np.where(diag0 > 0, diag0, 1.0)), 0.0)
        M = ratio[:, :, None] * M0[None] * ratio[:, None, :]
        idx = np.arange(stats.p)
        M[:, idx, idx] = diag
        nfev, solver = -1, "glv in ln diag(M), " + ("LSODA" if coupled else "Radau")
    else:
        p, k = G0.shape
        scale = float(np.max(np.abs(G0), initial=0.0))
        if scale == 0.0:
            M = np.zeros((t.size, p, p))
            nfev, solver = 0, "trivial"
        else:
            def rhs(_, g):
                G = g.reshape(p, k)
                H = stats.hessian(G @ G.T)
                if gamma:
                    H = H + gamma * np.eye(p)
                return -(H @ G).ravel()

            from scipy.integrate import solve_ivp

            times, repeat = np.unique(t, return_inverse=True)  # solve_ivp needs strictly increasing t_eval
            sol = solve_ivp(rhs, (0.0, float(t[-1])), G0.ravel(), method=method, t_eval=times,
                            rtol=rtol, atol=1e-12 * scale if atol is None else atol)
            if not sol.success:
                raise RuntimeError(f"M-flow integration failed: {sol.message}")
            G = sol.y.T[repeat.ravel()].reshape(t.size, p, k)
            M = G @ G.transpose(0, 2, 1)
            nfev, solver = int(sol.nfev), method
    ds = xr.Dataset(
        {"M": (("time", "row", "col"), M, {"units": "1", "long_name": "order parameter M = W W^T"}),
         "loss": ("time", stats.loss(M), {"units": "1", "long_name": "training loss (1/n) sum (f - y)^2 over n samples"})},
        coords={"time": ("time", t, {"units": "1", "long_name": "gradient-flow time"})})
    ds.attrs.update(method="mflow", solver=solver, rhs_evaluations=nfev, weight_decay=gamma,
                    rtol=rtol, wall_seconds=time.perf_counter() - start)
    return ds
