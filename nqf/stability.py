"""The largest stable learning rate of gradient descent, from the structure statistics alone.

In the shared eigenbasis the loss is a function of the mode amplitudes z_k = |w_k|^2 only,
L(z) = (1/m) |Lambda z - y|^2 + const. At the end point z* (the non-negative least-squares
solution, where dL/dz_k = 0 on every active mode) the Hessian with respect to the weights is

    H = 4 diag(sqrt z*) (d^2 L / dz^2) diag(sqrt z*) = diag(sqrt z*) C diag(sqrt z*),

since C = (8/m) Lambda^T Lambda (for diagonal C its eigenvalues are r_k = C_kk z*_k). Gradient
descent W <- W - lr grad L is linearly stable there when lr < 2 / lambda_max(H); Polyak momentum
beta (heavy ball) when lr < 2 (1 + beta) / lambda_max(H). Above the bound GD cannot settle at the
minimum (it oscillates, and far enough above it the loss overflows). Adam has no such linear
bound: None is returned.
"""
from __future__ import annotations

import numpy as np

from nqf import _checks


def hessian_at_minimum(C, z_star) -> np.ndarray:
    """H = diag(sqrt z*) C diag(sqrt z*), the weight-space Hessian at the learned end point.

    C is (K, K) finite, z* (K,) finite and >= 0 up to rounding (entries below 0 are clipped)."""
    z = _checks.array("z_star", z_star, ndim=1)
    C = _checks.square("C", C, z.shape[0])
    s = np.sqrt(np.clip(z, 0.0, None))
    return s[:, None] * C * s[None, :]


def max_stable_lr(C, z_star, *, optimizer: str = "gd", momentum: float = 0.9) -> float | None:
    """The largest learning rate at which ``optimizer`` can converge to the end point z*."""
    momentum = _checks.scalar("momentum", momentum, low=0.0, high=1.0, high_open=True)
    if optimizer not in ("gd", "momentum", "adam"):
        raise ValueError(f"optimizer must be gd, momentum or adam; got {optimizer!r}.")
    lam = float(np.linalg.eigvalsh(hessian_at_minimum(C, z_star))[-1])
    if lam <= 0:
        return float("inf")
    if optimizer == "gd":
        return 2.0 / lam
    if optimizer == "momentum":
        return 2.0 * (1.0 + momentum) / lam
    if optimizer == "adam":
        return None
    raise ValueError(f"optimizer must be gd, momentum or adam; got {optimizer!r}.")


def stability_hint(C, z_star, optimizer: str = "gd", momentum: float = 0.9) -> str:
    """A sentence for a divergence message: the largest stable rate the statistics predict."""
    try:
        lr = max_stable_lr(C, z_star, optimizer=optimizer, momentum=momentum)
    except (ValueError, np.linalg.LinAlgError):
        return ""
    if lr is None or not np.isfinite(lr):
        return ""
    return (f"The structure statistics predict that {optimizer} is stable only for lr < {lr:.4g} "
            f"(2 / largest eigenvalue of the Hessian at the learned minimum).")
