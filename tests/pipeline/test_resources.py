"""Cluster requests from nqf's own estimates (nqf.pipeline.resources, nqf.experiments.machine):
the work a run is counted as, the runtime model, memory from the estimate, growth per attempt,
and the requests a dry run prints for every job (the SLURM test compares them with what each
SLURM job asked for: tests/workflow/slurm/check_slurm_run.py)."""
import re
from types import SimpleNamespace

import pytest
import torch
import yaml
from helpers import ROOT, snakemake
from torch.utils.flop_counter import FlopCounterMode

from nqf.architectures import build
from nqf.experiments import kind_of, machine, run_ids
from nqf.experiments import work as M
from nqf.pipeline import resources as R
from nqf.pipeline.config import validate_config

TEST_CONFIG = validate_config(yaml.safe_load((ROOT / "config" / "test.yaml").read_text()))
DEFAULT_CONFIG = validate_config(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))


def test_meta_device_counts_equal_a_real_step():
    # the FLOPs counted on the meta device are those of the same step run for real on the CPU
    def real(arch, size, n, replicas):
        module = build(arch, size, n_outputs=2)
        x = module.sample_inputs(n, torch.Generator().manual_seed(0))
        W0 = module.unit_weights().detach()
        W = W0.expand(replicas, *W0.shape).clone().requires_grad_(True)
        with FlopCounterMode(display=False) as fc:
            module.forward_replicas(W, x).square().sum().backward()
        return fc.get_total_flops()

    for arch, size in (("mlp", {"D": 6, "width": 8}), ("cnn", {"image": [5, 6], "kernel": [3, 3], "width": 4})):
        flops, ops, nbytes = M.module_work(arch, size, 3, 40, {"n_outputs": 2})
        assert flops == real(arch, size, 40, 3) > 0
        assert ops > 10 and nbytes > 0
        # FLOPs and activations grow with the replicas and the samples, the operations do not
        flops2, ops2, nbytes2 = M.module_work(arch, size, 6, 80, {"n_outputs": 2})
        assert flops2 == pytest.approx(4 * flops, rel=0.05) and ops2 == ops
        assert 2 * nbytes < nbytes2 <= 4 * nbytes


def test_a_module_whose_forward_reads_values_is_counted_on_probe_batches():
    # the attention's softmax shift reads its logits, which the meta device does not hold: it is
    # run for real, directly up to the larger probe, beyond on the line through the two probes
    size, kw = {"d_k": 4}, {"image": (8, 8), "n_outputs": 1}
    assert M.count_work(lambda: None) == (0.0, 0, 0.0)
    hi = M.PROBES[1]
    flops, ops, nbytes = M.module_work("qk_self_attention", size, 2, hi, kw)
    assert ops > 10 and flops > 0 and nbytes > 0
    direct = M.count_work(lambda: _attention_step(size, kw, 2, hi), device="cpu")
    assert (flops, nbytes) == (direct[0], direct[2])
    # far beyond the probes: FLOPs exactly linear in the inputs (up to the float rounding of the
    # line); the bytes at most linear (the attention computes large batches in chunks, so they
    # grow more slowly there), so the line bounds them from above, and below the old estimate
    # (the larger probe scaled by the inputs), which scaled the weights and gradients up too
    far = 8 * hi
    line = M.module_work("qk_self_attention", size, 2, far, kw)
    direct = M.count_work(lambda: _attention_step(size, kw, 2, far), device="cpu")
    assert line[0] == pytest.approx(direct[0], rel=1e-9) and line[1] == ops
    assert direct[2] <= line[2] <= nbytes * far / hi


def _attention_step(size, kw, replicas, n):
    from nqf.architectures import build

    module = build("qk_self_attention", size, **kw)
    x = module.sample_inputs(n, torch.Generator().manual_seed(0))
    W0 = module.unit_weights().detach()
    W = W0.expand(replicas, *W0.shape).clone().requires_grad_(True)
    module.forward_replicas(W, x).square().sum().backward()


def test_the_bytes_of_a_step_are_those_alive_at_once():
    # two float64 tensors of 1000 values: the first freed before the second is made, 8000 bytes at
    # most; both kept, 16000; a view of one adds nothing
    def one_after_the_other():
        a = torch.empty(1000, dtype=torch.float64)
        del a
        return torch.empty(1000, dtype=torch.float64)

    def both():
        a, b = torch.empty(1000, dtype=torch.float64), torch.empty(1000, dtype=torch.float64)
        return a, b, b.view(10, 100)

    kept = []
    assert M.count_work(one_after_the_other, device="cpu")[2] == 8000
    assert M.count_work(lambda: kept.append(both()), device="cpu")[2] == 16000


def test_sizes_that_do_not_build_count_nothing():
    assert M.module_work("cnn", {"image": [4, 5], "kernel": [15, 15], "width": 4}, 1, 8, {}) == (0.0, 0, 0.0)


def test_the_runtime_model():
    work = {"steps": 1000, "flops": 2e9, "ops": 100, "dtype": "float32"}
    assert M.run_seconds(work) == pytest.approx(M.STARTUP_SECONDS + 1000 * (100 * M.OP_SECONDS + 2e9 / M.FLOP_RATE))
    assert M.run_seconds({**work, "flops_once": 4e10}) == pytest.approx(M.run_seconds(work) + 4e10 / M.FLOP_RATE)
    # float64 products at half the rate (half the peak)
    assert M.run_seconds({**work, "dtype": "float64"}) == pytest.approx(
        M.STARTUP_SECONDS + 1000 * (100 * M.OP_SECONDS + 2 * 2e9 / M.FLOP_RATE))
    assert M.generic_work({"bytes": 800, "steps": 7}) == {"steps": 7, "flops": 10 * 100, "ops": M.GENERIC_OPS}


def test_every_run_of_every_kind_has_a_work():
    # the default config holds every kind (those with a work hook of its own, the others through
    # their estimate); config/test.yaml seed blocks too (teacher_student's mlp.seeds-0)
    kinds = set()
    for exp in [*DEFAULT_CONFIG["experiments"].values(), *TEST_CONFIG["experiments"].values()]:
        for run in run_ids(exp):
            work = R.run_work(exp, run)
            assert work["steps"] >= 1 and work["flops"] >= 0 and work["ops"] >= 1, (exp["kind"], run, work)
            kinds.add(exp["kind"])
    assert len(kinds) == 12


def test_a_seed_block_counts_its_own_seeds():
    exp = next(e for e in TEST_CONFIG["experiments"].values() if e["kind"] == "teacher_student")
    blocks = [r for r in run_ids(exp) if r.startswith("mlp.")]
    assert len(blocks) >= 2
    whole = dict(exp, seeds_per_job="all")
    one, all_ = R.run_work(exp, blocks[0]), R.run_work(whole, "mlp")
    per_block = len(exp["seeds"]) // len(blocks)
    assert one["flops"] == pytest.approx(all_["flops"] * per_block / len(exp["seeds"]), rel=0.05)


def test_fourier_auto_steps_are_estimated_from_the_horizon():
    from nqf.experiments import fourier_powerlaw as F

    exp = next(e for e in DEFAULT_CONFIG["experiments"].values() if e["kind"] == "fourier_powerlaw")
    exp = dict(exp, steps="auto")
    assert F.estimate(exp)["steps"] == max(max(F.theta_steps(exp)), int(exp["raw_steps"]))
    assert M.run_work(F, exp, "fourier_mlp")["steps"] == sum(F.theta_steps(exp)) + M.RECORD_STEPS * exp["n_record"]


def test_requests_grow_with_each_attempt():
    jobs = R.JobResources(TEST_CONFIG["experiments"])
    exp = "featurewise" if "featurewise" in TEST_CONFIG["experiments"] else next(iter(TEST_CONFIG["experiments"]))
    run = run_ids(TEST_CONFIG["experiments"][exp])[0]
    wc = SimpleNamespace(exp=exp, run=run)
    est = machine.estimate(kind_of(TEST_CONFIG["experiments"][exp]), TEST_CONFIG["experiments"][exp])
    mem, rt = jobs.mem_mb("train"), jobs.runtime("train")
    assert mem(wc, 1) == int(-(-(R.BASE_MB + R.MEMORY_FACTOR * est["bytes"] / 1e6) // 1))
    assert mem(wc, 2) == int(-(-2 * (R.BASE_MB + R.MEMORY_FACTOR * est["bytes"] / 1e6) // 1))
    seconds = M.run_seconds(R.run_work(TEST_CONFIG["experiments"][exp], run))
    assert rt(wc, 1) == int(-(-max(R.MIN_MINUTES, R.RUNTIME_FACTOR * seconds / 60) // 1))
    assert rt(wc, 3) == int(-(-4 * max(R.MIN_MINUTES, R.RUNTIME_FACTOR * seconds / 60) // 1))
    # stages without an experiment hold no arrays of one; stages that train nothing ask STAGE_MINUTES
    assert jobs.mem_mb("summary")(SimpleNamespace(), 1) == R.BASE_MB
    assert jobs.runtime("figure")(wc, 2) == 2 * R.STAGE_MINUTES


def test_a_large_run_asks_for_more():
    jobs = R.JobResources({"a": validate_config({"experiments": {"a": {"kind": "featurewise_powerlaw"}}})
                           ["experiments"]["a"],
                           "b": validate_config({"experiments": {"b": {"kind": "featurewise_powerlaw", "m": 2000,
                                                                       "steps": 100000}}})["experiments"]["b"]})
    small, large = SimpleNamespace(exp="a", run="seeds"), SimpleNamespace(exp="b", run="seeds")
    assert jobs.mem_mb("train")(large) > jobs.mem_mb("train")(small)
    assert jobs.runtime("train")(large) > jobs.runtime("train")(small)


DRY_JOB = re.compile(r"^\s*rule (\w+):\n((?:\s+\w[\w ]*:.*\n)*?)\s+resources: (.*)$", re.M)


@pytest.mark.workflow
def test_the_dry_run_prints_nqfs_requests_for_every_job(tmp_path):
    # under the SLURM profile (its retries and grouping) the requests are the rules' own: no
    # set-resources overrides them
    out = snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config" / "test.yaml"),
                    "--workflow-profile", str(ROOT / "profiles" / "slurm")).stdout
    jobs = R.JobResources(TEST_CONFIG["experiments"])
    seen = set()
    for rule, body, res in DRY_JOB.findall(out):
        if rule == "all":  # the target, no job of its own
            continue
        found = dict(re.findall(r"\b(runtime|mem_mb)=(\d+)", res))
        wc = dict(re.findall(r"(\w+)=([^\s,]+)", re.search(r"wildcards: (.*)", body).group(1))) \
            if "wildcards:" in body else {}
        wc = SimpleNamespace(**wc)
        assert int(found["mem_mb"]) == jobs.mem_mb(rule)(wc, 1), (rule, wc, res)
        assert int(found["runtime"]) == jobs.runtime(rule)(wc, 1), (rule, wc, res)
        seen.add(rule)
    assert seen >= {"data", "structure", "theory", "train", "fit", "figure", "summary", "reproduction"}, seen


def test_a_jobs_memory_counts_its_stage_and_its_runs_dtype():
    base = validate_config({"experiments": {"a": {"kind": "real_data", "dtype": "float64"}}})["experiments"]["a"]
    jobs = R.JobResources({"a": base, "b": {**base, "dtype": "float32"}})
    images = jobs.estimate("a")["bytes"]
    # the structure stage's own arrays (the forms of every image) on top of the images
    assert jobs.held_bytes("structure", "a") == images + jobs.stage_bytes("a", "structure") > images
    assert jobs.held_bytes("fit", "a") == images and jobs.held_bytes("summary", None) == 0
    # a training step's bytes are counted in float64: a float32 run holds half of them
    step = R.run_work(base, "cnn")["bytes"]
    assert step > 0
    assert jobs.held_bytes("train", "a", "cnn") == pytest.approx(images + step)
    assert jobs.held_bytes("train", "b", "cnn") == pytest.approx(images + step / 2)
    assert jobs.mem_mb("train")(SimpleNamespace(exp="b", run="cnn")) == R.grown(R.memory_mb(images + step / 2), 1)
