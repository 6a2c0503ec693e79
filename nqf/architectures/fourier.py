"""The Fourier MLP of Section 7 (Eq. 50) and its structure matrix (App. C, Eq. 296), k outputs.

f_c(x) = P^-1/2 sum_k W[k, c] tanh(s_k a_k psi_k(x)), psi_k(x) = sqrt(2) cos(2 pi k x), s_k = k^-theta,
x a scalar in [0, 1). Each hidden unit k carries its own feature, so the units are not
interchangeable: the module is an NQF of width d = 1 whose single "unit" holds every parameter,
w = [a (P); vec W (P*K, column-major)], and Theorem 1 reduces to Taylor's theorem with ZGZ.

A_c(x) = 1/2 [[0, C_c], [C_c^T, 0]] with C_c[k, (c', k')] = delta_kk' delta_cc' s_k psi_k(x) / sqrt(P):
the (a_k, W_k) 2 x 2 blocks of Eq. 296, written here with the a's first; the paper's
block-diagonal matrix is the same one with rows and columns interleaved as (a_1, W_1, a_2, ...).
In factored form: q = P, scale = s psi(x) / sqrt(P), left = 1, right = e_c. tanh is odd, so
f(-w) = f(w) and the error is O(|w|^4).
"""
from __future__ import annotations

import math

import torch

from nqf.architectures.base import UnitModule, gaussian, generator, unvec, vec
from nqf.architectures.mode_designs import pair_modes
from nqf.theory.factored import BlockBilinearForm

Tensor = torch.Tensor


class FourierMLP(UnitModule):
    """Eq. 50 with trainable a (P) and W (P x k); inputs are scalars x (m,)."""

    input_layout = (("x", ()),)
    unit_input_dim = 1  # the scalar x

    def __init__(self, P: int = 6, n_outputs: int = 1, theta: float = 1.0, init_std: float = 1.0,
                 seed: int | None = 0, dtype: torch.dtype = torch.float64, width: int = 1):
        super().__init__()
        if width != 1:
            raise ValueError("FourierMLP is one non-interchangeable block of P hidden units: width must be 1.")
        gen = generator(seed)
        self.P, self.n_outputs, self.theta = P, n_outputs, theta
        self.a = torch.nn.Parameter(gaussian(gen, P, std=init_std, dtype=dtype))
        self.W = torch.nn.Parameter(gaussian(gen, P, n_outputs, std=init_std, dtype=dtype))
        k = torch.arange(1, P + 1, dtype=dtype)
        self.register_buffer("s", k ** (-theta), persistent=False)
        self.register_buffer("freq", k, persistent=False)

    @property
    def p(self) -> int:
        return self.P * (1 + self.n_outputs)

    @property
    def width(self) -> int:
        return 1

    def blocks(self):
        return [("a", self.P), ("W", self.P * self.n_outputs)]

    def features(self, x: Tensor) -> Tensor:
        """s_k psi_k(x) for x (...,) -> (..., P)."""
        return self.s * math.sqrt(2.0) * torch.cos(2 * math.pi * self.freq * x[..., None])

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.features(x) * self.a) @ self.W / math.sqrt(self.P)

    def unit(self, w: Tensor, x: Tensor) -> Tensor:
        a, Wm = w[:self.P], unvec(w[self.P:], self.P, self.n_outputs)
        return torch.tanh(self.features(x) * a) @ Wm / math.sqrt(self.P)

    def structure(self, x: Tensor) -> BlockBilinearForm:
        scale = (self.features(x) / math.sqrt(self.P))[:, None, None, :]
        left = torch.ones(1, 1, 1, 1, dtype=x.dtype, device=x.device)
        right = torch.eye(self.n_outputs, dtype=x.dtype, device=x.device)[None, :, None, :]
        return BlockBilinearForm(self.p, (0, self.P), (self.P, self.p), left, right, scale=scale, q=self.P)

    def params_from_unit_weights(self, W: Tensor) -> dict[str, Tensor]:
        return {"a": W[:self.P, 0], "W": unvec(W[self.P:, 0], self.P, self.n_outputs)}

    def unit_weights(self) -> Tensor:
        return torch.cat([self.a, vec(self.W)])[:, None]

    def sample_inputs(self, m: int, gen: torch.Generator) -> Tensor:
        return torch.rand(m, generator=gen, dtype=self.a.dtype)

    @classmethod
    def mode_design(cls, n_modes, width, gen, seed):
        """A uniform grid of 4P points, on which the psi_k are orthonormal: commuting A (d = 1,
        whatever ``width``)."""
        K = n_modes
        P = K + 1
        build = dict(P=P, n_outputs=1, theta=1.0, seed=seed)
        x = torch.arange(4 * P, dtype=torch.float64) / (4 * P)
        Q = pair_modes(2 * P, 0, torch.eye(P, K, dtype=torch.float64), P, torch.eye(P, K, dtype=torch.float64))
        return build, (x,), Q, "uniform grid: orthonormal features, commuting A (d = 1)"
