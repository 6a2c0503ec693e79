"""The NQF of the Fourier MLP (paper Eq. 50, Proposition 1, App. C "Figure 5") in closed form:
its features, the Lotka-Volterra coefficients of its modes as designed and as measured on a grid,
and the scaling law they predict (nqf.theory.scaling).

On the grid x_mu = mu / M (mu = 0..M-1) the Fourier MLP f(x) = P^-1/2 sum_k W_k tanh(s_k a_k psi_k(x)),
psi_k = sqrt2 cos(2 pi k x), learns y = sum_k b_k psi_k; its NQF is
f_NQF = P^-1/2 sum_k s_k a_k W_k psi_k (Eq. 296). Write c_k = s_k / sqrt(P), u_k = a_k W_k. For
k < M/2 the psi_k are orthonormal on the grid, (1/M) sum_mu psi_k psi_j = delta_kj, so the NQF's
loss is exactly L = sum_k (c_k u_k - b_k)^2: every unit is its own 2 x 2 problem. Its structure
matrix A_k(x) = (c_k psi_k(x) / 2) [[0, 1], [1, 0]] has eigenvectors (1, +-1)/sqrt2 with
eigenvalues lambda_mu,k = +- c_k psi_k(x_mu) / 2, so in the growing direction
z_k = (a_k + W_k)^2 / 2 and

    r_k = (8/M) sum_mu lambda_mu,k y_mu = 4 b_k s_k / sqrt(P)  (= 2 gamma_k of Theorem 7, a = 2,
          gamma_k = 2 b_k s_k / sqrt(P)),
    C_kk = (8/M) sum_mu lambda_mu,k^2 = 2 s_k^2 / P,   C_kj = 0 (k != j, orthogonal features),
    V_k = r_k^2 / (8 C_kk) = b_k^2 = k^-2 beta,   zeta_k = r_k = (4/sqrt P) k^-(theta + beta),

so alpha1 = 2 beta, alpha2 = theta + beta and the loss falls as t^-(2 beta - 1)/(theta + beta):
4/3, 1, 0.8 for theta = 0, 0.5, 1 at beta = 1.5. Mode k saturates at z_k = r_k / C_kk = 2 b_k / c_k,
i.e. a_k W_k = b_k sqrt(P) / s_k. The shrinking direction z_k^- = (a_k - W_k)^2 / 2 obeys
z_k z_k^- = const (a_k^2 - W_k^2 is conserved by the flow), so its only effect on z_k is a source
C_kk z_k(0) z_k^-(0) that is 1e-9 of r_k z_k: Theorem 6 with each seed's own z_k(0) is the NQF's
exact loss curve, L = sum_k (c_k (z_k - z_k^-) / 2 - b_k)^2 with z_k^- = z_k(0) z_k^-(0) / z_k.

nqf.training.fourier_training trains both networks; nqf.experiments.fourier_powerlaw is the experiment.
"""
from __future__ import annotations

import math

import numpy as np

from nqf import validate
from nqf.theory.scaling import predict_exponent


def fourier_features(x, P: int) -> np.ndarray:
    """psi_k(x) = sqrt2 cos(2 pi k x) for k = 1..P: (len(x), P)."""
    P = validate.integer("P", P, minimum=1)
    x = validate.array("x", x, ndim=1)
    k = np.arange(1, P + 1)
    return math.sqrt(2.0) * np.cos(2 * math.pi * np.outer(x, k))


def designed_coefficients(s, b, P: int) -> dict[str, np.ndarray]:
    """The analytic Lotka-Volterra coefficients of the growing modes z_k = (a_k + W_k)^2 / 2:
    r_k = 4 b_k s_k / sqrt(P), C_kk = 2 s_k^2 / P, V_k = r_k^2 / (8 C_kk) = b_k^2 (module docstring)."""
    s, b = np.asarray(s, float), np.asarray(b, float)
    r = 4.0 * b * s / math.sqrt(P)
    C = 2.0 * s ** 2 / P
    return {"r": r, "C_diag": C, "V": r ** 2 / (8.0 * C)}


def lv_from_grid(psi, s, y, P: int) -> tuple[np.ndarray, np.ndarray]:
    """r_k = (8/M) sum_mu lambda_mu,k y_mu and C_kj = (8/M) sum_mu lambda_mu,k lambda_mu,j from the
    grid, lambda_mu,k = s_k psi_k(x_mu) / (2 sqrt P) (the growing eigenvalue of unit k's A_k(x_mu)).
    ``s`` (..., P) and ``y`` (..., M) carry leading (theta) axes."""
    psi = np.asarray(psi, float)
    lam = np.asarray(s, float)[..., None, :] * psi / (2.0 * math.sqrt(P))  # (..., M, P)
    M = psi.shape[0]
    r = 8.0 / M * np.einsum("...mk,...m->...k", lam, np.asarray(y, float))
    C = 8.0 / M * np.einsum("...mk,...mj->...kj", lam, lam)
    return r, C


def predicted_windows(P: int, beta: float, thetas, z0: float, cutoff: float, t_max=None) -> list:
    """nqf.theory.scaling's prediction (exponents and fitting window) per theta from the designed
    coefficients (:func:`designed_coefficients`, equal to the grid's to 1e-12), from the balanced
    mean init z_k(0) = ``z0``; ``t_max`` (one per theta, or None) ends a window at the training
    horizon, ``cutoff`` is predict_exponent's finite-size cutoff."""
    P = validate.integer("P", P, minimum=3)  # a power law needs at least 3 modes
    k = np.arange(1, P + 1, dtype=float)
    out = []
    for j, theta in enumerate(thetas):
        d = designed_coefficients(k ** -float(theta), k ** -beta, P)
        horizon = None if t_max is None else float(t_max[j])
        out.append(predict_exponent(d["r"], d["V"], C=d["C_diag"], z0=z0, t_max=horizon, cutoff=cutoff))
    return out
