"""Rule summary: nqf.pipeline.stages.summary, with the rule's files and params."""
from nqf.pipeline.stages import run_stage

run_stage("summary", snakemake)  # noqa: F821 (injected by Snakemake)
