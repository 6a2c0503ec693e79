"""What each job asks a cluster for: memory and runtime from nqf's own estimate of that job.

Every rule's ``mem_mb`` and ``runtime`` are functions of the job's wildcards and of its attempt
(Snakemake's callable resources), so a SLURM submission asks for what the job needs, not one
guess for all:

* **memory** (MB): :data:`BASE_MB` (the process with torch, NumPy, xarray and netCDF4 loaded, and
  a stage's own small arrays, measured) plus :data:`MEMORY_FACTOR` times what the job holds by
  nqf's counts (:meth:`JobResources.held_bytes`): for the jobs that hold an experiment's arrays
  (data, structure, theory, train, fit, figure) the experiment's estimate
  (:func:`nqf.experiments.machine.estimate`: the float64 arrays its largest run holds at once, the
  floor that ``nqf check-config`` reports) and the stage's own arrays where the kind counts them
  (its ``stage_bytes`` hook); for a training run also its step (activations and gradients at
  their peak, :func:`nqf.experiments.work.run_work`, counted in float64 and scaled to the run's
  dtype); the others hold no more than the process.
* **runtime** (minutes): for a training run, :data:`RUNTIME_FACTOR` times the seconds of
  :func:`nqf.experiments.work.run_seconds` (its steps, the FLOPs and torch operations of each,
  counted by :func:`nqf.experiments.work.run_work`), at least :data:`MIN_MINUTES`; for the
  other stages, which train nothing, :data:`STAGE_MINUTES`.
* **attempts**: both double with each attempt (``attempt`` 1, 2, 3, ...), so a job that a
  cluster killed for its time or memory is resubmitted with twice as much when the run allows
  retries (``retries:`` in profiles/slurm and profiles/slurm-gpu).

A grouped SLURM job asks for what Snakemake sums over its jobs (memory over those it runs side
by side, runtime over its sequential layers). Each estimate is computed once per snakemake call
and job. ``benchmarks/resources.py`` sets these requests beside a run's measured peaks.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# Measured on the default run, one job per process (NQF_JOB_SERVER=off; benchmarks/resources.py):
# a job that imports torch peaks at 390-410 MB with (almost) no arrays of its own (featurewise,
# collapse), and the stages hold arrays the estimate does not count (real_data's structure job,
# A(x) statistics of 94 MB of images, peaked at 976 MB): BASE_MB covers both. A training run also
# holds its step's activations and gradients (the "bytes" of its work, counted on the meta device)
# for the module and its NQF: the largest default trainings peaked at up to 1.68 times (estimate +
# step bytes) above the process (real_data_raw_pixels' CNN, 784 MB), hence MEMORY_FACTOR 2. A job
# that still needs more is retried with twice as much.
BASE_MB = 1000
MEMORY_FACTOR = 2.0
# A training run's runtime request over the runtime model's seconds (a bound for one CPU thread).
RUNTIME_FACTOR = 2.0
# The smallest runtime a job asks for: a job's own start on a node (Python, snakemake, imports)
# takes up to a minute on a loaded node; SLURM counts whole minutes.
MIN_MINUTES = 5
# Minutes of the stages that train nothing (the default run's longest such job took under a minute).
STAGE_MINUTES = 10
# A training step's bytes are counted in float64 (nqf.experiments.work); a run in another dtype
# holds this share of them.
DTYPE_SHARE = {"float64": 1.0, "float32": 0.5}
# Each attempt after a failed one asks for GROWTH times the one before.
GROWTH = 2
# Stages whose jobs hold one experiment's arrays (its data, structure matrices, recorded runs).
EXPERIMENT_STAGES = ("data", "structure", "theory", "train", "fit", "figure")


def grown(value: float, attempt: int) -> int:
    """``value`` for attempt ``attempt`` (1 for the first): GROWTH**(attempt - 1) times it, rounded up."""
    return int(math.ceil(value * GROWTH ** (max(int(attempt), 1) - 1)))


def memory_mb(estimate_bytes: float) -> float:
    """Memory in MB of a job whose arrays are ``estimate_bytes`` by nqf's estimate."""
    return BASE_MB + MEMORY_FACTOR * float(estimate_bytes) / 1e6


def train_minutes(seconds: float) -> float:
    """Runtime in minutes of a training job the runtime model puts at ``seconds``."""
    return max(MIN_MINUTES, RUNTIME_FACTOR * float(seconds) / 60.0)


def run_work(exp: Mapping[str, Any], run: str) -> dict:
    """:func:`nqf.experiments.work.run_work` of run ``run`` of the experiment config ``exp``; a
    seed block's run (``seeds_per_job``) counts its own seeds only."""
    from nqf.experiments import kind_of, split_run_id
    from nqf.experiments.work import run_work as kind_run_work

    cfg = dict(exp)
    base, block = split_run_id(cfg, run)
    if block is not None:
        cfg = {**cfg, "seeds": list(block), "seeds_per_job": "all"}
    return kind_run_work(kind_of(cfg), cfg, base)


class JobResources:
    """The ``mem_mb`` and ``runtime`` functions of every rule, for the experiments of one
    validated config (``experiments``: id -> experiment config)."""

    def __init__(self, experiments: Mapping[str, Mapping[str, Any]]):
        self.experiments = experiments
        self._estimates: dict[str, dict] = {}
        self._work: dict[tuple[str, str], dict] = {}
        self._stage_bytes: dict[tuple[str, str], float] = {}

    def estimate(self, exp: str) -> dict:
        """nqf's estimate of the largest run of experiment ``exp`` (computed once)."""
        if exp not in self._estimates:
            from nqf.experiments import kind_of
            from nqf.experiments.machine import estimate

            cfg = dict(self.experiments[exp])
            self._estimates[exp] = estimate(kind_of(cfg), cfg)
        return self._estimates[exp]

    def work(self, exp: str, run: str) -> dict:
        """:func:`run_work` of training run ``run`` of ``exp`` (computed once)."""
        if (exp, run) not in self._work:
            self._work[exp, run] = run_work(self.experiments[exp], run)
        return self._work[exp, run]

    def train_seconds(self, exp: str, run: str) -> float:
        """The runtime model's seconds of training run ``run`` of ``exp``."""
        from nqf.experiments.work import run_seconds

        return run_seconds(self.work(exp, run))

    def stage_bytes(self, exp: str, stage: str) -> float:
        """The bytes the job of ``stage`` of ``exp`` holds beyond the estimate (the kind's
        ``stage_bytes`` hook; computed once)."""
        if (exp, stage) not in self._stage_bytes:
            from nqf.experiments import kind_of
            from nqf.experiments.contract import hook
            from nqf.experiments.estimate_cache import cached

            cfg = dict(self.experiments[exp])
            kind = kind_of(cfg)
            self._stage_bytes[exp, stage] = float(cached(
                "stage_bytes", [kind.__name__, cfg, stage], lambda: hook(kind, "stage_bytes")(cfg, stage)))
        return self._stage_bytes[exp, stage]

    def held_bytes(self, stage: str, exp: str | None, run: str | None = None) -> float:
        """What the job of ``stage`` (of ``exp``, training run ``run``) holds by nqf's estimates: the
        experiment's arrays, the stage's own (``stage_bytes``) and a training step's tensors, the
        latter counted in float64 and scaled to the run's dtype (a float32 run holds half)."""
        if stage not in EXPERIMENT_STAGES or exp is None:
            return 0.0
        held = self.estimate(exp)["bytes"] + self.stage_bytes(exp, stage)
        if stage == "train":
            work = self.work(exp, run)
            held += work.get("bytes", 0.0) * DTYPE_SHARE.get(work.get("dtype", "float64"), 1.0)
        return held

    def mem_mb(self, stage: str):
        """The rule ``stage``'s ``mem_mb``: a function of the job's wildcards and attempt."""
        def mem_mb(wildcards, attempt: int = 1) -> int:
            held = self.held_bytes(stage, getattr(wildcards, "exp", None), getattr(wildcards, "run", None))
            return grown(memory_mb(held), attempt)

        return mem_mb

    def runtime(self, stage: str):
        """The rule ``stage``'s ``runtime`` in minutes: a function of the job's wildcards and attempt."""
        def runtime(wildcards, attempt: int = 1) -> int:
            if stage == "train":
                return grown(train_minutes(self.train_seconds(wildcards.exp, wildcards.run)), attempt)
            return grown(STAGE_MINUTES, attempt)

        return runtime
