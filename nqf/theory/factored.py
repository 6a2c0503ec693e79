"""Structure matrices in factored form: what every architecture in the paper actually has.

Every A(x) of Table 1 and Table 3 is an off-diagonal ("feedforward", Eq. 17) or low-rank block,

    A = 1/2 [E1 C E2^T + E2 C^T E1^T],   C = sum_r (a_r b_r^T) (x) Diag(s_r),

where E1, E2 select two contiguous blocks of a unit's p parameters (they may coincide), a_r and
b_r are short vectors and (x) is a Kronecker product with a q x q diagonal (the identity I_dv of
attention, or the per-feature scales of the Fourier MLP). With W = [.. Z1 .. Z2 ..] the output
is f = sum_units Z1^T C Z2 = Tr[Z2 Z1^T C] (Eq. 18-19), so f and the gradient cost
O(size of the factors x width) per sample instead of O(p^2): the dense p x p matrix is never
formed unless asked for (``dense()``, for verification).

Index convention inside a block of length n * q: entry (j, alpha) sits at j * q + alpha, i.e. the
block is the column-major vec of a q x n matrix. This is the convention of the paper's Kronecker
identities (vec(A X B) = (B^T (x) A) vec X), so attention's (x_avg^T (x) I_dv) vec(W^V) reads
directly as a = x_avg, q = d_v.

Samples and outputs: factors carry a sample axis s and an output axis k (either may have size 1
and is then shared, e.g. the one-hot readout e_c of an MLP). The form holds m = S * K structure
matrices ordered sample-major (index s * K + c), the flattening of (sample, output) pairs that
nqf.theory.forms uses for vector outputs (App. B.2).
"""
from __future__ import annotations

import torch

from nqf.theory.forms import StructureForm

Tensor = torch.Tensor

_BROADCAST = "skr"  # axes that a factor may leave at size 1 (shared across samples/outputs/rank)


def _squeeze(t: Tensor, sub: str) -> tuple[Tensor, str]:
    """Drop singleton broadcast axes so einsum sees them as absent (i.e. shared)."""
    letters = sub.replace("...", "")
    offset = t.ndim - len(letters)
    kept = []
    for pos in reversed(range(len(letters))):
        ch = letters[pos]
        if ch in _BROADCAST and t.shape[offset + pos] == 1:
            t = t.squeeze(offset + pos)
        else:
            kept.append(ch)
    new = "".join(reversed(kept))
    return t, ("..." + new if sub.startswith("...") else new)


def _contract(out: str, *operands: tuple[Tensor, str]) -> Tensor:
    """einsum that treats size-1 axes in 's', 'k', 'r' as broadcast, not as indices to match.

    Output letters absent from every operand come back as size-1 axes, so shapes stay
    predictable. Two-operand calls map onto one batched matmul, which is why the forms below
    chain pairwise contractions instead of one many-operand einsum.
    """
    tensors, subs = [], []
    for t, sub in operands:
        t, sub = _squeeze(t, sub)
        tensors.append(t)
        subs.append(sub)
    present = set("".join(subs))
    out_letters = out.replace("...", "")
    eff = "".join(ch for ch in out_letters if ch in present)
    ellipsis = "..." if any(s.startswith("...") for s in subs) else ""
    res = torch.einsum(",".join(subs) + "->" + ellipsis + eff, *tensors)
    n_batch = res.ndim - len(eff)
    for pos, ch in enumerate(out_letters):
        if ch not in present:
            res = res.unsqueeze(n_batch + pos)
    return res


def _kept(factor: Tensor) -> str:
    """The broadcast letters along which a (s, k, r, n) factor actually varies."""
    return "".join(ch for ch, size in zip(_BROADCAST, factor.shape[:3]) if size != 1)


class BlockBilinearForm(StructureForm):
    """A_(s,c) = 1/2 [E1 C E2^T + E2 C^T E1^T] with C = sum_r (a b^T) (x) Diag(scale), factored.

    Parameters
    ----------
    p : parameters per unit.
    rows, cols : (start, stop) of the blocks selected by E1 and E2 (may coincide: then
        A = Sym(C), as in phase retrieval, matrix sensing or tied query-key attention).
    left : (S|1, K|1, R|1, n1) factors a; the rows block has length n1 * q.
    right : (S|1, K|1, R|1, n2) factors b; the cols block has length n2 * q.
    scale : (S|1, K|1, R|1, q) diagonal of the Kronecker factor, or None for I_q.
    q : size of the Kronecker factor.
    strategy : "auto" (cheaper contraction order by flop count), "project" or "gram"; the two
        orders give the same numbers to rounding and exist for speed only.
    """

    def __init__(self, p: int, rows: tuple[int, int], cols: tuple[int, int], left: Tensor,
                 right: Tensor, scale: Tensor | None = None, q: int = 1, strategy: str = "auto",
                 _check: bool = True):
        if left.ndim != 4 or right.ndim != 4 or (scale is not None and scale.ndim != 4):
            raise ValueError("left, right (and scale) must have shape (samples, outputs, rank, n); "
                             f"got {tuple(left.shape)}, {tuple(right.shape)}"
                             + ("" if scale is None else f", {tuple(scale.shape)}") + ".")
        if strategy not in ("auto", "project", "gram"):
            raise ValueError(f"strategy must be 'auto', 'project' or 'gram'; got {strategy!r}.")
        if scale is not None and scale.shape[-1] != q:
            raise ValueError(f"scale must end in q={q}; got {tuple(scale.shape)}.")
        for name, (start, stop), n in (("rows", rows, left.shape[-1]), ("cols", cols, right.shape[-1])):
            if not 0 <= start <= stop <= p or stop - start != n * q:
                raise ValueError(f"{name}={(start, stop)} must lie in [0, {p}] and have length "
                                 f"n * q = {n} * {q}; fix the block bounds or the factor shape.")
        factors = [left, right] + ([] if scale is None else [scale])
        sizes = []
        for axis, what in enumerate(("samples", "outputs", "rank")):
            if any(f.shape[axis] == 0 for f in factors):
                raise ValueError(f"the structure form needs at least one entry on the factors' {what} axis; got sizes "
                                 f"{[f.shape[axis] for f in factors]}" + (" (an empty batch of inputs x)." if axis == 0 else "."))
            n = max(f.shape[axis] for f in factors)
            if any(f.shape[axis] not in (1, n) for f in factors):
                raise ValueError(f"factor {what} axes must be 1 or {n}; got "
                                 f"{[f.shape[axis] for f in factors]}.")
            sizes.append(n)
        if _check:  # once per form built from data; .to, .subset, .with_strategy and vmap skip it
            for name, f in (("left", left), ("right", right), ("scale", scale)):
                if f is None or not f.is_floating_point() or torch._C._functorch.is_functorch_wrapped_tensor(f):
                    continue  # under vmap/grad a value test is data-dependent control flow
                if not bool(torch.isfinite(f).all()):
                    raise ValueError(f"the structure form's {name} factor must be finite (no NaN or inf); "
                                     f"{int((~torch.isfinite(f)).sum())} of its {f.numel()} entries are not "
                                     "(check the inputs x it was built from).")
        self.p, self.rows, self.cols, self.q = int(p), tuple(rows), tuple(cols), int(q)
        self.left, self.right, self.scale, self.strategy = left, right, scale, strategy
        self.n_samples, self.n_outputs, self.rank = sizes
        self.m = self.n_samples * self.n_outputs

    # -- helpers -----------------------------------------------------------------------------
    def _block(self, W: Tensor, span: tuple[int, int], n: int) -> Tensor:
        """Rows span of W (..., p, d) as (..., n, q, d)."""
        return W[..., span[0]:span[1], :].reshape(*W.shape[:-2], n, self.q, W.shape[-1])

    def _Z(self, W: Tensor) -> tuple[Tensor, Tensor]:
        return self._block(W, self.rows, self.left.shape[-1]), self._block(W, self.cols, self.right.shape[-1])

    def _projections(self, W: Tensor) -> tuple[Tensor, Tensor]:
        """(a^T Z1, b^T Z2) per (sample, output, rank) as (..., s, k, r, q, d)."""
        Z1, Z2 = self._Z(W)
        P1 = _contract("...skrai", (self.left, "skrj"), (Z1, "...jai"))
        P2 = _contract("...skrai", (self.right, "skrj"), (Z2, "...jai"))
        return P1, P2

    def _scaled(self, P: Tensor) -> Tensor:
        return P if self.scale is None else P * self.scale[..., None]

    def _flat(self, f: Tensor) -> Tensor:
        f = f.expand(*f.shape[:-2], self.n_samples, self.n_outputs)
        return f.reshape(*f.shape[:-2], self.m)

    def _unflat(self, c: Tensor) -> Tensor:
        if c.shape[-1] != self.m:
            raise ValueError(f"weights c must end in m={self.m}; got {tuple(c.shape)}.")
        return c.reshape(*c.shape[:-1], self.n_samples, self.n_outputs)

    def _gram_is_cheaper(self, d: int, apply: bool) -> bool:
        """Choose the contraction order by its flop count.

        "project" contracts every sample's factors with W (cost ~ |factors| q d); "gram" first
        reduces W to the n1 x n2 block Z1 Z2^T (outputs) or the samples to sum_mu c_mu C_mu
        (gradient), cost ~ n1 n2 q d + m n2. Attention's x_avg (x) I_dv and the MLP's x e_c^T
        favour "gram" by a factor of about d; Kronecker-rich factors can favour "project".
        """
        if self.strategy != "auto":
            return self.strategy == "gram"
        n1, n2, q = self.left.shape[-1], self.right.shape[-1], self.q
        qs = q if self.scale is not None else 1
        m_eff, na, nb = self.m * self.rank, self.left.numel(), self.right.numel()
        project = (na + nb) * q * d + m_eff * q * d
        gram = n1 * n2 * q * d + na * n2 * qs + m_eff * n2 * qs
        return gram < (2 * project if apply else project)

    def _trace_with(self, G: Tensor) -> Tensor:
        """f_(s,c) = <C_(s,c), B> for B given by G: (..., n1, n2) = sum_alpha B[(j,a),(l,a)] when
        there is no scale, else (..., n1, n2, q) = B[(j,a),(l,a)]. Returns (..., S, K)."""
        keep = _kept(self.left)
        if self.scale is None:
            T = _contract("..." + keep + "l", (self.left, "skrj"), (G, "...jl"))
            return _contract("...sk", (T, "..." + keep + "l"), (self.right, "skrl"))
        T = _contract("..." + keep + "la", (self.left, "skrj"), (G, "...jla"))
        return _contract("...sk", (T, "..." + keep + "la"), (self.right, "skrl"), (self.scale, "skra"))

    def _weighted_C(self, cs: Tensor) -> Tensor:
        """sum_(s,c) c_(s,c) C_(s,c) in the same compressed shape as _trace_with's G."""
        keep = _kept(self.left)
        if self.scale is None:
            T = _contract("..." + keep + "l", (cs, "...sk"), (self.right, "skrl"))
            return _contract("...jl", (self.left, "skrj"), (T, "..." + keep + "l"))
        T = _contract("..." + keep + "la", (cs, "...sk"), (self.right, "skrl"), (self.scale, "skra"))
        return _contract("...jla", (self.left, "skrj"), (T, "..." + keep + "la"))

    # -- StructureForm -----------------------------------------------------------------------
    def outputs(self, W: Tensor) -> Tensor:
        if self._gram_is_cheaper(W.shape[-1], apply=False):
            Z1, Z2 = self._Z(W)
            pattern = "...jai,...lai->...jl" if self.scale is None else "...jai,...lai->...jla"
            return self._flat(self._trace_with(torch.einsum(pattern, Z1, Z2)))
        P1, P2 = self._projections(W)
        return self._flat(_contract("...sk", (self._scaled(P1), "...skrai"), (P2, "...skrai")))

    def outputs_from_M(self, M: Tensor) -> Tensor:
        (r0, r1), (c0, c1) = self.rows, self.cols
        n1, n2, q = self.left.shape[-1], self.right.shape[-1], self.q
        block = 0.5 * (M[..., r0:r1, c0:c1] + M[..., c0:c1, r0:r1].transpose(-1, -2))
        G = torch.diagonal(block.reshape(*M.shape[:-2], n1, q, n2, q), dim1=-3, dim2=-1)
        return self._flat(self._trace_with(G if self.scale is not None else G.sum(-1)))

    def apply_weighted(self, c: Tensor, W: Tensor) -> Tensor:
        cs = self._unflat(c)
        Z1, Z2 = self._Z(W)
        d = W.shape[-1]
        out = torch.zeros(*torch.broadcast_shapes(c.shape[:-1], W.shape[:-2]), *W.shape[-2:],
                          dtype=W.dtype, device=W.device)
        if self._gram_is_cheaper(d, apply=True):
            G = self._weighted_C(cs)
            sub = "...jl" if self.scale is None else "...jla"
            rows = torch.einsum(f"{sub},...lai->...jai", G, Z2)
            cols = torch.einsum(f"{sub},...jai->...lai", G, Z1)
        else:
            P1, P2 = self._projections(W)
            rows, cols = (
                _contract("...jai", (factor, "skrj"),
                          (_contract("..." + _kept(factor) + "ai", (cs, "...sk"), (other, "...skrai")),
                           "..." + _kept(factor) + "ai"))
                for factor, other in ((self.left, self._scaled(P2)), (self.right, self._scaled(P1))))
        out[..., self.rows[0]:self.rows[1], :] += 0.5 * rows.reshape(*rows.shape[:-3], -1, d)
        out[..., self.cols[0]:self.cols[1], :] += 0.5 * cols.reshape(*cols.shape[:-3], -1, d)
        return out

    def weighted_sum(self, c: Tensor) -> Tensor:
        G = self._weighted_C(self._unflat(c))
        n1, n2, q = self.left.shape[-1], self.right.shape[-1], self.q
        if self.scale is None:
            eye = torch.eye(q, dtype=G.dtype, device=G.device)
            block = G[..., :, None, :, None] * eye[:, None, :]
            batch = G.shape[:-2]
        else:
            block = torch.diag_embed(G).permute(*range(G.ndim - 3), -4, -2, -3, -1)
            batch = G.shape[:-3]
        block = block.reshape(*batch, n1 * q, n2 * q)
        (r0, r1), (c0, c1) = self.rows, self.cols
        out = torch.zeros(*batch, self.p, self.p, dtype=G.dtype, device=G.device)
        out[..., r0:r1, c0:c1] += 0.5 * block
        out[..., c0:c1, r0:r1] += 0.5 * block.transpose(-1, -2)
        return out

    def dense(self) -> Tensor:
        """The m dense p x p matrices, built a block of samples at a time (never an m x m identity)."""
        from nqf.theory.forms import check_dense_memory

        K, pp = self.n_outputs, self.p * self.p
        chunk = max(1, min(self.n_samples, int((2 ** 21 / K) ** 0.5), 2 ** 21 // (K * pp)))  # work space ~16 MB
        check_dense_memory(self, self.left, extra=(chunk * K) ** 2 + 2 * chunk * K * pp)
        out = torch.empty(self.m, self.p, self.p, dtype=self.left.dtype, device=self.left.device)
        for start in range(0, self.n_samples, chunk):
            stop = min(self.n_samples, start + chunk)
            part = self if chunk >= self.n_samples else self.subset(slice(start, stop))
            eye = torch.eye((stop - start) * K, dtype=self.left.dtype, device=self.left.device)
            out[start * K:stop * K] = part.weighted_sum(eye)
        return out

    def subset(self, samples: slice) -> "BlockBilinearForm":
        """The same form restricted to a slice of samples (all outputs kept)."""
        pick = [f if f.shape[0] == 1 else f[samples] for f in (self.left, self.right)]
        scale = None if self.scale is None else (self.scale if self.scale.shape[0] == 1 else self.scale[samples])
        return BlockBilinearForm(self.p, self.rows, self.cols, pick[0], pick[1], scale, self.q, self.strategy,
                                 _check=False)

    def nbytes(self) -> int:
        """Bytes held by the factors (the whole storage cost of the form)."""
        return sum(f.numel() * f.element_size() for f in (self.left, self.right, self.scale) if f is not None)

    def to(self, device=None, dtype=None) -> "BlockBilinearForm":
        move = (lambda t: None if t is None else t.to(device=device, dtype=dtype or t.dtype))
        return BlockBilinearForm(self.p, self.rows, self.cols, move(self.left), move(self.right),
                                 move(self.scale), self.q, self.strategy, _check=False)

    def with_strategy(self, strategy: str) -> "BlockBilinearForm":
        """The same matrices with the contraction order fixed (for tests and benchmarks)."""
        return BlockBilinearForm(self.p, self.rows, self.cols, self.left, self.right, self.scale, self.q, strategy,
                                 _check=False)


class LowRankSymmetricForm(BlockBilinearForm):
    """A_s = sum_r w_r v_r v_r^T (phase retrieval a a^T, linear SSL Delta Delta^T, ...).

    ``v`` has shape (m, p) for rank one or (m, R, p); ``weights`` (m, R) or None for all ones.
    """

    def __init__(self, v: Tensor, weights: Tensor | None = None):
        if v.ndim == 2:
            v = v[:, None, :]
        if v.ndim != 3:
            raise ValueError(f"v must have shape (m, p) or (m, R, p); got {tuple(v.shape)}.")
        scaled = v if weights is None else v * weights.reshape(v.shape[0], -1)[..., None]
        p = v.shape[-1]
        super().__init__(p, (0, p), (0, p), v[:, None], scaled[:, None])
