"""A second run of the same experiments, whose jobs each run in their own process
(NQF_JOB_SERVER=off), writes the same numbers to the last bit as the finished run of the test
config, whose jobs ran in forks of the job server: runs are deterministic, whichever process
runs a job, and an experiment's results do not depend on the other experiments of its config."""
import os
import subprocess
import sys

import pytest
import xarray as xr
import yaml
from helpers import ROOT, snakemake_timeout

pytestmark = pytest.mark.workflow

# featurewise: a deterministic init; collapse: Gaussian seeds; samplewise: BLAS (Radau's LU) in its
# theory. Their stages use torch training and the thread counts and imports a forked job inherits
# from the server would show in them.
EXPERIMENTS = ("featurewise", "collapse", "samplewise")
STAGES = ("data", "structure", "theory", "runs", "fits")


def test_a_second_run_without_the_server_gives_identical_results(finished, tmp_path):
    work, cfg_file = finished
    cfg = yaml.safe_load(cfg_file.read_text())
    cfg["experiments"] = {k: cfg["experiments"][k] for k in EXPERIMENTS}
    own = tmp_path / "config.yaml"
    own.write_text(yaml.safe_dump(cfg, sort_keys=False))
    # up to the fits: the claims are theirs (the figure job only draws them and writes them out)
    targets = [f"results/fits/{exp}.nc" for exp in EXPERIMENTS]
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path / "off"),
           "--cores", "2", *targets, "--configfile", str(own)]  # targets first: --configfile takes several
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=snakemake_timeout(),
                          env={**os.environ, "NQF_JOB_SERVER": "off"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    off = tmp_path / "off" / "results"
    files = sorted(p.relative_to(off) for stage in STAGES for p in (off / stage).rglob("*.nc"))
    assert len(files) >= 5 * len(EXPERIMENTS)
    assert {rel.parts[1] for rel in files if rel.parts[0] == "runs"} == set(EXPERIMENTS)
    for rel in files:
        with xr.open_dataset(off / rel, engine="netcdf4") as a, \
                xr.open_dataset(work / "results" / rel, engine="netcdf4") as b:
            # data variables and coordinates bit for bit; attributes hold timestamps and hosts
            xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())


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
