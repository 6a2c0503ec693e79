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
  module and its NQF can start from the same W, and the module can be evaluated at any W;
* what experiments need to read and store its inputs: ``input_layout``, ``unit_input_dim``
  (the length of the vector one unit reads), ``image_size`` / ``image_inputs`` (modules that
  read images), ``set_readout`` (modules with a fixed readout).

Vec convention: a matrix inside w is stored column-major (Fortran order, columns stacked), the
convention of the Kronecker identities in the paper's proofs (vec(A X B) = (B^T (x) A) vec X).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np
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


# How a module's inputs are laid out: one (part, axes) per part of what forward() takes (a tensor,
# or a tuple of them), the axes after the sample axis. Data files store part p of architecture a
# as a variable over (sample, a_axis, ...) (nqf.architectures.input_variables).
VECTOR = (("x", ("feature",)),)
MATRIX = (("x", ("row", "col")),)  # an image, a sensing matrix
QUERY_CONTEXT = (("query", ("feature",)), ("context", ("feature", "token")))


class UnitModule(torch.nn.Module, ABC):
    """A layer of interchangeable units with its structure matrix; see the module docstring."""

    n_outputs: int
    z2: bool = True  # theory: unit(-w) = unit(w), so the NQF error is O(|W|^4)
    additive: bool = True  # the layer is a plain sum of its units' outputs
    input_layout: tuple[tuple[str, tuple[str, ...]], ...] = VECTOR  # see VECTOR above

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

    @property
    def unit_input_dim(self) -> int:
        """Length of the vector one unit reads: x or a token (D) unless the module says otherwise."""
        return self.D

    def unit_input_norm2(self, x: Any) -> Tensor:
        """Mean over samples (and positions) of |v|^2, v the vectors the units read in inputs x
        (here vector inputs (m, D); modules that read patches or tokens say how)."""
        return x.pow(2).sum(-1).mean()

    @staticmethod
    def image_size(image: tuple[int, int]) -> dict:
        """The constructor's keyword arguments that size the module for (H, W) images."""
        raise ValueError("this architecture does not read images.")

    def image_inputs(self, images: Tensor) -> Any:
        """Images (m, H, W) as forward() takes them (for a module sized by ``image_size``)."""
        raise ValueError(f"{type(self).__name__} does not read images.")

    def set_readout(self, values) -> None:
        """Overwrite the module's fixed readout (its buffer ``readout``, as in the query-key
        heads) with ``values`` of its size, so that teacher, module and NQF share one; nothing
        to do for a module without one."""
        readout = getattr(self, "readout", None)
        if readout is not None:
            with torch.no_grad():
                readout.copy_(torch.as_tensor(np.asarray(values)).reshape(readout.shape))

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


def initial_weights(module: UnitModule, seeds: Sequence[int], scales: Sequence[float] = (1.0,)) -> Tensor:
    """W0 of shape (scales x seeds, p, d), scale-major: seed s gives one standard Gaussian G_s
    (torch generator seeded by s, float64), scaled by each sigma in ``scales``."""
    G = torch.stack([torch.randn(module.p, module.width, generator=torch.Generator().manual_seed(int(s)),
                                 dtype=torch.float64) for s in seeds])
    return torch.cat([float(sigma) * G for sigma in scales])


def gaussian_teacher(module: UnitModule, gen: torch.Generator, *, std: float = 1.0, fan_in: bool = False) -> Tensor:
    """Teacher unit weights W* (p x d) drawn from ``gen``: N(0, std^2) per entry, or with
    ``fan_in`` N(0, std^2 / fan-in) per block: a block named "v" (an MLP unit's readout) reads
    the d hidden units, every other block reads one unit input (``unit_input_dim``)."""
    W = torch.randn(module.p, module.width, generator=gen, dtype=torch.float64) * std
    if fan_in:
        start = 0
        for name, n in module.blocks():
            W[start:start + n] /= math.sqrt(module.width if name == "v" else module.unit_input_dim)
            start += n
    return W
