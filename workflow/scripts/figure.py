"""Rule figure: the experiment's figure as PDF and PNG (or a notice if runs diverged)."""
from pathlib import Path

import csv

from nqf.experiments import figure_of, merge_seed_blocks
from nqf.experiments.common import SUMMARY_COLUMNS, summary_rows
from nqf.experiments.divergence import divergence_figure, diverged_runs
from nqf.experiments.jobs import job
from nqf.netcdf import open_result

cfg, style = snakemake.params.cfg, snakemake.params.style  # noqa: F821
paths = [snakemake.output.pdf, snakemake.output.png]  # noqa: F821
with job(snakemake.log[0], "figure"):  # noqa: F821
    theory = open_result(snakemake.input.theory, made_by="theory")  # noqa: F821
    fit = open_result(snakemake.input.fit, made_by="fit")  # noqa: F821
    runs = merge_seed_blocks({Path(p).stem: open_result(p, made_by="train")  # noqa: F821
                              for p in snakemake.input.runs})  # noqa: F821
    if diverged_runs(runs):
        divergence_figure(runs, cfg, paths, font_size=style["font_size"], dpi=style["dpi"])
    else:
        figure_of(cfg)(theory, fit, runs, cfg, paths, font_size=style["font_size"], dpi=style["dpi"])
    with open(snakemake.output.claims, "w", newline="") as fh:  # noqa: F821
        writer = csv.DictWriter(fh, fieldnames=SUMMARY_COLUMNS)
        writer.writeheader()
        writer.writerows(summary_rows(snakemake.wildcards.exp, fit))  # noqa: F821
