"""The train rule's gpu resource in dry runs (docs/cluster.md, "GPUs"): none on the CPU, so a CPU
run's jobs are what they were; one per training job under device: cuda; and under
profiles/slurm-gpu one per training job, each its own SLURM job, whatever `auto` finds on the
login node. The rule's choice itself: tests/package/test_gpu_check.py."""
import re

import pytest
from helpers import ROOT, snakemake

pytestmark = pytest.mark.workflow


def jobs(tmp_path, *args) -> list[tuple[str, str]]:
    """(rule, resources line) of every job of a dry run of config/test.yaml."""
    out = snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config" / "test.yaml"), *args).stdout
    found = re.findall(r"^\s*(?:local)?rule (\w+):\n(?:\s+\w[\w ]*:.*\n)*?\s+resources: (.*)$", out, re.MULTILINE)
    assert found, out[-3000:]
    return found


def gpus(resources: str) -> int | None:
    hit = re.search(r"(?:^|, )gpu=(\d+)", resources)
    return int(hit.group(1)) if hit else None


def test_a_cpu_run_asks_for_no_gpu(tmp_path):
    found = jobs(tmp_path)  # config/test.yaml: device: cpu
    assert sum(rule == "train" for rule, _ in found) >= 10
    assert all(gpus(res) is None for _, res in found), [r for r in found if "gpu" in r[1]]


def test_device_cuda_asks_one_gpu_per_training_and_none_elsewhere(tmp_path):
    # a cluster run (the profile's executor): the login node without a GPU may plan device: cuda
    found = jobs(tmp_path, "--config", "device=cuda", "--workflow-profile", str(ROOT / "profiles" / "slurm"))
    assert {gpus(res) for rule, res in found if rule == "train"} == {1}
    assert all(gpus(res) is None for rule, res in found if rule != "train")


def test_the_gpu_profile_asks_one_gpu_per_training_job_under_auto(tmp_path):
    proc = snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config" / "test.yaml"), "--config", "device=auto",
                     "--workflow-profile", str(ROOT / "profiles" / "slurm-gpu"))
    found = re.findall(r"^\s*(?:local)?rule (\w+):\n(?:\s+\w[\w ]*:.*\n)*?\s+resources: (.*)$", proc.stdout, re.MULTILINE)
    assert {gpus(res) for rule, res in found if rule == "train"} == {1}
    assert all(gpus(res) is None for rule, res in found if rule != "train")
    # one training run per SLURM job: no group of trainings asks for several GPUs
    sizes, current = [], None
    for line in proc.stdout.splitlines():
        if line.startswith("["):  # a job or a group starts
            current = None
            if "] Group job train" in line:
                sizes.append(0)
                current = len(sizes) - 1
        elif current is not None and re.match(r"\s+rule train:", line):
            sizes[current] += 1
    assert sizes and set(sizes) == {1}, sizes
