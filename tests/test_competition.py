"""Coupled GLV (non-diagonal C): GD vs GLV integration vs the eps -> 0 staircase."""
import numpy as np
import pytest

from nqf.config import validate_config
from nqf.experiments import competition
from nqf.experiments.common import form_from_dataset, structure_dataset


@pytest.fixture(scope="module")
def outcome():
    cfg = validate_config({"experiments": {"c": {"kind": "competition", "eps": [1e-4, 1e-8, 1e-16],
                                                 "lr": 0.004, "n_record": 300}}})["experiments"]["c"]
    data = competition.make_data(cfg)
    structure, _ = structure_dataset(form_from_dataset(data), data["y"].values)
    theory = competition.theory(structure, cfg)
    runs = {run: competition.train_run(data, competition.run_config(cfg, run), run, device="cpu")
            for run in competition.runs(cfg)}
    return cfg, structure, theory, runs, competition.fit(structure, theory, runs, cfg)


def test_default_data_has_a_suppressed_mode(outcome):
    _, structure, theory, _, _ = outcome
    C = structure["C"].values
    assert np.any(np.abs(C - np.diag(np.diag(C))) > 1)  # genuinely coupled
    assert np.isfinite(theory["tau_suppressed"].values[0])  # mode 1 ignites, then is suppressed
    assert list(np.argsort(theory["tau_star"].values)) == [0, 1, 2]


def test_gd_matches_the_coupled_glv(outcome):
    """GD ignites a mode of rate r late by about lr r / 4 relative (O(lr) discretisation)."""
    _, structure, _, _, fit = outcome
    r = structure["r"].values
    err = np.abs(fit["t_star_measured"] - fit["t_star_predicted"]) / fit["t_star_predicted"]
    assert np.all(err.values <= 0.004 * r[None, :] / 4 * 1.5 + 1e-3), err.values


def test_staircase_gap_shrinks_like_one_over_log_eps(outcome):
    _, _, _, _, fit = outcome
    gap = fit["staircase_gap"].values  # eps = 1e-4, 1e-8, 1e-16: ln(1/eps) doubles each time
    assert np.all(np.diff(gap, axis=0) < 0)
    assert np.allclose(gap[1:] / gap[:-1], 0.5, atol=0.05)


def test_all_claims_pass(outcome):
    *_, fit = outcome
    failed = [str(q) for q, ok in zip(fit["claim_quantity"].values, fit["claim_passed"].values) if not ok]
    assert not failed, failed
