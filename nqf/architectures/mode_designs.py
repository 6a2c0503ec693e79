"""Data on which every architecture's NQF has K known, decoupled modes (init_scaling experiment).

Theorem 8 predicts the ignition time of a mode from its growth rate only when the modes evolve
independently. For each architecture the inputs below are designed so that K orthonormal
directions q_k in a unit's parameter space satisfy Theorem 16's conditions (App. B.7),

    K(q_b q_b^T) q_a = kappa_a delta_ab q_a,      K(X) = (4/m) sum_mu <A_mu, X> A_mu,

and the teacher is itself an NQF, M* = sum_k z*_k q_k q_k^T, y_mu = <A_mu, M*>. Then
Y = (4/m) sum_mu y_mu A_mu = K(M*) has eigenvectors q_k with gamma_k = kappa_k z*_k, and from
M(0) = sum_k z_k(0) q_k q_k^T every mode is the logistic z_k' = 2 z_k (gamma_k - kappa_k z_k)
with growth rate r_k = 2 gamma_k. The teacher strengths z*_k = r_k / (2 kappa_k) are set so that
r_k equals the configured rate exactly; kappa_k is measured on the actual data matrices.

Two routes make the conditions hold, depending on what A(x) allows:

* commuting data (Assumption 1): diagonal net, phase retrieval with orthogonal sensing vectors,
  matrix sensing with jointly diagonalisable S_mu, the Fourier MLP on its orthonormal grid. The
  q_k are shared eigenvectors; C = (8/m) Lambda^T Lambda is diagonal on them (Theorem 6).
* feedforward A = 1/2 [[0, S], [S^T, 0]] (MLP, CNN, attention, MoE, rectangular sensing): the
  A_mu do not commute (two outputs of one input never do), so the route is Corollary 4. The input features are
  whitened exactly, which makes C(Q) = (1/m) sum <S_mu, Q> S_mu isotropic (or Kronecker) on
  the block; q_k = (a_k, b_k) / sqrt 2 with a_k b_k^T eigenmatrices of C.

Loss normalisation: this experiment makes every (sample, output) pair a sample of its own, so m
counts the pairs: targets are stored as (samples, outputs) and given flattened, (m,), to training
and to reduce_modes alike (nqf.theory.losses: n = y.shape[0] everywhere, so both use this m). Sizes grow with K so that K modes always fit (K <= MAX_MODES).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from nqf import _checks
from nqf.architectures import ARCHITECTURES, UnitModule

Tensor = torch.Tensor
MAX_MODES = 5


@dataclass
class Design:
    """One architecture's module (as ``build`` re-creates it), inputs and mode directions."""

    name: str
    build: dict
    inputs: tuple[Tensor, ...]
    modes: Tensor  # (p, K), orthonormal columns q_k
    note: str
    module: UnitModule = field(repr=False, default=None)

    def __post_init__(self):
        if self.module is None:
            self.module = ARCHITECTURES[self.name].build(**self.build)

    @property
    def x(self):
        """The inputs in the form the module's forward() and structure() take."""
        return self.inputs[0] if len(self.inputs) == 1 else self.inputs


def whitened(Z: Tensor) -> Tensor:
    """Z (m samples, n features) with the features mixed linearly so that (1/m) Z^T Z = I_n exactly."""
    L = torch.linalg.cholesky(Z.T @ Z / Z.shape[0])
    return torch.linalg.solve_triangular(L, Z.T, upper=False).T


def orthonormal(n: int, k: int, gen: torch.Generator) -> Tensor:
    """n x k matrix with random orthonormal columns (QR of a Gaussian matrix)."""
    q, r = torch.linalg.qr(torch.randn(n, k, generator=gen, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


def pair_modes(p: int, rows: int, a: Tensor, cols: int, b: Tensor) -> Tensor:
    """q_k = (a_k in the block starting at ``rows``, b_k in the block at ``cols``) / sqrt 2."""
    Q = torch.zeros(p, a.shape[1], dtype=torch.float64)
    Q[rows:rows + a.shape[0]] = a / np.sqrt(2.0)
    Q[cols:cols + b.shape[0]] = b / np.sqrt(2.0)
    return Q


def _randn(gen, *shape) -> Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _mlp(K, d, gen, seed):
    D = K + 3
    build = dict(D=D, width=d, n_outputs=K, seed=seed)
    x = whitened(_randn(gen, 4 * D, D))
    Q = pair_modes(D + K, 0, orthonormal(D, K, gen), D, orthonormal(K, K, gen))
    return build, (x,), Q, "whitened inputs: C(Q) = phi'(0)^2 Q / k"


def _cnn(K, d, gen, seed):
    build = dict(image=(4, 5), kernel=(2, 3), width=d, n_outputs=K, seed=seed)
    module = ARCHITECTURES["cnn"].build(**build)
    (H, W), n_k = build["image"], 6
    # x_sum = P vec(image) is linear: Gaussian images, corrected in the row space of P so that
    # their patch sums are exactly whitened (the correction leaves the null space of P alone).
    P = module.patch_sum(torch.eye(H * W, dtype=torch.float64).reshape(H * W, H, W)).T
    img = _randn(gen, 4 * n_k, H, W)
    s = module.patch_sum(img)
    img = img + ((whitened(s) - s) @ torch.linalg.pinv(P).T).reshape(img.shape)
    Q = pair_modes(n_k + K, 0, orthonormal(n_k, K, gen), n_k, orthonormal(K, K, gen))
    return build, (img,), Q, "images whose patch sums are whitened"


def _mha(K, d, gen, seed):
    D, d_k = K + 1, 2
    build = dict(D=D, d_k=d_k, d_v=1, width=d, n_outputs=K, seq_len=5, seed=seed)
    x, X = _randn(gen, 4 * D, D), _randn(gen, 4 * D, D, 5)
    xbar = X.mean(-1)
    X = X + (whitened(xbar) - xbar)[..., None]  # shift every context so x_avg is whitened
    v_start = 2 * d_k * D  # d_v = 1: no I_dv Kronecker factor, so no degenerate copies of a mode
    Q = pair_modes(v_start + D + K, v_start, orthonormal(D, K, gen), v_start + D, orthonormal(K, K, gen))
    return build, (x, X), Q, "contexts with whitened token means, d_v = 1"


def _contexts(m: int, D: int, N: int, gen) -> Tensor:
    """m contexts of N tokens whose centred covariance is exactly I_D (random means)."""
    Z = _randn(gen, m, D, N)
    Z = Z - Z.mean(-1, keepdim=True)
    L = torch.linalg.cholesky(Z @ Z.transpose(-1, -2) / N)
    return torch.linalg.solve_triangular(L, Z, upper=False) + _randn(gen, m, D, 1)


def _fixed_readout(name):
    def design(K, d, gen, seed):
        D = K + 1
        build = dict(D=D, width=d, n_outputs=K, seq_len=D + 2, seed=seed)
        if name == "qk_head":
            build["d_k"] = 1  # no I_dk Kronecker factor, so no degenerate copies of a mode
        module = ARCHITECTURES[name].build(**build)
        x, X = whitened(_randn(gen, 4 * D, D)), _contexts(4 * D, D, D + 2, gen)
        # Sigma_X = I makes u_c the readout column c, so C(Q) = Q Cr Cr^T / (k d_k): its
        # eigenmatrices are a b^T with b a left singular vector of the readout.
        b = torch.linalg.svd(module.readout, full_matrices=False)[0][:, :K]
        Q = pair_modes(2 * D, 0, orthonormal(D, K, gen), D, b)
        return build, (x, X), Q, "whitened queries, contexts with covariance I"
    return design


def _moe(K, d, gen, seed):
    D = K + 1
    build = dict(D=D, width=d, n_outputs=K, gate="tanh", expert="linear", seed=seed)
    # One-hot inputs sqrt(D) e_i: S_(i,c) = psi'(0) D e_i (e_i (x) e_c)^T, so C is isotropic on
    # the entries (i, (i, c)) and mode k lives on the gate weight r_k and the expert column k.
    x = np.sqrt(D) * torch.eye(D, dtype=torch.float64)
    beta = orthonormal(K, K, gen)
    b = torch.zeros(D * K, K, dtype=torch.float64)
    for k in range(K):
        b[k * K:(k + 1) * K, k] = beta[:, k]  # vec(Theta)[j k + c] = Theta[c, j]
    Q = pair_modes(D + D * K, 0, torch.eye(D, K, dtype=torch.float64), D, b)
    return build, (x,), Q, "one-hot inputs (gated bilinear model, one mode per input direction)"


def _fourier(K, d, gen, seed):
    P = K + 1
    build = dict(P=P, n_outputs=1, theta=1.0, seed=seed)
    x = torch.arange(4 * P, dtype=torch.float64) / (4 * P)  # psi_k orthonormal on this grid
    Q = pair_modes(2 * P, 0, torch.eye(P, K, dtype=torch.float64), P, torch.eye(P, K, dtype=torch.float64))
    return build, (x,), Q, "uniform grid: orthonormal features, commuting A (d = 1)"


def _diagonal(K, d, gen, seed):
    D = K + 1
    x = whitened(_randn(gen, 4 * D, D))
    return dict(D=D, width=d, seed=seed), (x,), torch.eye(D, K, dtype=torch.float64), \
        "whitened inputs: C = I / 2"


def _phase(K, d, gen, seed):
    D = K + 1
    O = orthonormal(D, D, gen)
    scale = 0.5 + torch.rand(2 * D, generator=gen, dtype=torch.float64)
    a = scale[:, None] * O.T.repeat(2, 1)  # every sensing vector along one basis direction
    return dict(D=D, width=d, seed=seed), (a,), O[:, :K], "orthogonal sensing directions"


def _sensing(K, d, gen, seed):
    n = K + 1
    O = orthonormal(n, n, gen)
    lam = whitened(_randn(gen, 4 * n, n))
    S = torch.einsum("ik,mk,jk->mij", O, lam, O)
    return dict(n=n, width=d, seed=seed), (S,), O[:, :K], "jointly diagonalisable S_mu"


def _rectangular(K, d, gen, seed):
    n_out, n_in = K, K + 1
    S = whitened(_randn(gen, 2 * n_out * n_in, n_out * n_in)).reshape(-1, n_out, n_in)
    Q = pair_modes(n_out + n_in, 0, orthonormal(n_out, K, gen), n_out, orthonormal(n_in, K, gen))
    return dict(n_out=n_out, n_in=n_in, width=d, seed=seed), (S,), Q, "whitened sensing matrices: C = I"


DESIGNS: dict[str, Callable] = {
    "mlp": _mlp, "cnn": _cnn, "mha": _mha, "qk_head": _fixed_readout("qk_head"),
    "single_head_logits": _fixed_readout("single_head_logits"), "moe": _moe,
    "fourier_mlp": _fourier, "diagonal_net": _diagonal, "phase_retrieval": _phase,
    "matrix_sensing": _sensing, "rectangular_sensing": _rectangular,
}


def design(name: str, n_modes: int, width: int, seed: int) -> Design:
    """The inputs and mode directions of architecture ``name`` with ``n_modes`` modes.

    ``width`` is the number of units d (the Fourier MLP always has d = 1); the data depend on
    ``seed`` only.
    """
    if name not in DESIGNS:
        raise ValueError(f"No init_scaling design for architecture {name!r}; choose from "
                         f"{', '.join(DESIGNS)}.")
    n_modes = _checks.integer("n_modes", n_modes, minimum=1)
    if not 1 <= n_modes <= MAX_MODES:
        raise ValueError(f"n_modes (the number of modes) must lie in 1..{MAX_MODES}; got {n_modes}.")
    width = _checks.integer("width", width, minimum=1)
    seed = _checks.seed("seed", seed)
    gen = torch.Generator().manual_seed(seed)
    build, inputs, Q, note = DESIGNS[name](n_modes, width, gen, seed)
    return Design(name, build, inputs, Q, note)


def mode_outputs(form, modes: Tensor) -> Tensor:
    """u_(mu, k) = q_k^T A_mu q_k for every flattened sample mu, shape (m, K)."""
    return form.outputs(modes.T[:, :, None]).T


def teacher(form, modes: Tensor, rates) -> tuple[Tensor, Tensor]:
    """Targets y = sum_k z*_k u_k (flattened, (m,)) and the strengths z*_k giving rates r_k.

    With kappa_k = (4/m) |u_k|^2 = q_k^T K(q_k q_k^T) q_k, the teacher M* = sum z*_k q_k q_k^T
    gives gamma_k = kappa_k z*_k, so z*_k = r_k / (2 kappa_k) sets the growth rate r_k = 2 gamma_k.
    """
    u = mode_outputs(form, modes)
    kappa = 4.0 / u.shape[0] * (u * u).sum(0)
    z_star = torch.as_tensor(np.asarray(rates, float)) / (2.0 * kappa)
    return u @ z_star, z_star


def initial_weights(des: Design, z_star, eps, seeds, seed_scale: float, seed: int) -> tuple[Tensor, Tensor]:
    """Aligned W(0) per eps, z_k(0) = eps z*_k exactly, and Gaussian W(0) ~ N(0, seed_scale / d) per seed.

    ``seeds`` is a list of integer seeds (possibly empty): seed s is row s of one Gaussian draw of
    max(seeds) + 1 rows from the design's generator (after the unit directions); [0, ..., n-1]
    draws what the old count n drew (torch's CPU sampler redraws its last block of 16 values, so
    a row can change with the largest seed, as it could with the count).

    The aligned W(0) = sum_k sqrt(eps z*_k) q_k r_k^T uses orthonormal r_k in unit space, which keeps
    M(0) diagonal in the q basis (Theorem 16 needs it); with d < K (the Fourier MLP, d = 1) all
    modes share one unit, which Assumption 1 allows (off-diagonal entries are slaved, Prop. 7).
    """
    d, (p, K) = des.module.width, des.modes.shape
    z_star = _checks.array("z_star", z_star, shape=(K,))
    _checks.nonnegative("z_star", z_star)
    eps = _checks.positive("eps", _checks.array("eps", eps, ndim=1, nonempty=True), what=" (z_k(0) = eps z*_k)")
    seeds = [_checks.seed("seeds", s) for s in (seeds.tolist() if hasattr(seeds, "tolist") else seeds)]
    seed_scale = _checks.scalar("seed_scale", seed_scale, low=0.0)
    seed = _checks.seed("seed", seed)
    gen = torch.Generator().manual_seed(zlib.crc32(f"{des.name}:{seed}".encode()))
    R = orthonormal(d, K, gen) if d >= K else torch.ones(d, K, dtype=torch.float64) / np.sqrt(d)
    amp = torch.sqrt(torch.as_tensor(np.asarray(eps, float))[:, None] * torch.as_tensor(np.asarray(z_star, float))[None])
    aligned = torch.einsum("pk,ek,dk->epd", des.modes, amp, R)
    seeds = [int(s) for s in seeds]
    draws = torch.randn(max(seeds, default=-1) + 1, p, d, generator=gen, dtype=torch.float64)
    gaussian = draws[torch.as_tensor(seeds, dtype=torch.long)] * np.sqrt(seed_scale / d)
    return aligned, gaussian
