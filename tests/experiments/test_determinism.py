"""Determinism (issue 9): the same seed gives bit-identical trajectories, a different seed gives
different ones, and every run records the seeds it used."""
import numpy as np
from helpers import experiment_config

from nqf.experiments import featurewise_powerlaw as fpl
from nqf.experiments import teacher_student as ts


def test_seeded_runs_repeat_exactly_and_differ_across_seeds():
    cfg = {**experiment_config("featurewise_powerlaw", base="test"), "steps": 300}
    data = fpl.make_data(cfg)
    a = fpl.train_run(data, cfg, "seeds", device="cpu")
    b = fpl.train_run(data, cfg, "seeds", device="cpu")
    c = fpl.train_run(data, {**cfg, "init_seed": cfg["init_seed"] + 1}, "seeds", device="cpu")
    assert np.array_equal(a["loss"].values, b["loss"].values)
    assert not np.allclose(a["loss"].values, c["loss"].values, rtol=1e-6)
    assert str(cfg["init_seed"]) in a.attrs["init"] and str(cfg["init_seed"] + 1) in c.attrs["init"]


def test_online_sgd_records_its_seeds_and_repeats():
    cfg = experiment_config("teacher_student", base="test")
    data = ts.make_data(cfg)
    run = ts.runs(cfg)[0]
    a = ts.train_run(data, cfg, run, device="cpu")
    b = ts.train_run(data, cfg, run, device="cpu")
    c = ts.train_run(data, {**cfg, "seeds": [s + 7 for s in cfg["seeds"]]}, run, device="cpu")
    assert list(a["seed"].values) == list(cfg["seeds"])
    for name in a.data_vars:
        assert np.array_equal(a[name].values, b[name].values, equal_nan=True), name
    assert not np.allclose(a["batch_loss_module"].values, c["batch_loss_module"].values, equal_nan=True)
