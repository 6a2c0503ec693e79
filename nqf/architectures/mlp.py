"""Two-layer MLP without biases (Prop. 1, Eq. 5-6), with k outputs.

f_c(x) = sum_i V[c, i] phi(u_i . x). Unit i is w_i = [u_i (D); v_i (k)] with v_i = V[:, i].
A_c(x) = phi'(0)/2 [[0, x e_c^T], [e_c x^T, 0]]: the feedforward form with C = phi'(0) x e_c^T.
"""
from __future__ import annotations

import math

import torch

from nqf.architectures.activations import activation
from nqf.architectures.base import UnitModule, gaussian, generator, orthonormal
from nqf.architectures.effective import two_block_matrix, two_block_teacher
from nqf.architectures.mode_designs import pair_modes, standard_normal, whitened
from nqf.theory.factored import BlockBilinearForm

Tensor = torch.Tensor


class TwoLayerMLP(UnitModule):
    """f(x) = V phi(U x); U (d x D) rows are the units' input weights, V (k x d) the readout."""

    def __init__(self, D: int = 5, width: int = 4, n_outputs: int = 2, activation_name: str = "tanh",
                 init_std: float = 1.0, seed: int | None = 0, dtype: torch.dtype = torch.float64):
        super().__init__()
        gen = generator(seed)
        self.D, self.n_outputs, self.act = D, n_outputs, activation(activation_name)
        self.U = torch.nn.Parameter(gaussian(gen, width, D, std=init_std / math.sqrt(D), dtype=dtype))
        self.V = torch.nn.Parameter(gaussian(gen, n_outputs, width, std=init_std / math.sqrt(width), dtype=dtype))

    @property
    def p(self) -> int:
        return self.D + self.n_outputs

    @property
    def width(self) -> int:
        return self.U.shape[0]

    @property
    def z2(self) -> bool:
        return self.act.odd

    def blocks(self):
        return [("u", self.D), ("v", self.n_outputs)]

    def forward(self, x: Tensor) -> Tensor:
        return self.act.fn(x @ self.U.T) @ self.V.T

    def forward_replicas(self, W: Tensor, x: Tensor) -> Tensor:
        """Outputs (R, m, k) at unit weights W (R, p, d): two batched products, the same numbers as
        ``forward_with`` (tested). Outside vmap the activation runs on plain tensors, where tanh
        is nqf.architectures.fast_tanh's (several times torch.tanh's speed on the CPU)."""
        return self.act.fn(torch.matmul(x, W[:, :self.D])) @ W[:, self.D:].transpose(1, 2)

    def unit(self, w: Tensor, x: Tensor) -> Tensor:
        return w[self.D:] * self.act.fn(w[:self.D] @ x)

    def structure(self, x: Tensor) -> BlockBilinearForm:
        self.act.require_nqf("TwoLayerMLP.structure")
        k = self.n_outputs
        left = self.act.slope0 * x[:, None, None, :]
        right = torch.eye(k, dtype=x.dtype, device=x.device)[None, :, None, :]
        return BlockBilinearForm(self.p, (0, self.D), (self.D, self.p), left, right)

    def params_from_unit_weights(self, W: Tensor) -> dict[str, Tensor]:
        return {"U": W[:self.D].T, "V": W[self.D:]}

    def unit_weights(self) -> Tensor:
        return torch.cat([self.U.T, self.V], dim=0)

    def sample_inputs(self, m: int, gen: torch.Generator) -> Tensor:
        return torch.randn(m, self.D, generator=gen, dtype=self.U.dtype)

    @staticmethod
    def image_size(image: tuple[int, int]) -> dict:
        return {"D": image[0] * image[1]}

    def image_inputs(self, images: Tensor) -> Tensor:
        return images.reshape(images.shape[0], -1)  # the flattened pixels

    def effective_matrix(self, W: Tensor) -> Tensor:
        """Prop. 1: E = phi'(0) Z_v Z_u^T (k x D); the NQF output is f - f(0) = E x."""
        return two_block_matrix(W, self.D, self.act.slope0)

    def effective_outputs(self, E: Tensor, x: Tensor) -> Tensor:
        return x @ E.transpose(-1, -2)

    def teacher_units(self, root: Tensor, gen: torch.Generator) -> Tensor:
        return two_block_teacher(self.p, self.D, self.act.slope0, root, gen)

    @classmethod
    def mode_design(cls, n_modes, width, gen, seed):
        """Whitened inputs: C(Q) = phi'(0)^2 Q / k, so q_k = (a_k, b_k) / sqrt 2 decouple."""
        K = n_modes
        D = K + 3
        build = dict(D=D, width=width, n_outputs=K, seed=seed)
        x = whitened(standard_normal(gen, 4 * D, D))
        Q = pair_modes(D + K, 0, orthonormal(D, K, gen), D, orthonormal(K, K, gen))
        return build, (x,), Q, "whitened inputs: C(Q) = phi'(0)^2 Q / k"
