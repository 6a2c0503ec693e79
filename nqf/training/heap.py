"""A training process's resident memory kept within a budget when its allocator keeps freed memory.

The workflow starts its jobs with glibc settings under which freed memory stays in the process
(nqf.pipeline.snakefile.ALLOCATOR_SETTINGS): a step's large tensors then reuse the heap instead of
being mapped, faulted in and unmapped again every step. The price is fragmentation: the resident
size creeps above what is live. Measured here (default real_data CNN, 200 steps, 50 records, one
thread): glibc's defaults 784 MB flat, 17.3 s of system time; the workflow's settings 720 MB in the
first quarter of the run, 809 MB by its end, 0.5 s; handing the free pages back after every record
701 MB flat, 9.9 s. On config/paper.yaml the real_data CNN reached 5.7 GB against its 3.75 GB
request (3.05 GB after 8 steps under any setting).

So a process given a budget (the workflow gives each job its ``mem_mb``, nqf.pipeline.stages)
looks at its resident size after each record and at most once a second (:func:`keep_within_budget`,
called by the training loop), and only above :data:`FRACTION` of the budget asks glibc to hand
every free page of the heap back (``malloc_trim(0)``): within the budget a job runs as fast as the
settings allow, and above it pays the page faults once. Without a budget (the library used on its
own), on systems without /proc or without glibc, nothing happens.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

FRACTION = 0.85  # of the budget: the resident size above which the heap's free pages go back
_budget_mb: float | None = None
_malloc_trim = None  # glibc's malloc_trim, looked up on first use (False: there is none)


def set_budget(mb: float | None) -> None:
    """The memory budget of this process in MB (None: no budget)."""
    global _budget_mb
    if mb is not None and not mb > 0:
        raise ValueError(f"a memory budget must be a positive number of MB; got {mb!r}")
    _budget_mb = None if mb is None else float(mb)


def budget() -> float | None:
    return _budget_mb


def resident_mb() -> float | None:
    """This process's resident set size in MB now (Linux's /proc/self/statm), or None elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            pages = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def trim() -> bool:
    """Hand the heap's free pages back to the system (glibc's malloc_trim(0)); whether it could."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to hand back this way
            _malloc_trim = False
    if _malloc_trim is False:
        return False
    _malloc_trim(0)
    return True


def keep_within_budget() -> bool:
    """Above FRACTION of the budget, trim the heap; whether it trimmed."""
    if _budget_mb is None:
        return False
    rss = resident_mb()
    if rss is None or rss <= FRACTION * _budget_mb:
        return False
    return trim()
