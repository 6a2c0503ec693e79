"""Multi-head attention with a linear readout per head (Prop. 2, Eq. 7-8), k outputs.

f_c(x, X) = sum_i R_i[:, c]^T W^V_i X softmax(X^T W^K_i^T W^Q_i x / sqrt(d_k)),
query token x (D), context X (D x N), W^Q_i, W^K_i (d_k x D), W^V_i (d_v x D), readout R_i (d_v x k)
(for k = 1, R_i is the paper's v_i). Unit i is w_i = [vec W^Q_i; vec W^K_i; vec W^V_i; vec R_i],
column-major vecs, p = 2 d_k D + d_v D + d_v k.

A_c = 1/2 [[0 (Q, K)], [0, x_avg e_c^T (x) I_dv], [e_c x_avg^T (x) I_dv, 0]] on the (V, R) blocks,
x_avg = X 1_N / N: softmax(L) = 1/N + O(|w|^2) and L is quadratic in (W^Q, W^K), so Q and K
enter at quartic order only. Each head is even in its own weights (Z2): the error is O(|W|^4).
"""
from __future__ import annotations

import math

import torch

from nqf.architectures.base import QUERY_CONTEXT, UnitModule, gaussian, generator, orthonormal, unvec, vec
from nqf.architectures.effective import first_row_units, singular_vectors
from nqf.architectures.mode_designs import pair_modes, standard_normal, whitened
from nqf.theory.factored import BlockBilinearForm

Tensor = torch.Tensor


class MultiHeadAttention(UnitModule):
    """Heads as units; inputs are (x, X): queries (m, D) and contexts (m, D, N)."""

    input_layout = QUERY_CONTEXT

    def __init__(self, D: int = 4, d_k: int = 2, d_v: int = 3, width: int = 2, n_outputs: int = 2,
                 seq_len: int = 5, init_std: float = 1.0, seed: int | None = 0,
                 dtype: torch.dtype = torch.float64):
        super().__init__()
        gen = generator(seed)
        self.D, self.d_k, self.d_v, self.n_outputs, self.seq_len = D, d_k, d_v, n_outputs, seq_len
        s = init_std / math.sqrt(D)
        self.WQ = torch.nn.Parameter(gaussian(gen, width, d_k, D, std=s, dtype=dtype))
        self.WK = torch.nn.Parameter(gaussian(gen, width, d_k, D, std=s, dtype=dtype))
        self.WV = torch.nn.Parameter(gaussian(gen, width, d_v, D, std=s, dtype=dtype))
        self.R = torch.nn.Parameter(gaussian(gen, width, d_v, n_outputs, std=init_std / math.sqrt(d_v), dtype=dtype))

    @property
    def p(self) -> int:
        return sum(n for _, n in self.blocks())

    @property
    def width(self) -> int:
        return self.WQ.shape[0]

    def blocks(self):
        return [("Q", self.d_k * self.D), ("K", self.d_k * self.D), ("V", self.d_v * self.D),
                ("v", self.d_v * self.n_outputs)]

    def _split(self, W: Tensor) -> list[Tensor]:
        """W (p, ...) -> [vec W^Q, vec W^K, vec W^V, vec R] along the first axis."""
        return list(torch.split(W, [n for _, n in self.blocks()], dim=0))

    def forward(self, inputs: tuple[Tensor, Tensor]) -> Tensor:
        # Contraction order keeps every intermediate at (m, heads, D): W^K^T W^Q x first, and the
        # context X attn before W^V (about 10x fewer flops than forming keys or W^V X per token).
        x, X = inputs
        qk = torch.einsum("hkd,md,hke->mhe", self.WQ, x, self.WK)
        attn = torch.softmax(torch.einsum("mhe,men->mhn", qk, X) / math.sqrt(self.d_k), dim=-1)
        context = torch.einsum("mdn,mhn->mhd", X, attn)
        return torch.einsum("mhd,hvd,hvc->mc", context, self.WV, self.R)

    def unit(self, w: Tensor, inputs: tuple[Tensor, Tensor]) -> Tensor:
        x, X = inputs
        q, k, v, r = self._split(w)
        WQ, WK = unvec(q, self.d_k, self.D), unvec(k, self.d_k, self.D)
        WV, R = unvec(v, self.d_v, self.D), unvec(r, self.d_v, self.n_outputs)
        attn = torch.softmax(X.T @ (WK.T @ (WQ @ x)) / math.sqrt(self.d_k), dim=-1)
        return R.T @ (WV @ (X @ attn))

    def structure(self, inputs: tuple[Tensor, Tensor]) -> BlockBilinearForm:
        x, X = inputs
        start = 2 * self.d_k * self.D
        stop = start + self.d_v * self.D
        left = X.mean(-1)[:, None, None, :]
        right = torch.eye(self.n_outputs, dtype=X.dtype, device=X.device)[None, :, None, :]
        return BlockBilinearForm(self.p, (start, stop), (stop, self.p), left, right, q=self.d_v)

    def params_from_unit_weights(self, W: Tensor) -> dict[str, Tensor]:
        q, k, v, r = (t.T for t in self._split(W))
        return {"WQ": unvec(q, self.d_k, self.D), "WK": unvec(k, self.d_k, self.D),
                "WV": unvec(v, self.d_v, self.D), "R": unvec(r, self.d_v, self.n_outputs)}

    def unit_weights(self) -> Tensor:
        return torch.cat([vec(self.WQ), vec(self.WK), vec(self.WV), vec(self.R)], dim=1).T

    def sample_inputs(self, m: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        dtype = self.WQ.dtype
        return (torch.randn(m, self.D, generator=gen, dtype=dtype),
                torch.randn(m, self.D, self.seq_len, generator=gen, dtype=dtype))

    def effective_matrix(self, W: Tensor) -> Tensor:
        """Prop. 2: E = sum_h R_h^T W^V_h (k x D); f - f(0) = E x_avg, x_avg = X 1 / N."""
        _, _, v, r = torch.split(W, [n for _, n in self.blocks()], dim=-2)
        WV = unvec(v.transpose(-1, -2), self.d_v, self.D)  # (..., d, d_v, D)
        R = unvec(r.transpose(-1, -2), self.d_v, self.n_outputs)  # (..., d, d_v, k)
        return torch.einsum("...hac,...haj->...cj", R, WV)

    def effective_outputs(self, E: Tensor, x: tuple[Tensor, Tensor]) -> Tensor:
        _, X = x
        return X.mean(-1) @ E.transpose(-1, -2)

    def teacher_units(self, root: Tensor, gen: torch.Generator) -> Tensor:
        """Teacher heads use the first row of W^V and R only; W^Q, W^K stay 0."""
        r = root.numel()
        W = torch.zeros(self.p, r, dtype=torch.float64)
        U, V = singular_vectors(self.n_outputs, r, gen), singular_vectors(self.D, r, gen)
        start = 2 * self.d_k * self.D
        W[start:start + self.d_v * self.D] = first_row_units(V.T * root[:, None], self.d_v)
        W[start + self.d_v * self.D:] = first_row_units(U.T * root[:, None], self.d_v)
        return W

    @classmethod
    def mode_design(cls, n_modes, width, gen, seed):
        """Contexts with whitened token means, d_v = 1 (no I_dv Kronecker factor, so no degenerate
        copies of a mode); the modes live on the (V, R) blocks."""
        K = n_modes
        D, d_k = K + 1, 2
        build = dict(D=D, d_k=d_k, d_v=1, width=width, n_outputs=K, seq_len=5, seed=seed)
        x, X = standard_normal(gen, 4 * D, D), standard_normal(gen, 4 * D, D, 5)
        xbar = X.mean(-1)
        X = X + (whitened(xbar) - xbar)[..., None]  # shift every context so x_avg is whitened
        v_start = 2 * d_k * D
        Q = pair_modes(v_start + D + K, v_start, orthonormal(D, K, gen), v_start + D, orthonormal(K, K, gen))
        return build, (x, X), Q, "contexts with whitened token means, d_v = 1"
