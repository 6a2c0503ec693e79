"""Rule reproduction: nqf.pipeline.stages.reproduction, with the rule's files and params."""
from nqf.pipeline.job_server import run_stage

run_stage("reproduction", snakemake)  # noqa: F821 (injected by Snakemake)
