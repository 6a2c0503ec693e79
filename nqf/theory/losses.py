"""Loss conventions and the clock they set.

The theory (paper Eq. 26) uses L = (1/m) sum_mu (f_mu - y_mu)^2: a mean over the m samples of a
batch, summed over outputs, without a factor 1/2. Every formula in nqf (r_k, C_kj, Theorem 8's
ignition times, the M-flow) is written in that convention, and its gradient flow runs in the
time t of Eq. 27-28.

The paper's stated learning rates do not all fit that convention (its Fig. 5 and Fig. 6 need
another one to reach what they show), and the paper does not say which one it trained with, so
the convention is an option of every trained experiment:

    ===========  =============================  =================
    name         loss the optimizer sees         factor c = L / L_Eq.26
    ===========  =============================  =================
    mean         (1/n) sum (f - y)^2   (Eq. 26)  1
    half_mean    (1/2n) sum (f - y)^2            1/2
    sum          sum (f - y)^2                   n
    half_sum     (1/2) sum (f - y)^2             n/2
    ===========  =============================  =================

with n the number of samples in the batch (full batch: m; online SGD: the minibatch size).
Gradient descent with step eta on c * L_Eq.26 is gradient descent with step c * eta on L_Eq.26,
so it samples the flow of Eq. 27-28 at t = c * eta * step: the convention changes the clock,
nothing else. nqf.train and the experiments record losses in Eq. 26 units and time in that clock,
so every prediction stays exact under every convention. (Adam divides the gradient by its own
running scale: there the convention changes only the eps term of Adam, and the clock of the
theory does not apply, since Adam has no closure.)

Samples and outputs (one rule for every entry point). Targets ``y`` have the samples on their
first axis: shape (n,) for one output per sample, (n, n_out) for vector outputs (App. B.2), in the
sample-major order of the form's m = n * n_out data matrices (row mu * n_out + c is output c of
sample mu, as every architecture's ``structure(x)`` lays them out). The loss is

    L = (1/n) sum_mu sum_c (f_mu,c - y_mu,c)^2,   n = y.shape[0] = :func:`sample_count` (y),

a mean over samples, summed over outputs, and every prefactor of the theory is (c/n): r = (8/n)
Lambda^T y, C = (8/n) Lambda^T Lambda, K and Y = (4/n) sum ..., the clock t = c lr step.
``nqf.train`` (``QuadraticModel.loss_and_grad``, ``training.mse_per_replica``), ``nqf.predict``,
``nqf.theory.mflow``, ``SecondMoment``, ``discrete_flow``, ``LotkaVolterra`` and the closed forms of
``nqf.theory.closed_forms`` (Theorems 4 and 5) all read n from the targets' shape, so the same y gives
the same trajectory everywhere. Flattening y to (n * n_out,) makes every entry a sample of its
own (n -> n * n_out): a valid problem whose flow runs n_out times slower.
"""
from __future__ import annotations

import numpy as np

LOSS_CONVENTIONS = ("mean", "half_mean", "sum", "half_sum")
FORMULAS = {
    "mean": "(1/n) sum (f - y)^2 (Eq. 26)",
    "half_mean": "(1/2n) sum (f - y)^2",
    "sum": "sum (f - y)^2",
    "half_sum": "(1/2) sum (f - y)^2",
}
# the same formulas for figure titles (matplotlib mathtext)
FORMULAS_MATH = {
    "mean": r"$\frac{1}{n}\sum_\mu (f_\mu - y_\mu)^2$ (Eq. 26)",
    "half_mean": r"$\frac{1}{2n}\sum_\mu (f_\mu - y_\mu)^2$",
    "sum": r"$\sum_\mu (f_\mu - y_\mu)^2$",
    "half_sum": r"$\frac{1}{2}\sum_\mu (f_\mu - y_\mu)^2$",
}


def sample_count(y) -> int:
    """n, the number of samples of targets ``y`` (its first axis, see the module docstring): the
    1/n of the loss and of every prefactor of the theory. A scalar counts as one sample."""
    shape = tuple(y.shape) if hasattr(y, "shape") else np.shape(y)
    return int(shape[0]) if len(shape) else 1


def flat_targets(y, rows: int, *, name: str = "y"):
    """(targets as a float vector of ``rows`` entries, n = :func:`sample_count`) for functions
    that take Lambda's rows (one per data matrix): y (rows,) or (n, rows / n), sample-major."""
    from nqf import validate

    y = validate.array(name, y, ndim=(1, 2))
    if y.size != rows or y.shape[0] == 0:
        raise ValueError(f"{name} must have one entry per data matrix (m = {rows}), as shape ({rows},) or "
                         f"(samples, outputs) with samples * outputs = {rows}; got shape {y.shape}.")
    return y.reshape(-1), int(y.shape[0])


def loss_factor(convention: str, n: int) -> float:
    """c with L_convention = c * L_Eq.26 for a batch of ``n`` samples (see the module table)."""
    if convention not in LOSS_CONVENTIONS:
        raise ValueError(f"loss convention must be one of {', '.join(LOSS_CONVENTIONS)}; got {convention!r}.")
    from nqf import validate

    n = validate.integer("n (the samples in the batch)", n)
    if n < 1:
        raise ValueError(f"n must be >= 1: the batch must hold at least one sample; got n = {n}.")
    return {"mean": 1.0, "half_mean": 0.5, "sum": float(n), "half_sum": 0.5 * n}[convention]


def flow_lr(lr: float, convention: str, n: int) -> float:
    """The step of the Eq. 26 flow that one optimizer step of ``lr`` on the ``convention`` loss
    takes: c * lr. Gradient descent samples the flow at t = flow_lr * step."""
    from nqf import validate

    return loss_factor(convention, n) * validate.scalar("lr", lr, low=0.0, low_open=True)


def describe(convention: str, n: int | None = None) -> str:
    """'half_sum: (1/2) sum (f - y)^2, t = 128 lr step' (the clock when n is given)."""
    text = f"{convention}: {FORMULAS[convention]}" if convention in FORMULAS else str(convention)
    if n is not None:
        text += f", t = {loss_factor(convention, n):g} lr step"
    return text
