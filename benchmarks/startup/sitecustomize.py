"""Loaded by every Python process started with this folder on PYTHONPATH (benchmarks/
default_run_split.sh): at its exit, the process's own CPU seconds (not its children's) and its
command line are appended to $NQF_CPU_LOG. Forked children (the job server's jobs) record
nothing: the server's jobs.tsv has them."""
import atexit
import os
import resource
import sys

_LOG = os.environ.get("NQF_CPU_LOG")
_PID = os.getpid()


def _record():
    if _LOG and os.getpid() == _PID:
        own = resource.getrusage(resource.RUSAGE_SELF)
        with open(_LOG, "a") as f:
            f.write(f"{own.ru_utime + own.ru_stime:.3f}\t{' '.join(sys.argv)[:200]}\n")


if _LOG:
    atexit.register(_record)
    _exit = os._exit

    def _exit_recorded(code):  # the job server's children leave by os._exit: not recorded
        _record()
        _exit(code)

    os._exit = _exit_recorded
