"""Batched trainers for the Fourier-feature experiment (paper Eq. 50, Fig. 5): R replicas of the
Fourier MLP or of its NQF (tanh replaced by its argument) and of a standard tanh MLP on the raw
input, each with its exact gradient in closed form, plus the NQF's exact gradient-flow loss.

The derivation of the rates and of the exact loss is in nqf.theory.fourier_modes.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from nqf.architectures.fast_tanh import tanh, tanh_values


def fold_even_grid(M: int) -> tuple[np.ndarray, np.ndarray]:
    """Representatives mu = 0..floor(M/2) of the grid points x_mu, x_(M-mu) (cosines agree there)
    and their weights (multiplicity / M), which sum to 1."""
    idx = np.arange(M // 2 + 1)
    weights = np.where((idx == 0) | (2 * idx == M), 1.0, 2.0) / M
    return idx, weights


def init_draws(seeds, P: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """a_k(0), W_k(0) ~ N(0, eps^2) per seed, (S, P) each: seed -> W0, the same for every theta
    and for the Fourier MLP and its NQF."""
    a, W = [], []
    for seed in seeds:
        gen = torch.Generator().manual_seed(int(seed))
        draw = torch.randn(2, P, generator=gen, dtype=torch.float64) * eps
        a.append(draw[0].numpy())
        W.append(draw[1].numpy())
    return np.array(a), np.array(W)


def raw_init_draws(seeds, width: int, eps: float) -> np.ndarray:
    """Raw MLP parameters [u (H), c (H), v (H), d] ~ N(0, eps^2) per seed: (S, 3 H + 1)."""
    out = []
    for seed in seeds:
        gen = torch.Generator().manual_seed(10_000 + int(seed))  # its own stream
        out.append((torch.randn(3 * width + 1, generator=gen, dtype=torch.float64) * eps).numpy())
    return np.array(out)


class FourierReplicas(torch.nn.Module):
    """R replicas of the Fourier MLP (``nonlinear=True``) or of its NQF (tanh replaced by its
    argument), parameters ``theta`` of shape (R, 2, P) = [a; W], on weighted grid points.

    f_r(x_mu) = P^-1/2 sum_k W_rk g(s_rk a_rk psi_k(x_mu)), loss_r = sum_mu w_mu (f_r - y_r)^2.
    """

    per_replica_targets = True  # nqf.train accepts y of shape (R, points): one target row per replica

    def __init__(self, a0, W0, s, psi, weights, *, nonlinear: bool, device="cpu", dtype=torch.float64):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.theta = torch.nn.Parameter(torch.stack([torch.as_tensor(a0, **kw), torch.as_tensor(W0, **kw)], 1))
        self.register_buffer("s", torch.as_tensor(s, **kw))
        self.register_buffer("psi", torch.as_tensor(psi, **kw))
        self.register_buffer("w", torch.as_tensor(weights, **kw))
        self.nonlinear = nonlinear
        self.scale = 1.0 / math.sqrt(self.psi.shape[1])

    def forward(self) -> torch.Tensor:
        """Outputs f (R, points)."""
        a, W = self.theta[:, 0], self.theta[:, 1]
        if not self.nonlinear:
            return (self.s * a * W * self.scale) @ self.psi.T
        h = tanh((self.s * a)[:, None, :] * self.psi)
        return rows_times(h, W) * self.scale

    def loss_and_grad(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Weighted squared loss per replica and its exact gradient (R, 2, P)."""
        with torch.no_grad():
            a, W = self.theta[:, 0], self.theta[:, 1]
            if self.nonlinear:
                h = _tanh((self.s * a)[:, None, :] * self.psi)  # (R, m, P)
                res = rows_times(h, W) * self.scale - y
                wres = (2.0 * self.scale * self.w * res)[:, None, :]  # (R, 1, m)
                gW = torch.bmm(wres, h)[:, 0]
                sech2_psi = h.square_().neg_().add_(1.0).mul_(self.psi)  # in place: h is no longer needed
                ga = torch.bmm(wres, sech2_psi)[:, 0] * self.s * W
            else:
                res = (self.s * a * W * self.scale) @ self.psi.T - y
                proj = (2.0 * self.scale * self.w * res) @ self.psi * self.s  # (R, P)
                gW, ga = proj * a, proj * W
            loss = (self.w * res * res).sum(1)
            return loss, torch.stack([ga, gW], 1)

    def coefficients(self) -> torch.Tensor:
        """Projection sum_mu w_mu f(x_mu) psi_k(x_mu) of the output on each feature (R, P)."""
        return (self.forward() * self.w) @ self.psi


RECORDED = ("loss", "coef", "u", "z", "arg")  # what train_per_theta returns


def record_modes(mod: FourierReplicas) -> dict[str, torch.Tensor]:
    """What a Fourier run records per replica and unit k: the learned coefficient of psi_k
    (``coef``), the NQF coefficient s_k a_k W_k / sqrt(P) of the same weights (``u``), the
    growing-mode amplitude z_k = (a_k + W_k)^2 / 2 (``z``) and max_x |s_k a_k psi_k(x)| =
    sqrt2 s_k |a_k| (``arg``)."""
    a, W = mod.theta[:, 0], mod.theta[:, 1]
    return {"coef": mod.coefficients(), "u": mod.s * a * W * mod.scale,
            "z": (a + W) ** 2 / 2, "arg": math.sqrt(2.0) * (mod.s * a).abs()}


def train_per_theta(a0, W0, s, psi, weights, y, *, nonlinear: bool, steps, grid, run_gd, device="cpu",
                    dtype=torch.float64) -> dict[str, np.ndarray]:
    """Each theta j (row j of the scales ``s`` (T, P) and targets ``y`` (T, n)) trained as one tensor
    program over the S seeds of (a0, W0) for ``steps[j]`` steps, by ``run_gd(model, targets, record,
    steps=, record_steps=)`` (a call of nqf.train), recorded on the common step ``grid`` up to its own
    steps: (T, S, len(grid)) for ``loss`` and (T, S, len(grid), P) for :func:`record_modes`'
    quantities, NaN beyond a theta's steps."""
    S, P = np.shape(a0)
    rec = {n: np.full((len(steps), S, grid.size) + (() if n == "loss" else (P,)), np.nan) for n in RECORDED}
    for j in range(len(steps)):
        keep = grid <= steps[j]
        model = FourierReplicas(a0, W0, np.repeat(s[j][None], S, 0), psi, weights, nonlinear=nonlinear,
                                device=device, dtype=dtype)
        ds = run_gd(model, np.repeat(y[j][None], S, 0), record_modes, steps=steps[j], record_steps=grid[keep])
        for n in RECORDED:
            rec[n][j][:, keep] = ds[n].values
    return rec


class RawMLPReplicas(torch.nn.Module):
    """R replicas of the standard tanh MLP f(x) = sum_i v_i tanh(u_i x + c_i) + d on scalar inputs,
    parameters (R, 3 H + 1) = [u; c; v; d], loss (1/M) sum_mu (f - y)^2."""

    per_replica_targets = True  # nqf.train accepts y of shape (R, M): one target row per replica

    def __init__(self, params0, x, *, device="cpu", dtype=torch.float64):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.theta = torch.nn.Parameter(torch.as_tensor(params0, **kw).clone())
        self.register_buffer("x", torch.as_tensor(x, **kw))
        self.H = (self.theta.shape[1] - 1) // 3

    def _split(self):
        H = self.H
        th = self.theta
        return th[:, :H], th[:, H:2 * H], th[:, 2 * H:3 * H], th[:, 3 * H]

    def forward(self) -> torch.Tensor:
        u, c, v, d = self._split()
        h = tanh(self.x[None, :, None] * u[:, None, :] + c[:, None, :])
        return rows_times(h, v) + d[:, None]

    def loss_and_grad(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean squared loss per replica and its exact gradient (R, 3 H + 1)."""
        with torch.no_grad():
            H, th = self.H, self.theta
            X = torch.stack([self.x, torch.ones_like(self.x)], 1)  # (M, 2): pre = x u + c
            h = _tanh(torch.matmul(X, th[:, :2 * H].reshape(-1, 2, H)))  # (R, M, H)
            v, d = th[:, 2 * H:3 * H], th[:, 3 * H]
            res = rows_times(h, v) + d[:, None] - y
            g = 2.0 / res.shape[1] * res
            gv = torch.bmm(g[:, None, :], h)[:, 0]
            gpre = h.square_().neg_().add_(1.0).mul_(v[:, None, :])  # in place: h is no longer needed
            guc = torch.bmm((X.T[None] * g[:, None, :]), gpre)  # (R, 2, H): [x; 1] weighted sums
            return (res * res).mean(1), torch.cat([guc[:, 0], guc[:, 1], gv, g.sum(1, keepdim=True)], 1)


def rows_times(h: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """h (R, m, k) times v (R, k) for each replica: (R, m). Computed as the row vector v times h
    transposed, which torch's CPU BLAS does 3.5-9x faster than h times the column v (bmm or
    einsum) at the training runs' shapes, (6, 129, 104) to (64, 129, 64), equal up to rounding
    (benchmarks/results/rows_times.txt)."""
    return torch.bmm(v[:, None, :], h.mT)[:, 0]


def _tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh, the bulk of a training step here, without autograd (the gradients above are exact):
    NumPy's on the CPU (nqf.architectures.fast_tanh; for the (6, 129, 104) float32 arguments of the
    default run 30 us against torch.tanh's 230 us, float64 170 us against 540 us, on this project's
    2-core CI machine kind, torch 2.13, NumPy 2.4, one thread)."""
    return tanh_values(x)


def exact_nqf_loss(r, C_diag, zp0, t, zm0=None) -> np.ndarray:
    """The NQF's loss under gradient flow, exact for orthogonal features (module docstring).

    z_k(t) is Theorem 6's logistic from z_k(0) = ``zp0`` (..., P) (the shrinking direction's source
    C_kk z_k(0) z_k^-(0) is 1e-9 of r_k z_k and left out), z_k^-(t) = z_k(0) z_k^-(0) / z_k(t)
    (``zm0``; None for a balanced init, z^- = 0), and
    L = sum_k (C_kk / 8) (z_k - z_k^- - r_k / C_kk)^2, which is sum_k (c_k u_k - b_k)^2.
    Returns (..., len(t)).
    """
    from nqf.theory.lotka_volterra import logistic_solution

    r, C = np.asarray(r, float), np.asarray(C_diag, float)
    zp0 = np.asarray(zp0, float)
    flat = zp0.reshape(-1, zp0.shape[-1])
    zm_flat = None if zm0 is None else np.asarray(zm0, float).reshape(flat.shape)
    out = []
    for i, z0 in enumerate(flat):  # seeds: a handful of closed-form evaluations
        z = logistic_solution(r, C, z0, t)
        zm = 0.0 if zm_flat is None else z0 * zm_flat[i] / z
        out.append(np.sum(C / 8.0 * (z - zm - r / C) ** 2, axis=-1))
    return np.array(out).reshape(*zp0.shape[:-1], len(t))
