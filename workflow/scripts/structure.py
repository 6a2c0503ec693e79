"""Rule structure: nqf.pipeline.stages.structure, with the rule's files and params."""
from nqf.pipeline.job_server import run_stage

run_stage("structure", snakemake)  # noqa: F821 (injected by Snakemake)
