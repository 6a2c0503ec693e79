"""Teacher-student online SGD of a module beside its NQF (Fig. 6), at a tiny size."""
import numpy as np
import pytest
import torch

from nqf.experiments import teacher_student as ts

EPS = 1e-3


def _cfg(**over):
    cfg = dict(kind="teacher_student", description="test", architectures=["mlp", "qk_head"],
               sizes={"mlp": {"D": 6, "width": 12}, "qk_head": {"D": 4, "d_k": 2, "width": 2, "seq_len": 5}},
               teacher_std=1.0, teacher_fan_in=False, n_probe=64, data_seed=0,
               lr={"mlp": 0.05, "qk_head": 0.02}, steps={"mlp": 40, "qk_head": 40}, batch_size=16,
               init_std=EPS, seeds=[0, 1], threshold=0.05,
               tolerances={"min_agree_steps": 10, "parting_cv": 0.25})
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def pipeline():
    torch.manual_seed(0)
    cfg = _cfg()
    data = ts.make_data(cfg)
    st = ts.structure(data)
    th = ts.theory(st, cfg)
    runs = {a: ts.train_run(data, cfg, a, "cpu") for a in cfg["architectures"]}
    return cfg, data, st, th, runs, ts.fit(st, th, runs, cfg)


def test_module_equals_nqf_at_init(pipeline):
    """At W0 ~ N(0, eps^2) the MLP's error is the tanh cubic term: with z = u.x Gaussian of variance
    s^2 = eps^2 |x|^2 ~ eps^2 D, RMS(z^3/3) / RMS(z) = sqrt(15) s^2 / 3 ~ 1.3 eps^2 D; bound
    3 eps^2 D leaves a factor ~2 for the finite sums over 12 units and 64 probes. The QK head's learned part is O(eps^2) against f(0) = O(1), and its
    quartic error is O(eps^4) relative to f: bound eps^2."""
    cfg, _, _, _, runs, _ = pipeline
    assert np.all(runs["mlp"]["rel_output"].values[:, 0] < 3 * EPS**2 * cfg["sizes"]["mlp"]["D"])
    assert np.all(runs["qk_head"]["rel_output"].values[:, 0] < EPS**2)


def test_top_mode_growth_rate(pipeline):
    """r = (8/m) sum lambda y' equals 2 psi^T Y psi = 2 gamma for the top eigenvector psi (identity)."""
    _, _, st, _, _, _ = pipeline
    assert np.allclose(st["r"].values, 2 * st["gamma"].values, rtol=1e-10)
    assert np.all(st["r"].values > 0) and np.all(st["C"].values > 0)


def test_parting_step_is_first_crossing(pipeline):
    """The recorded parting step is the first step whose relative difference exceeds the threshold."""
    cfg, _, _, _, runs, fit = pipeline
    for a, run in runs.items():
        rel = run["rel_output"].values
        for i, p in enumerate(run["parting_step"].values):
            if p >= 0:
                assert rel[i, p] > cfg["threshold"] and np.all(rel[i, :p] <= cfg["threshold"])
            else:
                assert np.all(rel[i] <= cfg["threshold"])
    assert fit.sizes["claim"] == 3 * len(cfg["architectures"])


def test_loss_parting_step_is_first_loss_gap(pipeline):
    """The loss parting step is the first step where the seed-mean probe MSEs differ by more than
    the threshold (relative to the module's)."""
    cfg, _, _, _, runs, fit = pipeline
    for a, run in runs.items():
        lm = run["probe_loss_module"].values.mean(0)
        gap = np.abs(run["probe_loss_nqf"].values.mean(0) - lm) / lm
        lp = float(fit["loss_parting_step"].sel(arch=a))
        if np.isnan(lp):
            assert np.all(gap <= cfg["threshold"])
        else:
            k = int(lp)
            assert gap[k] > cfg["threshold"] and np.all(gap[:k] <= cfg["threshold"])
    assert np.isnan(ts.loss_parting_step(runs["mlp"], np.inf))  # never over an infinite threshold


def test_seed_streams_are_independent_of_other_seeds():
    """A seed's run does not depend on which other seeds are trained beside it (own generator)."""
    cfg = _cfg(architectures=["mlp"], steps={"mlp": 5, "qk_head": 5})
    data = ts.make_data(cfg)
    both = ts.train_run(data, cfg, "mlp", "cpu")
    alone = ts.train_run(data, dict(cfg, seeds=[1]), "mlp", "cpu")
    assert np.allclose(both["probe_loss_module"].sel(seed=1), alone["probe_loss_module"].sel(seed=1), rtol=1e-10)
