# Config validation and the helpers every rule uses. Validation runs when the Snakefile is
# parsed, so a bad config stops snakemake before any job starts.
#
# Snakemake has already read every --configfile into `config` (keeping the last of two equal keys,
# evaluating a YTE template): nqf reads those files again itself, strictly (nqf.pipeline.config_files), with
# the --config overrides on top, and uses only that reading. A config file is code to Snakemake
# (README, "Security"): run only configs you trust.
import os
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from nqf import experiments as nqf_experiments
from nqf.io import provenance as nqf_provenance
from nqf.pipeline import reproduction as nqf_reproduction
from nqf.pipeline import report_html as nqf_report_html
from nqf.pipeline.config import load_workflow_config, validate_config
from nqf.errors import ConfigError
from nqf.experiments.machine import cluster_executor

DEFAULT_CONFIG = Path(workflow.basedir) / "config" / "config.yaml"

# Provenance of every file a job writes (nqf.io.provenance): the command of this snakemake
# call and the commit of this workflow's checkout. Set once, by the first parse: jobs inherit
# the environment (a cluster job re-parses on its node and keeps the submitting call's values).
os.environ.setdefault(nqf_provenance.COMMAND_VARIABLE, shlex.join(["snakemake", *sys.argv[1:]]))
os.environ.setdefault(nqf_provenance.WORKFLOW_COMMIT_VARIABLE, nqf_provenance.git_commit(workflow.basedir))

try:
    _raw = load_workflow_config(
        workflow.config_settings.configfiles,  # --configfile, in order
        workflow.config_settings.config,  # --config key=value, parsed
        DEFAULT_CONFIG,
    )
    _validated = validate_config(_raw)
    # A cluster job re-parses this file on its node, where it runs: the device and memory checks
    # hold there; the main process checks them only when its jobs run on this machine (a login
    # node without a GPU may submit device: cuda to GPU nodes).
    nqf_experiments.check_config(
        _validated, jobs_run_here=workflow.remote_exec or cluster_executor(sys.argv, workflow.basedir) is None
    )
except ConfigError as _exc:
    raise WorkflowError(f"Invalid configuration: {_exc}") from None
config.clear()
config.update(_validated)
EXPERIMENTS = config["experiments"]
# which config this run is (its files, overrides and hash; whether it is the default or the
# paper's): the reproduction page says so
CONFIG_IDENTITY = nqf_reproduction.config_identity(
    workflow.config_settings.configfiles, workflow.config_settings.config, _validated, workflow.basedir
)
# the part of it the verdicts depend on (the reproduction rule's params, so its rerun trigger):
# a new config file that changes only figure style keeps the page, whose verdicts are unchanged
VERDICT_IDENTITY = {key: CONFIG_IDENTITY[key] for key in ("sha256", "matches")}
config["config_identity"] = CONFIG_IDENTITY


# {exp} matches only the configured experiment ids, so other figures (structure_matrices) and
# stale files never resolve to an experiment rule.
wildcard_constraints:
    exp="|".join(sorted(EXPERIMENTS, key=len, reverse=True)),
    run="[A-Za-z0-9][A-Za-z0-9_.-]*",


def experiment(wildcards):
    return EXPERIMENTS[wildcards.exp]


def stage_params(stage):
    """The config keys a stage reads, as a rule param: changing them reruns that stage."""
    return lambda wildcards: nqf_experiments.stage_config(experiment(wildcards), stage)


def report_params(value):
    """A param of a rule whose outputs are in Snakemake's report, which writes params unescaped
    into a <script> element: the same value with a repr free of '<'
    (nqf.pipeline.report_html.report_param), as a function (Snakemake rebuilds a plain list
    param, and would lose that repr). ``value`` is the value or a function of the wildcards."""
    if callable(value):
        return lambda wildcards: nqf_report_html.report_param(value(wildcards))
    return lambda wildcards: nqf_report_html.report_param(value)


def run_params(wildcards):
    """The config one training run reads (narrowed to that run where the kind allows)."""
    return nqf_experiments.run_config(experiment(wildcards), wildcards.run)


def run_files(wildcards):
    runs = nqf_experiments.run_ids(experiment(wildcards))
    return expand("results/runs/{exp}/{run}.nc", exp=wildcards.exp, run=runs)
