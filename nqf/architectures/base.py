"""What every architecture provides, and the vec convention they share.

A layer here is a sum (or, for attention logits, a symmetric function) over d interchangeable
units, unit i carrying a flat parameter vector w_i of length p. Each architecture is a real
``torch.nn.Module`` (``UnitModule``) that also exposes, for the same parameters:

* ``unit(w, x)``: the layer's output on one input x with one unit set to w and all others at 0;
  this is what ``nqf.structure_matrix`` differentiates;
* ``structure(x)``: the analytic A(x) for a batch of inputs, as a factored StructureForm
  (never p x p per sample), over the flattened (sample, output) pairs;
* ``unit_weights()`` / ``set_unit_weights(W)`` / ``forward_with(W, x)``: the module's weights
  read as W = [w_1 ... w_d] (p x d), so M = W W^T can be tracked while the module trains, the
  module and its NQF can start from the same W, and the module can be evaluated at any W.

Vec convention: a matrix inside w is stored column-major (Fortran order, columns stacked), the
convention of the Kronecker identities in the paper's proofs (vec(A X B) = (B^T (x) A) vec X).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.func import functional_call, vmap

from nqf.forms import StructureForm

Tensor = torch.Tensor


def vec(matrix: Tensor) -> Tensor:
    """Column-major vec of the last two axes: (..., r, c) -> (..., r * c)."""
    return matrix.transpose(-1, -2).reshape(*matrix.shape[:-2], -1)


def unvec(flat: Tensor, rows: int, cols: int) -> Tensor:
    """Inverse of vec: (..., rows * cols) -> (..., rows, cols)."""
    return flat.reshape(*flat.shape[:-1], cols, rows).transpose(-1, -2)


def generator(seed: int | None) -> torch.Generator:
    return torch.Generator().manual_seed(0 if seed is None else seed)


def gaussian(gen: torch.Generator, *shape: int, std: float = 1.0, dtype=torch.float64) -> Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype) * std


class UnitModule(torch.nn.Module, ABC):
    """A layer of interchangeable units with its structure matrix; see the module docstring."""

    n_outputs: int
    z2: bool = True  # theory: unit(-w) = unit(w), so the NQF error is O(|W|^4)
    additive: bool = True  # the layer is a plain sum of its units' outputs

    @property
    @abstractmethod
    def p(self) -> int:
        """Parameters per unit."""

    @property
    @abstractmethod
    def width(self) -> int:
        """Number of units d."""

    @abstractmethod
    def blocks(self) -> list[tuple[str, int]]:
        """Named consecutive blocks of a unit's parameter vector, e.g. [("u", D), ("v", k)]."""

    @abstractmethod
    def unit(self, w: Tensor, x: Any) -> Tensor:
        """Output (n_outputs,) on one input x with one unit at w and every other unit at 0."""

    @abstractmethod
    def structure(self, x: Any) -> StructureForm:
        """Analytic A(x) for a batch of inputs, factored, over m = samples * n_outputs pairs."""

    @abstractmethod
    def params_from_unit_weights(self, W: Tensor) -> dict[str, Tensor]:
        """The module's parameters (name -> tensor) that correspond to W (p x d)."""

    @abstractmethod
    def unit_weights(self) -> Tensor:
        """The module's current weights as W (p x d); differentiable w.r.t. the parameters."""

    @abstractmethod
    def sample_inputs(self, m: int, gen: torch.Generator) -> Any:
        """m random inputs of the shape forward() takes (standard Gaussian unless stated)."""

    def set_unit_weights(self, W: Tensor) -> None:
        """Overwrite the module's parameters with those of W (p x d)."""
        params = dict(self.named_parameters())
        with torch.no_grad():
            for name, value in self.params_from_unit_weights(W).items():
                params[name].copy_(value)

    def forward_with(self, W: Tensor, x: Any) -> Tensor:
        """forward(x) evaluated at unit weights W (p x d), without touching the parameters."""
        return functional_call(self, self.params_from_unit_weights(W), (x,))

    def forward_replicas(self, W: Tensor, x: Any) -> Tensor:
        """forward(x) at each of R unit-weight matrices W (R, p, d): (R, samples, n_outputs).

        The default maps :meth:`forward_with` over the replicas (torch.func.vmap); modules whose
        forward is one large contraction (CNN, self-attention) override it with a single kernel
        call over all replicas, which is several times faster on the CPU."""
        return vmap(self.forward_with, in_dims=(0, None))(W, x)

    def nqf_outputs(self, W: Tensor, x: Any) -> Tensor:
        """The NQF prediction f(0) + Tr[W W^T A(x)], shape (samples, n_outputs)."""
        f0 = self.forward_with(torch.zeros_like(W), x)
        return f0 + self.structure(x).outputs(W).reshape(f0.shape)


@dataclass(frozen=True)
class Architecture:
    """Registry entry: how to build a module, and what the theory says about it.

    ``build(**overrides)`` returns a float64 UnitModule with small default sizes (fast to
    differentiate, readable when plotted); the module carries p, the unit function, the
    analytic factored A(x) and the weights -> W reader. ``z2`` is the theory's claim about the
    per-unit sign symmetry (rate 1/phi vs phi^-1/2); ``exact`` marks the Table 3 models, which
    are quadratic already, so their NQF has no error at all.
    """

    name: str
    title: str
    reference: str
    factory: Callable[..., UnitModule]
    z2: bool
    exact: bool = False

    def build(self, **overrides) -> UnitModule:
        return self.factory(**overrides)
