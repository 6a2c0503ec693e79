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

from nqf.architectures.base import QUERY_CONTEXT, UnitModule, gaussian, generator, orthonormal, unvec, vec
from nqf.architectures.effective import first_row_units, singular_vectors
from nqf.architectures.mode_designs import pair_modes, standard_normal, whitened
from nqf.theory.factored import BlockBilinearForm

Tensor = torch.Tensor


def context_covariance_readout(X: Tensor, readout: Tensor) -> Tensor:
    """u_c = Sigma_X Cr[:, c] for contexts X (m, D, N): returns (m, k, D)."""
    centred = X - X.mean(-1, keepdim=True)
    sigma = centred @ centred.transpose(-1, -2) / X.shape[-1]
    return torch.einsum("mde,ec->mcd", sigma, readout)


def _contexts(m: int, D: int, N: int, gen: torch.Generator) -> Tensor:
    """m contexts of N tokens whose centred covariance is exactly I_D (random means)."""
    Z = standard_normal(gen, m, D, N)
    Z = Z - Z.mean(-1, keepdim=True)
    L = torch.linalg.cholesky(Z @ Z.transpose(-1, -2) / N)
    return torch.linalg.solve_triangular(L, Z, upper=False) + standard_normal(gen, m, D, 1)


class _FixedReadout(UnitModule):
    input_layout = QUERY_CONTEXT

    @classmethod
    def mode_design(cls, n_modes, width, gen, seed, **sizes):
        """Whitened queries and contexts with covariance I: Sigma_X = I makes u_c the readout
        column c, so C(Q) = Q Cr Cr^T / (k d_k), whose eigenmatrices are a b^T with b a left
        singular vector of the readout. ``sizes`` are further constructor arguments."""
        K = n_modes
        D = K + 1
        build = dict(D=D, width=width, n_outputs=K, seq_len=D + 2, seed=seed, **sizes)
        module = cls(**build)
        x, X = whitened(standard_normal(gen, 4 * D, D)), _contexts(4 * D, D, D + 2, gen)
        b = torch.linalg.svd(module.readout, full_matrices=False)[0][:, :K]
        Q = pair_modes(2 * D, 0, orthonormal(D, K, gen), D, b)
        return build, (x, X), Q, "whitened queries, contexts with covariance I"

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

    def effective_matrix(self, W: Tensor) -> Tensor:
        """Prop. 3: E = sum_h W^K_h^T W^Q_h / sqrt(d_k) (D x D); f_c - f_c(0) = u_c^T E x,
        u_c = Sigma_X Cr[:, c]."""
        n = self.d_k * self.D
        WQ = unvec(W[..., :n, :].transpose(-1, -2), self.d_k, self.D)
        WK = unvec(W[..., n:, :].transpose(-1, -2), self.d_k, self.D)
        return torch.einsum("...hae,...haj->...ej", WK, WQ) / math.sqrt(self.d_k)

    def effective_outputs(self, E: Tensor, x: tuple[Tensor, Tensor]) -> Tensor:
        q, X = x
        u = context_covariance_readout(X, self.readout)  # (m, k, D)
        return torch.einsum("mce,...ej,mj->...mc", u, E, q)

    def teacher_units(self, root: Tensor, gen: torch.Generator) -> Tensor:
        """Teacher heads use the first row of W^Q and W^K only, each scaled by d_k^(1/4)."""
        r = root.numel()
        W = torch.zeros(self.p, r, dtype=torch.float64)
        U, V = singular_vectors(self.D, r, gen), singular_vectors(self.D, r, gen)
        scale = root * self.d_k ** 0.25
        n = self.d_k * self.D
        W[:n] = first_row_units(V.T * scale[:, None], self.d_k)
        W[n:] = first_row_units(U.T * scale[:, None], self.d_k)
        return W

    @classmethod
    def mode_design(cls, n_modes, width, gen, seed):
        """The fixed-readout design with d_k = 1: no I_dk Kronecker factor, so no degenerate
        copies of a mode."""
        return super().mode_design(n_modes, width, gen, seed, d_k=1)


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


QUERIES = ("all", "first", "last")
HEADS = ("sum", "mean")


class SelfAttentionReadout(QueryKeyAttention):
    """Query-key-only self-attention on a sequence X (D x N) with a fixed readout (paper Fig. 7).

    f_c(X) = s_h sum_i (1/|Q|) sum_(n in Q) Cr[:, c]^T X softmax(X^T W^K_i^T W^Q_i x_n / sqrt(d_k)):
    the tokens in Q query the same sequence and their outputs are averaged (the image's rows as
    tokens). Units and parameter order are those of :class:`QueryKeyAttention`
    (w_i = [vec W^Q_i; vec W^K_i]). The paper leaves three choices open, each an option:

    * ``query``: which tokens query, ``all`` (mean-pooled, the default), ``first`` or ``last``;
    * ``heads``: the heads' outputs summed (``sum``, s_h = 1) or averaged (``mean``, s_h = 1/d);
      f is linear in Cr, so ``mean`` equals ``sum`` with the readout divided by d;
    * ``center``: keep f(0) = s_h d Cr^T x_avg (False) or remove it, reading out
      Cr^T X (softmax(...) - 1/N) (True): the output of uniform attention is subtracted.

    The logit is linear in the query, so averaging the queries averages A: A_c is Eq. 10 with x
    replaced by the mean query q = (1/|Q|) sum_(n in Q) x_n and scaled by s_h,
    A_c = s_h / (2 sqrt d_k) [[0, q u_c^T (x) I_dk], [u_c q^T (x) I_dk, 0]], u_c = Sigma_X Cr[:, c].
    ``center`` changes f(0) only. Inputs are sequences X of shape (m, D, N).
    """

    input_layout = (("x", ("feature", "token")),)

    def __init__(self, D: int = 4, d_k: int = 2, width: int = 2, n_outputs: int = 2, seq_len: int = 5,
                 init_std: float = 1.0, seed: int | None = 0, dtype: torch.dtype = torch.float64,
                 query: str = "all", heads: str = "sum", center: bool = False):
        from nqf import validate

        super().__init__(D=D, d_k=d_k, width=width, n_outputs=n_outputs, seq_len=seq_len, init_std=init_std,
                         seed=seed, dtype=dtype)
        self.query = validate.choice("SelfAttentionReadout: query", query, QUERIES)
        self.heads = validate.choice("SelfAttentionReadout: heads", heads, HEADS)
        if not isinstance(center, bool):
            raise TypeError(f"SelfAttentionReadout: center must be True or False; got {center!r:.40}.")
        self.center = center

    @property
    def head_scale(self) -> float:
        """s_h: 1 for summed heads, 1/d for averaged ones."""
        return 1.0 if self.heads == "sum" else 1.0 / self.width

    def queries(self, X: Tensor) -> Tensor:
        """The query tokens (m, D, |Q|) of sequences X (m, D, N)."""
        if self.query == "first":
            return X[..., :1]
        if self.query == "last":
            return X[..., -1:]
        return X

    def _readout_out(self, values: Tensor, pooled: Tensor) -> Tensor:
        """sum over heads of values . pooled attention, less the uniform output if centred.
        values (m, c, N) = Cr^T X per token; pooled (..., m, heads, N) -> (..., m, c)."""
        if self.center:
            pooled = pooled - 1.0 / pooled.shape[-1]
        return self.head_scale * torch.einsum("mcn,...mhn->...mc", values, pooled)

    def forward(self, X: Tensor) -> Tensor:
        # logits through each head's D x D matrix W^Q^T W^K: no (m, heads, d_k, N) intermediates,
        # about d_k / D times fewer flops than forming queries and keys when d_k > D
        QK = torch.einsum("hkd,hke->hde", self.WQ, self.WK) / math.sqrt(self.d_k)
        right = torch.einsum("hde,men->mhdn", QK, X)
        logits = torch.einsum("mdq,mhdn->mhqn", self.queries(X), right)
        pooled = torch.softmax(logits, dim=-1).mean(-2)  # (m, heads, N): attention averaged over queries
        return self._readout_out(torch.einsum("dc,mdn->mcn", self.readout, X), pooled)

    def forward_replicas(self, W: Tensor, X: Tensor) -> Tensor:
        """Outputs (R, m, k) at unit weights W (R, p, d) for sequences X (m, D, N): every replica's
        heads at once, the same numbers as ``forward_with`` (tested). The softmax and its gradient
        run over blocks of samples that stay in cache (:class:`PooledAttention`), never forming the
        (m, R x heads, N, N) logits at once; only the D x D matrices W^Q^T W^K go through autograd."""
        n, D = self.d_k * self.D, self.D
        WQ = unvec(W[:, :n].transpose(1, 2), self.d_k, D)  # (R, heads, d_k, D)
        WK = unvec(W[:, n:].transpose(1, 2), self.d_k, D)
        QK = torch.einsum("rhkd,rhke->rhde", WQ, WK) / math.sqrt(self.d_k)  # each head's D x D form
        R, heads = QK.shape[:2]
        values = torch.einsum("dc,mdn->mcn", self.readout, X)
        pooled = PooledAttention.apply(QK.reshape(R * heads, D, D), X, self.queries(X), values)  # (m, G, c)
        if self.center:
            pooled = pooled - values.mean(-1)[:, None, :]
        out = self.head_scale * pooled.reshape(X.shape[0], R, heads, -1).sum(2)
        return out.transpose(0, 1)

    def unit(self, w: Tensor, X: Tensor) -> Tensor:
        n = self.d_k * self.D
        WQ, WK = unvec(w[:n], self.d_k, self.D), unvec(w[n:], self.d_k, self.D)
        attn = torch.softmax((self.queries(X).T @ WQ.T) @ (WK @ X) / math.sqrt(self.d_k), dim=-1)  # (query, key)
        pooled = attn.mean(0)
        if self.center:
            pooled = pooled - 1.0 / X.shape[-1]
        return self.head_scale * (self.readout.T @ (X @ pooled))

    def structure(self, X: Tensor) -> BlockBilinearForm:
        n = self.d_k * self.D
        left = (self.head_scale * self.queries(X).mean(-1) / math.sqrt(self.d_k))[:, None, None, :]
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


class PooledAttention(torch.autograd.Function):
    """h[mu, g, c] = sum_n v[mu, c, n] (1/|Q|) sum_(q in Q) softmax_n(x_q^T B_g x_n), with its
    gradient in B only, over blocks of samples.

    B (G, D, D): each head's scaled bilinear form W^Q^T W^K / sqrt(d_k); X (m, D, N) the
    sequences, Xq (m, D, |Q|) the query tokens, v (m, c, N) the readout values Cr^T X. With P the
    softmax, a_q = sum_n P_qn v_n and upstream gradient G[mu, g, c], the logit gradient is
    dL_qn = (1/|Q|) P_qn (sum_c G_c v_cn - sum_c G_c a_qc) and dB_g = sum_mu Xq dL X^T.

    Why not autograd through einsums: at the paper's 4000 images and 20 heads the softmax has
    63 M entries; autograd writes and rereads it several times per step, and torch's softmax over
    rows of 28 keys costs ~2.6 ns per entry on one core. Here every large operand is a matmul
    (no permuted copies), the softmax is one exp over the block with a shift shared by the block
    where the block's logits span less than the dtype's safe range (exact: a softmax is unchanged by
    any shift of its row), its normaliser and a_q come from one batched matmul with [v, 1], and P
    is kept for the backward pass.
    """

    # Samples per block: as many as keep the block's logits (b, |Q| G, N) near 2 MiB
    # (:meth:`block_size`), not 128 samples (~8 MB at real_data's attention sizes, before). The
    # default run's raw-pixel attention training took 22-24 % less CPU so (its system time 10-13 s
    # -> 1.5-2 s: the large temporaries were mapped and unmapped block by block), the screen 3-7 %
    # (benchmarks/results/attention_jobs_ab_2026-12-07.txt, interleaved). Single steps
    # (benchmarks/attention_step.py) were 10-35 % faster in two runs and alike in a third.
    # On other devices the blocks stay at 128 samples (as before; no GPU timing exists), since
    # every block costs ~15 kernel launches there.
    BLOCK_BYTES = 2 << 20
    DEVICE_BLOCK = 128

    @staticmethod
    def block_size(nq: int, G: int, N: int, itemsize: int, device: str = "cpu") -> int:
        """Samples per block: on the CPU as many as keep the block's logits, ``nq`` G N
        ``itemsize`` bytes a sample, near BLOCK_BYTES; DEVICE_BLOCK on other devices."""
        if device != "cpu":
            return PooledAttention.DEVICE_BLOCK
        return max(1, PooledAttention.BLOCK_BYTES // (nq * G * N * itemsize))

    @staticmethod
    def _exp_rows(L: Tensor) -> Tensor:
        """exp(L - shift) in place, one shift per block when the block's logits span less than
        ~80 (float32) or ~700 (float64) natural units, so that no row under- or overflows;
        otherwise the row maxima (torch.softmax's own shift)."""
        span = 80.0 if L.dtype != torch.float64 else 700.0
        top, bottom = float(L.max()), float(L.min())
        L -= top if top - bottom < span else L.amax(-1, keepdim=True)
        if L.device.type == "cpu" and L.is_contiguous():
            import numpy as np

            np.exp(L.numpy(), out=L.numpy())  # numpy's exp is ~3x torch's on this CPU build
        else:
            L.exp_()
        return L

    @staticmethod
    def forward(ctx, B, X, Xq, v):
        nq, G, D = Xq.shape[-1], B.shape[0], B.shape[1]
        c = v.shape[1]
        Bt = B.transpose(0, 1).reshape(D, G * D)
        ones = torch.ones(X.shape[0], X.shape[-1], 1, dtype=v.dtype, device=v.device)
        values1 = torch.cat([v.transpose(1, 2), ones], dim=-1)  # (m, N, c + 1)
        out, kept = [], []
        ctx.block = block = PooledAttention.block_size(nq, G, X.shape[-1], X.element_size(), X.device.type)
        for s in range(0, X.shape[0], block):
            sl = slice(s, s + block)
            b = X[sl].shape[0]
            Y = Xq[sl].transpose(1, 2).reshape(b * nq, D) @ Bt  # (b |Q|, G D): x_q^T B_g
            E = PooledAttention._exp_rows(torch.bmm(Y.reshape(b, nq * G, D), X[sl]))  # (b, |Q| G, N)
            S = torch.bmm(E, values1[sl])  # (b, |Q| G, c + 1): sum_n E v_n and sum_n E
            a = S[..., :c] / S[..., c:]  # a_q = sum_n P_qn v_n
            out.append(a.reshape(b, nq, G, c).mean(1))
            kept.append(a)
            if ctx.needs_input_grad[0]:  # P, for the backward pass only
                E /= S[..., c:]
                kept.append(E)
        ctx.save_for_backward(X, Xq, v, *kept)
        return torch.cat(out)

    @staticmethod
    def backward(ctx, grad):
        X, Xq, v, *kept = ctx.saved_tensors
        D, nq = X.shape[1], Xq.shape[-1]
        G, c = grad.shape[1], grad.shape[2]
        dB = torch.zeros(D, G * D, dtype=grad.dtype, device=grad.device)
        for i, s in enumerate(range(0, X.shape[0], ctx.block)):
            sl = slice(s, s + ctx.block)
            a, P = kept[2 * i], kept[2 * i + 1]
            b, N = P.shape[0], P.shape[-1]
            g = grad[sl] / nq  # (b, G, c)
            gv = torch.bmm(g, v[sl])  # (b, G, N): sum_c g_c v_cn
            ga = (a.reshape(b, nq, G, c) * g[:, None]).sum(-1)  # (b, |Q|, G): sum_c g_c a_qc
            dL = P.reshape(b, nq, G, N) * (gv[:, None] - ga[..., None])
            T = torch.bmm(dL.reshape(b, nq * G, N), X[sl].transpose(1, 2))  # (b, |Q| G, D)
            dB += Xq[sl].permute(1, 0, 2).reshape(D, b * nq) @ T.reshape(b * nq, G * D)
        return dB.reshape(D, G, D).transpose(0, 1), None, None, None
