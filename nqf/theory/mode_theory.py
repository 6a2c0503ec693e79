"""Growth rates, Theorem 8 constants and seed scatter of given modes of a quadratic model.

:func:`reduce_modes` takes data matrices (any structure form), targets and K orthonormal mode
directions q_k and returns what Theorem 8 needs, in the variables of the solved regime that
applies (SCIENCE.md section 3):

  theorem6    Assumption 1 (the A_mu commute):     z' = z (r - C_kk z)            a = 1, zeta = r
  corollary4  feedforward A, App. B.7 Cor. 4:       rho' = 4 rho (tau - c rho)     a = 4, zeta = tau
  theorem16   otherwise, App. B.7 Theorem 16:       z' = 2 z (gamma - kappa z)     a = 2, zeta = gamma

All three are the same logistic: r = a zeta = 2 gamma, and rho = z / 2 in Corollary 4 (for the
balanced weights of Eq. 269, W = [u sqrt(rho) r^T; v sqrt(rho) r^T], the mode q = (u, v) / sqrt 2
has z = q^T W W^T q = 2 rho), so z(0) = eps c_k is rho(0) = eps c_k / 2. The slope of t*_k
against ln(1/eps) is 1 / (a zeta_k) in every regime. The conditions are checked, never assumed:
Y q_k = gamma_k q_k and K(q_b q_b^T) q_a = kappa_a delta_ab q_a are measured on the factored
form, and their residuals are returned.

Seed scatter (beyond the paper): from Gaussian W0 with d units, z_k(0) = sigma^2 chi^2_d and
t*_k = (ln(1/z_k(0)) + const) / (a zeta_k), so std t*_k = sqrt(psi'(d/2)) / (a zeta_k)
(``nqf.predicted_seed_scatter``). That holds when the modes are decoupled in W (Assumption 1:
the rows of P^T W scale independently). When two modes are coupled through the second moment
(q_l^T K(sym(q_l q_k^T)) q_k > 0, the rectangular/Saxe case), the cross term (g_l . g_k) of
M = W W^T feeds back: once mode l has saturated along its unit-space direction g_l = W^T q_l,
the component of g_k along g_l is damped and mode k ignites from the component orthogonal to
it. By the Bartlett decomposition of a Gaussian matrix, that component has squared length
sigma^2 chi^2_(d - j_k), j_k = number of faster modes coupled to k, so
std t*_k = sqrt(psi'((d - j_k)/2)) / (a zeta_k) (:func:`ordered_seed_scatter`). Evaluated seed by
seed on the projected amplitudes (:func:`effective_amplitudes`), Theorem 8 reproduces the GD
scatter of the init_scaling experiment to about 1%; psi'(d/2) misses it by 20-80% for d = 4.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from nqf import validate
from nqf.theory.lotka_volterra import shared_eigenbasis

if TYPE_CHECKING:
    import torch

    from nqf.theory.forms import StructureForm

REGIMES = {"theorem6": (1.0, 2.0, 2.0, 1.0),  # a, zeta / gamma, C_k / kappa, amplitude / z
           "corollary4": (4.0, 0.5, 1.0, 0.5),
           "theorem16": (2.0, 1.0, 1.0, 1.0)}


@dataclass
class ModeReduction:
    """Theorem 8's inputs for K modes, and the residuals of the conditions that make them exact."""

    regime: str
    gamma: np.ndarray  # q_k^T Y q_k
    kappa: np.ndarray  # q_k^T K(q_k q_k^T) q_k
    C: np.ndarray  # (K, K) GLV interaction among the modes, C_kj = 2 q_k^T K(q_j q_j^T) q_k
    coupling: np.ndarray  # (K, K) q_l^T K(sym(q_l q_k^T)) q_k: cross-talk through M's off-diagonal
    eigen_residual: float  # max_k |Y q_k - gamma_k q_k| / max gamma
    decoupling_residual: float  # max_ab |K(q_b q_b^T) q_a - kappa_a delta_ab q_a| / max kappa
    commutator_residual: float  # Assumption 1 (0 when the A_mu commute)
    other_growth: float  # largest eigenvalue of Y off span(q) over min gamma (> 0: a rival mode)

    @property
    def a(self) -> float:
        return REGIMES[self.regime][0]

    @property
    def zeta(self) -> np.ndarray:
        return REGIMES[self.regime][1] * self.gamma

    @property
    def C_k(self) -> np.ndarray:
        return REGIMES[self.regime][2] * self.kappa

    @property
    def amplitude_unit(self) -> float:
        """The regime's mode variable per unit of z (rho = z / 2 in Corollary 4)."""
        return REGIMES[self.regime][3]

    @property
    def rate(self) -> np.ndarray:
        """Growth rate of z_k, r_k = a zeta_k = 2 gamma_k."""
        return 2.0 * self.gamma

    @property
    def saturation(self) -> np.ndarray:
        """z_k at the fixed point, gamma_k / kappa_k."""
        return self.gamma / self.kappa

    def predecessors(self) -> np.ndarray:
        """For each mode, the number of faster modes coupled to it (see the module docstring)."""
        return coupled_faster(self.rate, self.coupling).sum(0)


def _pair_values(form: StructureForm, Q: torch.Tensor) -> torch.Tensor:
    """q_l^T A_mu q_k for all l, k by polarisation, shape (m, K, K)."""
    plus = (Q[:, :, None] + Q[:, None, :]).permute(1, 2, 0)[..., None]  # (K, K, p, 1)
    minus = (Q[:, :, None] - Q[:, None, :]).permute(1, 2, 0)[..., None]
    return ((form.outputs(plus) - form.outputs(minus)) / 4.0).permute(2, 0, 1)


def reduce_modes(form: StructureForm, y, modes, *, tol: float = 1e-9) -> ModeReduction:
    """Growth rates and interactions of the modes ``modes`` (p, K) on data (form, y).

    ``y`` is (m,) or (n, n_out) in the form's sample-major order and every prefactor is 4/n or
    8/n with n = y.shape[0], the samples of the loss (nqf.theory.losses), as in LotkaVolterra.from_data
    and predict (flattened targets make every (sample, output) pair a sample). Dense matrices are
    formed only for the Assumption 1 check and for Y's spectrum off the modes (p x p), both cheap
    at the sizes of mode_designs.
    """
    # torch is imported where needed: the theory and fit jobs use this module without it
    import torch

    from nqf import validate
    from nqf.theory.factored import BlockBilinearForm
    from nqf.theory.forms import DiagonalForm
    from nqf.theory.losses import sample_count

    n = sample_count(y)
    y = validate.targets(form, y)
    modes = validate.array("modes", modes, ndim=2)
    if modes.shape[0] != form.p or modes.shape[1] == 0:
        raise ValueError(f"modes must have shape (p = {form.p}, K >= 1): one column per mode; got {modes.shape}.")
    form = form.to(device="cpu", dtype=torch.float64)
    Q = torch.as_tensor(modes)
    y = torch.as_tensor(y)
    m, K = n, Q.shape[1]  # m: the loss's samples (the prefactors' 1/m)
    Qb = Q.T[:, :, None]  # (K, p, 1)
    Yq = form.apply_weighted(4.0 / m * y, Qb)[..., 0]  # (K, p)
    gamma = (Yq * Q.T).sum(-1)
    pair = _pair_values(form, Q)  # (m, K, K)
    u = torch.diagonal(pair, dim1=1, dim2=2)  # (m, K): q_k^T A_mu q_k
    KQ = form.apply_weighted(4.0 / m * u.T[:, None, :], Qb[None])[..., 0]  # [b, a] = K(q_b q_b^T) q_a
    kappa = torch.einsum("aap,pa->a", KQ, Q)
    expected = torch.zeros_like(KQ)
    expected[torch.arange(K), torch.arange(K)] = kappa[:, None] * Q.T
    gmax, kmax = float(gamma.abs().max()), float(kappa.abs().max())
    eigen_res = float((Yq - gamma[:, None] * Q.T).abs().max()) / max(gmax, 1e-300)
    dec_res = float((KQ - expected).abs().max()) / max(kmax, 1e-300)
    coupling = 4.0 / m * torch.einsum("mlk,mlk->lk", pair, pair)
    # Y off the modes: a positive eigenvalue there would be a mode this reduction does not know.
    Y = form.weighted_sum(4.0 / m * y)
    proj = torch.eye(form.p, dtype=torch.float64) - Q @ Q.T
    off = torch.linalg.eigvalsh(proj @ Y @ proj)
    other = float(off.max()) / max(float(gamma.min()), 1e-300)
    if isinstance(form, DiagonalForm):
        commutator = 0.0
    else:
        commutator = shared_eigenbasis(form)[2]["commutator"]
    if commutator <= tol:
        regime = "theorem6"
    elif isinstance(form, BlockBilinearForm) and (form.rows[1] <= form.cols[0] or form.cols[1] <= form.rows[0]):
        regime = "corollary4"
    else:
        regime = "theorem16"
    C = 8.0 / m * (u.T @ u)
    return ModeReduction(regime, gamma.numpy(), kappa.numpy(), C.numpy(), coupling.numpy(),
                         eigen_res, dec_res, float(commutator), other)


def coupled_faster(rate, coupling, rtol: float = 1e-9) -> np.ndarray:
    """(K, K) mask [l, k]: mode l is faster than mode k and coupled to it through K."""
    rate, coupling = np.asarray(rate, float), np.asarray(coupling, float)
    scale = max(float(np.max(np.abs(coupling))), 1e-300)
    return (np.abs(coupling) > rtol * scale) & (rate[:, None] > rate[None, :])


def effective_amplitudes(g, mask) -> np.ndarray:
    """z_k(0) each mode effectively ignites from: |g_k|^2 with g_k = W(0)^T q_k projected off
    the unit-space directions g_l of its coupled faster modes (``mask`` from coupled_faster).

    ``g`` has shape (..., K, d). Without coupled predecessors this is z_k(0) itself; with j of
    them it is sigma^2 chi^2_(d - j) for Gaussian W(0) (Bartlett decomposition).
    """
    g = np.asarray(g, float)
    out = np.empty(g.shape[:-1])
    for k in range(g.shape[-2]):
        rows = np.flatnonzero(np.asarray(mask)[:, k])
        v = g[..., k, :]
        if rows.size:
            basis = np.linalg.qr(np.swapaxes(g[..., rows, :], -1, -2))[0]  # (..., d, j)
            v = v - np.einsum("...dj,...j->...d", basis, np.einsum("...dj,...d->...j", basis, v))
        out[..., k] = np.sum(v * v, axis=-1)
    return out


def ordered_seed_scatter(rate, d: int, predecessors) -> np.ndarray:
    """std of t*_k over Gaussian seeds: sqrt(psi'((d - j_k)/2)) / r_k (see the module docstring).

    ``rate`` is r_k = a zeta_k; ``predecessors`` j_k counts the faster modes coupled to mode k
    (0 for every mode under Assumption 1, which gives nqf.predicted_seed_scatter). NaN where
    d - j_k < 1 (no unit-space direction left for the mode).
    """
    rate = np.asarray(rate, float)
    d = validate.integer("d (the number of units)", d, minimum=1)
    dof = d - np.asarray(predecessors, float)
    from scipy.special import polygamma

    with np.errstate(invalid="ignore"):
        spread = np.sqrt(polygamma(1, np.where(dof >= 1, dof, np.nan) / 2.0))
    return spread / rate


def std_relative_error(dof, n: int) -> np.ndarray:
    """Relative standard error of the sample std (ddof 1) of n draws of ln chi^2_dof.

    Var(s^2) = sigma^4 (2 / (n - 1) + kappa_4 / n) with kappa_4 the excess kurtosis, which for
    ln chi^2_nu is psi'''(nu/2) / psi'(nu/2)^2 (its cumulants are the polygammas), so the
    relative error of s is half the square root: 1/sqrt(2 (n - 1)) for a Gaussian (12.7% at
    n = 32), but 15.9% at n = 32, 7.9% at n = 128 and 5.6% at n = 256 for d = 4.
    """
    n = validate.integer("n (the number of draws)", n, minimum=2)
    nu = validate.positive("dof", dof) / 2.0
    from scipy.special import polygamma

    kurt = polygamma(3, nu) / polygamma(1, nu) ** 2
    return 0.5 * np.sqrt(2.0 / (n - 1) + kurt / n)


def slope_fit(eps, t) -> np.ndarray:
    """Least-squares slope of t (eps, ...) against ln(1/eps), along the first axis (NaN if any
    t along it is NaN: a mode that never ignited has no slope)."""
    eps = validate.positive("eps", validate.array("eps", eps, ndim=1))
    if np.unique(eps).size < 2:
        raise ValueError(f"eps must hold at least 2 distinct values for a slope; got {validate.describe(eps)}.")
    x = np.log(1.0 / eps)
    t = validate.array("t", t, finite=None)
    if t.ndim < 1 or t.shape[0] != eps.size:
        raise ValueError(f"t must have one row per eps ({eps.size}) along its first axis; got shape {t.shape}.")
    xc = (x - x.mean()).reshape(-1, *([1] * (t.ndim - 1)))
    return (xc * (t - t.mean(0))).sum(0) / (xc ** 2).sum(0)
