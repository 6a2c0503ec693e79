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


@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
def test_lr_scale_is_a_learning_rate_per_replica(optimizer):
    """lr_scale = (1, 0.3): replica 1 trained together with replica 0 equals replica 1 trained
    alone at lr 0.3 lr (float64, 1e-12: the same arithmetic up to the order of a product), for
    the analytic-gradient NQF and for an autograd module; Adam is refused (its step is not linear
    in the gradient)."""
    import nqf
    from nqf.approximation import ModuleReplicas
    from nqf.architectures import ARCHITECTURES

    module = ARCHITECTURES["mlp"].build(D=5, width=4, n_outputs=2)
    x = module.sample_inputs(20, torch.Generator().manual_seed(0))
    y = torch.randn(20, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    W0 = 0.3 * torch.randn(2, module.p, module.width, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for make in (lambda W: nqf.QuadraticModel(module.structure(x), W, device="cpu"),
                 lambda W: ModuleReplicas(module, x, W)):
        both = nqf.train(make(W0), y, lr=0.05, steps=15, optimizer=optimizer, n_record=4, lr_scale=[1.0, 0.3],
                         record=lambda m: {"W": m.W.detach().clone()})
        alone = nqf.train(make(W0[1:]), y, lr=0.015, steps=15, optimizer=optimizer, n_record=4,
                          record=lambda m: {"W": m.W.detach().clone()})
        assert np.allclose(both["W"].values[1], alone["W"].values[0], rtol=1e-12, atol=1e-14)
        assert both["lr"].values.tolist() == pytest.approx([0.05, 0.015], rel=1e-15)
    with pytest.raises(ValueError, match="lr_scale .* applies to gd and momentum"):
        nqf.train(ModuleReplicas(module, x, W0), y, lr=0.05, steps=2, optimizer="adam", lr_scale=[1.0, 0.3])
