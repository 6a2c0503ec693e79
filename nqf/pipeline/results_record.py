"""A record of the results files nqf has seen, to catch files changed behind their mtime.

Snakemake decides what to rerun from mtimes alone. A results file whose bytes changed while its
mtime did not (copied over with ``cp -a`` or ``rsync -t``, restored from a backup, edited by a
tool that keeps mtimes, hit by a storage fault) is taken as up to date, and a run file holding
NaN or another run's data would be used without a word. Changing a file's bytes always sets its
ctime, which no tool can set back, so:

* after a successful run (the Snakefile's ``onsuccess``), and before each run, :func:`update`
  writes ``.snakemake/nqf_results.json``: size, mtime and ctime (ns) and SHA-256 of every file
  under ``results/`` (logs, benchmarks, hidden and ``.unusable`` files aside). Only files whose
  size or times changed since the last record are hashed again.
* before Snakemake plans a run, :func:`changed_behind_mtime` lists each recorded file whose
  ctime or size changed while its mtime stayed the recorded one and whose SHA-256 differs: its
  content changed outside the workflow. :func:`set_aside_changed` moves each aside
  (``<name>.unusable``), so that this run regenerates it and everything made from it; NetCDF
  files new to the record are checked by their stage's readers' checks
  (:mod:`nqf.pipeline.verify`) in the Snakefile.

A file whose mtime changed is left to Snakemake: it is newer than what was made from it, so that
reruns, and the jobs' checks on read see its content.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from nqf.errors import ResultWriteError
from nqf.io.atomic import atomic_write

RECORD = Path(".snakemake") / "nqf_results.json"
SKIP_PARTS = ("logs", "benchmarks")
FORMAT = 1


def _files(results: Path):
    if not results.is_dir():
        return
    seen = set()
    # links to folders are followed (a runs/ kept on scratch storage is still results), each real
    # folder once
    for dirpath, dirnames, filenames in os.walk(results, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = [d for d in dirnames if not d.startswith(".")
                       and not (Path(dirpath) == results and d in SKIP_PARTS)]
        for name in filenames:
            if not name.startswith(".") and not name.endswith(".unusable"):
                yield Path(dirpath) / name


def files(results: str | os.PathLike = "results") -> list[Path]:
    """Every results file the record covers (logs, benchmarks, hidden and ``.unusable`` files aside)."""
    return list(_files(Path(results)))


def force_regeneration(workflow, paths) -> list[str]:
    """Have Snakemake remake ``paths`` (files moved aside before planning) in this call, as
    ``--forcerun PATH`` would, and so everything made from them: Snakemake itself does not remake
    a missing intermediate file whose products are present. Only paths some rule makes are
    forced; the forced paths are returned.

    Snakemake sets its DAG settings after the Snakefile is read, so the paths are added when it
    prepares the DAG (a wrapper of ``Workflow._prepare_dag``). A Snakemake without that method
    gets a sentence on stderr naming the command that remakes them.
    """
    import sys

    wanted = [str(p) for p in paths]
    if not wanted:
        return []
    prepare = getattr(workflow, "_prepare_dag", None)
    if prepare is None:
        print("nqf: to remake the files moved aside in this call, run it again with --forcerun "
              + " ".join(wanted), file=sys.stderr)
        return []

    def prepare_forcing(*args, **kwargs):
        made = [p for p in wanted if any(rule.is_producer(p) for rule in workflow.rules)]
        settings = workflow.dag_settings
        if made and settings is not None:
            settings.forcerun = frozenset(set(settings.forcerun) | set(made))
        return prepare(*args, **kwargs)

    workflow._prepare_dag = prepare_forcing
    return wanted


def sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def load(record: str | os.PathLike = RECORD) -> dict[str, list]:
    """The record: relative path -> [size, mtime_ns, ctime_ns, sha256]; {} when absent or unreadable."""
    try:
        data = json.loads(Path(record).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        return {}
    return data["files"]


def update(results: str | os.PathLike = "results", record: str | os.PathLike = RECORD) -> int:
    """Record every results file (hashing only those whose size or times changed); returns the
    number of files hashed. Written atomically; a record that cannot be written is skipped (the
    next call starts a new one)."""
    results, record = Path(results), Path(record)
    old = load(record)
    files, hashed = {}, 0
    for path in _files(results):
        st = _stat(path)
        if st is None:
            continue
        key = str(path)
        prev = old.get(key)
        if prev and tuple(prev[:3]) == st:
            files[key] = prev
            continue
        try:
            files[key] = [*st, sha256(path)]
        except OSError:
            continue
        hashed += 1
    text = json.dumps({"format": FORMAT, "files": files})
    try:
        atomic_write(record, lambda tmp: Path(tmp).write_text(text))
    except (OSError, ResultWriteError):
        pass
    return hashed


def changed_behind_mtime(results: str | os.PathLike = "results", record: str | os.PathLike = RECORD) -> list[Path]:
    """Recorded files whose bytes changed while their mtime stayed the recorded one."""
    out = []
    for key, (size, mtime_ns, ctime_ns, digest) in load(record).items():
        path = Path(key)
        st = _stat(path)
        if st is None or not path.is_relative_to(Path(results)):
            continue
        if st == (size, mtime_ns, ctime_ns) or st[1] != mtime_ns:
            continue  # untouched, or newer (Snakemake reruns what is made from it)
        try:
            if st[0] != size or sha256(path) != digest:
                out.append(path)
        except OSError:
            continue
    return out


def new_to_record(paths, record: str | os.PathLike = RECORD) -> list[Path]:
    """Those of ``paths`` the record does not hold: absent from it, or whose size, mtime or ctime
    differ from it, except a file whose size and mtime are the recorded ones and whose bytes
    hash to the recorded SHA-256 (a copy of the tree made with its times, ``cp -a`` or
    ``rsync -a``: the same content, a new ctime)."""
    old = load(record)
    out = []
    for p in paths:
        p = Path(p)
        prev, st = old.get(str(p)), _stat(p)
        if prev is not None and tuple(prev[:3]) == st:
            continue
        if prev is not None and st is not None and tuple(prev[:2]) == st[:2]:
            try:
                if sha256(p) == prev[3]:
                    continue
            except OSError:
                pass
        out.append(p)
    return out


def set_aside_changed(paths, *, move: bool = True) -> list[str]:
    """Move each file aside to ``<name>.unusable`` (with ``move`` False: say that a run would);
    one sentence per file."""
    from nqf.pipeline.results_tree import move_aside

    return [move_aside(path, "changed since nqf recorded it while its mtime stayed the same (copied with its "
                             "times, restored, or edited outside the workflow)", move=move)[1] for path in paths]
