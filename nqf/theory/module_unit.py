"""An ordinary ``torch.nn.Module`` read as d units of p weights, and its unit function derived.

``UnitReading(module, units)``: ``units`` maps each parameter holding the units to the axis that
indexes them (``{"U": 0, "V": 1}`` for f(x) = V sin(U x), U (d, D), V (k, d): unit i is
w_i = [U[i, :]; V[:, i]], p = D + k). Each unit's slice of a parameter (the parameter without
its unit axis) is flattened in torch's row-major order; the slices are concatenated in the
order ``units`` lists them. From it:

* ``unit_weights(module)``: W = [w_1 ... w_d] (p, d) of the module's current parameters;
* ``parameters(W)``: the named parameters holding the n units of W (p, n);
* ``unit_function(module)``: unit(w, x), the module's own forward (torch.func.functional_call) on
  the one input x with unit 0 set to w and every other unit at zero; this is what
  nqf.structure_matrix differentiates. Parameters and buffers not named keep their values.

nqf.architectures.module_units.ModuleUnits builds the full layer interface on it.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import torch
from torch.func import functional_call

Tensor = torch.Tensor


class UnitReading:
    """Which parameters of a module hold its units, and along which axis (module docstring)."""

    def __init__(self, module: torch.nn.Module, units: Mapping[str, int]):
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be a torch.nn.Module; got {type(module).__name__}.")
        if not isinstance(units, Mapping) or not units:
            raise TypeError("units must be a non-empty mapping {parameter name: axis that indexes the units}, e.g. "
                            "{'0.weight': 0, '2.weight': 1} for nn.Sequential(nn.Linear(D, d), nn.Tanh(), "
                            "nn.Linear(d, k)).")
        params = dict(module.named_parameters())
        axes, widths = {}, {}
        for name, axis in units.items():
            if name not in params:
                raise ValueError(f"units names {name!r}, which is not a parameter of the {type(module).__name__}; "
                                 f"its parameters are {sorted(params)}.")
            shape = params[name].shape
            if isinstance(axis, bool) or not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
                raise ValueError(f"units[{name!r}] must be an axis of the parameter, shape {tuple(shape)}; got {axis!r}.")
            axes[name] = axis % len(shape)
            widths[name] = shape[axes[name]]
        if len(set(widths.values())) != 1:
            raise ValueError(f"the parameters in units must have one number of units d along their unit axes; "
                             f"got {widths}.")
        self.axes = axes
        self.width = next(iter(widths.values()))
        self.shapes = {name: params[name].shape for name in axes}
        self.sizes = {name: math.prod(s) // self.width for name, s in self.shapes.items()}
        self.p = sum(self.sizes.values())

    def parameters(self, W: Tensor) -> dict[str, Tensor]:
        """W (p, n) -> each named parameter with the n units of W along its unit axis."""
        out, start = {}, 0
        for name, axis in self.axes.items():
            size, shape = self.sizes[name], self.shapes[name]
            rest = [s for i, s in enumerate(shape) if i != axis]
            out[name] = W[start:start + size].T.reshape(W.shape[-1], *rest).movedim(0, axis)
            start += size
        return out

    def unit_weights(self, module: torch.nn.Module) -> Tensor:
        """W (p, d) of the module's current parameters."""
        params = dict(module.named_parameters())
        return torch.cat([params[name].movedim(axis, 0).reshape(self.width, -1).T for name, axis in self.axes.items()])

    def unit_function(self, module: torch.nn.Module, prefix: str = "") -> Callable[[Tensor, Any], Tensor]:
        """unit(w, x) of ``module`` (module docstring); ``prefix`` is prepended to the parameter names
        (for a module that holds this one as a submodule, e.g. ``"module."``)."""
        d = self.width

        def unit(w: Tensor, x: Any) -> Tensor:
            W = torch.cat([w[:, None], w.new_zeros(w.shape[0], d - 1)], dim=1)
            batch = x[None] if isinstance(x, Tensor) else type(x)(t[None] for t in x)
            params = {prefix + name: value for name, value in self.parameters(W).items()}
            return functional_call(module, params, (batch,))[0]

        return unit
