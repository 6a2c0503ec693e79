"""Housekeeping of a results/ tree before Snakemake plans a run (called when the Snakefile is parsed).

Two faults no job would ever see:

* a results file that exists but is not a NetCDF file at all (zero-filled by a crash of the file
  system, emptied, replaced by a directory) and keeps its old mtime: Snakemake finds it up to
  date, so nothing reads it and nothing regenerates it. :func:`scan` reads the first 96 bytes of
  every ``*.nc`` (HDF5 or classic NetCDF signature, and the end-of-file address of the HDF5
  superblock, which a truncated copy keeps while it loses its end) and moves a file that lacks
  them, or is shorter than that address, aside to ``<name>.unusable``, so that this very run
  regenerates it. It reads 96 bytes a file (a full results/ tree of ~300 files takes
  milliseconds) and never opens a file any job is writing: nqf
  writes every file to a temporary name and renames it into place, so a ``*.nc`` is complete or
  absent.
* the hidden temporary file (``.<name>.<pid>@<host>.<random>.tmp``, see
  :func:`nqf.io.atomic.temporary_beside`) of a write that was killed. :func:`remove_stale_temporaries`
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

from nqf.io.atomic import HOST, TEMP_PATTERN

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
SIGNATURES = (HDF5_SIGNATURE, b"CDF\x01", b"CDF\x02", b"CDF\x05")
STALE_AFTER_S = 24 * 3600
# temporary files of nqf versions before the pid@host names: .<name>.<8 random>.tmp, the
# summary's .summary.csv.<8 random>, and the plain .<name>.tmp of a results file (.fw.nc.tmp)
_OLD_TEMP = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$|^\.summary\.csv\.[a-z0-9_]{8}$"
                       r"|^\..+\.(?:nc|csv|md|html|pdf|png)\.tmp$")


def _read_at(fh, offset: int, n: int = 96) -> bytes:
    fh.seek(offset)
    return fh.read(n)


def _signature_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a NetCDF file (None when it starts like one and is as long as its
    HDF5 superblock says; see :func:`_truncation_problem`). Reads 96 bytes, a few more where an
    HDF5 file starts with a user block."""
    if path.is_dir():
        return "is a directory"
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = _read_at(fh, 0)
            if not head:
                return "is empty"
            if head.startswith(SIGNATURES[1:]):
                return None  # classic NetCDF (nqf writes NETCDF4, i.e. HDF5; see nqf.io.netcdf.ENGINE)
            offset = 0
            # HDF5 looks for its superblock at 0, then after a user block at 512, 1024, 2048, ...
            while not head.startswith(HDF5_SIGNATURE) and offset < size:
                offset = 512 if offset == 0 else 2 * offset
                head = _read_at(fh, offset) if offset + len(HDF5_SIGNATURE) <= size else b""
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    if not head.startswith(HDF5_SIGNATURE):
        with open(path, "rb") as fh:
            first = fh.read(8)
        return "does not start with the HDF5/NetCDF signature" + (" (it is zero-filled)" if not first.strip(b"\0") else "")
    return _truncation_problem(head, size)


def hdf5_end_of_file(head: bytes) -> int | None:
    """The end-of-file address an HDF5 superblock at the start of ``head`` records (absolute: its
    base address added), or None when ``head`` holds no superblock this reads (an unknown version,
    too short, or an undefined address). Versions 0 and 1 keep it after the base and free-space
    addresses (bytes 24 / 28 on), versions 2 and 3 at byte 12 + 2 offsets."""
    if len(head) < 14 or not head.startswith(HDF5_SIGNATURE):
        return None
    version = head[8]
    if version in (0, 1):
        size = head[13]
        start = 24 if version == 0 else 28
    elif version in (2, 3):
        size = head[9]
        start = 12
    else:
        return None
    if size not in (2, 4, 8, 16) or len(head) < start + 3 * size:
        return None
    base, eof = (int.from_bytes(head[start + i * size:start + (i + 1) * size], "little") for i in (0, 2))
    undefined = (1 << (8 * size)) - 1
    if base == undefined or eof == undefined:
        return None
    return base + eof


def _truncation_problem(head: bytes, size: int) -> str | None:
    """Why an HDF5 file of ``size`` bytes whose superblock is ``head`` is shorter than that
    superblock says (None when it is not).

    The superblock's end-of-file address is where the file ended when it was closed, and the
    HDF5 library refuses a file that ends before it ('truncated file'). nqf writes a file to a
    temporary name and renames it into place once closed, so a shorter file is a copy cut off (a
    full disk, an interrupted copy or sync): it keeps the signature and its old mtime, and only
    this comparison tells."""
    eof = hdf5_end_of_file(head)
    if eof is not None and size < eof:
        return f"is truncated ({size:,} bytes of the {eof:,} its HDF5 superblock records)"
    return None


def scan(results: str | os.PathLike = "results", *, move: bool = True) -> list[str]:
    """Move every ``*.nc`` under ``results`` that is not a NetCDF file aside (``<name>.unusable``);
    one sentence per file moved (or that could not be moved, or, with ``move`` False, that a run
    would move)."""
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
            moved, message = move_aside(path, problem, move=move)
            messages.append(message)
            if moved and name in dirnames:
                dirnames.remove(name)
    return messages


def aside_path(path: str | os.PathLike) -> Path:
    """Where ``path`` goes when it is moved aside: ``<name>.unusable``. A file already there (an
    earlier copy moved aside) is kept: it is renamed to the first free ``<name>.<k>.unusable``
    first, so that moving aside never deletes anything."""
    path = Path(path)
    aside = path.with_name(path.name + ".unusable")
    if os.path.lexists(aside):
        k = 1
        while os.path.lexists(older := path.with_name(f"{path.name}.{k}.unusable")):
            k += 1
        os.replace(aside, older)
    return aside


def move_aside(path: str | os.PathLike, problem: str, *, move: bool = True) -> tuple[bool, str]:
    """Move ``path`` aside to ``<name>.unusable`` so that this run regenerates it; (moved, the
    sentence saying so, or that it could not be moved), ``problem`` completing "nqf: <path> ...".
    With ``move`` False (a call that runs no job: a dry run, a summary, a run another one
    holds the results for) nothing changes and the sentence says what a run would do."""
    path = Path(path)
    if not move:
        return False, (f"nqf: {path} {problem}: left in place (this call runs no job); a run moves it aside "
                       f"and regenerates it.")
    try:
        aside = aside_path(path)
        os.replace(path, aside)
    except OSError as err:
        return False, (f"nqf: {path} {problem} and could not be moved aside ({err.strerror}); delete it so "
                       f"that it is regenerated.")
    return True, f"nqf: {path} {problem}: moved aside to {aside.name}, this run regenerates it."


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
    return bool(_OLD_TEMP.match(path.name)) and age > STALE_AFTER_S and not _open_elsewhere(path)


def _open_elsewhere(path: Path) -> bool:
    """Whether a process of this user on this host holds ``path`` open (Linux: /proc/<pid>/fd);
    where that cannot be read, True (keep the file). A name without the writer's pid says nothing
    of its writer, so an old-form temporary is removed only when it is old and no process has it
    open. Called for old-form temporaries only (rare): it lists every process's open files."""
    proc = Path("/proc")
    try:
        target = path.resolve()
        pids = [d for d in proc.iterdir() if d.name.isdigit()]
    except OSError:
        return True
    if not pids:
        return True
    for d in pids:
        try:
            fds = list((d / "fd").iterdir())
        except OSError:  # gone, or another user's process (which cannot write our results)
            continue
        for fd in fds:
            try:
                if Path(os.readlink(fd)) == target:
                    return True
            except OSError:
                continue
    return False


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
    running one), pointing to docs/troubleshooting.md; else None."""
    locks = Path(workdir) / ".snakemake" / "locks"
    try:
        n = sum(1 for p in locks.iterdir() if p.is_file())
    except OSError:
        return None
    if not n:
        return None
    return (f"nqf: {locks} holds {n} lock file(s). If snakemake now stops with 'Directory cannot be locked' "
            f"and no other snakemake runs in this directory, a killed run left them: run `snakemake --unlock`, "
            f"then the same command again (Troubleshooting: docs/troubleshooting.md).")


# -- the other files of the DAG: figures, claims tables, summary, report ------------------------

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the IEND chunk every PNG ends with
HTML_ENDS = ("</html>", "</table>")  # nqf writes whole pages and one table fragment
TEXT_LIMIT = 64 * 2**20  # nqf's text outputs are kilobytes; a larger one is not one of them


def output_problem(path: str | os.PathLike) -> str | None:
    """Why the output file ``path`` cannot be what nqf wrote, from its form alone (None when it
    may be): a ``.nc`` as :func:`scan` sees it; a ``.png`` without its signature or its closing
    IEND chunk, a ``.pdf`` without ``%PDF-`` or a closing ``%%EOF``; a ``.csv`` that is not
    UTF-8, lacks its final newline, has no header or a row with another number of fields than
    its header; an ``.html`` that does not end in ``</html>`` or ``</table>``; a ``.md``
    that is empty or lacks its final newline. A file cut short (a full disk, an interrupted
    copy) fails these: each writer ends its file with them. Other suffixes: None."""
    import csv
    import io

    path = Path(path)
    suffix = path.suffix
    if suffix == ".nc":
        return _signature_problem(path)
    if suffix not in (".png", ".pdf", ".csv", ".html", ".md"):
        return None
    if path.is_dir():
        return "is a directory"
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return "is empty"
            head = fh.read(16)
            fh.seek(max(size - 1024, 0))
            tail = fh.read()
            if suffix in (".csv", ".html", ".md"):
                if size > TEXT_LIMIT:
                    return f"is {size:,} bytes, not a text file nqf writes"
                fh.seek(0)
                raw = fh.read()
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    zero = " (it is zero-filled)" if not head.strip(b"\0") else ""
    if suffix == ".png":
        if not head.startswith(PNG_SIGNATURE):
            return "does not start with the PNG signature" + zero
        return None if tail.endswith(PNG_END) else "is cut short (a PNG ends with its IEND chunk)"
    if suffix == ".pdf":
        if not head.startswith(b"%PDF-"):
            return "does not start with '%PDF-'" + zero
        return None if b"%%EOF" in tail[-64:] else "is cut short (a PDF ends with '%%EOF')"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"is not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})" + zero
    if suffix == ".html":
        return None if text.rstrip().endswith(HTML_ENDS) else "is cut short (it does not end in </html> or </table>)"
    if not text.endswith("\n"):
        return "is cut short (it lacks its final newline)"
    if suffix == ".md":
        return None
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        return f"is not a CSV table ({exc})"
    if not rows or not rows[0]:
        return "holds no table (no header)"
    bad = next((i for i, row in enumerate(rows[1:], start=2) if len(row) != len(rows[0])), None)
    if bad is not None:
        return f"is not one table: row {bad} has {len(rows[bad - 1])} fields, its header {len(rows[0])}"
    return None


def set_aside_outputs(paths_and_rules, check=None, *, move: bool = True) -> list[str]:
    """Check each existing (path, rule) with ``check(path)`` (a problem or None; default
    :func:`output_problem`); move each that fails aside to ``<name>.unusable``; one sentence per
    file moved (or that could not be moved)."""
    check = check or output_problem
    messages = []
    for path, rule in paths_and_rules:
        path = Path(path)
        if not os.path.lexists(path):
            continue
        problem = check(path)
        if problem is not None:
            messages.append(move_aside(path, f"{problem} (it is made by the rule '{rule}')", move=move)[1])
    return messages


# -- paths that block or leak the workflow's writes -----------------------------------------------

# the folders whose files Snakemake and the jobs open in place (not written to a temporary name
# and renamed): a link there to a file outside results/ would be written through
IN_PLACE = ("logs", "benchmarks")


def outward_links(results: str | os.PathLike = "results") -> list[tuple[Path, str]]:
    """Links under ``results/logs`` and ``results/benchmarks`` whose target lies outside the
    results folder (resolved), with that target: Snakemake and the jobs open those files in place,
    so they would write through the link. A results folder (or a subfolder) that is itself a link
    to storage elsewhere is the user's choice and is left alone; nqf's other writers replace a
    file by renaming, never through a link."""
    root = Path(results)
    if not root.is_dir():
        return []
    top = root.resolve()
    found = []
    for part in IN_PLACE:
        base = root / part
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            for name in [*filenames, *dirnames]:
                path = Path(dirpath) / name
                if not path.is_symlink():
                    continue
                target = Path(os.path.realpath(path))
                if not target.is_relative_to(top):
                    found.append((path, str(target)))
    return found


def remove_outward_links(links, *, move: bool = True) -> list[str]:
    """Remove each link of :func:`outward_links` (its target is not touched); one sentence each."""
    out = []
    for path, target in links:
        what = f"nqf: {path} is a link to {target}, outside results/, which this run would overwrite"
        if not move:
            out.append(f"{what}: left in place (this call runs no job); a run removes the link.")
            continue
        try:
            path.unlink()
            out.append(f"{what}: removed the link (its target is untouched).")
        except OSError as err:
            out.append(f"{what} and the link could not be removed ({err.strerror}); remove it by hand.")
    return out


def blocked_folders(paths, results: str | os.PathLike = "results") -> list[Path]:
    """Folders the workflow writes into (parents of ``paths``, under ``results``) that exist as
    something other than a folder (e.g. ``results/runs`` replaced by a file): every job writing
    there would fail with NotADirectoryError until it is moved."""
    root = Path(results)
    blocked = set()
    for p in paths:
        for parent in Path(p).parents:
            if parent == root or not parent.is_relative_to(root):
                break
            if os.path.lexists(parent) and not parent.is_dir():
                blocked.add(parent)
    return sorted(blocked)
