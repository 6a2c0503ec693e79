"""Why a file could not be written, in one sentence that names the cause and the fix.

Every write of a workflow job (NetCDF in nqf.io.netcdf, text, figures in nqf.plotting, the job's
log) turns a failure the user can fix into :class:`ResultWriteError`, which the job reports as
nqf's message (nqf.pipeline.jobs) instead of a traceback:

* no space: the disk is full (ENOSPC; also any error at all on a file system with (almost) no
  space left, since some file systems report a full disk as another error, e.g. EACCES), the
  user's quota is used up (EDQUOT), or a file size limit was reached (EFBIG: ``ulimit -f``, or
  the largest file the file system holds); netCDF reports each of these as 'NetCDF: HDF error';
* no permission (EACCES, EPERM) on the folder, or a read-only file system (EROFS).

Only the standard library is used: :mod:`nqf.pipeline.job_failures` calls :func:`disk_full` at the end of
a failed run.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from nqf.errors import ResultWriteError

# A file system with less free than this is full for a job whose message could not even reach
# its log (nqf.pipeline.job_failures): by then the job's temporary file is gone, and Snakemake has removed
# the outputs it finished before the failure.
FULL_BYTES = 64 * 2**20
_EDQUOT = getattr(errno, "EDQUOT", None)
_SPACE = {errno.ENOSPC, errno.EFBIG} | ({_EDQUOT} if _EDQUOT else set())
_DENIED = {errno.EACCES, errno.EPERM}
_AFTER = "rerun the same snakemake command (the files written so far are complete and are kept)"


def size_text(n: float) -> str:
    """12345 -> '12.3 kB' (decimal units)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def _existing(path: os.PathLike | str) -> Path:
    """``path`` or its nearest folder that exists (a file not yet written has none of its own)."""
    p = Path(os.path.abspath(os.fspath(path)))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_space(path: os.PathLike | str) -> dict | None:
    """{'bytes', 'size', 'inodes'} free to this user and in all on the file system holding
    ``path`` (inodes None where it counts none, e.g. btrfs); None where that cannot be read."""
    try:
        st = os.statvfs(_existing(path))
    except (OSError, AttributeError, ValueError):
        return None
    return {"bytes": st.f_bavail * st.f_frsize, "size": st.f_blocks * st.f_frsize,
            "inodes": st.f_favail if st.f_files else None}


def disk_full(path: os.PathLike | str, *, margin: bool = False) -> str | None:
    """'12 kB free' or 'no free inodes' where the file system holding ``path`` is full, else None.
    Full means less than a block (4 kB) or no inode left to this user; with ``margin``, less
    than FULL_BYTES (for a judgement made after the failed job's files were removed)."""
    free = free_space(path)
    if free is None:
        return None
    if free["inodes"] == 0:
        return "no free inodes: too many files"
    limit = FULL_BYTES if margin else 4096
    if free["bytes"] < limit:
        return f"{size_text(free['bytes'])} free"
    return None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{exc.strerror or os.strerror(exc.errno)}, {name}"
    return str(exc).strip() or type(exc).__name__


def _file_size_limit() -> int | None:
    """The file size limit of this process in bytes (``ulimit -f``), None when unlimited."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def write_failure(path: os.PathLike | str, exc: BaseException) -> str | None:
    """The sentence for a failed write of ``path`` the user can fix (see the module), or None
    where ``exc`` says nothing of space or permission (a bug)."""
    if not isinstance(exc, Exception):
        return None  # KeyboardInterrupt, SystemExit
    code = exc.errno if isinstance(exc, OSError) else None
    hdf = isinstance(exc, RuntimeError) and "HDF error" in str(exc)
    if code is None and not hdf:
        return None
    path, reason = Path(path), _reason(exc)
    full = disk_full(path)
    if code == errno.ENOSPC or full:
        fix = "delete files on it" if full and full.startswith("no free inodes") else "free space on it"
        detail = f"; {full} there" if full else ""
        return f"Could not write {path}: the disk holding it is full ({reason}{detail}); {fix} and {_AFTER}."
    if _EDQUOT is not None and code == _EDQUOT:
        return (f"Could not write {path}: your disk quota there is used up ({reason}); free space within your "
                f"quota (`quota -s` shows it) and {_AFTER}.")
    limit = _file_size_limit()
    if code == errno.EFBIG or (hdf and limit is not None):
        if limit is not None:
            return (f"Could not write {path}: it would pass this process's file size limit of {size_text(limit)} "
                    f"({reason}; `ulimit -f`); raise the limit (`ulimit -f unlimited`) and {_AFTER}.")
        return (f"Could not write {path}: it would be larger than the largest file its file system holds "
                f"({reason}); put results/ on another file system (e.g. a link to a folder there) and {_AFTER}.")
    if hdf:
        return (f"Could not write {path}: the netCDF library failed ({reason}), as it does when your disk quota "
                f"is used up (the disk itself has space left); free space within your quota and {_AFTER}; if "
                f"it fails again with space to spare, please report it.")
    if code in _DENIED:
        folder = _existing(path.parent)
        return (f"Could not write {path}: permission denied ({reason}) in {folder}; make that folder writable "
                f"for you (`ls -ld {folder}` shows its owner and mode) and {_AFTER}.")
    if code == errno.EROFS:
        return (f"Could not write {path}: its file system is read-only ({reason}); run in a writable folder "
                f"(snakemake --directory) or make it writable, and {_AFTER}.")
    return None


def write_error(path: os.PathLike | str, exc: BaseException) -> ResultWriteError | None:
    """:class:`ResultWriteError` for a failed write of ``path`` the user can fix, else None."""
    message = write_failure(path, exc)
    return ResultWriteError(path, message) if message else None


def out_of_space(exc: BaseException) -> bool:
    """Whether a failed write failed for want of space (a full disk or quota, a file size limit)."""
    if isinstance(exc, OSError):
        return exc.errno in _SPACE
    return isinstance(exc, RuntimeError) and "HDF error" in str(exc)
