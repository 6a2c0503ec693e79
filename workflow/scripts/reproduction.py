"""Rule reproduction: nqf.pipeline.stages.reproduction, with the rule's files and params."""
from _checkout import ensure_nqf

ensure_nqf(snakemake.scriptdir)  # noqa: F821 (injected by Snakemake)

from nqf.pipeline.job_server import run_stage  # noqa: E402

run_stage("reproduction", snakemake)  # noqa: F821 (injected by Snakemake)
