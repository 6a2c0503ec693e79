"""Rule structure: nqf.pipeline.stages.structure, with the rule's files and params."""
from nqf.pipeline.stages import run_stage

run_stage("structure", snakemake)  # noqa: F821 (injected by Snakemake)
