"""The planning estimates of a snakemake call, kept on disk for the next call.

Planning a run (the config check, every job's ``mem_mb`` and ``runtime``) builds modules on
torch's meta device and counts a training step's work there (:mod:`nqf.experiments.machine`,
:mod:`nqf.experiments.work`). The first meta operation of a process loads torch's meta kernels and
torch._dynamo: ~4-5 s of CPU, paid by every snakemake call, dry runs and every cluster job's
own snakemake process included, for numbers that depend only on the experiment's config and the
code. So the Snakefile turns this cache on (:func:`enable`): each estimate is stored as one JSON
file named by a hash of what it depends on, which is its function, its arguments (the
experiment's config) and a fingerprint of the code (every source file of nqf, and the versions of
Python, torch and NumPy), so an edit of nqf or another torch computes it anew.

Off unless enabled (a library call computes every time); ``NQF_ESTIMATE_CACHE`` names another
folder, or ``off``. A file that cannot be read or written is recomputed or skipped: the cache
changes how fast a plan is made, never what it is (a value is stored only if JSON gives it back
exactly). Entries of other fingerprints are removed when a day old.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ENV = "NQF_ESTIMATE_CACHE"  # a folder, or "off"
STALE_SECONDS = 86400  # entries of another fingerprint older than this are removed
_state: dict[str, Any] = {"folder": None, "swept": False}


def default_folder() -> Path:
    """``$XDG_CACHE_HOME/nqf/estimates`` (``~/.cache/nqf/estimates``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nqf" / "estimates"


def enable(folder: str | os.PathLike | None = None) -> Path | None:
    """Keep estimates in ``folder`` (default: ``NQF_ESTIMATE_CACHE``, else :func:`default_folder`)
    from now on in this process; None (and off) where ``NQF_ESTIMATE_CACHE`` is ``off``."""
    setting = os.environ.get(ENV, "").strip()
    if folder is None and setting.lower() in ("off", "0", "no", "false"):
        _state["folder"] = None
        return None
    _state["folder"] = Path(folder or setting or default_folder())
    return _state["folder"]


def disable() -> None:
    """Compute every estimate again (the library's default)."""
    _state["folder"] = None


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """A hash of nqf's source files (``*.py``, ``*.yaml``) and of the Python, torch and NumPy
    versions: what the estimates depend on besides their arguments."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]  # the nqf package
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".yaml") and p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    for package in ("torch", "numpy"):
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "-"
        digest.update(f"{package}={version}\0".encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()[:24]


def cached(name: str, arguments: Any, compute: Callable[[], Any]) -> Any:
    """``compute()``, or the value stored for function ``name`` and ``arguments`` (JSON-serialisable)
    under this code's :func:`fingerprint` where the cache is enabled."""
    folder = _state["folder"]
    if folder is None:
        return compute()
    try:
        key = json.dumps([name, arguments], sort_keys=True, default=str)
    except (TypeError, ValueError):
        return compute()
    prefix = fingerprint()
    path = folder / f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"
    try:
        entry = json.loads(path.read_text())
        if entry.get("key") == key:
            return entry["value"]
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    value = compute()
    _store(path, key, value, prefix)
    return value


def _store(path: Path, key: str, value: Any, prefix: str) -> None:
    try:
        text = json.dumps({"key": key, "value": value})
        if json.loads(text)["value"] != value:  # only what JSON gives back exactly
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)  # readers see the whole file or none
    except (OSError, TypeError, ValueError):
        return
    if not _state["swept"]:
        _state["swept"] = True
        _sweep(path.parent, prefix)


def _sweep(folder: Path, prefix: str) -> None:
    """Remove the entries of other fingerprints that are more than a day old."""
    now = time.time()
    for entry in folder.glob("*.json"):
        try:
            if not entry.name.startswith(prefix) and now - entry.stat().st_mtime > STALE_SECONDS:
                entry.unlink()
        except OSError:
            pass
