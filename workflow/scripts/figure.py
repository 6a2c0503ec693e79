"""Rule figure: nqf.pipeline.stages.figure, with the rule's files and params."""
from nqf.pipeline.job_server import run_stage

run_stage("figure", snakemake)  # noqa: F821 (injected by Snakemake)
