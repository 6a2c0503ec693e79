"""Rule train: nqf.pipeline.stages.train, with the rule's files and params."""
from nqf.pipeline.job_server import run_stage

run_stage("train", snakemake)  # noqa: F821 (injected by Snakemake)
