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

from nqf import validate


def hessian_at_minimum(C, z_star) -> np.ndarray:
    """H = diag(sqrt z*) C diag(sqrt z*), the weight-space Hessian at the learned end point.

    C is (K, K) finite, z* (K,) finite and >= 0 up to rounding (entries below 0 are clipped)."""
    z = validate.array("z_star", z_star, ndim=1)
    C = validate.square("C", C, z.shape[0])
    if z.size and z.min() < -1e-9 * max(float(np.max(np.abs(z))), 1e-300):
        raise ValueError(f"z_star must be non-negative (an end point of the GLV; entries down to -1e-9 max|z_star| "
                         f"are rounding and clipped); got smallest {z.min():.3g}.")
    s = np.sqrt(np.clip(z, 0.0, None))
    return s[:, None] * C * s[None, :]


def max_stable_lr(C, z_star, *, optimizer: str = "gd", momentum: float = 0.9) -> float | None:
    """The largest learning rate at which ``optimizer`` can converge to the end point z*."""
    momentum = validate.scalar("momentum", momentum, low=0.0, high=1.0, high_open=True)
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


def sample_block_curvature(lam, y, z0) -> np.ndarray:
    """Per sample, the largest Hessian eigenvalue at the end point that gradient flow reaches
    on mutually orthogonal diagonal data matrices (Theorem 5): sample mu owns the K modes with
    entries lam[mu] > 0 and target y[mu] > 0, its modes start at z0 > 0 (a number, (m,) or
    (m, K)) and grow as z_k = z0_k exp(lam_k u) with one u per sample, so the end point has
    sum_k lam_k z_k = y. Sample mu's block of H is (8/m) (sqrt z * lam)(sqrt z * lam)^T, of rank
    one: its eigenvalue is (8/m) sum_k lam_k^2 z_k, below zeta_mu = (8/m) max_k lam_k y_mu and
    equal to it as eps -> 0. Computed in log space (no z overflows), O(m K)."""
    lam = validate.positive("lam", validate.array("lam", lam, ndim=2, nonempty=True))
    m, K = lam.shape
    y = validate.positive("y", validate.array("y", y, shape=(m,)))
    z0 = validate.positive("z0", validate.array("z0", z0, ndim=(0, 1, 2)))
    if z0.shape not in ((), (m,), (m, K)):
        raise ValueError(f"z0 must be a number, one per sample ({m},) or one per mode ({m}, {K}); got shape {z0.shape}.")
    z0 = np.broadcast_to(z0.reshape(m, 1) if z0.shape == (m,) else z0, (m, K))
    base = np.log(lam * z0)  # ln(lam_k z0_k): the sample's output is sum_k exp(base_k + lam_k u)

    def log_output(u):
        e = base + lam * u[:, None]
        top = e.max(axis=1)
        return top + np.log(np.exp(e - top[:, None]).sum(axis=1))

    # bracket: the largest entry alone reaches y by u_hi; step down from there until below y
    j = np.argmax(lam, axis=1)
    u_hi = (np.log(y) - base[np.arange(m), j]) / lam[np.arange(m), j]
    u_lo, width = u_hi - 1.0, np.ones(m)
    for _ in range(2100):  # the output halves at least every ln 2 / min(lam) in u
        high = log_output(u_lo) > np.log(y)
        if not high.any():
            break
        u_lo, width = np.where(high, u_lo - width, u_lo), np.where(high, 2 * width, width)
    for _ in range(200):  # bisection to float64 resolution
        mid = 0.5 * (u_lo + u_hi)
        above = log_output(mid) > np.log(y)
        u_hi, u_lo = np.where(above, mid, u_hi), np.where(above, u_lo, mid)
    e = base + lam * u_hi[:, None] + np.log(lam)  # ln(lam_k^2 z_k)
    top = e.max(axis=1)
    return 8.0 / m * np.exp(top) * np.exp(e - top[:, None]).sum(axis=1)


def top_curvature(loss_fn, W, *, iters: int = 40):
    """Per replica, the largest eigenvalue of the Hessian of ``loss_fn`` with respect to W at W.

    ``loss_fn(W)`` returns one loss per replica, shape (R,), each depending on its own W[r] (R,
    ...) only, so the Hessian is block-diagonal and one power iteration with a vector normalised
    per replica finds every block's eigenvalue at once (Hessian-vector products by double
    backward). Power iteration finds the eigenvalue of largest magnitude; where that is negative
    (a saddle's escape direction, harmless to gradient descent), it is run again on H + |lambda| I,
    whose top eigenvalue less |lambda| is H's largest. Returns a numpy array (R,); a block with
    no positive curvature gives 0. The relative accuracy after ``iters`` iterations is set by the
    gap between the two largest eigenvalues; the value is a lower bound on the true one. Each
    replica's iteration starts from its own weights W[r] (plus a fixed pattern where W[r] = 0),
    so its value does not depend on the other replicas in the batch.
    """
    import torch

    W = W.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(loss_fn(W).sum(), W, create_graph=True)
    axes = tuple(range(1, W.ndim))
    start = W.detach() + 1e-3 * torch.cos(torch.arange(W[0].numel(), dtype=W.dtype, device=W.device)).reshape(W.shape[1:])

    def hvp(v):
        (hv,) = torch.autograd.grad(g, W, grad_outputs=v, retain_graph=True)
        return hv

    def iterate(shift):
        v = start / start.pow(2).sum(axes, keepdim=True).sqrt()
        lam = torch.zeros(W.shape[0], dtype=W.dtype, device=W.device)
        for _ in range(iters):
            hv = hvp(v) + shift.reshape(-1, *[1] * (W.ndim - 1)) * v
            lam = (v * hv).sum(axes)
            v = hv / hv.pow(2).sum(axes, keepdim=True).sqrt().clamp_min(1e-300)
        return lam

    lam = iterate(torch.zeros(W.shape[0], dtype=W.dtype, device=W.device))
    shift = lam.clamp(max=0).abs()
    if bool((shift > 0).any()):
        lam = torch.where(shift > 0, iterate(shift) - shift, lam)
    return lam.clamp_min(0).detach().cpu().numpy()


def first_growth_rate(form, y) -> float:
    """r_1, the largest eigenvalue of (8/n) sum_mu y_mu A_mu (n = y.shape[0]): the top growth rate
    of the modes and the loss's curvature where the first mode is learned (for diagonal C the
    top eigenvalue of the Hessian at the end point: GD settles there only for c lr < 2 / r_1).
    Power iteration on ``form.apply_weighted`` (never a p x p matrix), shifted when the largest
    |eigenvalue| is negative; y a torch tensor of targets (n,) or (n, k)."""
    import torch

    c = 8.0 / y.shape[0] * y.reshape(-1).to(dtype=torch.float64)
    form = form.to(dtype=torch.float64, device=c.device)
    start = 1.0 + 0.5 * torch.cos(torch.arange(form.p, dtype=torch.float64, device=c.device))[:, None]

    def top(shift: float) -> float:
        v, lam = start / start.norm(), 0.0
        for _ in range(100):
            hv = form.apply_weighted(c, v) + shift * v
            lam = float((v * hv).sum())
            v = hv / hv.norm().clamp_min(1e-300)
        return lam - shift

    lam = top(0.0)
    return top(-lam) if lam < 0 else lam


def unsettled_message(tail, first, *, lr: float, factor: float, scale, loss: str, eps: float, rate=None) -> str | None:
    """A sentence when gradient descent ended oscillating instead of settling, else None.

    ``tail``: the per-replica losses of the last steps (k, R), ``first``: those of step 0 (R,).
    Below its stability bound GD decreases the loss at every step near a minimum; a rise over the
    last steps larger than rounding (sqrt(eps) of the initial loss, 1e-3 of the current one) means
    it hovers on a plateau it cannot settle on. ``rate``: a callable giving r_1 (models with a
    structure form), to name the bound 2 / (c r_1); ``scale``: lr_scale per replica or None."""
    tail, first = np.asarray(tail, float), np.asarray(first, float)
    if tail.shape[0] < 3:
        return None
    rise = np.max(np.diff(tail, axis=0), axis=0)
    bad = rise > np.maximum(np.sqrt(eps) * np.abs(first), 1e-3 * np.abs(tail[-1]))
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad)[np.argmax(rise[bad])])
    s = 1.0 if scale is None else float(np.asarray(scale, float).reshape(-1)[i])
    head = (f"train: gradient descent did not settle: over its last {tail.shape[0] - 1} steps the loss of "
            f"{int(bad.sum())} of {bad.size} replica(s) rose (replica {i}: {tail[:, i].min():.3g} to "
            f"{tail[:, i].max():.3g}) instead of decreasing, so the recorded end is an oscillation, not a minimum; ")
    step = f"lr = {lr:g}" + (f" (x lr_scale {s:g})" if scale is not None else "")
    r1 = rate() if rate is not None else None
    if r1 is not None and np.isfinite(r1) and factor * lr * s * r1 > 2.0:
        bound = 2.0 / (factor * s * r1)
        return head + (f"{step} is above the stability bound 2 / (c r_1) = {bound:.4g} (r_1 = {r1:.4g}, the top growth "
                       f"rate, is the loss's curvature where the first mode is learned; c = {factor:g} for "
                       f"loss={loss!r}): train with lr below {bound:.4g}.")
    return head + (f"{step} is above the stability bound 2 / (c lambda) of the region it ended in (lambda the loss's "
                   f"largest curvature there, which nqf.theory.stability.top_curvature measures; c = {factor:g} for "
                   f"loss={loss!r}): lower lr (e.g. halve it) until the loss settles.")
