"""Paper Figure 3 (left, middle): gradient descent on the feature-wise data against Theorem 6.

Tolerances come from gradient descent's own first-order error. Per step GD multiplies z_k by
(1 + eta g / 2)^2, g = r_k - C_kk z_k, where the flow multiplies it by exp(eta g): ln z grows at
g (1 - eta g / 4) per unit time, so GD reaches a level z later than the flow by
(eta / 4) ln(z / z0) (eta = c lr, the flow step of the loss convention). At half saturation that
is a relative delay of eta ln(r_k / (2 C_kk eps)) / (4 t*_k), about eta r_k / 4, and the largest
error of ln z_k along the way is at most eta r_k ln(r_k / (C_kk eps)) / 4.
"""
import functools

import numpy as np
import pytest
import torch

import nqf
from nqf.experiments import featurewise
from nqf.experiments.common import CHECKS, structure_dataset
from nqf.losses import loss_factor

from helpers import claim_rows, kind_config, stage_chain

R = np.array([1.0, 0.5, 0.25, 0.125, 0.0625])
EPS = 1e-5


paper_config = functools.partial(kind_config, "featurewise")


@pytest.fixture(scope="module")
def data():
    return featurewise.make_data(paper_config())


pipeline = functools.partial(stage_chain, featurewise)


@pytest.fixture(scope="module")
def default_outcome():
    return pipeline(paper_config())


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
    """Per mode, max_t |ln z_GD - ln z_Thm6| stays below the first-order bound
    eta r ln(r / eps) / 4 (the delay (eta/4) ln(z/z0) times the growth rate g <= r), and the
    error halves with eta: the ratio at eta and eta / 2 is 2 to first order (1.8-2.2 allows the
    O(eta^2) remainder, which is eta r / 4 = 0.5 % of the error here)."""
    errors = {}
    for lr in (0.02, 0.01):
        t, z, _ = gd_modes(data, lr)
        z_thm = nqf.logistic_solution(R, np.ones(5), np.full(5, EPS), t)
        per_mode = np.max(np.abs(np.log(z) - np.log(z_thm)), axis=0)
        errors[lr] = per_mode.max()
        assert np.all(per_mode <= lr * R * np.log(R / EPS) / 4), per_mode
    assert 1.8 <= errors[0.02] / errors[0.01] <= 2.2


def test_gd_ignites_late_by_the_first_order_delay(default_outcome):
    """GD reaches half saturation later than Theorem 8 by 70-100 % of the first-order delay
    eta ln(z_half / eps) / (4 t*) (the delay accrues while ln z grows at g < r, so the
    first-order term is reached from below; its O(eta^2) remainder is 0.25 % of it at eta = 0.01)."""
    *_, fit = default_outcome
    delay = (fit["t_star_measured"] - fit["t_star_predicted"]) / fit["t_star_predicted"]
    ratio = (delay / fit["t_star_gd_delay"]).values
    assert np.all((ratio > 0.7) & (ratio <= 1.0)), ratio


def test_default_config_passes_every_row_with_budget_tolerances(default_outcome):
    structure, theory, runs, fit = default_outcome
    assert bool(np.all(fit["claim_passed"].values))
    assert set(fit["claim_checks"].values) <= set(CHECKS)
    assert all(str(s) for s in fit["claim_source"].values)
    assert all(str(s) for s in fit["claim_tolerance_source"].values)
    assert np.allclose(fit["t_star_predicted"].values, np.log((R - EPS) / EPS) / R, rtol=1e-12)
    # The theory's loss starts at the loss of W(0) and ends at the minimum (0 here).
    assert theory["loss"].values[0] == pytest.approx(float(runs["gd"]["loss"].values[0, 0]), rel=1e-9)
    assert theory["excess_loss"].values[-1] < 1e-6
    assert np.all(np.diff(theory["plateau_loss"].values) < 0)
    # Theorem 6 puts each drop's midpoint within one transition width 1 / r_k of t*_k (Fig. 3
    # middle: 'each sharp drop in the loss aligns with t*_k').
    k = fit["drop_mode"].values
    offset = (fit["drop_time_predicted"].values - fit["t_star_predicted"].values[k]) * R[k]
    assert np.all(np.abs(offset) < 1), offset


@pytest.mark.parametrize("convention", ["half_mean", "sum", "half_sum"])
def test_loss_conventions_run_on_the_eq26_clock(convention):
    """GD with lr / c on the convention's loss (c * L_Eq26) takes the very steps of GD with lr on
    Eq. 26: the same time coordinate and Eq. 26 losses (float64 rounding, rtol 1e-10), and every
    claim still passes."""
    small = dict(r=[1.0, 0.5, 0.25], eps=1e-3, steps=2000, n_record=120)
    _, _, refs, _ = pipeline(paper_config(lr=0.02, **small))
    c = loss_factor(convention, 3)
    _, _, runs, fit = pipeline(paper_config(lr=0.02 / c, loss=convention, **small))
    ref, run = refs["gd"], runs["gd"]
    assert np.allclose(run["time"].values, ref["time"].values, rtol=1e-10, atol=0)
    # The loss falls towards 0 (here to 1e-6 from 0.16): rounding in the iterates is relative to
    # the largest loss, not to each value, so atol = rtol * max |loss| (atol=0 asked 1e-10 of 1e-6).
    assert np.allclose(run["loss"].values, ref["loss"].values, rtol=1e-10,
                       atol=1e-10 * np.abs(ref["loss"].values).max())
    assert run.attrs["loss_convention"] == convention
    assert bool(np.all(fit["claim_passed"].values))


FAST = dict(r=[4.0, 2.0, 1.0, 0.5, 0.25], eps=1e-8, lr=0.01, steps=8000)


def test_faster_modes_and_smaller_eps_pass_every_row():
    """r = (4, 2, 1, 0.5, 0.25), eps = 1e-8, lr 0.01: GD's own O(lr) error in ln z reaches 0.16
    (bound eta r ln(r / eps) / 4 = 0.2 for r = 4), far above the former fixed 3 %, and the
    budget tolerance follows it; every row passes."""
    *_, fit = pipeline(paper_config(**FAST))
    assert bool(np.all(fit["claim_passed"].values)), claim_rows(fit)
    assert float(fit["z_max_log_error"].max()) > 0.1


def test_a_wrong_theory_fails():
    """The same GD run against a theory with every r_k 30 % too large: every ignition, loss drop
    and trajectory row fails (the budgets are a few per cent, the disagreement ~25 %); the
    two-theories and Assumption 1 rows, which do not involve the run, still pass."""
    def wrong(structure):
        return structure.assign(r=structure["r"] * 1.3)

    *_, fit = pipeline(paper_config(**FAST), structure_edit=wrong)
    for start in ("ignition time", "loss drop", "max_t,k |ln z_GD"):
        checked = claim_rows(fit, start, at_start=True)
        assert checked and not any(ok for _, ok in checked), checked
    assert all(ok for _, ok in claim_rows(fit, "max_t,k |z_GLV", at_start=True)
               + claim_rows(fit, "shared-eigenbasis", at_start=True))


def test_assumption1_row_holds_by_construction_and_says_so(data, default_outcome):
    """The data matrices are diagonal (stored as A_diag, trained as a DiagonalForm): Assumption 1
    holds by construction, the structure stage reports a commutator residual of 0.0 without
    forming one, and even the dense path of shared_eigenbasis on the densified matrices gives
    exactly 0.0 (a product of diagonal matrices has exact zeros off the diagonal, and D S - S D
    has exactly cancelling diagonal terms). So the row is labelled "construction" with its reason
    in the source, and it is the fit's only such row: every other row is a measurement."""
    *_, fit = default_outcome
    labelled = [(str(q), str(s)) for q, c, s in zip(fit["claim_quantity"].values, fit["claim_checks"].values,
                                                    fit["claim_source"].values) if c == "construction"]
    assert [q for q, _ in labelled] == ["shared-eigenbasis commutator residual (Assumption 1)"]
    assert labelled[0][1].startswith("holds by construction (")
    dense = nqf.DenseForm(torch.as_tensor(np.stack([np.diag(d) for d in data["A_diag"].values])))
    assert nqf.shared_eigenbasis(dense)[2]["commutator"] == 0.0
