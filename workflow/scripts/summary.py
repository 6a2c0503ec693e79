"""Rule summary: nqf.pipeline.stages.summary, with the rule's files and params."""
from nqf.pipeline.job_server import run_stage

run_stage("summary", snakemake)  # noqa: F821 (injected by Snakemake)
