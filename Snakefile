# nqf: the reproduction of "Neural Quadratic Forms" (arXiv 2608.13335) as a Snakemake DAG.
#   snakemake --cores all                              default config (a laptop, minutes)
#   snakemake --cores all --configfile config/paper.yaml    paper sizes
# The config is validated against workflow/schemas/config.schema.yaml before any job starts.

# Without --configfile, config/config.yaml is used; a --configfile replaces it entirely (it is
# not merged with the default, so a config lists exactly the experiments it runs), and
# --config key=value overrides apply on top of either.

include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/structure.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/theory.smk"
include: "workflow/rules/fit.smk"
include: "workflow/rules/figures.smk"


rule all:
    input:
        expand("results/figures/{exp}.{ext}", exp=EXPERIMENTS, ext=("pdf", "png")),
        "results/figures/structure_matrices.pdf",
        "results/summary.csv",
    default_target: True
