"""Rule fit: nqf.pipeline.stages.fit, with the rule's files and params."""
from nqf.pipeline.job_server import run_stage

run_stage("fit", snakemake)  # noqa: F821 (injected by Snakemake)
