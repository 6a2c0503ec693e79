"""A run whose jobs run in forks of the job server (every workflow test's run) writes the same
numbers as one whose jobs each run in their own process (NQF_JOB_SERVER=off)."""
import os
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr
import yaml
from helpers import ROOT, snakemake_timeout

pytestmark = pytest.mark.workflow

# experiments whose stages use BLAS (Radau's LU), torch training and matplotlib: the thread
# counts and the imports a forked job inherits from the server would show in them
EXPERIMENTS = ("featurewise", "samplewise")


def test_results_are_the_same_without_the_server(finished, tmp_path):
    work, cfg_file = finished
    cfg = yaml.safe_load(cfg_file.read_text())
    cfg["experiments"] = {k: cfg["experiments"][k] for k in EXPERIMENTS}
    own = tmp_path / "config.yaml"
    own.write_text(yaml.safe_dump(cfg, sort_keys=False))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path / "off"),
           "--cores", "2", "--configfile", str(own), "--forceall"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=snakemake_timeout(),
                          env={**os.environ, "NQF_JOB_SERVER": "off"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    compared = 0
    for stage in ("data", "structure", "theory", "runs", "fits"):
        for path in sorted((tmp_path / "off" / "results" / stage).rglob("*.nc")):
            rel = path.relative_to(tmp_path / "off")
            with xr.open_dataset(path) as off, xr.open_dataset(work / rel) as served:
                assert set(off.variables) == set(served.variables), rel
                for name in off.variables:
                    a, b = off[name], served[name]
                    assert a.dims == b.dims, (rel, name)
                    # the same code on the same inputs: equal to the last bit
                    assert np.array_equal(a.values, b.values, equal_nan=a.dtype.kind in "fc"), (rel, name)
            compared += 1
    assert compared >= 10
    for exp in EXPERIMENTS:
        claims = f"results/figures/{exp}.claims.csv"
        assert (tmp_path / "off" / claims).read_text() == (work / claims).read_text()


def test_the_server_records_what_each_job_used(finished):
    """results/benchmarks/jobs.tsv: one line per job the server ran, every training among them."""
    work, _ = finished
    import csv

    with open(work / "results" / "benchmarks" / "jobs.tsv") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    outputs = {row["output"]: row for row in rows}
    runs = sorted(str(p.relative_to(work)) for p in (work / "results" / "runs").rglob("*.nc"))
    assert runs and set(runs) <= set(outputs)
    for run in runs:
        row = outputs[run]
        assert row["rule"] == "train" and row["exit_status"] == "0"
        assert float(row["cpu_s"]) > 0 and float(row["wall_s"]) > 0 and float(row["max_rss_mb"]) > 0
    assert {row["rule"] for row in rows} >= {"data", "structure", "theory", "train", "fit", "figure"}
