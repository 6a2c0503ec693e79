"""Batched training: exact gradients, independent replicas, recording grid, divergence."""
import numpy as np
import pytest
import torch
from helpers import time_limit

import nqf
from nqf.training.loop import log_step_grid, mse_per_replica


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


def test_plain_gd_of_an_analytic_gradient_builds_no_torch_optimizer():
    """GD of a model with loss_and_grad is w -= c lr grad in place: no torch.optim object, whose
    first construction in a process imports torch._dynamo (~2.5 s). A fresh process shows it; the
    same model under momentum does build one (and so imports it)."""
    import subprocess
    import sys

    code = ("import sys, numpy as np, nqf\n"
            "from nqf.training.fourier_training import FourierReplicas\n"
            "m = FourierReplicas(np.full((2, 4), 1e-3), np.full((2, 4), 1e-3), np.ones((2, 4)), np.eye(4),\n"
            "                    np.full(4, 0.25), nonlinear=True)\n"
            "nqf.train(m, np.ones((2, 4)), lr=0.1, steps=10, n_record=5, record=lambda mod: {}, optimizer=sys.argv[1])\n"
            "print('torch._dynamo' in sys.modules)\n")
    for optimizer, imported in (("gd", "False"), ("momentum", "True")):
        out = subprocess.run([sys.executable, "-c", code, optimizer], capture_output=True, text=True,
                             timeout=time_limit(120))
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == imported, (optimizer, out.stdout)


@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
def test_lr_scale_is_a_learning_rate_per_replica(optimizer):
    """lr_scale = (1, 0.3): replica 1 trained together with replica 0 equals replica 1 trained
    alone at lr 0.3 lr (float64, 1e-12: the same arithmetic up to the order of a product), for
    the analytic-gradient NQF and for an autograd module; Adam is refused (its step is not linear
    in the gradient)."""
    import nqf
    from nqf.architectures import ARCHITECTURES
    from nqf.training.approximation import ModuleReplicas

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


def readme_diagonal_data():
    """The Theorem 6 data of docs/library.md's tour: diagonal C, r = (8, 4, 8/3, 2, 1.6, 4/3), so GD settles at the
    end point only for lr < 2 / r_1 = 0.25."""
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.standard_normal((400, 6)))
    feats = np.sqrt(400) * Q * np.arange(1, 7) ** -0.5
    return nqf.DiagonalForm(torch.as_tensor(feats)), feats @ np.ones(6), np.sqrt(1e-5) * np.eye(6)


def quiet_train(*args, **kwargs):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return nqf.train(*args, **kwargs)


def test_gd_above_the_stability_bound_warns_that_it_did_not_settle():
    from nqf.errors import NQFWarning

    form, y, W0 = readme_diagonal_data()
    with pytest.warns(NQFWarning, match=r"did not settle: .* lr = 0.3 is above the stability bound "
                                        r"2 / \(c r_1\) = 0.25 \(r_1 = 8, .*train with lr below 0.25"):
        above = nqf.train(nqf.QuadraticModel(form, W0), y, lr=0.3, steps=400, n_record=10)
    assert float(above["loss"][0, -1]) > 0.05  # the wrong plateau the warning is about
    with pytest.warns(NQFWarning, match=r"lr = 0.3 \(x lr_scale 1\) is above .* = 0.25"):  # one replica of two
        nqf.train(nqf.QuadraticModel(form, np.stack([W0, W0])), y, lr=0.3, steps=400, lr_scale=[0.5, 1.0])
    with pytest.warns(NQFWarning, match=r"lr = 0.15 is above the stability bound 2 / \(c r_1\) = 0.125 .*"
                                        r"c = 2 for loss='half_sum'"):
        nqf.train(nqf.QuadraticModel(form, W0), y, lr=0.15, steps=400, loss="half_sum", loss_samples=4)
    below = quiet_train(nqf.QuadraticModel(form, W0), y, lr=0.2, steps=400, n_record=10)
    assert float(below["loss"][0, -1]) < 1e-20
    short = quiet_train(nqf.QuadraticModel(form, W0), y, lr=0.3, steps=5)  # stopped before the first plateau
    assert short["loss"].shape == (1, 6)


def test_gd_between_two_over_r1_and_the_end_point_bound_converges_without_a_warning():
    """Non-diagonal C: the end point's curvature (nqf.theory.stability) is below r_1, GD at lr above 2 / r_1
    but below 2 / lambda_max(H) converges to rounding, and no warning says otherwise."""
    rng = np.random.default_rng(0)
    lam = rng.uniform(0.2, 1.5, size=(6, 3))
    y = lam @ rng.uniform(0.5, 1.5, size=3)  # 2 / r_1 = 0.122, the end point's bound 0.132
    run = quiet_train(nqf.QuadraticModel(nqf.DiagonalForm(torch.as_tensor(lam)), 0.1 * np.eye(3)), y, lr=0.128,
                      steps=8000, n_record=10)
    assert float(run["loss"][0, -1]) < 1e-20


@pytest.mark.parametrize("dtype, eps", [(torch.float16, "0.00098"), (torch.bfloat16, "0.0078")])
def test_half_precision_warns_of_its_loss_floor_and_records_float32(dtype, eps):
    from nqf.errors import NQFWarning

    form, y, W0 = readme_diagonal_data()
    with pytest.warns(NQFWarning, match=rf"{dtype}, whose machine epsilon {eps} floors the loss .*torch.float32 or "
                                        r"torch.float64"):
        run = nqf.train(nqf.QuadraticModel(form, W0, dtype=dtype), y, lr=0.01, steps=3000, n_record=20)
    assert run["loss"].dtype == np.float32 and run["M"].dtype == np.float32  # bfloat16 used to fail here
    assert 1e-4 < float(run["loss"][0, -1]) < 0.2  # learned, down to its floor
    single = quiet_train(nqf.QuadraticModel(form, W0, dtype=torch.float32), y, lr=0.01, steps=3000, n_record=20)
    assert float(single["loss"][0, -1]) < 1e-8


def test_a_record_grid_beyond_memory_is_refused_before_it_is_built(monkeypatch):
    import time

    form, y, W0 = readme_diagonal_data()
    monkeypatch.setenv("NQF_MAX_MEMORY_GB", "16")
    start = time.perf_counter()
    with pytest.raises(MemoryError, match=r"recorded trajectory \(1000000000 records of the loss \(1,\), M \(1, 6, 6\)\): "
                                          r"about 592 GB .* lower n_record"):
        nqf.train(nqf.QuadraticModel(form, W0), y, lr=0.01, steps=10 ** 9, n_record=10 ** 9)
    with pytest.raises(MemoryError, match="a step grid of 1000000001 points: about 32 GB .* lower n_points"):
        log_step_grid(10 ** 9, 10 ** 9 + 1)
    assert time.perf_counter() - start < time_limit(5)
    assert log_step_grid(10, 400).tolist() == list(range(11))  # n_record > steps + 1: every step, as before
    assert quiet_train(nqf.QuadraticModel(form, W0), y, lr=0.01, steps=10, n_record=400)["step"].size == 11


@pytest.mark.parametrize("optimizer", ["gd", "momentum", "adam"])
def test_a_trajectory_records_momentum_only_for_momentum(optimizer):
    """Optimizer-specific settings are attributes only of the runs they apply to."""
    form, y = random_dense_form()
    W0 = 0.1 * torch.randn(2, form.p, 3, dtype=torch.float64)
    ds = nqf.train(nqf.QuadraticModel(form, W0, device="cpu"), y, lr=0.01, steps=4, optimizer=optimizer,
                   momentum=0.8, n_record=2)
    assert ds.attrs["optimizer"] == optimizer
    assert ("momentum" in ds.attrs) == (optimizer == "momentum")
    if optimizer == "momentum":
        assert ds.attrs["momentum"] == 0.8
