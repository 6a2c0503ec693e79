"""Rule figure: the experiment's figure as PDF and PNG (or a notice if runs diverged), and its
checked claims as CSV and as the HTML table the report shows."""
from pathlib import Path

from nqf.experiments import figure_of, merge_seed_blocks
from nqf.experiments.common import summary_csv, summary_rows
from nqf.experiments.divergence import diverged_runs, divergence_figure
from nqf.io.netcdf import write_text
from nqf.pipeline.jobs import job
from nqf.pipeline.report_html import claims_page
from nqf.pipeline.validate import open_stage

cfg, style = snakemake.params.cfg, snakemake.params.style  # noqa: F821
exp_cfg = snakemake.config["experiments"][snakemake.wildcards.exp]  # noqa: F821
paths = [snakemake.output.pdf, snakemake.output.png]  # noqa: F821
with job(snakemake.log[0], "figure"):  # noqa: F821
    theory = open_stage(snakemake.input.theory, "theory", exp_cfg, experiment=snakemake.wildcards.exp)  # noqa: F821
    fit = open_stage(snakemake.input.fit, "fit", exp_cfg, experiment=snakemake.wildcards.exp)  # noqa: F821
    runs = merge_seed_blocks({Path(p).stem: open_stage(p, "train", exp_cfg, experiment=snakemake.wildcards.exp)  # noqa: F821
                              for p in snakemake.input.runs})  # noqa: F821
    if diverged_runs(runs):
        divergence_figure(runs, cfg, paths, font_size=style["font_size"], dpi=style["dpi"])
    else:
        figure_of(cfg)(theory, fit, runs, cfg, paths, font_size=style["font_size"], dpi=style["dpi"])
    rows = summary_rows(snakemake.wildcards.exp, fit)  # noqa: F821
    write_text(snakemake.output.claims, summary_csv(rows))  # noqa: F821
    write_text(snakemake.output.claims_html, claims_page(snakemake.wildcards.exp, rows,  # noqa: F821
                                                         description=exp_cfg.get("description", "")))
