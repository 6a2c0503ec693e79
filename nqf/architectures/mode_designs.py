"""Data on which every architecture's NQF has K known, decoupled modes (init_scaling experiment).

Theorem 8 predicts the ignition time of a mode from its growth rate only when the modes evolve
independently. Each architecture's class designs inputs (its ``mode_design``, for the registry
entries marked ``mode_design=True``) so that K orthonormal directions q_k in a unit's parameter
space satisfy Theorem 16's conditions (App. B.7),

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
and to reduce_modes alike (nqf.theory.losses: n = y.shape[0] everywhere, so both use this m).
Sizes grow with K so that K modes always fit (K <= MAX_MODES). The designs are built from the
helpers here (whitened, pair_modes, standard_normal) and nqf.architectures.base.orthonormal.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import torch

from nqf import validate
from nqf.architectures.base import UnitModule, orthonormal
from nqf.architectures.registry import ARCHITECTURES, selection

Tensor = torch.Tensor
MAX_MODES = 5
DESIGNS = selection("mode_design")  # the architectures with a mode design, in registry order


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


def pair_modes(p: int, rows: int, a: Tensor, cols: int, b: Tensor) -> Tensor:
    """q_k = (a_k in the block starting at ``rows``, b_k in the block at ``cols``) / sqrt 2."""
    Q = torch.zeros(p, a.shape[1], dtype=torch.float64)
    Q[rows:rows + a.shape[0]] = a / np.sqrt(2.0)
    Q[cols:cols + b.shape[0]] = b / np.sqrt(2.0)
    return Q


def standard_normal(gen: torch.Generator, *shape: int) -> Tensor:
    """A float64 standard Gaussian tensor of ``shape`` drawn from ``gen``."""
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def design(name: str, n_modes: int, width: int, seed: int) -> Design:
    """The inputs and mode directions of architecture ``name`` with ``n_modes`` modes.

    ``width`` is the number of units d (the Fourier MLP always has d = 1); the data depend on
    ``seed`` only.
    """
    if name not in DESIGNS:
        raise ValueError(f"No init_scaling design for architecture {name!r}; choose from "
                         f"{', '.join(DESIGNS)}.")
    n_modes = validate.integer("n_modes", n_modes, minimum=1)
    if not 1 <= n_modes <= MAX_MODES:
        raise ValueError(f"n_modes (the number of modes) must lie in 1..{MAX_MODES}; got {n_modes}.")
    width = validate.integer("width", width, minimum=1)
    seed = validate.seed("seed", seed)
    gen = torch.Generator().manual_seed(seed)
    build, inputs, Q, note = ARCHITECTURES[name].module_class.mode_design(n_modes, width, gen, seed)
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
    max(seeds) + 1 rows from the design's generator (after the unit directions); torch's CPU
    sampler redraws its last block of 16 values, so a row can change with the largest seed.

    The aligned W(0) = sum_k sqrt(eps z*_k) q_k r_k^T uses orthonormal r_k in unit space, which keeps
    M(0) diagonal in the q basis (Theorem 16 needs it); with d < K (the Fourier MLP, d = 1) all
    modes share one unit, which Assumption 1 allows (off-diagonal entries are slaved, Prop. 7).
    """
    d, (p, K) = des.module.width, des.modes.shape
    z_star = validate.array("z_star", z_star, shape=(K,))
    validate.nonnegative("z_star", z_star)
    eps = validate.positive("eps", validate.array("eps", eps, ndim=1, nonempty=True), what=" (z_k(0) = eps z*_k)")
    seeds = [validate.seed("seeds", s) for s in (seeds.tolist() if hasattr(seeds, "tolist") else seeds)]
    seed_scale = validate.scalar("seed_scale", seed_scale, low=0.0)
    seed = validate.seed("seed", seed)
    gen = torch.Generator().manual_seed(zlib.crc32(f"{des.name}:{seed}".encode()))
    R = orthonormal(d, K, gen) if d >= K else torch.ones(d, K, dtype=torch.float64) / np.sqrt(d)
    amp = torch.sqrt(torch.as_tensor(np.asarray(eps, float))[:, None] * torch.as_tensor(np.asarray(z_star, float))[None])
    aligned = torch.einsum("pk,ek,dk->epd", des.modes, amp, R)
    seeds = [int(s) for s in seeds]
    draws = torch.randn(max(seeds, default=-1) + 1, p, d, generator=gen, dtype=torch.float64)
    gaussian = draws[torch.as_tensor(seeds, dtype=torch.long)] * np.sqrt(seed_scale / d)
    return aligned, gaussian
