"""The GLV reduction and its solutions against exact results."""
import warnings

import numpy as np
import pytest
import torch

import nqf
from nqf.experiments.structure_files import min_loss
from nqf.training.loop import log_step_grid


def commuting_dense(m=6, p=4, seed=0):
    """Dense A_mu = P diag(lambda_mu) P^T with a random orthogonal P (Assumption 1 exactly)."""
    rng = np.random.default_rng(seed)
    P, _ = np.linalg.qr(rng.standard_normal((p, p)))
    lam = rng.standard_normal((m, p))
    A = np.einsum("pk,mk,qk->mpq", P, lam, P)
    return P, lam, A


def test_lv_coefficients_match_definitions():
    lam = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.0]])
    y = np.array([1.0, -2.0, 4.0])
    r, C = nqf.lv_coefficients(lam, y)
    m = 3
    assert np.allclose(r, [8 / m * (1 - 6 + 2), 8 / m * (2 + 2)])
    assert np.allclose(C, 8 / m * lam.T @ lam)
    assert np.all(np.linalg.eigvalsh(C) >= -1e-12)  # a Gram matrix is PSD


def test_shared_eigenbasis_recovers_eigenvalues_of_commuting_matrices():
    P, lam, A = commuting_dense()
    Pf, lam_f, res = nqf.shared_eigenbasis(nqf.DenseForm(torch.as_tensor(A)))
    assert res["commutator"] < 1e-13 and res["off_diagonal"] < 1e-12
    # Same eigenvalue columns up to the order of the modes.
    match = [int(np.argmin(np.linalg.norm(lam_f - lam[:, [k]], axis=0))) for k in range(lam.shape[1])]
    assert sorted(match) == list(range(lam.shape[1]))
    assert np.allclose(lam_f[:, match], lam, atol=1e-12)


def test_data_rank_is_the_span_of_all_columns():
    from nqf.experiments.structure_files import data_rank
    P, lam, _ = commuting_dense(m=6, p=5)
    lam[:, 3:] = 0.0  # two directions never used by any sample
    A = np.einsum("pk,mk,qk->mpq", P, lam, P)
    assert data_rank(nqf.DenseForm(torch.as_tensor(A))) == 3
    assert data_rank(nqf.DiagonalForm(torch.as_tensor(lam))) == 3


def test_shared_eigenbasis_flags_non_commuting_matrices():
    rng = np.random.default_rng(1)
    B = rng.standard_normal((5, 4, 4))
    A = B + B.transpose(0, 2, 1)
    _, _, res = nqf.shared_eigenbasis(nqf.DenseForm(torch.as_tensor(A)))
    assert res["commutator"] > 1e-2 and res["off_diagonal"] > 1e-2


def test_reduction_predicts_the_m_flow_of_a_dense_model():
    """dz/dt from the GLV equals diag(P^T dM/dt P) with dM/dt = -HM - MH for M diagonal in P."""
    P, lam, A = commuting_dense(m=7, p=5, seed=2)
    y = np.random.default_rng(3).standard_normal(7)
    lv = nqf.LotkaVolterra.from_data(nqf.DenseForm(torch.as_tensor(A)), y)
    z = np.random.default_rng(4).uniform(0.1, 1.0, 5)
    M = lv.basis @ np.diag(z) @ lv.basis.T
    delta = np.einsum("mpq,pq->m", A, M) - y
    H = 4 / 7 * np.einsum("m,mpq->pq", delta, A)
    dM = -H @ M - M @ H
    assert np.allclose(lv.modes_of(dM), z * (lv.r - lv.C @ z), atol=1e-12)


@pytest.mark.parametrize("eps", [1e-5, 1e-12])
def test_glv_integrator_reproduces_theorem6_to_1e6(eps):
    r = np.array([1.0, 0.5, 0.25, 0.125, 0.0625])
    c = np.array([1.0, 2.0, 0.5, 1.0, 3.0])
    t = np.linspace(0, 600, 2001)
    z_num = nqf.glv(r, np.diag(c), np.full(5, eps), t, method="Radau")
    z_exact = nqf.logistic_solution(r, c, np.full(5, eps), t)
    assert np.max(np.abs(z_num - z_exact) / z_exact) < 1e-6
    # The diagonal shortcut (C given as a vector) is the same integrator; the default is the exact integral.
    assert np.allclose(nqf.glv(r, c, np.full(5, eps), t, method="Radau"), z_num, rtol=1e-6)
    assert np.array_equal(nqf.glv(r, c, np.full(5, eps), t), z_exact)


def test_logistic_solution_is_safe_for_extreme_inputs():
    r = np.array([1.0, 0.0, -0.5, 2.0])
    c = np.array([1.0, 1.0, 1.0, 0.5])
    t = np.array([0.0, 1.0, 1e3, 1e6])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z = nqf.logistic_solution(r, c, np.full(4, 1e-300), t)
    assert np.all(np.isfinite(z)) and np.all(z >= 0)
    assert np.isclose(z[-1, 0], 1.0) and np.isclose(z[-1, 3], 4.0)  # saturate at r / c
    assert z[-1, 2] == 0.0  # r < 0 decays
    assert np.isclose(z[1, 1], 1e-300 / (1 + 1e-300))  # r = 0: z0 / (1 + c z0 t)


def test_glv_keeps_zero_modes_at_zero():
    t = np.linspace(0, 20, 5)
    for method in (None, "Radau", "LSODA"):
        z = nqf.glv([1.0, 1.0], np.eye(2), [1e-3, 0.0], t, method=method)
        assert np.all(z[:, 1] == 0)
        assert np.allclose(z[:, 0], nqf.logistic_solution([1.0], [1.0], [1e-3], t)[:, 0], rtol=1e-6)


def test_predicted_ignition_time_is_the_exact_half_saturation_time():
    r, c, eps = np.array([1.0, 0.3]), np.array([2.0, 0.7]), 1e-6
    t_star = nqf.predicted_ignition_times(r, c, eps)
    z = nqf.logistic_solution(r, c, np.full(2, eps), t_star)
    assert np.allclose(np.diag(z), r / c / 2, rtol=1e-12)
    assert np.allclose(t_star, np.log((r - c * eps) / (c * eps)) / r, rtol=1e-14)
    # Theorem 8's general form with rho = 0.9 and initial profile c_k.
    t9 = nqf.predicted_ignition_times(r, c, eps, rho=0.9, c=[2.0, 0.5])
    z9 = nqf.logistic_solution(r, c, eps * np.array([2.0, 0.5]), t9)
    assert np.allclose(np.diag(z9), 0.9 * r / c, rtol=1e-12)
    assert np.isinf(nqf.predicted_ignition_times([-1.0], [1.0], eps)[0])  # never switches on


def test_measured_ignition_time_on_a_log_grid():
    r, c, eps = np.array([1.0, 0.1]), np.ones(2), 1e-8
    t = 1e-2 * log_step_grid(100000, 400)
    z = nqf.logistic_solution(r, c, np.full(2, eps), t)
    measured = nqf.ignition_times(t, z, saturation=r / c)
    exact = nqf.predicted_ignition_times(r, c, eps)
    # The logit ln(z / (sat - z)) of a logistic is linear in t, so the interpolation is exact.
    assert np.allclose(measured, exact, rtol=1e-9)
    # Without the saturation level (final value as saturation, still within 1e-8 of it here).
    assert np.allclose(nqf.ignition_times(t, z), exact, rtol=1e-6)


def test_min_loss_is_the_nonnegative_least_squares_value():
    lam = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = np.array([1.0, -1.0, 0.5])
    lv = nqf.LotkaVolterra(*nqf.lv_coefficients(lam, y), lam=lam, y=y, basis=np.eye(2))
    value, z = min_loss(lv)
    assert np.all(z >= 0)
    grid = np.stack(np.meshgrid(np.linspace(0, 2, 401), np.linspace(0, 2, 401)), -1).reshape(-1, 2)
    assert value <= lv.loss(grid).min() + 1e-12


def test_structure_file_stores_the_second_moment_operator():
    """K(X) = (4/m) sum <A_mu, X> A_mu, rebuilt from the stored compact form, equals the definition."""
    from nqf.experiments.structure_files import structure_dataset
    from nqf.theory.mflow import svec, unsvec
    P, lam, A = commuting_dense(m=3, p=4)  # m = 3 < s/2 = 5: stored as a factor
    y = np.array([1.0, -0.5, 2.0])
    ds, _ = structure_dataset(nqf.DenseForm(torch.as_tensor(A)), y)
    X = np.random.default_rng(5).standard_normal((4, 4))
    X = X + X.T
    K_def = 4 / 3 * np.einsum("m,mpq->pq", np.einsum("mpq,pq->m", A, X), A)
    F = ds["K_factor"].values
    assert np.allclose(unsvec(F @ (F.T @ svec(X)), 4), K_def, atol=1e-12)
    assert np.allclose(ds["Y_matrix"].values, 4 / 3 * np.einsum("m,mpq->pq", y, A), atol=1e-12)
    diag, _ = structure_dataset(nqf.DiagonalForm(torch.as_tensor(lam)), y)
    assert np.allclose(diag["K_diag"].values, 4 / 3 * lam.T @ lam, atol=1e-12)


def test_modes_come_ordered_with_their_directions():
    """A dense form's modes: sorted by decreasing r_k (ignition order from a common init), each with
    its direction basis[:, k] in the user's parameter space (A_mu q_k = lam_mu,k q_k, sign fixed:
    largest entry positive); predict's z uses the same order and directions. Diagonal data (also
    given as a DenseForm) keep the coordinate order, basis = I."""
    P, lam, A = commuting_dense(m=7, p=5, seed=2)
    y = np.random.default_rng(3).standard_normal(7)
    lv = nqf.LotkaVolterra.from_data(nqf.DenseForm(torch.as_tensor(A)), y)
    assert np.all(np.diff(lv.r) <= 0)
    q = lv.basis
    assert np.allclose(np.einsum("mpq,qk->mpk", A, q), lv.lam[:, None, :] * q[None], atol=1e-12)
    assert np.all(q[np.argmax(np.abs(q), axis=0), np.arange(5)] > 0)
    sol = nqf.predict(nqf.DenseForm(torch.as_tensor(A)), y, np.linspace(0, 2, 5), M0=1e-3 * np.eye(5))
    assert sol.method == "glv" and np.allclose(sol.info["r"], lv.r) and np.allclose(np.abs(sol.basis.T @ q), np.eye(5))
    assert np.allclose(sol.z, np.einsum("pk,tpq,qk->tk", q, sol.M, q), rtol=1e-10)
    d = np.random.default_rng(4).standard_normal((6, 3))
    dense = nqf.DenseForm(torch.as_tensor(np.einsum("mk,kl->mkl", d, np.eye(3))))
    lv_d = nqf.LotkaVolterra.from_data(dense, y[:6])
    assert np.array_equal(lv_d.basis, np.eye(3)) and np.allclose(lv_d.lam, d)


def test_predict_on_diagonal_dense_data_warns_nothing():
    """Diagonal data as a DenseForm: predict takes the diagonal path without torch's
    'non-writable NumPy array' warning (a read-only np.diagonal view used to reach torch)."""
    d = np.random.default_rng(0).uniform(0.5, 1.5, (4, 3))
    form = nqf.DenseForm(torch.as_tensor(np.einsum("mk,kl->mkl", d, np.eye(3))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sol = nqf.predict(form, np.ones(4), np.linspace(0, 1, 4), M0=1e-3 * np.eye(3))
    assert sol.method in ("theorem6", "glv", "theorem4", "theorem5")
