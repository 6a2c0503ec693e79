"""nqf.pipeline.local.run_experiment: one experiment end to end without Snakemake, its files
laid out as the workflow's and read back by nqf.io.runs.open_runs."""
import numpy as np
import pytest
from helpers import read_test_config

from nqf.errors import ConfigError
from nqf.io.runs import open_runs
from nqf.pipeline.local import run_experiment


def test_a_featurewise_experiment_runs_and_its_claims_hold(tmp_path):
    cfg = read_test_config()["experiments"]["featurewise"]
    out = run_experiment(cfg, experiment="fw", results=tmp_path)
    assert set(out) == {"data", "structure", "runs", "theory", "fit"} and list(out["runs"]) == ["gd"]
    assert out["fit"]["claim_passed"].values.astype(bool).all()
    for sub in ("data/fw.nc", "structure/fw.nc", "theory/fw.nc", "fits/fw.nc", "runs/fw/gd.nc"):
        assert (tmp_path / sub).stat().st_size > 0, sub
    runs = open_runs("fw", tmp_path)
    assert runs.sizes["run"] == 1 and str(runs["experiment"].values) == "fw"
    np.testing.assert_allclose(runs["loss"].isel(run=0).values, out["runs"]["gd"]["loss"].values, rtol=1e-12)


def test_seed_blocks_are_trained_apart_and_joined_for_the_fit(tmp_path):
    cfg = read_test_config()["experiments"]["teacher_student"]  # seeds_per_job: 1, seeds [0, 1]
    out = run_experiment(cfg, experiment="ts", results=tmp_path)
    assert list(out["runs"]) == ["mlp"] and list(out["runs"]["mlp"]["seed"].values) == [0, 1]
    assert sorted(p.name for p in (tmp_path / "runs" / "ts").iterdir()) == ["mlp.seeds-0.nc", "mlp.seeds-1.nc"]
    joined = open_runs("ts", tmp_path)
    assert list(joined["seed"].values) == [0, 1] and joined.sizes["run"] == 1


def test_a_bad_experiment_config_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"experiments\.x\.eps"):
        run_experiment({"kind": "featurewise", "eps": -1.0}, experiment="x")
