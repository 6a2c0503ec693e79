"""One sentence per failed job at the end of a failed Snakemake run (the Snakefile's ``onerror``).

Snakemake reports a failed job as a block (``Error in rule train:`` with its jobid, input,
output and log) and, for a job killed by a signal (out of memory, a cluster time limit, ``kill``),
says nothing about why. :func:`summary` reads those blocks from Snakemake's log, reads each job's
own log (written by :func:`nqf.pipeline.jobs.job`) and says, per job, whether it stopped with
nqf's message (a bad input, a full disk, divergence), with an unexpected error (a bug), or
ended without finishing; and that the finished jobs are kept, so the same command resumes.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

_BLOCK = re.compile(r"^Error in rule (?P<rule>[A-Za-z_][\w]*):\s*$")
_FIELD = re.compile(r"^\s+(?P<key>output|log): (?P<value>.*)$")
_RAISED = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception)) in file .*, line \d+:\s*$")
_LOG_NOTE = " (check log file(s) for error details)"
_ERROR_LINE = re.compile(r" nqf\.job\.\S+ ERROR: (?P<message>.*)$")
TAIL_BYTES = 64 * 1024  # of a job's log: its last messages
_SIGNAL = re.compile(r"died with <Signals\.(?P<name>SIG\w+)")
_STATUS = re.compile(r"non-zero exit status (?P<code>-?\d+)")
_WHY_KILLED = {"SIGKILL": "out of memory, a cluster time limit, or kill -9",
               "SIGTERM": "a cluster time limit, a cancelled job, or kill",
               "SIGSEGV": "a crash in a compiled library", "SIGBUS": "a crash, or a file changed while mapped",
               "SIGXCPU": "a CPU time limit", "SIGINT": "an interrupt"}
_SPACE_WORDS = ("No space left", "File too large", "Disk quota exceeded", "Errno 27", "Errno 28", "Errno 122")
SNAKEMAKE_LOG_BYTES = 8 * 2**20  # of Snakemake's log: the failed jobs are reported near its end


def failed_jobs(text: str) -> list[dict]:
    """The failed jobs of a Snakemake log: ``{'rule', 'output': [...], 'log': [...], 'error'}``
    each, in the order reported, each job once. ``error`` is the exception Snakemake reported for
    its own step of the job just before the block (``OSError ...: [Errno 27] File too large``
    where it could not write the job's script), or ''."""
    jobs, current, error = [], None, ""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        raised = _RAISED.match(line)
        if raised and i + 1 < len(lines):
            error = f"{raised['type']}: {lines[i + 1].strip()}"
            continue
        start = _BLOCK.match(line)
        if start:
            current = {"rule": start["rule"], "output": [], "log": [], "error": error}
            jobs.append(current)
            error = ""
            continue
        if current is None:
            continue
        field = _FIELD.match(line)
        if field:
            value = field["value"].removesuffix(_LOG_NOTE)
            current[field["key"]] = [v.strip() for v in value.split(",") if v.strip()]
        elif line.strip() and not line.startswith((" ", "\t")):
            current = None
    seen, unique = set(), []
    for job in jobs:
        key = (job["rule"], tuple(job["output"]))
        if key not in seen:
            seen.add(key)
            unique.append(job)
    return unique


def _tail(path: str, n: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(size - n, 0))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def explain(job: dict) -> str:
    """The sentence for one failed job."""
    what = f"the job of rule '{job['rule']}'" + (f" for {', '.join(job['output'][:3])}" if job["output"] else "")
    if len(job["output"]) > 3:
        what += f" and {len(job['output']) - 3} more"
    logs = job["log"]
    text = "\n".join(_tail(p) for p in logs)
    where = f" (its log: {', '.join(logs)})" if logs else ""
    errors = [m["message"] for m in map(_ERROR_LINE.search, text.splitlines()) if m]
    _, raised_here, traceback = text.rpartition("Traceback (most recent call last)")
    if raised_here and any(w in traceback for w in _SPACE_WORDS):
        raised = [ln.strip() for ln in traceback.splitlines() if ln.strip()][-1][:160]
        return (f"nqf: {what} stopped because a write failed for want of space ({raised}){where}: the disk or "
                f"your quota is full, or a file size limit (ulimit -f) was reached; free space and rerun the same "
                f"snakemake command (the finished jobs are kept).")
    if raised_here:
        return (f"nqf: {what} failed with an unexpected error, a bug in nqf{where}: please report it with "
                f"that log.")
    if errors:
        message = errors[-1]
        message = message if len(message) <= 200 else message[:197] + "..."
        return f"nqf: {what} stopped: {message}"
    error = job.get("error", "")
    killed = _SIGNAL.search(error)
    resume = "its unfinished output was removed, the finished jobs are kept, and rerunning the same command redoes it."
    if killed:
        why = _WHY_KILLED.get(killed["name"], "a signal")
        return f"nqf: {what} was killed by {killed['name']} ({why}){where}; {resume}"
    if any(w in error for w in _SPACE_WORDS):
        return (f"nqf: Could not write a file of {what} in Snakemake's own step of it ({error[:160]}): "
                f"the disk or your quota is probably full, or a file size limit (ulimit -f) was reached; "
                f"free space and rerun the same snakemake command (the files written so far are complete "
                f"and are kept).")
    # a job whose log could not even take nqf's message, on a file system that is still full
    full = _full_disk([*logs, *job["output"]])
    if full:
        unlogged = f": not even nqf's message reached its log ({', '.join(logs)})" if logs else ""
        return (f"nqf: {what} stopped because the disk holding {full[0]} is full ({full[1]} there){unlogged}; "
                f"free space on it and rerun the same snakemake command (the finished jobs are kept).")
    status = _STATUS.search(error)
    if status:
        return (f"nqf: {what} exited with status {status['code']} without nqf's message{where}; {resume}")
    if error:
        return (f"nqf: {what} failed in Snakemake's own step of it ({error[:200]}){where}; the finished "
                f"jobs are kept: fix that and rerun the same command.")
    return (f"nqf: {what} ended without finishing and without an error in its log{where}: it was "
            f"killed (out of memory, a cluster time limit, or a kill signal); its unfinished output was "
            f"removed, the finished jobs are kept, and rerunning the same command redoes it.")


def _full_disk(paths) -> tuple[str, str] | None:
    """(folder, '12 kB free') of the first of ``paths`` (a job's log and outputs) whose file system
    is full (nqf.io.write_failures.disk_full, with its margin: the job's unfinished files are gone)."""
    from nqf.io.write_failures import disk_full

    for path in paths:
        full = disk_full(path, margin=True)
        if full:
            return str(Path(path).parent) + "/", full
    return None


def summary(snakemake_log) -> list[str]:
    """One sentence per failed job in Snakemake's log file ``snakemake_log`` (a path, or the
    list of paths Snakemake hands ``onerror``; none when missing or naming no failed job)."""
    if isinstance(snakemake_log, (list, tuple)):
        return [line for one in snakemake_log for line in summary(one)]
    if not snakemake_log or not Path(snakemake_log).is_file():
        return []
    return [explain(job) for job in failed_jobs(_tail(str(snakemake_log), SNAKEMAKE_LOG_BYTES))]
