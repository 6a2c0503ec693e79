"""The one atomic write of nqf: every results file (NetCDF, text, figures) is written to a
temporary file in its destination folder and moved into place with ``os.replace``, so that a
killed job never leaves a file that looks finished.

The temporary file's name holds the writer's pid and host (:data:`TEMP_PATTERN`), so that the
next run can remove the leftover of a killed writer (nqf.pipeline.results_tree) without
touching one a running job still writes. A failure the user can fix (a full disk, a quota, no
permission) becomes :class:`nqf.errors.ResultWriteError` with one sentence
(nqf.io.write_failures).
"""
from __future__ import annotations

import os
import re
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

from nqf.io.write_failures import write_error

# This machine's name as it appears in temporary file names (characters a file name may hold).
HOST = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "localhost"
# ``.<name>.<pid>@<host>.<random>.tmp``: the temporary file of an atomic write (:func:`temporary_beside`).
TEMP_PATTERN = re.compile(r"^\.(?P<name>.+)\.(?P<pid>[0-9]+)@(?P<host>[A-Za-z0-9.-]+)\.[A-Za-z0-9_]+\.tmp$")


def current_umask() -> int:
    """The process's file-mode creation mask (read without changing it where Linux allows)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (the only portable way to read it)
    os.umask(mask)
    return mask


def temporary_beside(path: Path) -> tuple[int, str]:
    """A new hidden temporary file beside ``path`` whose name says who writes it,
    ``.<name>.<pid>@<host>.<random>.tmp`` (:data:`TEMP_PATTERN`).

    mkstemp creates the file with mode 0600 whatever the umask; it gets the mode an ordinary
    ``open`` would give (0666 minus the umask, 0644 under umask 022), so that the file renamed
    into place is readable by a collaborator as the umask intends (a shared results folder)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}@{HOST}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
    except OSError:
        pass  # a file system without modes (FAT, some network mounts) refuses chmod: the file stays 0600
    return fd, tmp


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> Path:
    """Write ``path`` atomically: ``write(tmp)`` writes the whole file to ``tmp``, a new empty
    temporary file beside ``path`` (:func:`temporary_beside`), which then replaces ``path``.

    On any failure the temporary file is removed; a failure the user can fix raises
    :class:`nqf.errors.ResultWriteError` (nqf.io.write_failures), any other is re-raised."""
    path, tmp = Path(path), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temporary_beside(path)
        os.close(fd)
        write(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.remove(tmp)
            except FileNotFoundError:
                pass
        error = write_error(path, exc)
        if error is not None:
            raise error from exc
        raise
    return path
