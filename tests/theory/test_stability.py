"""Divergence: the exact first non-finite step, and the largest stable learning rate predicted
from the structure statistics (nqf.theory.stability) against gradient descent itself."""
import numpy as np
import pytest
import torch

from nqf.errors import TrainingDiverged
from nqf.experiments import featurewise
from nqf.experiments.structure_files import min_loss
from nqf.theory.forms import DiagonalForm
from nqf.theory.lotka_volterra import LotkaVolterra
from nqf.theory.stability import max_stable_lr
from nqf.training.loop import train
from nqf.training.quadratic import QuadraticModel


def diagonal_data(seed=0, m=6, p=3):
    """Commuting (diagonal) data with a non-diagonal C and an interior least-squares end point."""
    rng = np.random.default_rng(seed)
    lam = rng.uniform(0.2, 1.5, size=(m, p))
    z_true = rng.uniform(0.5, 1.5, size=p)
    return lam, lam @ z_true


def final_loss(lam, y, lr, steps=4000):
    model = QuadraticModel(DiagonalForm(torch.as_tensor(lam)), 0.1 * np.eye(lam.shape[1]))
    ds = train(model, y, lr=lr, steps=steps, n_record=20)
    return float(ds["loss"].values[0, -1])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradient_descent_converges_below_and_not_above_the_predicted_rate(seed):
    lam, y = diagonal_data(seed)
    lv = LotkaVolterra.from_data(DiagonalForm(torch.as_tensor(lam)), y)
    _, z_star = min_loss(lv)
    lr_max = max_stable_lr(lv.C, z_star)
    # Linear stability at the minimum is exact: below the bound the error contracts by
    # |1 - lr lambda| <= 0.9 per step (converged to round-off in 4000 steps); above it the
    # top Hessian direction grows by 1.1 per step, so GD cannot settle there.
    assert final_loss(lam, y, 0.95 * lr_max) < 1e-20
    with np.errstate(all="ignore"):
        try:
            above = final_loss(lam, y, 1.05 * lr_max)
        except TrainingDiverged:
            above = np.inf
    assert above > 1e-8


def test_momentum_bound_is_wider_and_adam_has_none():
    C, z = np.diag([1.0, 2.0]), np.array([1.0, 0.5])
    assert max_stable_lr(C, z) == pytest.approx(2.0)
    assert max_stable_lr(C, z, optimizer="momentum", momentum=0.9) == pytest.approx(3.8)
    assert max_stable_lr(C, z, optimizer="adam") is None


def test_divergence_is_reported_at_the_first_non_finite_step():
    cfg = dict(kind="featurewise", r=[1.0, 0.5], C_diag=1.0, data_seed=0, eps=1e-3, lr=10.0,
               steps=500, n_record=10, dtype="float64")
    data = featurewise.make_data(cfg)
    with pytest.raises(TrainingDiverged) as info:
        featurewise.train_run(data, cfg, "gd")
    # the same recursion by hand: first step whose loss is not finite
    lam, y = data["A_diag"].values, data["y"].values
    W = np.sqrt(cfg["eps"]) * np.eye(2)
    with np.errstate(all="ignore"):
        for step in range(500):
            z = (W ** 2).sum(1)
            res = lam @ z - y
            if not np.isfinite(np.mean(res ** 2)):
                break
            W = W - cfg["lr"] * (4 / lam.shape[0]) * (lam.T @ res)[:, None] * W
    assert info.value.step == step
    assert f"step {step}" in str(info.value) and "learning rate 10" in str(info.value)
