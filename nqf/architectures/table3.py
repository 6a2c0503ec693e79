"""The quadratic models of Table 3, each as an exact NQF with its unit function and factored A.

These models are quadratic in their weights already, so f = Tr[W W^T A(x)] holds exactly and the
registry marks them ``exact``. Each class gives the natural parameters as W (p x d), the unit
function (for autograd), and A(x) in factored form. Where the paper's neurons are the rows of
its W (tied query-key, linear SSL) our W is its transpose, so that M = W W^T throughout.
Scalar outputs (k = 1) throughout.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch.func import vmap

from nqf.architectures.base import MATRIX, QUERY_CONTEXT, UnitModule, gaussian, generator, orthonormal
from nqf.architectures.mode_designs import pair_modes, standard_normal, whitened
from nqf.architectures.query_key import context_covariance_readout
from nqf.theory.factored import BlockBilinearForm, LowRankSymmetricForm
from nqf.theory.forms import DiagonalForm, StructureForm

Tensor = torch.Tensor


class QuadraticUnitModel(UnitModule):
    """f(x) = sum_i unit(w_i, x) with W (p x d) as the parameter; subclasses give unit and A."""

    n_outputs = 1

    def __init__(self, p: int, width: int, seed: int | None, dtype: torch.dtype, init_std: float = 1.0):
        super().__init__()
        self._p = p
        self.W = torch.nn.Parameter(gaussian(generator(seed), p, width, std=init_std / math.sqrt(p), dtype=dtype))

    @property
    def p(self) -> int:
        return self._p

    @property
    def width(self) -> int:
        return self.W.shape[1]

    @property
    def unit_input_dim(self) -> int:
        return getattr(self, "D", self.p)  # the D-vector each factor reads, else the p entries w pairs with

    def forward(self, x: Any) -> Tensor:
        per_unit = vmap(vmap(self.unit, in_dims=(0, None)), in_dims=(None, 0))(self.W.T, x)
        return per_unit.sum(1)

    def params_from_unit_weights(self, W: Tensor) -> dict[str, Tensor]:
        return {"W": W}

    def unit_weights(self) -> Tensor:
        return self.W

    def _randn(self, gen, *shape):
        return torch.randn(*shape, generator=gen, dtype=self.W.dtype)


def _eye_rows(n: int, like: Tensor) -> Tensor:
    """Factor a_r = e_r (r = 1..n) shared by all samples: C = sum_r e_r S[r, :]^T = S."""
    return torch.eye(n, dtype=like.dtype, device=like.device)[None, None]


class PhaseRetrieval(QuadraticUnitModel):
    """Quadratic network / phase retrieval: f = sum_i (w_i . a)^2, A = a a^T."""

    def __init__(self, D: int = 5, width: int = 3, seed: int | None = 0, dtype=torch.float64):
        super().__init__(D, width, seed, dtype)

    def blocks(self):
        return [("w", self.p)]

    def unit(self, w, x):
        return (w @ x)[None] ** 2

    def structure(self, x) -> StructureForm:
        return LowRankSymmetricForm(x)

    def sample_inputs(self, m, gen):
        return self._randn(gen, m, self.p)

    @classmethod
    def mode_design(cls, n_modes, width, gen, seed):
        """Sensing vectors along the directions of one orthonormal basis (commuting A)."""
        D = n_modes + 1
        O = orthonormal(D, D, gen)
        scale = 0.5 + torch.rand(2 * D, generator=gen, dtype=torch.float64)
        a = scale[:, None] * O.T.repeat(2, 1)  # every sensing vector along one basis direction
        return dict(D=D, width=width, seed=seed), (a,), O[:, :n_modes], "orthogonal sensing directions"


class DiagonalNet(QuadraticUnitModel):
    """Diagonal linear network, square parametrisation: f = sum_k x_k u_k^2 / 4, A = Diag(x) / 4."""

    def __init__(self, D: int = 5, width: int = 1, seed: int | None = 0, dtype=torch.float64):
        super().__init__(D, width, seed, dtype)

    def blocks(self):
        return [("u", self.p)]

    def unit(self, w, x):
        return (x * w * w).sum()[None] / 4

    def structure(self, x) -> StructureForm:
        return DiagonalForm(x / 4)

    def sample_inputs(self, m, gen):
        return self._randn(gen, m, self.p)

    @classmethod
    def mode_design(cls, n_modes, width, gen, seed):
        """Whitened inputs: C = I / 2, the modes are coordinate directions."""
        D = n_modes + 1
        x = whitened(standard_normal(gen, 4 * D, D))
        return dict(D=D, width=width, seed=seed), (x,), torch.eye(D, n_modes, dtype=torch.float64), \
            "whitened inputs: C = I / 2"


class DiagonalNetTwoFactor(QuadraticUnitModel):
    """Diagonal network, two-factor signed form: f = u^T Diag(x) v, A = 1/2 [[0, Diag x], [Diag x, 0]]."""

    def __init__(self, D: int = 4, width: int = 1, seed: int | None = 0, dtype=torch.float64):
        super().__init__(2 * D, width, seed, dtype)
        self.D = D

    def blocks(self):
        return [("u", self.D), ("v", self.D)]

    def unit(self, w, x):
        return (w[:self.D] * x * w[self.D:]).sum()[None]

    def structure(self, x) -> StructureForm:
        one = torch.ones(1, 1, 1, 1, dtype=x.dtype, device=x.device)
        return BlockBilinearForm(self.p, (0, self.D), (self.D, self.p), one, one,
                                 scale=x[:, None, None, :], q=self.D)

    def sample_inputs(self, m, gen):
        return self._randn(gen, m, self.D)


class MatrixSensing(QuadraticUnitModel):
    """PSD matrix sensing / factorisation: y = <S, W W^T>, A = Sym(S) (S need not be symmetric)."""

    input_layout = MATRIX

    def __init__(self, n: int = 4, width: int = 2, seed: int | None = 0, dtype=torch.float64):
        super().__init__(n, width, seed, dtype)

    def blocks(self):
        return [("w", self.p)]

    def unit(self, w, x):
        return (w @ x @ w)[None]

    def structure(self, x) -> StructureForm:
        return BlockBilinearForm(self.p, (0, self.p), (0, self.p), _eye_rows(self.p, x), x[:, None])

    def sample_inputs(self, m, gen):
        return self._randn(gen, m, self.p, self.p)

    @classmethod
    def mode_design(cls, n_modes, width, gen, seed):
        """Jointly diagonalisable S_mu (commuting A): the modes are their shared eigenvectors."""
        n = n_modes + 1
        O = orthonormal(n, n, gen)
        lam = whitened(standard_normal(gen, 4 * n, n))
        S = torch.einsum("ik,mk,jk->mij", O, lam, O)
        return dict(n=n, width=width, seed=seed), (S,), O[:, :n_modes], "jointly diagonalisable S_mu"


class RectangularSensing(QuadraticUnitModel):
    """Rectangular sensing / matrix factorisation: y = <S, U V^T> = Tr(U^T S V), A = 1/2 [[0, S], [S^T, 0]].

    Unit i is [u_i (n_out); v_i (n_in)], the i-th columns of U and V.
    """

    input_layout = MATRIX

    def __init__(self, n_out: int = 3, n_in: int = 4, width: int = 2, seed: int | None = 0, dtype=torch.float64):
        super().__init__(n_out + n_in, width, seed, dtype)
        self.n_out, self.n_in = n_out, n_in

    def blocks(self):
        return [("u", self.n_out), ("v", self.n_in)]

    def unit(self, w, x):
        return (w[:self.n_out] @ x @ w[self.n_out:])[None]

    def structure(self, x) -> StructureForm:
        return BlockBilinearForm(self.p, (0, self.n_out), (self.n_out, self.p),
                                 _eye_rows(self.n_out, x), x[:, None])

    def sample_inputs(self, m, gen):
        return self._randn(gen, m, self.n_out, self.n_in)

    @classmethod
    def mode_design(cls, n_modes, width, gen, seed):
        """Whitened sensing matrices: C = I, q_k = (u_k, v_k) / sqrt 2 (Corollary 4)."""
        K = n_modes
        n_out, n_in = K, K + 1
        S = whitened(standard_normal(gen, 2 * n_out * n_in, n_out * n_in)).reshape(-1, n_out, n_in)
        Q = pair_modes(n_out + n_in, 0, orthonormal(n_out, K, gen), n_out, orthonormal(n_in, K, gen))
        return dict(n_out=n_out, n_in=n_in, width=width, seed=seed), (S,), Q, "whitened sensing matrices: C = I"


class MatrixCompletion(QuadraticUnitModel):
    """Matrix completion / recommender entry R_ij = u_i^T v_j (also the word-context score s_wc = u_w^T v_c).

    Unit r is [U[:, r] (n_rows); V[:, r] (n_cols)]; an input is the pair of one-hot vectors
    (e_i, e_j), so A_ij = 1/2 [[0, e_i e_j^T], [e_j e_i^T, 0]] (rank one, stored as e_i and e_j).
    """

    input_layout = (("e_row", ("row",)), ("e_col", ("col",)))  # one-hot row and column

    def __init__(self, n_rows: int = 4, n_cols: int = 3, width: int = 2, seed: int | None = 0, dtype=torch.float64):
        super().__init__(n_rows + n_cols, width, seed, dtype)
        self.n_rows, self.n_cols = n_rows, n_cols

    def blocks(self):
        return [("u", self.n_rows), ("v", self.n_cols)]

    def unit(self, w, x):
        e_i, e_j = x
        return ((w[:self.n_rows] @ e_i) * (w[self.n_rows:] @ e_j))[None]

    def structure(self, x) -> StructureForm:
        e_i, e_j = x
        return BlockBilinearForm(self.p, (0, self.n_rows), (self.n_rows, self.p),
                                 e_i[:, None, None, :], e_j[:, None, None, :])

    def sample_inputs(self, m, gen):
        i = torch.randint(self.n_rows, (m,), generator=gen)
        j = torch.randint(self.n_cols, (m,), generator=gen)
        eye_r = torch.eye(self.n_rows, dtype=self.W.dtype)
        eye_c = torch.eye(self.n_cols, dtype=self.W.dtype)
        return eye_r[i], eye_c[j]


class TiedQueryKey(QuadraticUnitModel):
    """Tied query-key attention score u^T W_t^T W_t x / sqrt(d_k), u = Sigma_X c (Table 3).

    The neurons are the d_k rows of the paper's W_t, i.e. our columns w_i (D); inputs (x, X) with a
    fixed readout c. A = (x u^T + u x^T) / (2 sqrt d_k). In the paper W_t has d_k rows, so
    d_k is the number of units and by default ``d_k = width``: then A(x), hence the NQF, changes
    with the width (the 1/sqrt(d_k) of attention). Give ``d_k`` to fix the scale while varying the
    number of units (a width sweep on one A(x)).
    """

    input_layout = QUERY_CONTEXT

    def __init__(self, D: int = 4, width: int = 2, seq_len: int = 5, seed: int | None = 0, dtype=torch.float64,
                 d_k: int | None = None):
        super().__init__(D, width, seed, dtype)
        self.seq_len = seq_len
        self.d_k = width if d_k is None else int(d_k)
        if self.d_k < 1:
            raise ValueError(f"d_k must be a positive integer (the 1/sqrt(d_k) scale); got {d_k!r}.")
        self.register_buffer("readout", gaussian(generator((seed or 0) + 1), D, 1, dtype=dtype))

    def blocks(self):
        return [("w", self.p)]

    def _u(self, X):
        return context_covariance_readout(X, self.readout)[..., 0, :]

    def unit(self, w, x):
        query, X = x
        return ((self._u(X[None])[0] @ w) * (w @ query))[None] / math.sqrt(self.d_k)

    def structure(self, x) -> StructureForm:
        query, X = x
        left = (query / math.sqrt(self.d_k))[:, None, None, :]
        return BlockBilinearForm(self.p, (0, self.p), (0, self.p), left, self._u(X)[:, None, None, :])

    def sample_inputs(self, m, gen):
        return self._randn(gen, m, self.p), self._randn(gen, m, self.p, self.seq_len)


class BilinearSequence(QuadraticUnitModel):
    """Bilinear sequence regression: a token pair (x_s, x_t) scored x_s^T U V^T x_t.

    Unit i is [u_i; v_i] (columns of U, V); A_st = 1/2 [[0, x_s x_t^T], [x_t x_s^T, 0]].
    """

    input_layout = (("source", ("feature",)), ("target", ("feature",)))  # the token pair

    def __init__(self, D: int = 4, width: int = 2, seed: int | None = 0, dtype=torch.float64):
        super().__init__(2 * D, width, seed, dtype)
        self.D = D

    def blocks(self):
        return [("u", self.D), ("v", self.D)]

    def unit(self, w, x):
        xs, xt = x
        return ((w[:self.D] @ xs) * (w[self.D:] @ xt))[None]

    def structure(self, x) -> StructureForm:
        xs, xt = x
        return BlockBilinearForm(self.p, (0, self.D), (self.D, self.p), xs[:, None, None, :], xt[:, None, None, :])

    def sample_inputs(self, m, gen):
        return self._randn(gen, m, self.D), self._randn(gen, m, self.D)


class LinearSSL(QuadraticUnitModel):
    """Linear self-supervised learning: |W_t Delta|^2 = Tr(W_t^T W_t Delta Delta^T), Delta = x - chi.

    The neurons are the rows of the paper's W_t (our columns); an input is the pair of views
    (x, chi); A = Delta Delta^T.
    """

    input_layout = (("view", ("feature",)), ("other", ("feature",)))  # the two views

    def __init__(self, D: int = 5, width: int = 2, seed: int | None = 0, dtype=torch.float64):
        super().__init__(D, width, seed, dtype)

    def blocks(self):
        return [("w", self.p)]

    def unit(self, w, x):
        view, other = x
        return (w @ (view - other))[None] ** 2

    def structure(self, x) -> StructureForm:
        view, other = x
        return LowRankSymmetricForm(view - other)

    def sample_inputs(self, m, gen):
        return self._randn(gen, m, self.p), self._randn(gen, m, self.p)
