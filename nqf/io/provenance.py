"""Provenance of a result: the command, the commits and the package versions behind it.

What ran a file is passed in, never read from the process's environment: a caller that knows
(the workflow: the snakemake call and its checkout, :class:`Origin`) hands it to the writer; a
file written without one records this Python process's command line and the checkout nqf is
imported from. Kept apart from :mod:`nqf.io.netcdf` so that the Snakefile can compute an
:class:`Origin` when it is parsed without importing xarray.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

_PACKAGES = ("numpy", "scipy", "torch", "xarray", "netCDF4", "matplotlib", "snakemake")

def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def package_versions() -> dict[str, str]:
    """Versions of the packages whose behaviour the numbers depend on."""
    return {name: _version(name) for name in _PACKAGES}


def git_commit(cwd: str | os.PathLike | None = None) -> str:
    """The commit of the checkout that produced a result ('unknown' outside git), '+dirty' if modified."""
    here = Path(cwd) if cwd is not None else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@dataclass(frozen=True)
class Origin:
    """What produced a file: ``command``, the command line that ran (a workflow's snakemake
    call), and ``commit``, the commit of the checkout it ran from (:func:`git_commit`)."""

    command: str
    commit: str


def command_line(origin: Origin | None = None) -> str:
    """The command that produced a file: ``origin.command`` where given, else this Python
    process's own command line."""
    if origin is not None:
        return origin.command
    return shlex.join([os.path.basename(sys.executable), *sys.argv]) if sys.argv and sys.argv[0] else "python"


def provenance(config: Mapping[str, Any] | None = None, origin: Origin | None = None) -> dict[str, Any]:
    """Global attributes recording what produced a file: ``git_commit`` is the commit of what ran
    (``origin.commit``: a workflow's checkout) or, without an ``origin``, of the checkout nqf is
    imported from; ``nqf_git_commit`` is always the latter (they differ when the workflow runs
    with an nqf installed from elsewhere)."""
    from nqf import __version__

    library = git_commit()
    attrs: dict[str, Any] = {
        "nqf_version": __version__,
        "git_commit": (origin.commit if origin is not None else "") or library,
        "nqf_git_commit": library,
        "config_json": json.dumps(config if config is not None else {}, sort_keys=True, default=str),
    }
    for name, ver in package_versions().items():
        attrs[f"version_{name}"] = ver
    return attrs
