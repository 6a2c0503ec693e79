"""benchmarks/gpu_check.py, the one-call GPU check (docs/cluster.md, "GPUs"), and the train rule's
gpu resource (nqf.pipeline.snakefile.train_gpus).

The script runs here in its --quick form: on a machine without CUDA it must still run its CPU
parts and say in its results file that CUDA was absent; where torch sees CUDA the same test
checks its CUDA parts. Its snakemake part (config/test.yaml run twice) runs only with
NQF_GPU_CHECK_SNAKEMAKE=1."""
import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import ROOT, time_limit

from nqf.pipeline.snakefile import train_gpus

WORKLOADS = {"cnn_module", "cnn_nqf", "qk_self_attention_module", "qk_self_attention_nqf", "small_loop_featurewise"}


def run_check(tmp_path, *args):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--quick", "--out", str(out),
                           *args], capture_output=True, text=True, timeout=time_limit(600), cwd=tmp_path, check=False)
    assert out.exists(), (proc.stdout + proc.stderr)[-3000:]
    return proc, json.loads(out.read_text())


def test_gpu_check_writes_one_results_file_and_says_whether_cuda_was_there(tmp_path):
    proc, res = run_check(tmp_path, "--snakemake", "off")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert res["ok"] is True and res["quick"] is True
    cuda = torch.cuda.is_available()
    assert res["cuda"] is cuda and res["environment"]["cuda_available"] is cuda
    assert res["environment"]["torch"] == torch.__version__
    assert res["device_resolution"]["status"] == "ok", res["device_resolution"]
    per_step = res["timings"]["seconds_per_step"]
    assert set(per_step["cpu_1_thread"]) == WORKLOADS
    assert all(v > 0 for row in per_step.values() for v in row.values())
    assert res["snakemake"] == {"status": "skipped", "reason": "--snakemake off", "seconds": res["snakemake"]["seconds"]}
    if cuda:
        assert res["cuda_paths"]["status"] == "ok", res["cuda_paths"]
        assert set(per_step["cuda"]) == WORKLOADS
    else:
        # every CUDA part says why it did not run, and the workflow's device check refuses cuda
        assert "no CUDA" in res["cuda_absent"]
        assert res["cuda_paths"]["status"] == "skipped" and "no CUDA" in res["cuda_paths"]["reason"]
        assert "cuda" not in per_step and "no CUDA" in res["timings"]["cuda"]["reason"]
        assert "refused" in res["device_resolution"]["resolved"]["cuda"]
        assert res["device_resolution"]["device_problem"]["cuda"]


@pytest.mark.skipif(os.environ.get("NQF_GPU_CHECK_SNAKEMAKE") != "1",
                    reason="runs config/test.yaml (minutes): set NQF_GPU_CHECK_SNAKEMAKE=1")
def test_gpu_check_runs_the_test_config(tmp_path):
    proc, res = run_check(tmp_path, "--snakemake", "on", "--snakemake-limit", str(time_limit(1500)))
    sm = res["snakemake"]
    assert proc.returncode == 0 and sm["status"] == "ok", json.dumps(sm, indent=1)[-3000:]
    assert sm["cpu"]["returncode"] == 0 and sm["cpu"]["train_jobs"] > 0
    assert sm["cpu"]["train_jobs_with_gpu_resource"] == 0
    if torch.cuda.is_available():
        assert sm["cuda"]["train_jobs_with_gpu_resource"] == sm["cuda"]["train_jobs"]
        assert sm["summary_cuda_vs_cpu"]["same_rows"]


@pytest.mark.parametrize("device, here, cuda, gpus", [
    ("cpu", True, True, None),       # the CPU asked for: no gpu resource, whatever the machine has
    ("cuda", True, False, 1),        # cuda: one GPU (the device check refuses a machine without)
    ("cuda:1", False, False, 1),
    ("auto", True, True, 1),         # auto here, with CUDA: it will train on the GPU
    ("auto", True, False, None),     # auto here, without: on the CPU
    ("auto", False, True, None),     # auto on a cluster: the profile decides (profiles/slurm-gpu)
])
def test_the_train_rule_asks_for_a_gpu_only_where_it_trains_on_cuda(device, here, cuda, gpus):
    asked = []

    def cuda_available():
        asked.append(True)
        return cuda

    assert train_gpus(device, here, cuda_available) == gpus
    # torch is asked about CUDA only for auto on this machine
    assert bool(asked) == (device == "auto" and here)
