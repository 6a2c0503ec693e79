"""Paper Figure 3 (left, middle): gradient descent on the feature-wise data against Theorem 6."""
import numpy as np
import pytest
import torch

import nqf
from nqf.config import validate_config
from nqf.experiments import featurewise
from nqf.experiments.common import structure_dataset

R = np.array([1.0, 0.5, 0.25, 0.125, 0.0625])
EPS = 1e-5


def paper_config(**over):
    cfg = validate_config({"experiments": {"f": {"kind": "featurewise", **over}}})
    return cfg["experiments"]["f"]


@pytest.fixture(scope="module")
def data():
    return featurewise.make_data(paper_config())


def gd_modes(data, lr, t_max=250.0, eps=EPS):
    form = nqf.DiagonalForm(torch.as_tensor(data["A_diag"].values))
    model = nqf.QuadraticModel(form, np.sqrt(eps) * np.eye(form.p), device="cpu")
    ds = nqf.train(model, data["y"].values, lr=lr, steps=int(round(t_max / lr)), n_record=400)
    t = ds["time"].values
    return t, np.einsum("sikk->sik", ds["M"].values)[0], ds


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("c_diag", [1.0, 2.5])
def test_data_has_the_configured_lv_coefficients(seed, c_diag):
    cfg = paper_config(data_seed=seed, C_diag=c_diag)
    ds = featurewise.make_data(cfg)
    st, lv = structure_dataset(nqf.DiagonalForm(torch.as_tensor(ds["A_diag"].values)), ds["y"].values)
    assert np.allclose(lv.r, R, atol=1e-12)
    assert np.allclose(lv.C, c_diag * np.eye(5), atol=1e-12)
    assert float(st["commutator_residual"]) == 0.0
    assert float(st["min_loss"]) < 1e-20  # z = r / C fits the data exactly
    assert int(st["k_V"]) == 5  # the diagonals span R^5 (Q is orthogonal)


def test_gd_follows_theorem6_with_first_order_error(data):
    """Max relative error <= 3% at lr 0.01, and it halves with lr (O(eta) discretisation).

    Per GD step z picks up a factor (1 - eta h)^2 instead of exp(-2 eta h), h = -(r - Cz)/2,
    so ln z drifts by -eta r^2 t / 4 during growth: about eta r ln(r/eps) / 4 = 2.9% for r = 1
    at the ignition time. That is the 3% bound; the ratio of errors at eta and eta/2 is 2 to
    first order (1.8-2.2 allows the O(eta^2) remainder).
    """
    errors = {}
    for lr in (0.01, 0.005):
        t, z, _ = gd_modes(data, lr)
        z_thm = nqf.logistic_solution(R, np.ones(5), np.full(5, EPS), t)
        errors[lr] = np.max(np.abs(z - z_thm) / z_thm)
        bound = lr * R * np.log(R / EPS) / 4
        per_mode = np.max(np.abs(z - z_thm) / z_thm, axis=0)
        assert np.all(per_mode <= 1.05 * bound), (per_mode, bound)
    assert errors[0.01] <= 0.03
    assert 1.8 <= errors[0.01] / errors[0.005] <= 2.2


def test_measured_ignition_times_within_2_percent(data):
    t, z, _ = gd_modes(data, 0.01)
    measured = nqf.ignition_times(t, z)
    predicted = np.log(R / EPS) / R  # (1/r_k) ln(r_k / (C_kk eps)), C_kk = 1
    assert np.all(np.abs(measured - predicted) / predicted < 0.02)
    # Measured at the exact saturation level r_k / C_kk, GD ignites late (the O(eta) drift of
    # ln z above), as the discretisation analysis predicts.
    late = nqf.ignition_times(t, z, saturation=R)
    assert np.all(late > nqf.predicted_ignition_times(R, 1.0, EPS))


def test_theory_and_fit_stages_report_passing_claims(data):
    cfg = paper_config()
    form = nqf.DiagonalForm(torch.as_tensor(data["A_diag"].values))
    structure, _ = structure_dataset(form, data["y"].values)
    theory = featurewise.theory(structure, cfg)
    run = featurewise.train_run(data, cfg, "gd", device="cpu")
    fit = featurewise.fit(structure, theory, {"gd": run}, cfg)
    assert bool(np.all(fit["claim_passed"].values))
    assert np.allclose(fit["t_star_predicted"].values, np.log((R - EPS) / EPS) / R, rtol=1e-12)
    # The theory's loss starts at the loss of W(0) and ends at the minimum (0 here).
    assert theory["loss"].values[0] == pytest.approx(float(run["loss"].values[0, 0]), rel=1e-9)
    assert theory["excess_loss"].values[-1] < 1e-6
    assert np.all(np.diff(theory["plateau_loss"].values) < 0)
