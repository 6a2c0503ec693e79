"""Scalar activations with the facts the structure matrices need: phi(0), phi'(0), parity, smoothness."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from nqf.architectures.fast_tanh import tanh as _tanh


@dataclass(frozen=True)
class Activation:
    name: str
    fn: Callable[[torch.Tensor], torch.Tensor]
    value0: float  # phi(0): must be 0 for ZGZ
    slope0: float  # phi'(0): the only number of phi that enters A(x) (Prop. 1, 5, 6)
    odd: bool  # phi(-z) = -phi(z): gives the per-unit Z2 symmetry of MLP-like units
    smooth: bool  # C^3 at 0, as Theorem 1 needs

    def require_nqf(self, where: str) -> None:
        """Refuse an analytic A(x) where Theorem 1 does not apply, saying which hypothesis fails."""
        if not self.smooth:
            raise ValueError(f"{where}: activation {self.name!r} is not C^3 at 0, so Theorem 1 "
                             f"does not apply and A(x) is undefined; use tanh, gelu or linear.")
        if self.value0 != 0.0:
            raise ValueError(f"{where}: activation {self.name!r} has phi(0) = {self.value0} != 0, so "
                             f"ZGZ fails and the pure NQF does not apply; nqf.expansion(module.unit, "
                             f"x, module.p) returns the non-zero gradient g(x).")


def _identity(z: torch.Tensor) -> torch.Tensor:
    return z


ACTIVATIONS: dict[str, Activation] = {
    # phi(z) = z: a linear network (Saxe et al.), exactly quadratic in each unit's w, so its NQF is exact
    "linear": Activation("linear", _identity, 0.0, 1.0, odd=True, smooth=True),
    "tanh": Activation("tanh", _tanh, 0.0, 1.0, odd=True, smooth=True),
    # exact (erf) GELU: x Phi(x), phi'(0) = 1/2, phi''(0) = 2 / sqrt(2 pi) != 0, so no Z2 symmetry
    "gelu": Activation("gelu", torch.nn.functional.gelu, 0.0, 0.5, odd=False, smooth=True),
    "sigmoid": Activation("sigmoid", torch.sigmoid, 0.5, 0.25, odd=False, smooth=True),
    "relu": Activation("relu", torch.relu, 0.0, float("nan"), odd=False, smooth=False),
}


def activation(name: str) -> Activation:
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}.") from None
