"""Rule theory: nqf.pipeline.stages.theory, with the rule's files and params."""
from nqf.pipeline.job_server import run_stage

run_stage("theory", snakemake)  # noqa: F821 (injected by Snakemake)
