# Housekeeping before Snakemake plans the run (nqf.results_check): a results/*.nc that is not a
# NetCDF file at all (emptied, zero-filled, a directory) is moved aside to <name>.unusable so that
# this run regenerates it, and the temporary files of killed writes are removed. Only in the main
# snakemake process: a cluster job parses the Snakefile again and must not sweep the tree. A dry
# run (-n) sweeps too: such a file is garbage, and the plan then shows its regeneration.
import sys

from nqf import results_check as _results_check

if workflow.is_main_process:
    for _message in _results_check.scan("results"):
        print(_message, file=sys.stderr)
    for _path in _results_check.remove_stale_temporaries("results"):
        print(f"nqf: removed {_path}, the temporary file of a write that was killed.", file=sys.stderr)
    _hint = _results_check.lock_hint(".")
    if _hint and "--unlock" not in sys.argv:
        print(_hint, file=sys.stderr)
