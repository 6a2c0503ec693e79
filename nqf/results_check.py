"""Housekeeping of a results/ tree before Snakemake plans a run (called when the Snakefile is parsed).

Two faults no job would ever see:

* a results file that exists but is not a NetCDF file at all (zero-filled by a crash of the file
  system, emptied, replaced by a directory) and keeps its old mtime: Snakemake finds it up to
  date, so nothing reads it and nothing regenerates it. :func:`scan` reads the first 8 bytes of
  every ``*.nc`` (HDF5 or classic NetCDF signature) and moves a file that lacks them aside to
  ``<name>.unusable``, so that this very run regenerates it. It reads 8 bytes a file (a full
  results/ tree of ~150 files takes milliseconds) and never opens a file any job is writing: nqf
  writes every file to a temporary name and renames it into place, so a ``*.nc`` is complete or
  absent.
* the hidden temporary file (``.<name>.<pid>@<host>.<random>.tmp``, see
  :func:`nqf.netcdf.temporary_beside`) of a write that was killed. :func:`remove_stale_temporaries`
  removes one whose writer (pid) no longer runs on this host; one written on another host (a
  cluster node) or of the older unnamed form once it has not been modified for
  :data:`STALE_AFTER_S` (a write takes seconds and touches its file throughout). A temporary file
  of a live writer is never removed.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from nqf.netcdf import HOST, TEMP_PATTERN

SIGNATURES = (b"\x89HDF\r\n\x1a\n", b"CDF\x01", b"CDF\x02", b"CDF\x05")
STALE_AFTER_S = 24 * 3600
# temporary files of nqf versions before the pid@host names: .<name>.<8 random>.tmp, and the
# summary's .summary.csv.<8 random>
_OLD_TEMP = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$|^\.summary\.csv\.[a-z0-9_]{8}$")


def _signature_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a NetCDF file (None when it starts like one)."""
    if path.is_dir():
        return "is a directory"
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    if not head:
        return "is empty"
    if not head.startswith(SIGNATURES):
        return "does not start with the HDF5/NetCDF signature" + (" (it is zero-filled)" if not head.strip(b"\0") else "")
    return None


def scan(results: str | os.PathLike = "results") -> list[str]:
    """Move every ``*.nc`` under ``results`` that is not a NetCDF file aside (``<name>.unusable``);
    one sentence per file moved (or that could not be moved)."""
    root = Path(results)
    messages = []
    if not root.is_dir():
        return messages
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*filenames, *dirnames]:
            if not name.endswith(".nc") or name.startswith("."):
                continue
            path = Path(dirpath) / name
            if not os.path.lexists(path) or (path.is_symlink() and not path.exists()):
                continue  # a dangling link: Snakemake sees it missing and regenerates it
            problem = _signature_problem(path)
            if problem is None:
                continue
            aside = path.with_name(name + ".unusable")
            try:
                os.replace(path, aside)
            except OSError as err:
                messages.append(f"nqf: {path} {problem} and could not be moved aside ({err.strerror}); "
                                f"delete it so that it is regenerated.")
                continue
            if name in dirnames:
                dirnames.remove(name)
            messages.append(f"nqf: {path} {problem}: moved aside to {aside.name}, this run regenerates it.")
    return messages


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OverflowError:
        return False
    return True


def is_stale_temporary(path: Path, now: float | None = None) -> bool:
    """Whether ``path`` is the temporary file of a write that can no longer finish."""
    now = time.time() if now is None else now
    try:
        age = now - path.lstat().st_mtime
    except OSError:
        return False
    m = TEMP_PATTERN.match(path.name)
    if m is not None:
        if m["host"] == HOST:
            return not _pid_alive(int(m["pid"])) or age > STALE_AFTER_S
        return age > STALE_AFTER_S
    return bool(_OLD_TEMP.match(path.name)) and age > STALE_AFTER_S


def remove_stale_temporaries(results: str | os.PathLike = "results") -> list[Path]:
    """Remove the temporary files of killed writes under ``results``; the paths removed."""
    root = Path(results)
    removed = []
    if not root.is_dir():
        return removed
    now = time.time()
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            if name.startswith(".") and is_stale_temporary(path, now):
                try:
                    path.unlink()
                    removed.append(path)
                except OSError:
                    pass
    return removed


def lock_hint(workdir: str | os.PathLike = ".") -> str | None:
    """A sentence when Snakemake's lock files exist (left by a killed snakemake, or held by a
    running one), pointing to the README's troubleshooting section; else None."""
    locks = Path(workdir) / ".snakemake" / "locks"
    try:
        n = sum(1 for p in locks.iterdir() if p.is_file())
    except OSError:
        return None
    if not n:
        return None
    return (f"nqf: {locks} holds {n} lock file(s). If snakemake now stops with 'Directory cannot be locked' "
            f"and no other snakemake runs in this directory, a killed run left them: run `snakemake --unlock`, "
            f"then the same command again (README, 'Troubleshooting').")
