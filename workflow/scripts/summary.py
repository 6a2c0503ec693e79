"""Rule summary: results/summary.csv, one row per checked claim."""
from nqf.experiments.common import summary_csv, summary_rows
from nqf.io.netcdf import write_text
from nqf.pipeline.jobs import job
from nqf.pipeline.validate import open_stage

experiments = snakemake.config["experiments"]  # noqa: F821
with job(snakemake.log[0], "summary") as log:  # noqa: F821
    rows = []
    for exp, path in zip(snakemake.params.experiments, snakemake.input):  # noqa: F821
        rows += summary_rows(exp, open_stage(path, "fit", experiments[exp], experiment=exp))
    write_text(snakemake.output[0], summary_csv(rows))  # noqa: F821
    # rows that hold by construction (nqf.experiments.common.CHECKS) and rows the run could not judge
    # (judged False: not reached, run too short) are written but not counted as checked
    built = sum(r["checks"] == "construction" for r in rows)
    unjudged = [r for r in rows if r["checks"] != "construction" and not r["judged"]]
    checked = [r for r in rows if r["checks"] != "construction" and r["judged"]]
    failed = [r for r in checked if not r["passed"]]
    log.info("%d claims checked, %d passed, %d failed (and %d rows that hold by construction, %d not judged at "
             "this run length)", len(checked), sum(r["passed"] for r in checked), len(failed), built, len(unjudged))
    for r in unjudged:
        log.warning("NOT JUDGED %s: %s (%s)", r["experiment"], r["quantity"], r["note"][:200])
    for r in failed:
        log.warning("FAILED %s: %s (measured %g, predicted %g, tolerance %g)", r["experiment"],
                    r["quantity"], r["measured"], r["predicted"], r["tolerance"])
