"""What the Snakefile and its rule files call when Snakemake parses them: the rule files hold
rules only, and every function they use lives here.

:func:`setup` reads the config files again strictly (:mod:`nqf.pipeline.config_files`), with the
``--config`` overrides on top, validates that reading into a new dict (Snakemake's own ``config``
keeps what Snakemake read and is not used by nqf) and returns a :class:`Workflow`: the validated
config, the experiments, the config's identity, and the rules' input and params functions.

What a job needs beyond its rule's params reaches it as one more param, ``context``, a
:class:`RunContext`: the validated config, the config's identity and the :class:`Origin` of this
snakemake call (its command line and its checkout's commit), which every file a job writes
records. Snakemake reruns a job when a param's value changes, comparing the reprs of params of
builtin types only; a RunContext is not one of those, so a new command line, a new commit or a
config change outside a stage's keys reruns nothing (each stage's own keys are its ``cfg``
param, which does). Its repr is constant, so it stays so even where Snakemake shows params.
"""
from __future__ import annotations

import copy
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nqf.io.provenance import Origin, git_commit
from nqf.pipeline.resources import JobResources


@dataclass(frozen=True, eq=False)
class RunContext:
    """What every job of one snakemake call shares and that must not rerun a job: ``config``
    (validated), ``identity`` (:func:`nqf.pipeline.reproduction.config_identity`) and ``origin``
    (what ran: nqf.io.provenance)."""

    config: Mapping[str, Any]
    identity: Mapping[str, Any]
    origin: Origin

    def experiment(self, exp: str) -> Mapping[str, Any]:
        """The validated config of experiment ``exp``."""
        return self.config["experiments"][exp]

    def __repr__(self) -> str:
        # constant: not a rerun trigger, and nothing for Snakemake's report to escape
        return "RunContext(config, identity, origin)"


def origin_of(argv: list[str], basedir: str | Path) -> Origin:
    """This snakemake call (``argv``: its command line) and the commit of the workflow's checkout
    at ``basedir``."""
    return Origin(command=shlex.join(["snakemake", *argv[1:]]), commit=git_commit(basedir))


def jobs_run_here(workflow, argv: list[str]) -> bool:
    """Whether this snakemake process runs its jobs on this machine: a local run, or a cluster job
    on its node (``workflow.remote_exec``); False where it submits them to a cluster."""
    from nqf.experiments.machine import cluster_executor

    return bool(workflow.remote_exec) or cluster_executor(argv, workflow.basedir) is None


def validated_config(workflow, argv: list[str]) -> dict:
    """The config of this snakemake call, read strictly and validated (a new dict); a
    ConfigError stops snakemake (WorkflowError) before any job starts.

    A cluster job parses the Snakefile again on its node, where it runs: the device and memory
    checks hold there; the main process checks them only when its jobs run on this machine (a
    login node without a GPU may submit device: cuda to GPU nodes)."""
    from snakemake.exceptions import WorkflowError

    from nqf import experiments
    from nqf.errors import ConfigError
    from nqf.pipeline.config import load_workflow_config, validate_config
    from nqf.pipeline.config_schema_file import WORKFLOW_SCHEMA

    try:
        raw = load_workflow_config(
            workflow.config_settings.configfiles,  # --configfile, in order
            workflow.config_settings.config,  # --config key=value, parsed
            Path(workflow.basedir) / "config" / "config.yaml",  # without --configfile
        )
        validated = validate_config(raw)
        experiments.check_config(
            validated, jobs_run_here=jobs_run_here(workflow, argv))
    except ConfigError as exc:
        raise WorkflowError(f"Invalid configuration: {exc}") from None
    # Snakemake's own validation, against the one-file schema where a workflow keeps it: it refuses
    # nothing nqf's stricter reading above accepts (that reading adds one-sentence errors, strict
    # YAML, NaN/inf and cross-key checks), and it keeps that file a schema of every valid config.
    from snakemake.utils import validate

    validate(copy.deepcopy(validated), str(Path(workflow.basedir) / WORKFLOW_SCHEMA), set_default=False)
    return validated


def cuda_here() -> bool:
    """Whether torch sees a CUDA device on this machine (torch is imported only when asked)."""
    import torch

    return torch.cuda.is_available()


def callable_priority() -> bool:
    """Whether this Snakemake takes a function of the wildcards as a rule's ``priority`` (it
    evaluates it per job in ``Rule.expand_priority``; older releases refuse any non-number)."""
    from snakemake.rules import Rule

    return hasattr(Rule, "expand_priority")


def train_gpus(device: str, jobs_run_here: bool, cuda_available=cuda_here) -> int | None:
    """The ``gpu`` resource of a training job whose config says ``device``: 1 where it will train
    on CUDA, None (no gpu resource at all) where it will train on the CPU.

    ``cuda``/``cuda:<n>`` -> 1; ``cpu`` -> None; ``auto`` -> 1 when the jobs run on this machine
    (``jobs_run_here``: locally, or a cluster job on its node) and torch sees CUDA here
    (``cuda_available()``, asked only then), else None: a login node without a GPU cannot tell
    what ``auto`` finds on a node, so on a cluster ``auto`` asks for a GPU only through the
    profile (profiles/slurm-gpu sets ``train:gpu=1``; docs/cluster.md)."""
    device = str(device)
    if device.startswith("cuda"):
        return 1
    if device == "auto" and jobs_run_here and cuda_available():
        return 1
    return None


class Workflow:
    """The validated config of one snakemake call and the functions its rules use."""

    def __init__(self, config: Mapping[str, Any], identity: Mapping[str, Any], origin: Origin,
                 jobs_run_here: bool = True):
        self.config = config
        self.jobs_run_here = jobs_run_here
        self.experiments = config["experiments"]
        self.identity = identity
        # the part of the identity the verdicts depend on (the reproduction rule's params, so its
        # rerun trigger): a new config file that changes only figure style keeps the page
        self.verdict_identity = {key: identity[key] for key in ("sha256", "matches")}
        self.context = RunContext(config, identity, origin)
        # every rule's mem_mb and runtime, from nqf's estimate of its job (nqf.pipeline.resources)
        self.resources = JobResources(self.experiments)

    # -- wildcards and targets

    @property
    def exp_pattern(self) -> str:
        """The regex of ``{exp}``: only the configured ids (longest first), so other figures
        (structure_matrices) and stale files never resolve to an experiment rule."""
        return "|".join(sorted(self.experiments, key=len, reverse=True))

    def targets(self) -> list[str]:
        """Every file of the DAG (nqf.pipeline.verify.outputs), intermediate NetCDF files included:
        one that is missing is regenerated by the next run."""
        from nqf.pipeline import verify

        return [str(path) for path in verify.outputs(self.experiments)]

    # -- resources

    def train_gpu(self, wildcards) -> int | None:
        """The train rule's ``gpu`` resource (:func:`train_gpus`): 1 where training runs on CUDA,
        else None, so a CPU run's jobs carry no gpu resource. ``--resources gpu=1`` then runs one
        training at a time on the GPU while the CPU stages fill the cores. Asked once per call."""
        if not hasattr(self, "_train_gpu"):
            self._train_gpu = train_gpus(self.config.get("device", "auto"), self.jobs_run_here)
        return self._train_gpu

    # the data rule's priority: above any training's (1 + minutes), so every data job runs first
    DATA_PRIORITY = 1_000_000

    @property
    def train_priority(self):
        """The train rule's ``priority``: every training before the other jobs (priority 0), and
        among them the longest by nqf's runtime model first (1 + its modelled minutes), so that a
        long training does not start last and run alone at the end of a run (longest processing
        time first). A Snakemake that takes only a number as a priority (:func:`callable_priority`)
        gets 1: trainings first, in its own order."""
        if not callable_priority():
            return 1
        resources = self.resources

        def priority(wildcards) -> int:
            return 1 + round(resources.train_seconds(wildcards.exp, wildcards.run) / 60)

        return priority

    # -- inputs and params of the rules

    def experiment(self, wildcards) -> Mapping[str, Any]:
        return self.experiments[wildcards.exp]

    def stage_params(self, stage: str):
        """The config keys a stage reads, as a rule param: changing them reruns that stage."""
        from nqf.experiments import stage_config

        return lambda wildcards: stage_config(self.experiment(wildcards), stage)

    def run_params(self, wildcards):
        """The config one training run reads (narrowed to that run where the kind allows)."""
        from nqf.experiments import run_config

        return run_config(self.experiment(wildcards), wildcards.run)

    def run_files(self, wildcards) -> list[str]:
        """The training runs of one experiment."""
        from nqf.experiments import run_ids

        return [f"results/runs/{wildcards.exp}/{run}.nc" for run in run_ids(self.experiment(wildcards))]

    def reproduction_params(self) -> dict:
        """Per experiment: its kind, description, reading and what it tried of the open choices
        (they label the reproduction page)."""
        from nqf.experiments import reading_choices, reading_of

        return {
            exp: {
                "kind": cfg["kind"],
                "description": cfg.get("description", ""),
                "reading": reading_of(cfg),
                "choices": reading_choices(cfg),
            }
            for exp, cfg in sorted(self.experiments.items())
        }


def report_params(value):
    """A param of a rule whose outputs are in Snakemake's report, which writes params unescaped
    into a <script> element: the same value with a repr free of '<'
    (nqf.pipeline.report_html.report_param), as a function (Snakemake rebuilds a plain list
    param, and would lose that repr). ``value`` is the value or a function of the wildcards; a
    :class:`RunContext` is passed as it is (its repr is constant)."""
    from nqf.pipeline.report_html import report_param

    if isinstance(value, RunContext):
        return lambda wildcards: value
    if callable(value):
        return lambda wildcards: report_param(value(wildcards))
    return lambda wildcards: report_param(value)


# glibc's allocator hands every block above its mmap threshold back to the system when it is freed,
# so a training step whose tensors are larger (a CNN's activations: MBs) maps, faults in and
# unmaps them again on every step: the default real_data CNN spent 7.1 s of 19.4 s in the kernel
# doing so (3.5 M page faults), 0.4 s of 12.4 s with these two settings (benchmarks/allocator.py).
# Freed memory then stays with the process for its next step, so a job holds its peak until it
# ends, as it would anyway. A value the environment already sets is kept; other C libraries
# ignore them.
ALLOCATOR_SETTINGS = {"MALLOC_MMAP_THRESHOLD_": str(2**30), "MALLOC_TRIM_THRESHOLD_": str(2**34)}


def tune_allocator(environ=os.environ) -> None:
    """Give the jobs started from this process (which inherit ``environ``) the allocator settings
    of :data:`ALLOCATOR_SETTINGS`, where ``environ`` does not set them already."""
    for key, value in ALLOCATOR_SETTINGS.items():
        environ.setdefault(key, value)


def setup(workflow, argv: list[str] | None = None) -> Workflow:
    """The :class:`Workflow` of this snakemake call (``argv``: its command line, default
    ``sys.argv``)."""
    from nqf.experiments import estimate_cache
    from nqf.pipeline.reproduction import config_identity

    argv = sys.argv if argv is None else argv
    tune_allocator()
    # the config check's and the jobs' estimates, kept for the next call (a dry run, a cluster
    # job's own snakemake): their meta-device counts cost ~4-5 s of CPU per call otherwise
    estimate_cache.enable()
    config = validated_config(workflow, argv)
    # which config this run is (its files, overrides and hash; whether it is the default or the
    # paper's): the reproduction page says so
    identity = config_identity(workflow.config_settings.configfiles, workflow.config_settings.config, config,
                               workflow.basedir)
    return Workflow(config, identity, origin_of(argv, workflow.basedir), jobs_run_here(workflow, argv))


def start_job_server(workflow, jobs_run_here: bool) -> str | None:
    """Start the job server (:mod:`nqf.pipeline.job_server`) for the jobs this snakemake process is
    about to run itself; its socket path, or None where the run uses none."""
    from nqf.pipeline import job_server

    return job_server.start(jobs_run_here and not workflow.remote_exec,
                            workflow.deployment_settings.deployment_method,
                            jobs=sum(1 for _ in workflow.dag.needrun_jobs()))


def end_scheduler_wakeups() -> int:
    """Cancel the wake-ups Snakemake's job scheduler left behind (the number cancelled).

    With a rate limit on job starts (``--max-jobs-per-timespan``, set in profiles/default), the
    scheduler arms a ``threading.Timer`` of one timespan after each of its rounds, to look again
    once the limit allows. Those timers are not daemons: the interpreter waits for every one still
    armed before it exits, up to a timespan after the run has ended. Called from ``onsuccess`` and
    ``onerror``, when no round is left to run. A Snakemake whose scheduler arms no such timers
    (another version) leaves nothing to cancel."""
    import threading

    cancelled = 0
    for thread in threading.enumerate():
        code = getattr(getattr(thread, "function", None), "__code__", None)
        if isinstance(thread, threading.Timer) and code is not None \
                and Path(code.co_filename).parts[-2:] == ("scheduling", "job_scheduler.py"):
            thread.cancel()
            cancelled += 1
    return cancelled


def on_error(snakemake_log) -> None:
    """A failed run ends with one sentence per failed job (nqf.pipeline.job_failures), on stderr."""
    from nqf.pipeline.job_failures import summary

    for line in summary(snakemake_log):
        print(line, file=sys.stderr)
