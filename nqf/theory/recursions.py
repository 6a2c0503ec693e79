"""Exact discrete-time dynamics of the order parameters (Theorem 2, Corollary 2, App. B.3).

Gradient descent does not sample the M-flow exactly (error O(eta)), but it closes exactly in
discrete time: W' = (I - eta H~) W with H~ = H + gamma I (gamma: torch-style weight decay), so
M' = (I - eta H~) M (I - eta H~), the eta^2 terms of Eq. 24 included. Polyak momentum in torch's
convention (v' = beta v + g, W' = W - eta v', v_0 = 0) closes on three p x p moments:

    S = v v^T,  X = v W^T,  M = W W^T   (g = H~ W):
    S' = beta^2 S + beta (X H~ + H~ X^T) + H~ M H~
    X' = beta X + H~ M - eta S'
    M' = M - eta (X1 + X1^T) + eta^2 S',   X1 = beta X + H~ M.

Both recursions take H from :class:`~nqf.theory.mflow.SecondMoment`, so a step costs nothing in m or d.
Minibatch SGD with the general form f = f0 + g^T mu + mu^T B mu + Tr[M A] (Eq. 20, units not
obeying ZGZ) closes on (M, mu) with Eq. 23-24; :func:`sgd_moments` implements it per batch.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from nqf import validate
from nqf.theory.forms import StructureForm
from nqf.theory.mflow import SecondMoment


def _steps_grid(steps: int, record_steps, n_record: int) -> np.ndarray:
    from nqf.theory.step_grid import log_step_grid, record_grid
    steps = validate.integer("steps", steps, minimum=1)
    n_record = validate.integer("n_record", n_record, minimum=2)
    grid = log_step_grid(steps, n_record) if record_steps is None else record_grid(record_steps, steps)
    return grid.astype(np.int64)


def discrete_flow(data: SecondMoment | StructureForm, M0=None, *, lr: float, steps: int,
                  W0=None, y=None, optimizer: str = "gd", momentum: float = 0.9,
                  weight_decay: float = 0.0, record_steps: Sequence[int] | None = None,
                  n_record: int = 400) -> xr.Dataset:
    """The exact full-batch trajectory of M under 'gd' or 'momentum', as nqf.train records it.

    Returns a Dataset with ``M`` (step, row, col) and ``loss`` (step), the Eq. 26 loss over the
    n = y.shape[0] samples (targets (m,) or (n, n_out), nqf.theory.losses); the ``step`` dimension carries
    ``time`` = lr * step, like :func:`nqf.train` with the ``mean`` convention (for another
    convention pass its step c lr, :func:`nqf.theory.losses.flow_lr`).
    """
    if not isinstance(data, (SecondMoment, StructureForm)):
        raise TypeError(f"data must be a SecondMoment or a StructureForm (DenseForm, DiagonalForm, ...); "
                        f"got a {type(data).__name__}.")
    stats = data if isinstance(data, SecondMoment) else SecondMoment.from_form(data, y)
    if optimizer not in ("gd", "momentum"):
        raise ValueError("optimizer must be 'gd' or 'momentum' (Adam does not close on M); "
                         f"got {optimizer!r}.")
    lr = validate.scalar("lr", lr, low=0.0, low_open=True)
    momentum = validate.scalar("momentum", momentum, low=0.0, high=1.0, high_open=True)
    weight_decay = validate.scalar("weight_decay", weight_decay, low=0.0)
    M = validate.initial_state(M0, W0, stats.p).copy()
    grid = _steps_grid(steps, record_steps, n_record)
    p, eta, beta, gamma = stats.p, float(lr), float(momentum), float(weight_decay)
    diag = stats.diagonal

    def htilde(M):
        if diag:
            return stats.kmat @ np.diagonal(M) - np.diagonal(stats.Y) + gamma
        return stats.hessian(M) + gamma * np.eye(p)

    def left(H, X):  # H X
        return H[:, None] * X if diag else H @ X

    def right(X, H):  # X H
        return X * H[None, :] if diag else X @ H

    X = np.zeros((p, p))
    S = np.zeros((p, p))
    out, nxt = [], 0
    for step in range(steps + 1):
        if step == grid[nxt]:
            out.append(M.copy())
            nxt += 1
            if nxt == grid.size:
                break
        H = htilde(M)
        if optimizer == "gd":
            HM = left(H, M)
            M = M - eta * (HM + HM.T) + eta * eta * right(HM, H)
        else:
            HM = left(H, M)
            S = beta * beta * S + beta * (right(X, H) + left(H, X.T)) + right(HM, H)
            X1 = beta * X + HM
            M = M - eta * (X1 + X1.T) + eta * eta * S
            X = X1 - eta * S
        M = (M + M.T) / 2
        if not np.all(np.isfinite(M)):
            raise FloatingPointError(f"The recursion diverged at step {step + 1} with lr {lr:g}; lower it.")
    Ms = np.stack(out)
    ds = xr.Dataset(
        {"M": (("step", "row", "col"), Ms, {"units": "1", "long_name": "order parameter M = W W^T"}),
         "loss": ("step", stats.loss(Ms), {"units": "1", "long_name": "training loss"})},
        coords={"step": ("step", grid),
                "time": ("step", eta * grid.astype(float),
                         {"units": "1", "long_name": "gradient-flow time eta * step"})})
    ds.attrs.update(method="exact recursion", optimizer=optimizer, lr=eta, weight_decay=gamma, steps=steps,
                    **({"momentum": beta} if optimizer == "momentum" else {}))
    return ds


def sgd_moments(A, y, M0, mu0, *, lr: float, batches: Sequence, d: int, g=None, B=None, f0=None,
                weight_decay: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Minibatch SGD on (M, mu) by Theorem 2 (Eq. 23-24), one step per entry of ``batches``.

    f_mu = f0_mu + g_mu^T mu + mu^T B_mu mu + Tr[M A_mu], loss on a batch b is
    (1/|b|) sum_{mu in b} (f_mu - y_mu)^2, so l'_mu = 2 Delta_mu / |b|, v = sum l' (g + 2 B mu) and
    H = sum 2 l' A (+ gamma I for weight decay). ``A`` is a structure form or an (m, p, p) array,
    ``g`` (m, p) and ``B`` (m, p, p) default to 0 (ZGZ units), ``d`` is the number of units.
    Returns M of shape (steps + 1, p, p) and mu of shape (steps + 1, p).
    """
    A = A.dense().detach().cpu().numpy() if isinstance(A, StructureForm) else np.asarray(A, float)
    y = np.asarray(y, float)
    m, p, _ = A.shape
    g = np.zeros((m, p)) if g is None else np.asarray(g, float)
    B = np.zeros((m, p, p)) if B is None else np.asarray(B, float)
    f0 = np.zeros(m) if f0 is None else np.asarray(f0, float)
    M, mu = np.array(M0, float), np.array(mu0, float)
    Ms, mus = [M.copy()], [mu.copy()]
    eta, gamma = float(lr), float(weight_decay)
    for batch in batches:
        b = np.asarray(batch)
        Bb, Ab, gb = B[b], A[b], g[b]
        Bmu = Bb @ mu
        f = f0[b] + gb @ mu + Bmu @ mu + np.einsum("bpq,pq->b", Ab, M)
        lp = 2.0 * (f - y[b]) / b.size
        v = lp @ (gb + 2 * Bmu)
        H = 2 * np.einsum("b,bpq->pq", lp, Ab) + gamma * np.eye(p)
        Hmu = H @ mu
        HM = H @ M
        vmu = np.outer(v, mu)
        M = (M - eta * (vmu + vmu.T + HM + HM.T)
             + eta * eta * (d * np.outer(v, v) + vmu @ H + np.outer(Hmu, v) + HM @ H))
        mu = mu - eta * (d * v + Hmu)
        M = (M + M.T) / 2
        Ms.append(M.copy())
        mus.append(mu.copy())
    return np.stack(Ms), np.stack(mus)
