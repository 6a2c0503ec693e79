"""Rule reproduction: results/reproduction.md and .html, one section per paper figure, and the
verdicts of the report's front page (results/reproduction_verdicts.html)."""
import datetime

from nqf.io.netcdf import write_text
from nqf.pipeline.jobs import job
from nqf.pipeline.report_html import verdicts_fragment
from nqf.pipeline.reproduction import collect, html_page, markdown
from nqf.pipeline.validate import open_stage

params = snakemake.params.experiments  # noqa: F821
with job(snakemake.log[0], "reproduction") as log:  # noqa: F821
    experiments = snakemake.config["experiments"]  # noqa: F821
    fits = {exp: open_stage(path, "fit", experiments[exp], experiment=exp) for exp, path in zip(sorted(params), snakemake.input)}  # noqa: F821
    header = (f"Written {datetime.date.today().isoformat()} from `results/fits/*.nc` "
              f"({len(fits)} experiments) by the workflow's reproduction rule.")
    collected = collect(fits, params)
    # the files and overrides of the run that computed these verdicts; params.config (its
    # experiments' hash) is what reruns this rule
    identity = {**snakemake.config["config_identity"], **snakemake.params.config}  # noqa: F821
    text = markdown(collected, header=header, config=identity)
    write_text(snakemake.output.md, text)  # noqa: F821
    write_text(snakemake.output.html, html_page(text))  # noqa: F821
    write_text(snakemake.output.verdicts, verdicts_fragment(collected, config=identity))  # noqa: F821
    log.info("wrote %s, %s and %s", snakemake.output.md, snakemake.output.html,  # noqa: F821
             snakemake.output.verdicts)  # noqa: F821
