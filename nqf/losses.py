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
"""
from __future__ import annotations

LOSS_CONVENTIONS = ("mean", "half_mean", "sum", "half_sum")
FORMULAS = {
    "mean": "(1/n) sum (f - y)^2 (Eq. 26)",
    "half_mean": "(1/2n) sum (f - y)^2",
    "sum": "sum (f - y)^2",
    "half_sum": "(1/2) sum (f - y)^2",
}


def loss_factor(convention: str, n: int) -> float:
    """c with L_convention = c * L_Eq.26 for a batch of ``n`` samples (see the module table)."""
    if convention not in LOSS_CONVENTIONS:
        raise ValueError(f"loss convention must be one of {', '.join(LOSS_CONVENTIONS)}; got {convention!r}.")
    from nqf import _checks

    n = _checks.integer("n (the samples in the batch)", n)
    if n < 1:
        raise ValueError(f"n must be >= 1: the batch must hold at least one sample; got n = {n}.")
    return {"mean": 1.0, "half_mean": 0.5, "sum": float(n), "half_sum": 0.5 * n}[convention]


def flow_lr(lr: float, convention: str, n: int) -> float:
    """The step of the Eq. 26 flow that one optimizer step of ``lr`` on the ``convention`` loss
    takes: c * lr. Gradient descent samples the flow at t = flow_lr * step."""
    from nqf import _checks

    return loss_factor(convention, n) * _checks.scalar("lr", lr, low=0.0, low_open=True)


def describe(convention: str, n: int | None = None) -> str:
    """'half_sum: (1/2) sum (f - y)^2, t = 128 lr step' (the clock when n is given)."""
    text = f"{convention}: {FORMULAS[convention]}" if convention in FORMULAS else str(convention)
    if n is not None:
        text += f", t = {loss_factor(convention, n):g} lr step"
    return text
