"""The workflow on a real one-node SLURM cluster (tests/workflow/slurm/run_slurm_test.sh).

Skipped unless NQF_SLURM_TEST=1: it installs Debian's slurm-wlm and munge when missing (root),
starts private munged/slurmctld/slurmd daemons on loopback, runs the DAG through
snakemake-executor-plugin-slurm with profiles/slurm and again locally, and checks that every
job ran as a SLURM job and that both runs give the same NetCDF results. CI runs it as its own
step (.ci/run); locally: NQF_SLURM_TEST=1 .venv/bin/python -m pytest -x -q tests/workflow/test_slurm.py
"""
import os
import subprocess
import sys

import pytest
from helpers import ROOT, time_limit

SCRIPT = ROOT / "tests" / "workflow" / "slurm" / "run_slurm_test.sh"

pytestmark = [
    pytest.mark.workflow,
    pytest.mark.skipif(os.environ.get("NQF_SLURM_TEST") != "1",
                       reason="real SLURM cluster test: set NQF_SLURM_TEST=1 (needs root or slurm-wlm)"),
]


def test_workflow_on_slurm_matches_local_run():
    env = dict(os.environ, NQF_PYTHON=os.environ.get("NQF_PYTHON", sys.executable))
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=time_limit(3600))
    print(proc.stdout[-6000:])
    assert proc.returncode == 0, f"{SCRIPT.name} failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-4000:]}"
    assert "PASSED" in proc.stdout
