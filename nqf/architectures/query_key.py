"""Attention with fixed readout: query-key-only heads (Prop. 3) and single-head logits (Prop. 4).

Both read out through a fixed matrix Cr (D x k) (the paper's vector c for k = 1):
f_c = Cr[:, c]^T X softmax(L). Expanding softmax(L) = 1/N + J_S(0) L + O(L^2) with
J_S(0) = I/N - 1 1^T/N^2 gives X J_S(0) X^T = Sigma_X (the context covariance), hence
u_c = Sigma_X Cr[:, c] and the second-order term u_c^T W^K^T W^Q x / sqrt(d_k). L is quadratic
in the unit's weights, so f is even in them (Z2) and the error is O(|W|^4).
"""
from __future__ import annotations

import math

import torch

from nqf.architectures.base import QUERY_CONTEXT, UnitModule, gaussian, generator, unvec, vec
from nqf.factored import BlockBilinearForm

Tensor = torch.Tensor


def context_covariance_readout(X: Tensor, readout: Tensor) -> Tensor:
    """u_c = Sigma_X Cr[:, c] for contexts X (m, D, N): returns (m, k, D)."""
    centred = X - X.mean(-1, keepdim=True)
    sigma = centred @ centred.transpose(-1, -2) / X.shape[-1]
    return torch.einsum("mde,ec->mcd", sigma, readout)


class _FixedReadout(UnitModule):
    input_layout = QUERY_CONTEXT

    def _init_common(self, D, n_outputs, seq_len, gen, dtype):
        self.D, self.n_outputs, self.seq_len = D, n_outputs, seq_len
        self.register_buffer("readout", gaussian(gen, D, n_outputs, dtype=dtype))

    def sample_inputs(self, m: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        dtype = self.readout.dtype
        return (torch.randn(m, self.D, generator=gen, dtype=dtype),
                torch.randn(m, self.D, self.seq_len, generator=gen, dtype=dtype))


class QueryKeyAttention(_FixedReadout):
    """Heads as units, each w_i = [vec W^Q_i; vec W^K_i] (column-major), p = 2 d_k D (Eq. 9-10).

    A_c = 1/(2 sqrt d_k) [[0, x u_c^T (x) I_dk], [u_c x^T (x) I_dk, 0]]. Every head adds the
    constant Cr^T x_avg at W = 0, so f(0) = d Cr^T x_avg is not zero.
    """

    def __init__(self, D: int = 4, d_k: int = 2, width: int = 2, n_outputs: int = 2, seq_len: int = 5,
                 init_std: float = 1.0, seed: int | None = 0, dtype: torch.dtype = torch.float64):
        super().__init__()
        gen = generator(seed)
        self._init_common(D, n_outputs, seq_len, gen, dtype)
        self.d_k = d_k
        s = init_std / math.sqrt(D)
        self.WQ = torch.nn.Parameter(gaussian(gen, width, d_k, D, std=s, dtype=dtype))
        self.WK = torch.nn.Parameter(gaussian(gen, width, d_k, D, std=s, dtype=dtype))

    @property
    def p(self) -> int:
        return 2 * self.d_k * self.D

    @property
    def width(self) -> int:
        return self.WQ.shape[0]

    def blocks(self):
        return [("Q", self.d_k * self.D), ("K", self.d_k * self.D)]

    def forward(self, inputs: tuple[Tensor, Tensor]) -> Tensor:
        x, X = inputs
        q = torch.einsum("hkd,md->mhk", self.WQ, x)
        keys = torch.einsum("hkd,mdn->mhkn", self.WK, X)
        attn = torch.softmax(torch.einsum("mhk,mhkn->mhn", q, keys) / math.sqrt(self.d_k), dim=-1)
        return torch.einsum("dc,mdn,mhn->mc", self.readout, X, attn)

    def unit(self, w: Tensor, inputs: tuple[Tensor, Tensor]) -> Tensor:
        x, X = inputs
        n = self.d_k * self.D
        WQ, WK = unvec(w[:n], self.d_k, self.D), unvec(w[n:], self.d_k, self.D)
        attn = torch.softmax(X.T @ (WK.T @ (WQ @ x)) / math.sqrt(self.d_k), dim=-1)
        return self.readout.T @ (X @ attn)

    def structure(self, inputs: tuple[Tensor, Tensor]) -> BlockBilinearForm:
        x, X = inputs
        n = self.d_k * self.D
        left = (x / math.sqrt(self.d_k))[:, None, None, :]
        right = context_covariance_readout(X, self.readout)[:, :, None, :]
        return BlockBilinearForm(self.p, (0, n), (n, 2 * n), left, right, q=self.d_k)

    def params_from_unit_weights(self, W: Tensor) -> dict[str, Tensor]:
        n = self.d_k * self.D
        return {"WQ": unvec(W[:n].T, self.d_k, self.D), "WK": unvec(W[n:].T, self.d_k, self.D)}

    def unit_weights(self) -> Tensor:
        return torch.cat([vec(self.WQ), vec(self.WK)], dim=1).T


class SingleHeadLogits(_FixedReadout):
    """One head; the d_k rows (q_i, k_i) of W^Q, W^K are the units (Eq. 11-12), p = 2 D.

    The layer is not a sum over units (the logits sum over rows inside one softmax), but it is
    symmetric under permuting rows and has ZGZ. A = 1/(2 sqrt d_k) [[0, x u_c^T], [u_c x^T, 0]]
    with the module's d_k in the 1/sqrt(d_k), also when ``unit`` switches on a single row.
    """

    additive = False

    def __init__(self, D: int = 4, width: int = 3, n_outputs: int = 2, seq_len: int = 5,
                 init_std: float = 1.0, seed: int | None = 0, dtype: torch.dtype = torch.float64):
        super().__init__()
        gen = generator(seed)
        self._init_common(D, n_outputs, seq_len, gen, dtype)
        s = init_std / math.sqrt(D)
        self.WQ = torch.nn.Parameter(gaussian(gen, width, D, std=s, dtype=dtype))
        self.WK = torch.nn.Parameter(gaussian(gen, width, D, std=s, dtype=dtype))

    @property
    def d_k(self) -> int:
        return self.WQ.shape[0]

    @property
    def p(self) -> int:
        return 2 * self.D

    @property
    def width(self) -> int:
        return self.d_k

    def blocks(self):
        return [("q", self.D), ("k", self.D)]

    def forward(self, inputs: tuple[Tensor, Tensor]) -> Tensor:
        x, X = inputs
        logits = torch.einsum("mdn,kd,ke,me->mn", X, self.WK, self.WQ, x) / math.sqrt(self.d_k)
        return torch.einsum("dc,mdn,mn->mc", self.readout, X, torch.softmax(logits, dim=-1))

    def unit(self, w: Tensor, inputs: tuple[Tensor, Tensor]) -> Tensor:
        x, X = inputs
        logits = (X.T @ w[self.D:]) * (w[:self.D] @ x) / math.sqrt(self.d_k)
        return self.readout.T @ (X @ torch.softmax(logits, dim=-1))

    def structure(self, inputs: tuple[Tensor, Tensor]) -> BlockBilinearForm:
        x, X = inputs
        left = (x / math.sqrt(self.d_k))[:, None, None, :]
        right = context_covariance_readout(X, self.readout)[:, :, None, :]
        return BlockBilinearForm(self.p, (0, self.D), (self.D, 2 * self.D), left, right)

    def params_from_unit_weights(self, W: Tensor) -> dict[str, Tensor]:
        return {"WQ": W[:self.D].T, "WK": W[self.D:].T}

    def unit_weights(self) -> Tensor:
        return torch.cat([self.WQ.T, self.WK.T], dim=0)


class SelfAttentionReadout(QueryKeyAttention):
    """Query-key-only self-attention on a sequence X (D x N), mean-pooled over query positions.

    f_c(X) = sum_i (1/N) sum_n Cr[:, c]^T X softmax(X^T W^K_i^T W^Q_i x_n / sqrt(d_k)): every
    token x_n queries the same sequence and the outputs are averaged (paper Fig. 7's attention
    with a fixed readout vector, the image's rows as tokens). Units and parameter order are those
    of :class:`QueryKeyAttention` (w_i = [vec W^Q_i; vec W^K_i]). The logit is linear in the
    query, so averaging the queries averages A: A_c is Eq. 10 with x -> x_avg = X 1_N / N,
    A_c = 1/(2 sqrt d_k) [[0, x_avg u_c^T (x) I_dk], [u_c x_avg^T (x) I_dk, 0]], u_c = Sigma_X Cr[:, c];
    f(0) = d Cr^T x_avg is not zero. Inputs are sequences X of shape (m, D, N) only; an image
    (H, W) is read as its H rows, tokens of dimension W.
    """

    input_layout = (("x", ("feature", "token")),)

    def forward(self, X: Tensor) -> Tensor:
        # logits through each head's D x D matrix W^Q^T W^K: no (m, heads, d_k, N) intermediates,
        # about d_k / D times fewer flops than forming queries and keys when d_k > D
        QK = torch.einsum("hkd,hke->hde", self.WQ, self.WK)
        right = torch.einsum("hde,men->mhdn", QK, X)
        logits = torch.einsum("mdq,mhdn->mhqn", X, right) / math.sqrt(self.d_k)
        pooled = torch.softmax(logits, dim=-1).mean(-2)  # (m, heads, N): attention averaged over queries
        return torch.einsum("dc,mdn,mhn->mc", self.readout, X, pooled)

    def forward_replicas(self, W: Tensor, X: Tensor) -> Tensor:
        """Outputs (R, m, k) at unit weights W (R, p, d) for sequences X (m, D, N): every replica's
        heads at once (the same numbers as ``forward_with``, tested). W^K X for all heads is one
        large matmul and the logits one batched matmul over samples, instead of m * heads tiny ones."""
        n, D = self.d_k * self.D, self.D
        m, _, N = X.shape
        WQ = unvec(W[:, :n].transpose(1, 2), self.d_k, D)  # (R, heads, d_k, D)
        WK = unvec(W[:, n:].transpose(1, 2), self.d_k, D)
        QK = torch.einsum("rhkd,rhke->rhde", WQ, WK)  # each head's D x D bilinear form
        R, heads = QK.shape[:2]
        G = R * heads
        right = (QK.reshape(G * D, D) @ X.permute(1, 0, 2).reshape(D, m * N)).reshape(G, D, m, N)
        right = right.permute(2, 1, 0, 3).reshape(m, D, G * N)
        logits = torch.bmm(X.transpose(1, 2), right).reshape(m, N, G, N) / math.sqrt(self.d_k)
        pooled = torch.softmax(logits, dim=-1).mean(1).reshape(m, R, heads, N)  # averaged over queries
        return torch.einsum("dc,mdn,mrhn->rmc", self.readout, X, pooled)

    def unit(self, w: Tensor, X: Tensor) -> Tensor:
        n = self.d_k * self.D
        WQ, WK = unvec(w[:n], self.d_k, self.D), unvec(w[n:], self.d_k, self.D)
        attn = torch.softmax((X.T @ WQ.T) @ (WK @ X) / math.sqrt(self.d_k), dim=-1)  # (query, key)
        return self.readout.T @ (X @ attn.mean(0))

    def structure(self, X: Tensor) -> BlockBilinearForm:
        n = self.d_k * self.D
        left = (X.mean(-1) / math.sqrt(self.d_k))[:, None, None, :]
        right = context_covariance_readout(X, self.readout)[:, :, None, :]
        return BlockBilinearForm(self.p, (0, n), (n, 2 * n), left, right, q=self.d_k)

    def sample_inputs(self, m: int, gen: torch.Generator) -> Tensor:
        return torch.randn(m, self.D, self.seq_len, generator=gen, dtype=self.readout.dtype)

    def unit_input_norm2(self, X: Tensor) -> Tensor:
        return X.pow(2).sum(-2).mean()  # |token|^2, tokens along the last axis

    @staticmethod
    def image_size(image: tuple[int, int]) -> dict:
        return {"D": image[1], "seq_len": image[0]}

    def image_inputs(self, images: Tensor) -> Tensor:
        return images.transpose(-1, -2)  # (m, D = W, N = H): the rows as tokens
