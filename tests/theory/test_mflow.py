"""The M-flow from data statistics and the exact discrete recursions of Theorem 2 / Corollary 2.

Tolerances: statistics and exact recursions are rounding-level identities (float64, a few hundred
operations), so they are compared at 1e-12 relative (the brief asks 1e-8 for momentum). The flow
integrator runs at rtol 1e-12 and is compared at 1e-6. Gradient descent samples the flow with an
O(eta) error, checked by halving eta.
"""
import warnings

import numpy as np
import pytest
import torch

import nqf
from nqf.theory.mflow import SecondMoment, mflow, svec, unsvec
from nqf.theory.recursions import sgd_moments


def random_data(m, p, seed=0, scale=0.25):
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((m, p, p))
    return scale * (B + B.transpose(0, 2, 1)), rng.standard_normal(m)


def direct_H_and_loss(A, y, M):
    delta = np.einsum("mpq,pq->m", A, M) - y
    return 4 / len(y) * np.einsum("m,mpq->pq", delta, A), np.mean(delta ** 2)


@pytest.mark.parametrize("m", [3, 40])  # m < s/2 (factor of rank m) and m > s (s x s matrix)
def test_second_moment_reproduces_H_and_loss(m):
    A, y = random_data(m, 5, seed=m)
    stats = SecondMoment.from_matrices(A, y)
    assert (stats.factor is not None) == (m == 3)
    M = np.random.default_rng(1).standard_normal((5, 5))
    M = M @ M.T
    H, L = direct_H_and_loss(A, y, M)
    assert np.allclose(stats.hessian(M), H, rtol=1e-12, atol=1e-12 * np.abs(H).max())
    assert np.isclose(stats.loss(M), L, rtol=1e-12)
    assert np.allclose(unsvec(svec(M), 5), M)


def test_second_moment_compresses_low_rank_data_and_detects_diagonal_data():
    # 60 samples spanning only 3 directions of Sym(4): stored as a rank-3 factor.
    A0, y0 = random_data(3, 4, seed=5)
    coef = np.random.default_rng(6).standard_normal((60, 3))
    A = np.einsum("ni,ipq->npq", coef, A0)
    stats = SecondMoment.from_matrices(A, coef @ y0)
    assert stats.factor is not None and stats.rank == 3
    M = np.eye(4) + 0.1
    assert np.allclose(stats.hessian(M), direct_H_and_loss(A, coef @ y0, M)[0], atol=1e-10)
    diag = np.random.default_rng(7).standard_normal((6, 4))
    dense = SecondMoment.from_matrices(np.einsum("mp,pq->mpq", diag, np.eye(4)), np.ones(6))
    ref = SecondMoment.from_form(nqf.DiagonalForm(torch.as_tensor(diag)), np.ones(6))
    assert dense.diagonal and ref.diagonal and np.allclose(dense.kmat, ref.kmat, rtol=1e-13)


def test_isotropy_residual_vanishes_only_for_isotropic_data():
    p = 4
    s = p * (p + 1) // 2
    O, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((s, s)))
    A = unsvec(O.T, p)  # an orthonormal basis of Sym(4): Eq. 40 with c = 1/m
    c, res = SecondMoment.from_matrices(A, np.ones(s)).isotropy()
    assert res < 1e-13 and np.isclose(c, 1 / s, rtol=1e-12)
    assert SecondMoment.from_matrices(*random_data(30, 4)).isotropy()[1] > 0.1


def test_mflow_does_not_depend_on_width():
    """Two initial W with the same M (d = 3 and d = 60) give the same trajectory and work."""
    A, y = random_data(20, 4, seed=2)
    stats = SecondMoment.from_matrices(A, y)
    rng = np.random.default_rng(3)
    W3 = 0.05 * rng.standard_normal((4, 3))
    Q, _ = np.linalg.qr(rng.standard_normal((60, 3)))
    W60 = W3 @ Q.T  # W60 W60^T = W3 W3^T
    t = np.linspace(0, 5, 11)
    a, b = mflow(stats, W0=W3, t=t), mflow(stats, W0=W60, t=t)
    assert np.allclose(a["M"], b["M"], rtol=1e-9, atol=1e-12)
    assert a.attrs["rhs_evaluations"] == b.attrs["rhs_evaluations"]


@pytest.mark.parametrize("weight_decay", [0.0, 0.3])
def test_gradient_descent_samples_the_flow_with_order_eta_error(weight_decay):
    A, y = random_data(12, 3, seed=4)
    form = nqf.DenseForm(torch.as_tensor(A))
    W0 = 0.2 * np.random.default_rng(5).standard_normal((3, 4))
    T = 3.0
    flow = mflow(form, W0=W0, y=y, t=[T], weight_decay=weight_decay, rtol=1e-12)["M"].values[0]
    errors = []
    for lr in (0.004, 0.002):
        model = nqf.QuadraticModel(form, W0[None], device="cpu")
        steps = int(round(T / lr))
        ds = nqf.train(model, y, lr=lr, steps=steps, weight_decay=weight_decay, record_steps=[0, steps])
        errors.append(np.abs(ds["M"].values[0, -1] - flow).max() / np.abs(flow).max())
    assert errors[0] < 0.05
    assert 1.7 < errors[0] / errors[1] < 2.3  # first order in eta


@pytest.mark.parametrize("optimizer,weight_decay", [("gd", 0.0), ("gd", 0.1), ("momentum", 0.0),
                                                     ("momentum", 0.05)])
def test_exact_recursion_equals_training(optimizer, weight_decay):
    A, y = random_data(15, 4, seed=6)
    form = nqf.DenseForm(torch.as_tensor(A))
    W0 = 0.3 * np.random.default_rng(7).standard_normal((4, 6))
    model = nqf.QuadraticModel(form, W0[None], device="cpu")
    ds = nqf.train(model, y, lr=0.02, steps=400, optimizer=optimizer, momentum=0.9,
                   weight_decay=weight_decay, n_record=40)
    rec = nqf.discrete_flow(form, W0=W0, y=y, lr=0.02, steps=400, optimizer=optimizer,
                            momentum=0.9, weight_decay=weight_decay, record_steps=ds["step"].values)
    M = ds["M"].values[0]
    assert np.abs(rec["M"].values - M).max() <= 1e-12 * np.abs(M).max()
    assert np.allclose(rec["loss"].values, ds["loss"].values[0], rtol=1e-10)
    assert np.allclose(rec["time"].values, ds["time"].values)


def test_exact_recursion_with_diagonal_data_matches_training():
    diag = np.random.default_rng(8).uniform(0.2, 1.0, (5, 5))
    form = nqf.DiagonalForm(torch.as_tensor(diag))
    y = np.linspace(1.0, 0.2, 5)
    W0 = 1e-3 * np.random.default_rng(9).standard_normal((5, 5))
    ds = nqf.train(nqf.QuadraticModel(form, W0[None], device="cpu"), y, lr=0.05, steps=500,
                   optimizer="momentum", momentum=0.8, n_record=30)
    rec = nqf.discrete_flow(form, W0=W0, y=y, lr=0.05, steps=500, optimizer="momentum",
                            momentum=0.8, record_steps=ds["step"].values)
    assert np.abs(rec["M"].values - ds["M"].values[0]).max() <= 1e-12 * np.abs(ds["M"].values).max()


def test_minibatch_sgd_on_mean_and_second_moment_is_exact():
    """Theorem 2 with g, B (no ZGZ) and weight decay against SGD on W itself."""
    rng = np.random.default_rng(10)
    m, p, d, eta, gamma = 20, 4, 6, 0.02, 0.05
    A, y = random_data(m, p, seed=11)
    g = rng.standard_normal((m, p))
    B = 0.1 * (lambda X: X + X.transpose(0, 2, 1))(rng.standard_normal((m, p, p)))
    W = 0.3 * rng.standard_normal((p, d))
    batches = [rng.choice(m, 5, replace=False) for _ in range(60)]
    Ms, mus = sgd_moments(A, y, W @ W.T, W.sum(1), lr=eta, batches=batches, d=d, g=g, B=B,
                              weight_decay=gamma)
    for step, b in enumerate(batches, start=1):
        mu = W.sum(1)
        f = g[b] @ mu + np.einsum("p,bpq,q->b", mu, B[b], mu) + np.einsum("bpq,pi,qi->b", A[b], W, W)
        lp = 2 * (f - y[b]) / b.size
        v = lp @ (g[b] + 2 * np.einsum("bpq,q->bp", B[b], mu))
        W = W - eta * (v[:, None] + 2 * np.einsum("b,bpq->pq", lp, A[b]) @ W + gamma * W)
        assert np.allclose(Ms[step], W @ W.T, rtol=1e-12, atol=1e-13)
        assert np.allclose(mus[step], W.sum(1), rtol=1e-12, atol=1e-13)


def test_diagonal_mflow_is_safe_at_extreme_scales():
    """eps = 1e-30 and a mode with r <= 0: finite, no warnings, the never-learned mode decays."""
    form = nqf.DiagonalForm(torch.as_tensor(np.eye(3)))
    y = np.array([1.0, 0.3, -0.5])
    t = np.linspace(0, 400, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = mflow(form, M0=1e-30 * np.eye(3), y=y, t=t)
    M = ds["M"].values
    assert np.all(np.isfinite(M)) and np.all(np.isfinite(ds["loss"].values))
    z_exact = nqf.logistic_solution(8 / 3 * y, np.full(3, 8 / 3), np.full(3, 1e-30), t)
    assert np.allclose(np.diagonal(M, axis1=1, axis2=2), z_exact, rtol=1e-6, atol=0)
    assert M[-1, 2, 2] < 1e-100


def test_converged_loss_has_no_cancellation():
    """A realisable problem run to convergence: the M-flow's loss is computed from the residuals,
    so it keeps falling far below 1e-16 of the initial loss instead of hitting exact zeros
    (the expanded square <M, K M>/4 - <Y, M>/2 + y2 clipped 25 of 81 points to 0)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 3, 3))
    A = (A + A.transpose(0, 2, 1)) / 2
    W_star = rng.standard_normal((3, 3))
    y = np.einsum("mpq,pq->m", A, W_star @ W_star.T)
    t = np.geomspace(1e-2, 400, 81)
    ds = nqf.mflow(nqf.DenseForm(torch.as_tensor(A)), W0=0.5 * np.eye(3), y=y, t=t, rtol=1e-12)
    loss = ds["loss"].values
    assert np.all(loss > 0) and loss[-1] < 1e-16 * loss[0]
    M = ds["M"].values
    direct = np.mean((np.einsum("mpq,tpq->tm", A, M) - y) ** 2, axis=1)
    # both from residuals: equal to rounding, which is ~1e-15 |f| on a residual, i.e. relative
    # 1e-10 while the loss is above 1e-10 of L(0) and ~1e-3 at the 1e-25 floor
    big = loss > 1e-10 * loss[0]
    assert np.allclose(loss[big], direct[big], rtol=1e-10, atol=0)
    assert np.allclose(loss[~big], direct[~big], rtol=1e-2, atol=0)
