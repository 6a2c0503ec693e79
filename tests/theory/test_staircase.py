"""The eps -> 0 event solver against exact limits and direct GLV integration.

Finite-eps corrections: ignition times t*_k / ln(1/eps) differ from the limit tau*_k by O(1) / ln(1/eps)
(the saturation-level term of Theorem 8 and the O(1)-time transients), so the gap must shrink
monotonically and roughly halve each time ln(1/eps) doubles. A plateau loss measured on the GLV
differs from the limit by O(eps^{|x|}) with |x| the distance of the nearest moving mode from 0, so
plateaus are compared at their flattest point; with this example's spacing that is < 1e-6 at
eps = 1e-16. GLV runs at rtol 1e-10 in ln z.
"""
import warnings

import numpy as np
import pytest
from scipy.optimize import nnls

import nqf
from nqf.theory.lotka_volterra import glv
from nqf.theory.staircase import staircase_from_init


def suppression_example():
    """Three modes in three samples; mode 0 ignites first and is pushed out when mode 2 ignites."""
    lam = np.array([[2.7, 1.0, 0.0], [2.7, 0.0, 1.0], [0.9, 0.0, 0.0]])
    y = np.array([1.0, 0.8, -0.4])
    return lam, y


def test_diagonal_c_reproduces_theorems_6_and_8():
    r = np.array([1.0, 0.5, 0.25, 0.0, -0.3])
    c = np.array([1.0, 2.0, 0.5, 1.0, 1.0])
    sc = nqf.staircase(r, c, -1.0, loss0=2.0)
    assert np.allclose(sc.ignition_tau[:3], 1 / r[:3], rtol=1e-14)
    assert np.all(np.isinf(sc.ignition_tau[3:])) and sc.suppressed.size == 0
    assert list(sc.order) == [0, 1, 2]
    # The closed-form diagonal path equals the general event solver (formally dense C).
    dense = np.diag(c)
    dense[0, 1] = dense[1, 0] = 1e-300
    general = nqf.staircase(r, dense, -1.0, loss0=2.0)
    assert general.x_start is not None and sc.x_start is None
    assert np.allclose(general.ignition_tau, sc.ignition_tau) and np.allclose(general.loss, sc.loss)
    taus = np.linspace(0, 6, 13)
    assert np.allclose(general.x(taus), sc.x(taus)) and np.allclose(general.z_at(taus), sc.z_at(taus))
    # Plateaus: each ignition removes V_k = r_k^2 / (8 C_kk) (Eq. 162 at saturation).
    drops = np.cumsum(r[:3] ** 2 / (8 * c[:3]))
    assert np.allclose(sc.loss, 2.0 - np.concatenate([[0.0], drops]), rtol=1e-14)
    # Theorem 8 at finite eps: t*_k / ln(1/eps) = tau*_k - ln(r_k / (C_kk - ...)) / (r_k ln(1/eps)).
    for eps in (1e-4, 1e-8, 1e-16):
        t8 = nqf.predicted_ignition_times(r[:3], c[:3], eps) / np.log(1 / eps)
        expected = np.log((r[:3] - c[:3] * eps) / c[:3]) / (r[:3] * np.log(1 / eps))
        assert np.allclose(t8 - sc.ignition_tau[:3], expected, rtol=1e-10, atol=1e-14)
    # The x-trajectory: linear at rate r_k until 0, modes with r <= 0 never rise.
    x = sc.x([0.5, 5.0])
    assert np.allclose(x[0], [-0.5, -0.75, -0.875, -1.0, -1.15])
    assert np.allclose(x[1, :3], 0.0) and x[1, 4] < -2


def test_initial_profile_shifts_ignition_times():
    r, c = np.array([1.0, 0.5]), np.ones(2)
    sc = staircase_from_init(r, c, [1e-8, 1e-4], 1e-8)
    assert np.allclose(sc.ignition_tau, [1.0, 1.0])  # x0 = (-1, -1/2): both reach 0 at tau = 1


def test_suppression_example_events_and_equilibria():
    lam, y = suppression_example()
    r, C = nqf.lv_coefficients(lam, y)
    sc = nqf.staircase(r, C, -1.0, loss0=np.mean(y ** 2))
    assert list(sc.order) == [0, 1, 2]
    assert list(sc.suppressed) == [0]
    assert np.isclose(sc.suppression_tau[0], sc.ignition_tau[2])
    assert [(e.mode, e.kind) for e in sc.events] == [(0, "ignite"), (1, "ignite"), (2, "ignite"),
                                                     (0, "suppress")]
    # Each plateau is the non-negative least-squares fit on the ignited modes.
    for i, active in enumerate([[], [0], [0, 1], [1, 2]]):
        z = np.zeros(3)
        if active:
            z[active] = nnls(lam[:, active], y)[0]
        assert np.allclose(sc.z[i], z, atol=1e-12)
        assert np.isclose(sc.loss[i], np.mean((lam @ z - y) ** 2), rtol=1e-12, atol=1e-15)
    # After suppression mode 0 falls at its (negative) rate.
    assert sc.rates[-1, 0] < 0 and np.isclose(sc.x(sc.tau_start[-1] + 1.0)[0, 0], sc.rates[-1, 0])


def test_staircase_is_the_limit_of_glv_integration():
    lam, y = suppression_example()
    r, C = nqf.lv_coefficients(lam, y)
    sc = nqf.staircase(r, C, -1.0, loss0=np.mean(y ** 2))
    edges = np.append(sc.tau_start, 1.5 * sc.tau_start[-1])
    tau = np.linspace(0, edges[-1], 30001)
    gaps, plateau_errors, fall = [], [], []
    for eps in (1e-4, 1e-8, 1e-16):
        ln = np.log(1 / eps)
        z = glv(r, C, np.full(3, eps), tau * ln)
        t_star = nqf.ignition_times(tau * ln, z, saturation=sc.ignition_level) / ln
        gaps.append(np.abs(t_star - sc.ignition_tau))
        loss = np.mean((z @ lam.T - y) ** 2, axis=1)
        flat = []
        for lo, hi in zip(edges[:-1], edges[1:]):
            sel = (tau >= lo) & (tau <= hi)
            flat.append(loss[sel][np.argmin(np.abs(np.gradient(loss[sel], tau[sel])))])
        plateau_errors.append(np.abs(np.array(flat) - sc.loss))
        fall.append(abs(np.log(z[-1, 0]) / ln - sc.x(tau[-1])[0, 0]))
    gaps, plateau_errors = np.array(gaps), np.array(plateau_errors)
    assert np.all(np.diff(gaps, axis=0) < 0)  # monotone in eps, every mode
    assert np.all(gaps[1] / gaps[2] > 1.8) and np.all(gaps[1] / gaps[2] < 2.2)  # O(1/ln(1/eps))
    assert np.all(gaps[2] < 0.035)
    assert np.all(np.diff(plateau_errors[:, 1:3], axis=0) < 0)
    assert np.all(plateau_errors[2] < 1e-6)
    assert fall[2] < fall[1] < fall[0] < 0.15  # the suppressed mode's descent converges too


def test_random_dense_case_agrees_with_glv_at_small_eps():
    rng = np.random.default_rng(3)
    lam, y = rng.standard_normal((5, 8)), rng.standard_normal(5)
    r, C = nqf.lv_coefficients(lam, y)
    sc = nqf.staircase(r, C, -1.0, loss0=np.mean(y ** 2))
    assert sc.order.size >= 3
    eps = 1e-30
    ln = np.log(1 / eps)
    tau = np.linspace(0, 1.3 * sc.tau_start[-1], 20001)
    z = glv(r, C, np.full(8, eps), tau * ln)
    t_star = nqf.ignition_times(tau * ln, z, saturation=sc.ignition_level) / ln
    ignited = np.isfinite(sc.ignition_tau)
    assert np.all(np.abs(t_star[ignited] - sc.ignition_tau[ignited]) < 0.05 * sc.tau_start[-1])
    assert np.isclose(np.mean((z[-1] @ lam.T - y) ** 2), sc.loss[-1], rtol=1e-6, atol=1e-9)
    # Modes that never ignite stay exponentially small.
    assert np.all(z[-1, ~ignited] < eps ** 0.05)


def test_extreme_inputs_are_safe():
    lam = np.random.default_rng(4).standard_normal((6, 5))
    lam[:, 2] = 0.0  # a mode no sample sees: r = C_kk = 0
    y = np.random.default_rng(5).standard_normal(6)
    r, C = nqf.lv_coefficients(lam, y)
    x0 = np.array([-1.0, -0.5, -1.0, -np.inf, -1e-3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sc = nqf.staircase(r, C, x0, loss0=np.mean(y ** 2))
        sc_eps = staircase_from_init(r, C, np.array([1e-30, 1e-30, 1e-30, 0.0, 1e-30]), 1e-30)
        x = sc.x(np.linspace(0, 10, 5))
    assert np.isinf(sc.ignition_tau[2]) and np.isinf(sc.ignition_tau[3])
    assert np.all(np.isneginf(x[:, 3])) and np.all(np.isfinite(x[:, [0, 1, 2, 4]]))
    assert np.all(np.isfinite(sc.loss)) and np.all(np.isfinite(sc_eps.loss))
    with pytest.raises(ValueError, match="range of C"):
        nqf.staircase(np.array([1.0, -1.0]), np.array([[1.0, 1.0], [1.0, 1.0]]))


def test_default_loss_is_never_negative():
    """Without loss0 the staircase reports the loss above the least-squares floor (r^T C^+ r / 8
    removed from L(0)): non-negative, and with realisable targets the absolute loss."""
    rng = np.random.default_rng(1)
    lam = rng.standard_normal((8, 3))
    y = lam @ np.array([0.7, 0.3, 0.2])  # realisable, y in the span of Lambda
    r, C = nqf.lv_coefficients(lam, y)
    for CC in (C, np.diag(np.diag(C))):
        sc = nqf.staircase(r, CC, -1.0)
        assert np.all(sc.loss >= -1e-12 * np.mean(y ** 2))
    sc = nqf.staircase(r, C, -1.0)
    assert np.allclose(sc.loss, nqf.staircase(r, C, -1.0, loss0=np.mean(y ** 2)).loss, rtol=1e-9, atol=1e-12)
