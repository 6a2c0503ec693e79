"""Rule theory: nqf.pipeline.stages.theory, with the rule's files and params."""
from nqf.pipeline.stages import run_stage

run_stage("theory", snakemake)  # noqa: F821 (injected by Snakemake)
