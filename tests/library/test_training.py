"""Batched training: exact gradients, independent replicas, recording grid, divergence."""
import numpy as np
import pytest
import torch

import nqf
from nqf.training import log_step_grid, mse_per_replica


def random_dense_form(m=9, p=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    B = torch.randn(m, p, p, generator=g, dtype=torch.float64)
    return nqf.DenseForm(B + B.transpose(1, 2)), torch.randn(m, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("form_kind", ["dense", "diagonal"])
def test_analytic_gradient_equals_autograd(form_kind):
    form, y = random_dense_form()
    if form_kind == "diagonal":
        form = nqf.DiagonalForm(torch.diagonal(form.dense(), dim1=1, dim2=2))
    W0 = torch.randn(3, form.p, 6, dtype=torch.float64)
    model = nqf.QuadraticModel(form, W0, device="cpu")
    loss, grad = model.loss_and_grad(y)
    auto = mse_per_replica(model(), y)
    auto.sum().backward()
    assert torch.allclose(loss, auto.detach(), rtol=1e-13)
    assert torch.allclose(grad, model.W.grad, rtol=1e-12, atol=1e-14)


def test_forms_agree_with_dense_definitions():
    form, _ = random_dense_form()
    W = torch.randn(2, form.p, 5, dtype=torch.float64)
    M = W @ W.transpose(1, 2)
    f_def = torch.einsum("mpq,rpq->rm", form.dense(), M)
    assert torch.allclose(form.outputs(W), f_def) and torch.allclose(form.outputs_from_M(M), f_def)
    c = torch.randn(2, form.m, dtype=torch.float64)
    assert torch.allclose(form.apply_weighted(c, W), form.weighted_sum(c) @ W)
    diag = nqf.DiagonalForm(torch.randn(form.m, form.p, dtype=torch.float64))
    assert torch.allclose(diag.outputs(W), torch.einsum("mpq,rpq->rm", diag.dense(), M))
    assert torch.allclose(diag.apply_weighted(c, W), diag.weighted_sum(c) @ W)


@pytest.mark.parametrize("optimizer", ["gd", "momentum", "adam"])
def test_replicas_trained_together_equal_replicas_trained_alone(optimizer):
    form, y = random_dense_form()
    W0 = 0.1 * torch.randn(3, form.p, 5, dtype=torch.float64)
    together = nqf.train(nqf.QuadraticModel(form, W0, device="cpu"), y, lr=0.01, steps=200,
                         optimizer=optimizer, n_record=20)
    for r in range(3):
        alone = nqf.train(nqf.QuadraticModel(form, W0[r], device="cpu"), y, lr=0.01, steps=200,
                          optimizer=optimizer, n_record=20)
        assert np.allclose(together["M"].values[r], alone["M"].values[0], rtol=1e-12, atol=1e-15)


def test_log_step_grid_and_time_coordinate():
    grid = log_step_grid(25000, 500)
    assert grid[0] == 0 and grid[-1] == 25000 and np.all(np.diff(grid) > 0)
    assert 450 <= grid.size <= 500
    form, y = random_dense_form()
    ds = nqf.train(nqf.QuadraticModel(form, 0.1 * torch.randn(form.p, 3, dtype=torch.float64),
                                      device="cpu"), y, lr=0.02, steps=100, n_record=30)
    assert np.allclose(ds["time"].values, 0.02 * ds["step"].values)
    assert ds["loss"].dims == ("seed", "step") and ds["M"].dims == ("seed", "step", "row", "col")


def test_divergence_stops_at_the_first_non_finite_loss():
    form, y = random_dense_form()
    model = nqf.QuadraticModel(form, torch.randn(form.p, 3, dtype=torch.float64), device="cpu")
    with pytest.raises(nqf.TrainingDiverged) as info:
        nqf.train(model, y, lr=10.0, steps=5000, n_record=5000)
    assert info.value.step < 5000 and "learning rate 10" in str(info.value)


def test_unknown_optimizer_is_refused():
    form, y = random_dense_form()
    with pytest.raises(ValueError, match="optimizer must be one of"):
        nqf.train(nqf.QuadraticModel(form, torch.zeros(form.p, 2, dtype=torch.float64), device="cpu"),
                  y, lr=0.1, steps=3, optimizer="sgdd")
