# The config and the functions every rule uses (nqf.pipeline.snakefile). The config is read and
# validated when the Snakefile is parsed, so a bad config stops snakemake before any job starts.
#
# Snakemake has already read every --configfile into `config` (keeping the last of two equal keys,
# evaluating a YTE template): nqf reads those files again itself, strictly
# (nqf.pipeline.config_files), with the --config overrides on top, validates that reading into a
# new dict (NQF.config) and uses only that; Snakemake's `config` is left as Snakemake read it. A
# config file is code to Snakemake (docs/security.md): run only configs you trust.
#
# Every rule's `context` param (NQF.context) hands its job the validated config, the config's
# identity and the provenance of this call (the snakemake command line and the commit of this
# workflow's checkout, which every file a job writes records); it is not a rerun trigger.
import sys

from nqf.pipeline import snakefile as nqf_snakefile
from nqf.pipeline.snakefile import report_params

NQF = nqf_snakefile.setup(workflow, sys.argv)
EXPERIMENTS = NQF.experiments


# {exp} matches only the configured experiment ids, so other figures (structure_matrices) and
# stale files never resolve to an experiment rule.
wildcard_constraints:
    exp=NQF.exp_pattern,
    run="[A-Za-z0-9][A-Za-z0-9_.-]*",
