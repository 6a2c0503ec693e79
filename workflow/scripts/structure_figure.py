"""Rule structure_figure: nqf.pipeline.stages.structure_figure, with the rule's files and params."""
from nqf.pipeline.job_server import run_stage

run_stage("structure_figure", snakemake)  # noqa: F821 (injected by Snakemake)
