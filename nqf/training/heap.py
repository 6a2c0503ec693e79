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
called by the training loop), and only above :data:`FRACTION` of the budget maps its large blocks
on their own from then on (:func:`map_large_blocks`, as glibc's defaults do) and asks glibc to hand
every free page of the heap back (``malloc_trim(0)``): within the budget a job runs as fast as the
settings allow, and above it pays page faults for its large tensors only. Handing pages back alone
did not hold the paper-size real_data CNN (3.78 GB against a 3.755 GB budget); with the switch, its
400 steps peaked at 2.46 GB under a 2.49 GB budget, at 1.55 times the CPU time (page faults). So the
switch is made only where the budget is hard (a cluster's limit, ``set_budget(mb, hard=True)``). Without a budget (the library used on its
own), on systems without /proc or without glibc, nothing happens.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

FRACTION = 0.85  # of the budget: the resident size above which the heap's free pages go back
# Blocks from this size up are mapped on their own once a process has reached FRACTION of its
# budget (glibc's mallopt M_MMAP_THRESHOLD; 32 MiB is the most its own adaptive threshold reaches).
MMAP_FALLBACK_BYTES = 32 * 2 ** 20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
_budget_mb: float | None = None
_glibc = None  # glibc (malloc_trim, mallopt), looked up on first use (False: the C library is another)
_mapping_large = False  # whether this process has switched its large blocks to their own mappings
_hard = False  # whether the budget is a limit that ends the process (set_budget)


def set_budget(mb: float | None, *, hard: bool = False) -> None:
    """The memory budget of this process in MB (None: no budget). ``hard``: a limit that ends the
    process when passed (a cluster's memory request): only then does a job above FRACTION of it
    map its large blocks on their own, which costs page faults on every step (the paper-size
    real_data CNN, 400 steps: 814 s user and 301 s kernel time for a peak of 2.46 GB, against
    699 s and 20 s for 3.78 GB with trimming only); without it the heap's free pages are handed back, nothing more."""
    global _budget_mb, _hard
    if mb is not None and not mb > 0:
        raise ValueError(f"a memory budget must be a positive number of MB; got {mb!r}")
    _budget_mb = None if mb is None else float(mb)
    _hard = bool(hard)


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


def _libc():
    """glibc (None where the C library is another: musl, macOS)."""
    global _glibc
    if _glibc is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _glibc = libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else False
        except OSError:
            _glibc = False
    return _glibc or None


def trim() -> bool:
    """Hand the heap's free pages back to the system (glibc's malloc_trim(0)); whether it could."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def map_large_blocks() -> bool:
    """From now on, give blocks of MMAP_FALLBACK_BYTES and more their own mappings, handed back
    when freed (glibc's mallopt): a heap that keeps every freed block fragments under a step's
    large tensors of changing sizes, and its resident size grows to 2-3 times what is live (the
    paper-size real_data CNN: 2.5-2.9 GB after 10 steps against 1.4 GB so). Whether it could."""
    global _mapping_large
    libc = _libc()
    if libc is None or not libc.mallopt(_M_MMAP_THRESHOLD, MMAP_FALLBACK_BYTES):
        return False
    _mapping_large = True
    return True


def keep_within_budget() -> bool:
    """Above FRACTION of the budget, switch large blocks to their own mappings where the budget is
    hard (once: the process then pays their page faults, which the workflow's allocator settings
    avoid while it has room) and trim the heap; whether it trimmed."""
    if _budget_mb is None:
        return False
    rss = resident_mb()
    if rss is None or rss <= FRACTION * _budget_mb:
        return False
    if _hard and not _mapping_large:
        map_large_blocks()
    return trim()
