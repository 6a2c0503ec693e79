# Housekeeping before Snakemake plans the run (nqf.results_check, nqf.results_record,
# nqf.experiments.verify): a results/*.nc that is not a NetCDF file at all (emptied,
# zero-filled, a directory), a figure, table or report of the DAG cut short or not of its kind
# (nqf.results_check.output_problem), a results file whose bytes changed while its mtime stayed the one
# nqf recorded (cp -a, a restore, an edit that keeps mtimes), and a NetCDF file new to that
# record that fails its readers' checks are moved aside to <name>.unusable so that this run
# regenerates them; the temporary files of killed writes are removed. Only in the main snakemake
# process: a cluster job parses the Snakefile again and must not sweep the tree. A dry run (-n)
# sweeps too: such a file is garbage, and the plan then shows its regeneration.
#
# Snakemake does not remake a missing intermediate file whose products are present and newer
# than their other inputs, so each file moved aside is handed to Snakemake as forced (as with
# --forcerun FILE): this call remakes it, whichever target was asked for, and then everything
# made from it (nqf.results_record.force_regeneration).
import sys

from nqf import job_failures as _job_failures
from nqf import results_check as _results_check
from nqf import results_record as _results_record
from nqf.experiments import verify as _verify

if workflow.is_main_process:
    _before = set(_results_record.files("results"))
    _made_by = _verify.made_by(EXPERIMENTS, Path("results"))
    for _message in _results_check.scan("results"):
        print(_message, file=sys.stderr)
    _others = [(p, rule) for p, rule in _made_by.items() if p.suffix != ".nc"]
    for _message in _results_check.set_aside_outputs(_others):
        print(_message, file=sys.stderr)
    _tables = [(p, rule) for p, rule in _others if p.suffix == ".csv"]
    for _message in _results_check.set_aside_outputs(
        _tables, lambda p: _verify.table_problem(p, EXPERIMENTS, Path("results"))
    ):
        print(_message, file=sys.stderr)
    for _message in _results_record.set_aside_changed(_results_record.changed_behind_mtime("results")):
        print(_message, file=sys.stderr)
    _new = _results_record.new_to_record([p for p in _made_by if p.suffix == ".nc" and p.exists()])
    for _finding in _verify.verify_results(EXPERIMENTS, "results", only=_new, regenerated_by="this run"):
        if _finding.problem:
            print(f"nqf: {_finding.problem} {_finding.action}", file=sys.stderr)
    for _path in _results_check.remove_stale_temporaries("results"):
        print(f"nqf: removed {_path}, the temporary file of a write that was killed.", file=sys.stderr)
    _ours = {str(p) for p in _made_by}
    _results_record.force_regeneration(
        workflow, sorted(str(p) for p in _before - set(_results_record.files("results")) if str(p) in _ours)
    )
    _results_record.update("results")
    _hint = _results_check.lock_hint(".")
    if _hint and "--unlock" not in sys.argv:
        print(_hint, file=sys.stderr)


onsuccess:
    _results_record.update("results")
