"""Rule data: nqf.pipeline.stages.data, with the rule's files and params."""
from nqf.pipeline.job_server import run_stage

run_stage("data", snakemake)  # noqa: F821 (injected by Snakemake)
