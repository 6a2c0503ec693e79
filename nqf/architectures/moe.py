"""Mixture of experts with independent gates (Prop. 5, Eq. 13-14), k outputs.

f(x) = sum_i psi(r_i . x) E(x; Theta_i), psi(0) = 0, E(x; 0) = 0. Unit i is w_i = [r_i (D); theta_i]
with theta_i the expert's parameters (column-major vecs).

* Linear expert E(x; Theta) = Theta x, Theta (k x D): G_c = grad_theta E_c(x; 0) = x (x) e_c, so
  A_c = psi'(0)/2 [[0, x G_c^T], [G_c x^T, 0]], a gated bilinear model f_c = psi'(0) (r.x)(Theta x)_c.
* Tanh expert E(x; V1, V2) = V2 tanh(V1 x): G = 0, because the expert is itself a product of two
  weight layers that both vanish at 0 (its own ZGZ). Hence A = 0: the branch psi(r.x) E starts
  at cubic order (one power of |w| from the gate, two from the expert), its NQF is trivial, and
  the unit is odd in w (psi and tanh odd, three factors). A small-init MoE of such experts learns
  through its cubic term, which this library does not model (the paper's "neural cubic forms").
"""
from __future__ import annotations

import math

import torch

from nqf.architectures.activations import activation
from nqf.architectures.base import UnitModule, gaussian, generator, orthonormal, unvec, vec
from nqf.architectures.effective import singular_vectors
from nqf.architectures.mode_designs import pair_modes
from nqf.theory.factored import BlockBilinearForm

Tensor = torch.Tensor


class MixtureOfExperts(UnitModule):
    """Experts as units; ``expert`` is "linear" or "tanh" (hidden size ``expert_hidden``)."""

    def __init__(self, D: int = 4, width: int = 3, n_outputs: int = 2, gate: str = "tanh",
                 expert: str = "linear", expert_hidden: int = 2, init_std: float = 1.0,
                 seed: int | None = 0, dtype: torch.dtype = torch.float64):
        super().__init__()
        if expert not in ("linear", "tanh"):
            raise ValueError(f"expert must be 'linear' or 'tanh'; got {expert!r}.")
        gen = generator(seed)
        self.D, self.n_outputs, self.expert, self.h = D, n_outputs, expert, expert_hidden
        self.gate = activation(gate)
        s = init_std / math.sqrt(D)
        self.Rg = torch.nn.Parameter(gaussian(gen, width, D, std=s, dtype=dtype))
        if expert == "linear":
            self.Theta = torch.nn.Parameter(gaussian(gen, width, n_outputs, D, std=s, dtype=dtype))
        else:
            self.V1 = torch.nn.Parameter(gaussian(gen, width, expert_hidden, D, std=s, dtype=dtype))
            self.V2 = torch.nn.Parameter(gaussian(gen, width, n_outputs, expert_hidden,
                                                  std=init_std / math.sqrt(expert_hidden), dtype=dtype))

    @property
    def z2(self) -> bool:
        # psi odd and E odd in its weights (linear: -Theta x) -> even unit; tanh expert: even in
        # theta, so psi(r.x) E is odd in w and the unit has no even Z2 symmetry
        return self.gate.odd and self.expert == "linear"

    @property
    def p(self) -> int:
        return sum(n for _, n in self.blocks())

    @property
    def width(self) -> int:
        return self.Rg.shape[0]

    def blocks(self):
        if self.expert == "linear":
            return [("r", self.D), ("Θ", self.n_outputs * self.D)]
        return [("r", self.D), ("V1", self.h * self.D), ("V2", self.n_outputs * self.h)]

    def _experts(self, x: Tensor, theta: list[Tensor]) -> Tensor:
        """E(x; theta) for x (..., D) and expert weights with a leading unit axis -> (..., units, k)."""
        if self.expert == "linear":
            return torch.einsum("ikd,...d->...ik", theta[0], x)
        hidden = torch.tanh(torch.einsum("ihd,...d->...ih", theta[0], x))
        return torch.einsum("ikh,...ih->...ik", theta[1], hidden)

    def _theta(self) -> list[Tensor]:
        return [self.Theta] if self.expert == "linear" else [self.V1, self.V2]

    def forward(self, x: Tensor) -> Tensor:
        gates = self.gate.fn(x @ self.Rg.T)
        return torch.einsum("mi,mik->mk", gates, self._experts(x, self._theta()))

    def _unvec_theta(self, flat: Tensor) -> list[Tensor]:
        """flat (..., n_theta) -> expert weight matrices with the leading axes of flat."""
        k, D, h = self.n_outputs, self.D, self.h
        if self.expert == "linear":
            return [unvec(flat, k, D)]
        return [unvec(flat[..., :h * D], h, D), unvec(flat[..., h * D:], k, h)]

    def unit(self, w: Tensor, x: Tensor) -> Tensor:
        theta = [t[None] for t in self._unvec_theta(w[self.D:])]
        return self.gate.fn(w[:self.D] @ x) * self._experts(x, theta)[0]

    def structure(self, x: Tensor) -> BlockBilinearForm:
        self.gate.require_nqf("MixtureOfExperts.structure")
        k, m = self.n_outputs, x.shape[0]
        left = self.gate.slope0 * x[:, None, None, :]
        n_theta = self.p - self.D
        if self.expert == "linear":
            eye = torch.eye(k, dtype=x.dtype, device=x.device)
            # vec(Theta)[j * k + c] = Theta[c, j], so grad_theta E_c = x (x) e_c
            G = (x[:, None, :, None] * eye[None, :, None, :]).reshape(m, k, n_theta)
        else:
            G = torch.zeros(1, k, n_theta, dtype=x.dtype, device=x.device)  # k outputs, all A_c = 0
        return BlockBilinearForm(self.p, (0, self.D), (self.D, self.p), left, G[:, :, None, :])

    def params_from_unit_weights(self, W: Tensor) -> dict[str, Tensor]:
        theta = self._unvec_theta(W[self.D:].T)
        names = ["Theta"] if self.expert == "linear" else ["V1", "V2"]
        return {"Rg": W[:self.D].T, **dict(zip(names, theta))}

    def unit_weights(self) -> Tensor:
        return torch.cat([self.Rg] + [vec(t) for t in self._theta()], dim=1).T

    def sample_inputs(self, m: int, gen: torch.Generator) -> Tensor:
        return torch.randn(m, self.D, generator=gen, dtype=self.Rg.dtype)

    def effective_refusal(self) -> Exception | None:
        if self.expert != "linear":
            return ValueError("A MoE with tanh experts has A = 0 (its NQF is trivial), so it has no "
                              "effective matrix; use expert='linear'.")
        return None

    def effective_matrix(self, W: Tensor) -> Tensor:
        """Prop. 5 (linear experts): E_c = Sym(psi'(0) sum_i Theta_i[c, :]^T r_i^T) (D x D per
        output, stacked to (k D) x D); f_c - f_c(0) = x^T E_c x. Only the symmetric part of each
        E_c reaches the data, so the identified object is the symmetrised one."""
        k, D = self.n_outputs, self.D
        theta = unvec(W[..., D:, :].transpose(-1, -2), k, D)  # (..., d, k, D)
        G = self.gate.slope0 * torch.einsum("...icj,...li->...cjl", theta, W[..., :D, :])
        return (0.5 * (G + G.transpose(-1, -2))).reshape(*G.shape[:-3], k * D, D)

    def effective_outputs(self, E: Tensor, x: Tensor) -> Tensor:
        Ec = E.reshape(*E.shape[:-2], self.n_outputs, self.D, self.D)
        return torch.einsum("mj,...cjl,ml->...mc", x, Ec, x)

    def teacher_units(self, root: Tensor, gen: torch.Generator) -> Tensor:
        """U_a = a_a (x) v_a with orthonormal a_a: every E_c stays symmetric, so the data identify
        E exactly."""
        r = root.numel()
        W = torch.zeros(self.p, r, dtype=torch.float64)
        a, V = singular_vectors(self.n_outputs, r, gen), singular_vectors(self.D, r, gen)
        W[:self.D] = V * root
        theta = a.T[:, :, None] * (V.T * root[:, None])[:, None, :] / self.gate.slope0  # (r, k, D)
        W[self.D:] = vec(theta).T
        return W

    @classmethod
    def mode_design(cls, n_modes, width, gen, seed):
        """One-hot inputs sqrt(D) e_i: S_(i,c) = psi'(0) D e_i (e_i (x) e_c)^T, so C is isotropic on
        the entries (i, (i, c)) and mode k lives on the gate weight r_k and the expert column k."""
        K = n_modes
        D = K + 1
        build = dict(D=D, width=width, n_outputs=K, gate="tanh", expert="linear", seed=seed)
        x = math.sqrt(D) * torch.eye(D, dtype=torch.float64)
        beta = orthonormal(K, K, gen)
        b = torch.zeros(D * K, K, dtype=torch.float64)
        for k in range(K):
            b[k * K:(k + 1) * K, k] = beta[:, k]  # vec(Theta)[j k + c] = Theta[c, j]
        Q = pair_modes(D + D * K, 0, torch.eye(D, K, dtype=torch.float64), D, b)
        return build, (x,), Q, "one-hot inputs (gated bilinear model, one mode per input direction)"
