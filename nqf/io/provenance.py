"""Provenance of a result: the command, the commits and the package versions behind it.

Kept apart from :mod:`nqf.io.netcdf` so that the Snakefile can set the workflow's provenance when
it is parsed without importing xarray.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
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


# Set by the Snakefile at parse time (inherited by every job, local or on a cluster node): the
# command line of the snakemake call and the commit of the workflow's own checkout.
COMMAND_VARIABLE = "NQF_COMMAND"
WORKFLOW_COMMIT_VARIABLE = "NQF_WORKFLOW_COMMIT"


def command_line() -> str:
    """The command that produced a file: the snakemake call of a workflow run (from
    :data:`COMMAND_VARIABLE`), else this Python process's own command line."""
    if os.environ.get(COMMAND_VARIABLE):
        return os.environ[COMMAND_VARIABLE]
    return shlex.join([os.path.basename(sys.executable), *sys.argv]) if sys.argv and sys.argv[0] else "python"


def provenance(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Global attributes recording what produced a file: ``git_commit`` is the commit of the
    workflow that ran (its checkout, from :data:`WORKFLOW_COMMIT_VARIABLE`) or, for a file
    written by the library outside the workflow, of the checkout nqf is imported from;
    ``nqf_git_commit`` is always the latter (they differ when the workflow runs with an nqf
    installed from elsewhere)."""
    from nqf import __version__

    library = git_commit()
    attrs: dict[str, Any] = {
        "nqf_version": __version__,
        "git_commit": os.environ.get(WORKFLOW_COMMIT_VARIABLE) or library,
        "nqf_git_commit": library,
        "config_json": json.dumps(config if config is not None else {}, sort_keys=True, default=str),
    }
    for name, ver in package_versions().items():
        attrs[f"version_{name}"] = ver
    return attrs
