"""Rule fit: nqf.pipeline.stages.fit, with the rule's files and params."""
from nqf.pipeline.stages import run_stage

run_stage("fit", snakemake)  # noqa: F821 (injected by Snakemake)
