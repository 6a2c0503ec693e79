"""Rule summary: results/summary.csv, one row per checked claim."""
import csv
import os
import tempfile
from pathlib import Path

from nqf.experiments.common import SUMMARY_COLUMNS, summary_rows
from nqf.experiments.jobs import job
from nqf.netcdf import open_result

with job(snakemake.log[0], "summary") as log:  # noqa: F821
    rows = []
    for exp, path in zip(snakemake.params.experiments, snakemake.input):  # noqa: F821
        rows += summary_rows(exp, open_result(path, made_by="fit"))
    out = Path(snakemake.output[0])  # noqa: F821
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    with os.fdopen(fd, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=SUMMARY_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, out)
    failed = [r for r in rows if not r["passed"]]
    log.info("%d claims checked, %d passed, %d failed", len(rows), len(rows) - len(failed), len(failed))
    for r in failed:
        log.warning("FAILED %s: %s (measured %g, predicted %g, tolerance %g)", r["experiment"],
                    r["quantity"], r["measured"], r["predicted"], r["tolerance"])
