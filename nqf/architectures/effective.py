"""The effective matrix that an architecture's NQF identifies, and low-rank NQF teachers.

Every feedforward-type structure matrix (Eq. 17-19) makes the NQF output a linear or bilinear
function of one small matrix E(W) built from the unit weights, f_NQF(x) - f(0) = <E(W), C(x)>:

* 2-layer MLP (Prop. 1):  E = phi'(0) Z_v Z_u^T (k x D),        f = E x
* 1-layer CNN (Prop. 6):  E = phi'(0) Z_v Z_k^T (k x kh*kw),    f = E x_sum, x_sum = sum_p x_p
* multi-head attention (Prop. 2): E = sum_h R_h^T W^V_h (k x D), f = E x_avg, x_avg = X 1 / N
* query-key-only heads (Prop. 3): E = sum_h W^K_h^T W^Q_h / sqrt(d_k) (D x D),
  f_c = u_c^T E x, u_c = Sigma_X Cr[:, c]
* MoE with linear experts (Prop. 5): E_c = Sym(psi'(0) sum_i Theta_i[c, :]^T r_i^T) (D x D per
  output, stacked to (k D) x D), f_c = x^T E_c x. Only the symmetric part of each E_c reaches the
  data, so the identified object is the symmetrised one.

Its singular values s_k(E(W)) are the recovered spectrum that Figure 2 plots for the module
(E of the module's weights) and for its NQF alike. A teacher is a width-r W* (``teacher_weights``)
whose E has prescribed singular values with random orthonormal singular vectors, one rank-one
unit per singular value; its NQF outputs are the targets.

Since the NQF is linear in E, its lowest reachable loss on a data set is a least-squares problem
(the floor of paper Fig. 7): ``effective_features`` gives the map Phi(x) with f_NQF - f(0) =
<Phi(x), E(W)> from a factored structure form, and ``least_squares_nqf`` solves it.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from nqf.architectures.attention import MultiHeadAttention
from nqf.architectures.base import UnitModule, unvec, vec
from nqf.architectures.cnn import OneLayerCNN
from nqf.architectures.mlp import TwoLayerMLP
from nqf.architectures.moe import MixtureOfExperts
from nqf.architectures.query_key import QueryKeyAttention, context_covariance_readout
from nqf.theory.factored import BlockBilinearForm

Tensor = torch.Tensor
SUPPORTED = (TwoLayerMLP, OneLayerCNN, MultiHeadAttention, QueryKeyAttention, MixtureOfExperts)


def _check(module: UnitModule) -> None:
    if not isinstance(module, SUPPORTED):
        raise TypeError(f"No effective matrix for {type(module).__name__}; supported: "
                        f"{', '.join(c.__name__ for c in SUPPORTED)}.")
    if isinstance(module, MixtureOfExperts) and module.expert != "linear":
        raise ValueError("A MoE with tanh experts has A = 0 (its NQF is trivial), so it has no "
                         "effective matrix; use expert='linear'.")


def _two_block(module, W: Tensor, n_in: int, slope: float) -> Tensor:
    """slope * Z_out Z_in^T for W = [Z_in (n_in rows); Z_out]: (..., k, n_in)."""
    return slope * W[..., n_in:, :] @ W[..., :n_in, :].transpose(-1, -2)


def effective_matrix(module: UnitModule, W: Tensor) -> Tensor:
    """E(W) for unit weights W of shape (..., p, d); see the module docstring for each shape."""
    _check(module)
    module.check_unit_weights(W, width=False)
    if isinstance(module, TwoLayerMLP):
        return _two_block(module, W, module.D, module.act.slope0)
    if isinstance(module, OneLayerCNN):
        return _two_block(module, W, module.kernel[0] * module.kernel[1], module.act.slope0)
    if isinstance(module, MultiHeadAttention):
        _, _, v, r = torch.split(W, [n for _, n in module.blocks()], dim=-2)
        WV = unvec(v.transpose(-1, -2), module.d_v, module.D)  # (..., d, d_v, D)
        R = unvec(r.transpose(-1, -2), module.d_v, module.n_outputs)  # (..., d, d_v, k)
        return torch.einsum("...hac,...haj->...cj", R, WV)
    if isinstance(module, QueryKeyAttention):
        n = module.d_k * module.D
        WQ = unvec(W[..., :n, :].transpose(-1, -2), module.d_k, module.D)
        WK = unvec(W[..., n:, :].transpose(-1, -2), module.d_k, module.D)
        return torch.einsum("...hae,...haj->...ej", WK, WQ) / math.sqrt(module.d_k)
    k, D = module.n_outputs, module.D
    theta = unvec(W[..., D:, :].transpose(-1, -2), k, D)  # (..., d, k, D)
    G = module.gate.slope0 * torch.einsum("...icj,...li->...cjl", theta, W[..., :D, :])
    return (0.5 * (G + G.transpose(-1, -2))).reshape(*G.shape[:-3], k * D, D)


def effective_outputs(module: UnitModule, E: Tensor, x) -> Tensor:
    """The NQF output f - f(0) as the linear/bilinear form of E: (..., samples, k)."""
    _check(module)
    if isinstance(module, TwoLayerMLP):
        return x @ E.transpose(-1, -2)
    if isinstance(module, OneLayerCNN):
        return module.patch_sum(x) @ E.transpose(-1, -2)
    if isinstance(module, MixtureOfExperts):
        Ec = E.reshape(*E.shape[:-2], module.n_outputs, module.D, module.D)
        return torch.einsum("mj,...cjl,ml->...mc", x, Ec, x)
    q, X = x
    if isinstance(module, MultiHeadAttention):
        return X.mean(-1) @ E.transpose(-1, -2)
    u = context_covariance_readout(X, module.readout)  # (m, k, D)
    return torch.einsum("mce,...ej,mj->...mc", u, E, q)


def singular_values(module: UnitModule, W: Tensor, n: int) -> Tensor:
    """The n largest singular values of E(W), shape (..., n)."""
    from nqf import _checks

    n = _checks.integer("n", n, minimum=1)
    return torch.linalg.svdvals(effective_matrix(module, W))[..., :n]


def _orthonormal(n: int, r: int, gen: torch.Generator, dtype) -> Tensor:
    """n x r matrix with Haar-random orthonormal columns (QR with the sign fix)."""
    if r > n:
        raise ValueError(f"The teacher's singular vectors live in dimension {n}, so it takes at most "
                         f"{n} singular values; got {r}. Shorten singular_values or enlarge the module.")
    q, rr = torch.linalg.qr(torch.randn(n, r, generator=gen, dtype=dtype))
    return q * torch.sign(torch.diagonal(rr))


def teacher_weights(module: UnitModule, s, gen: torch.Generator) -> Tensor:
    """W* (p x r), one balanced rank-one unit per singular value, E(W*) = U diag(s) V^T.

    U and V have random orthonormal columns (for the MoE, U_a = a_a (x) v_a with orthonormal
    a_a, which keeps every E_c symmetric so the data identifies E exactly). Units that are
    attention heads use only their first row of W^Q, W^K (or W^V, R); the other rows stay 0.
    """
    _check(module)
    from nqf import _checks

    s_np = _checks.array("s", s, ndim=1, nonempty=True)
    _checks.nonnegative("s", s_np, what=" (singular values of the teacher's effective matrix)")
    s = torch.as_tensor(s_np, dtype=torch.float64)
    r, root = s.numel(), s.sqrt()
    dtype = torch.float64
    W = torch.zeros(module.p, r, dtype=dtype)
    if isinstance(module, (TwoLayerMLP, OneLayerCNN)):
        n_in = module.D if isinstance(module, TwoLayerMLP) else module.kernel[0] * module.kernel[1]
        U, V = _orthonormal(module.n_outputs, r, gen, dtype), _orthonormal(n_in, r, gen, dtype)
        W[:n_in] = V * root
        W[n_in:] = U * root / module.act.slope0
        return W
    if isinstance(module, MultiHeadAttention):
        U, V = _orthonormal(module.n_outputs, r, gen, dtype), _orthonormal(module.D, r, gen, dtype)
        e0 = torch.zeros(module.d_v, 1, dtype=dtype)
        e0[0] = 1.0
        WV = e0[None] * (V.T * root[:, None])[:, None, :]  # (r, d_v, D)
        R = e0[None] * (U.T * root[:, None])[:, None, :]  # (r, d_v, k)
        start = 2 * module.d_k * module.D
        W[start:start + module.d_v * module.D] = vec(WV).T
        W[start + module.d_v * module.D:] = vec(R).T
        return W
    if isinstance(module, QueryKeyAttention):
        U, V = _orthonormal(module.D, r, gen, dtype), _orthonormal(module.D, r, gen, dtype)
        scale = root * module.d_k ** 0.25
        e0 = torch.zeros(module.d_k, 1, dtype=dtype)
        e0[0] = 1.0
        n = module.d_k * module.D
        W[:n] = vec(e0[None] * (V.T * scale[:, None])[:, None, :]).T
        W[n:] = vec(e0[None] * (U.T * scale[:, None])[:, None, :]).T
        return W
    a, V = _orthonormal(module.n_outputs, r, gen, dtype), _orthonormal(module.D, r, gen, dtype)
    W[:module.D] = V * root
    theta = a.T[:, :, None] * (V.T * root[:, None])[:, None, :] / module.gate.slope0  # (r, k, D)
    W[module.D:] = vec(theta).T
    return W


def effective_features(form: BlockBilinearForm) -> torch.Tensor:
    """Phi(x_mu) with f_NQF - f(0) = <Phi, E(W)>, flattened to (m, n1 * n2).

    For a form without a Kronecker scale, A = 1/2 [[0, C (x) I_q], [.., 0]], C = sum_r a_r b_r^T,
    and Tr[W W^T A] = <C, E> with E[j, l] = sum over units and alpha of Z1[(j, alpha)] Z2[(l, alpha)].
    """
    if not isinstance(form, BlockBilinearForm) or form.scale is not None:
        raise ValueError("effective_features needs a BlockBilinearForm without a Kronecker scale.")
    left = form.left.expand(form.n_samples, form.n_outputs, form.rank, -1)
    right = form.right.expand(form.n_samples, form.n_outputs, form.rank, -1)
    return torch.einsum("skrj,skrl->skjl", left, right).reshape(form.m, -1)


def least_squares_nqf(phi_train, target_train, phi_test, f0_test):
    """The NQF's lowest reachable train loss and its minimiser's test predictions.

    min_E (1/m) |Phi vec(E) - (y - f0)|^2 over unconstrained E (a lower bound when the rank of E
    is capped below min(n1, n2); nqf.experiments.real_data checks that it is not). Returns
    (floor, vec E*, test outputs f0 + Phi_test vec E*).
    """
    phi, t = np.asarray(phi_train, float), np.asarray(target_train, float)
    e, *_ = np.linalg.lstsq(phi, t, rcond=None)
    floor = float(np.mean((phi @ e - t) ** 2))
    return floor, e, np.asarray(f0_test, float) + np.asarray(phi_test, float) @ e
