"""Rule train: nqf.pipeline.stages.train, with the rule's files and params."""
from nqf.pipeline.stages import run_stage

run_stage("train", snakemake)  # noqa: F821 (injected by Snakemake)
