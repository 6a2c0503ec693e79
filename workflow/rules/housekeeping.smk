# Housekeeping before Snakemake plans the run (nqf.pipeline.housekeeping.before_planning): a results/*.nc
# that is not a NetCDF file at all, a figure, table or report cut short or not of its kind, a
# results file whose bytes changed while its mtime stayed the one nqf recorded, a NetCDF file new
# to that record (by content: a copy made with its times is not new) that fails its readers'
# checks, a folder of results/ replaced by a file, and a link under results/logs or
# results/benchmarks to a file outside results/ are moved aside (links removed), so that this
# run regenerates them; the temporary files of killed writes are removed. Only in the main
# snakemake process (a cluster job parses the Snakefile again and must not sweep the tree), and
# only when this call will run jobs and holds nqf's lock on results/: a dry run, a summary, a
# run that another one holds the folder against and a run Snakemake's lock will refuse change
# nothing and only say what a run would do.
#
# Snakemake does not remake a missing intermediate file whose products are present and newer
# than their other inputs, so each file moved aside is handed to Snakemake as forced (as with
# --forcerun FILE): this call remakes it, whichever target was asked for, and then everything
# made from it (nqf.pipeline.results_record.force_regeneration).
import sys

from nqf.pipeline import housekeeping as _housekeeping
from nqf.pipeline import job_failures as _job_failures
from nqf.pipeline import results_check as _results_check
from nqf.pipeline import results_record as _results_record
from nqf.pipeline import verify as _verify

if workflow.is_main_process:
    for _message in _housekeeping.before_planning(workflow, EXPERIMENTS, sys.argv):
        print(_message, file=sys.stderr)
    _hint = _results_check.lock_hint(".")
    if _hint and "--unlock" not in sys.argv:
        print(_hint, file=sys.stderr)


onsuccess:
    _results_record.update("results")
