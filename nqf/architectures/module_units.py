"""Your own ``torch.nn.Module`` as a layer of units: the unit function derived, not written twice.

An ordinary module with ``forward(x)`` becomes an nqf layer once you say which parameters hold
the units and along which axis: ``units={"U": 0, "V": 1}`` for f(x) = V sin(U x) with U (d, D)
and V (k, d) reads unit i as w_i = [U[i, :]; V[:, i]] (p = D + k). Then

* ``unit(w, x)`` is the module's own forward (``torch.func.functional_call``) with unit 0 set to w
  and every other unit at zero: what nqf.structure_matrix differentiates;
* ``unit_weights()`` is W = [w_1 ... w_d] (p, d) from the module's current parameters, so
  M = W W^T; ``forward_with(W, x)`` evaluates the module at any W;
* ``structure(x)`` is A(x) by autograd for a batch of inputs, a DenseForm over the flattened
  (sample, output) pairs, which QuadraticModel, nqf.predict and nqf.train_side_by_side take.

Each unit's slice of a parameter (the parameter with the unit axis removed) is flattened in
torch's row-major order; the slices are concatenated in the order ``units`` lists them
(nqf.theory.module_unit.UnitReading). Parameters and buffers not named in ``units`` keep their values in every evaluation (a fixed
readout, say); a parameter that varies per unit but is left out (a hidden bias) makes "the other
units at zero" mean "at their own values of it", so name every per-unit parameter.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from nqf.architectures.base import UnitModule
from nqf.theory.forms import DenseForm
from nqf.theory.module_unit import UnitReading

Tensor = torch.Tensor


class ModuleUnits(UnitModule):
    """``module`` read as d units of p weights (module docstring); ``forward(x)`` is the module's.

    The module is registered as a submodule (``self.module``), so its parameters are this
    object's and the optimizer, ``unit_weights`` and ``set_unit_weights`` see the same tensors.
    ``z2``: whether unit(-w, x) = unit(w, x) (the O(|W|^4) error of Theorem 1); it is not known
    for an arbitrary module, so give it when you know it (nqf.expansion(units.unit, x, units.p)
    tests it on inputs).
    """

    def __init__(self, module: torch.nn.Module, units: Mapping[str, int], *, outputs: int | None = None,
                 z2: bool = False):
        super().__init__()
        self.module = module
        self._reading = UnitReading(module, units)
        self._unit = self._reading.unit_function(self.module)  # built once: structure() traces it per sample
        self.n_outputs = outputs  # None until known (structure(x) sets it)
        self.z2 = bool(z2)

    @property
    def p(self) -> int:
        return self._reading.p

    @property
    def width(self) -> int:
        return self._reading.width

    def blocks(self) -> list[tuple[str, int]]:
        return list(self._reading.sizes.items())

    def forward(self, x: Any) -> Tensor:
        return self.module(x)

    def params_from_unit_weights(self, W: Tensor) -> dict[str, Tensor]:
        return {f"module.{name}": value for name, value in self._reading.parameters(W).items()}

    def unit_weights(self) -> Tensor:
        return self._reading.unit_weights(self.module)

    def unit(self, w: Tensor, x: Any) -> Tensor:
        """The module's output on one input x (no sample axis) with unit 0 set to w and the other
        units at zero: forward on the batch of one, its sample axis removed."""
        return self._unit(w, x)

    def structure(self, x: Any) -> DenseForm:
        """A(x) by autograd for the inputs x (leading sample axis): a DenseForm over the m k
        (sample, output) pairs, sample-major as the module's outputs flatten."""
        from nqf.theory.taylor import structure_matrix

        A = structure_matrix(self.unit, x, self.p, batched=True, dtype=self._dtype(), check=False)
        self.n_outputs = 1 if A.ndim == 3 else A.shape[1]
        return DenseForm(A.reshape(-1, self.p, self.p))

    def _dtype(self) -> torch.dtype:
        return next(iter(self.module.parameters())).dtype

    def sample_inputs(self, m: int, gen: torch.Generator) -> Any:
        raise NotImplementedError(f"{type(self.module).__name__} has no sample inputs: pass your own data.")


class OnData(torch.nn.Module):
    """``module`` on its training inputs as what nqf.train trains: forward() -> module(x)[None],
    one replica. The module is a submodule, so the parameters are the module's own."""

    def __init__(self, module: torch.nn.Module, x: Any):
        super().__init__()
        self.module, self.x = module, x

    def forward(self) -> Tensor:
        return self.module(self.x)[None]


class UnitsOnData(OnData):
    """:class:`OnData` of a module read through ``units``: ``order_parameter()`` is M = W W^T of
    its unit weights, (1, p, p), which nqf.train records by default."""

    def __init__(self, module: torch.nn.Module, x: Any, units: Mapping[str, int]):
        super().__init__(module, x)
        self._reading = UnitReading(module, units)

    def order_parameter(self) -> Tensor:
        W = self._reading.unit_weights(self.module)
        return (W @ W.transpose(-1, -2))[None]
