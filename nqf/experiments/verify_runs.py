"""The fit's check that each run it reads was trained for the values its prediction is for.

A run file records what it was trained with: coordinates (eps, init_variance, seed), attributes
(architecture, optimizer, eps, lr, loss_convention) and the run's config (``config_json``). A
run whose recorded value differs from the one the fit compares it with (two runs that shared an
id, a file copied from another experiment, a stale file kept by an mtime-only rerun) would be
judged against the wrong prediction with exit 0; :func:`check_runs` refuses it instead, naming
the file and both values, and the workflow job moves the file aside so the next call retrains it.

Every kind's fit calls :func:`check_runs` with the values it predicts for, run by run. A value
the file does not record is not checked.
"""
from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import xarray as xr

from nqf.errors import ResultFileError

RTOL = 1e-12  # floats read back from NetCDF are exact; this only absorbs a float32 attribute
# expected name -> names a run file may record it under (coordinate or attribute), in order
ALIASES = {"loss": ("loss_convention", "loss"), "seeds": ("seed",)}
_MISSING = object()


def recorded(ds: xr.Dataset, name: str):
    """The value of ``name`` a run file records (coordinate, attribute, then its config), or _MISSING."""
    for key in ALIASES.get(name, (name,)):
        if key in ds.coords:
            return ds[key].values
        if key in ds.attrs:
            return ds.attrs[key]
    try:
        config = json.loads(ds.attrs.get("config_json", "{}"))
    except (TypeError, ValueError):
        return _MISSING
    return config.get(name, _MISSING) if isinstance(config, dict) else _MISSING


def same(have, want) -> bool:
    """Equal strings; numbers (or arrays of them, same shape) equal to a relative RTOL."""
    if isinstance(want, str) or isinstance(have, str):
        return str(np.asarray(have).item() if np.ndim(have) == 0 else have) == str(want)
    try:
        a, b = np.asarray(have, dtype=float), np.asarray(want, dtype=float)
    except (TypeError, ValueError):
        return False
    a, b = np.atleast_1d(a).ravel(), np.atleast_1d(b).ravel()
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=RTOL, atol=0.0))


def summary(value) -> str:
    """A short spelling of a recorded or expected value (arrays shown up to 6 entries)."""
    if isinstance(value, str):
        return repr(value)
    arr = np.asarray(value)
    if arr.ndim == 0:
        return repr(arr.item())
    items = arr.ravel().tolist()
    text = ", ".join(repr(v) for v in items[:6]) + (", ..." if len(items) > 6 else "")
    return f"[{text}] ({len(items)} values)" if len(items) > 6 else f"[{text}]"


def source_of(ds: xr.Dataset, run: str) -> tuple[str, str | None]:
    """How to name a run's file(s) in a message, and the file's path where it is one file."""
    path = ds.encoding.get("source")
    if path:
        return f"The run file {path}", str(path)
    blocks = ds.attrs.get("seed_blocks")
    return (f"Run {run!r} (seed blocks {blocks})" if blocks else f"Run {run!r}"), None


def check_runs(runs: Mapping[str, xr.Dataset], expected: Mapping[str, Mapping[str, object]]) -> None:
    """Raise :class:`ResultFileError` (the file named, unusable, so a workflow job moves it aside)
    for the first run whose recorded value of a name in ``expected[run]`` differs from the value
    the fit predicts for; runs absent from ``runs``, names a file does not record and expected
    values of None (a theory file that does not record the value) pass."""
    for run, values in expected.items():
        run = str(run)
        ds = runs.get(run)
        if ds is None:
            continue
        for name, want in values.items():
            have = recorded(ds, name)
            if want is None or have is _MISSING or same(have, want):
                continue
            what, path = source_of(ds, run)
            raise ResultFileError(
                f"{what} was trained with {name} {summary(have)}, but the fit compares it with the "
                f"prediction for {name} {summary(want)}: it is not the run of this experiment's "
                f"config (rule 'train', run {run!r}).", path, unusable=path is not None)
