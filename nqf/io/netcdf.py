"""NetCDF input/output with the project's contract.

Every file nqf writes is a self-describing xarray Dataset: CF attributes on variables
(``units``, ``long_name``), global ``Conventions``/``title``/``source``/``history`` and
provenance (nqf version, git commit, the config that produced it, package versions).
Writes are atomic (nqf.io.atomic): a killed job never leaves a file that looks finished.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from nqf.errors import ResultFileError
from nqf.io.atomic import atomic_write
from nqf.io.cf_names import describe_variables
from nqf.io.provenance import Origin, command_line, git_commit, package_versions, provenance  # noqa: F401
from nqf.io.run_layout import from_file
from nqf.io.write_failures import out_of_space, write_error  # noqa: F401

ENGINE = "netcdf4"


def dataset(name: str, ds) -> xr.Dataset:
    """Refuse anything but an xarray.Dataset (a dict or a path would fail on its first attribute)."""
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"{name} must be an xarray.Dataset; got a {type(ds).__name__}.")
    return ds


def _attr_value(value: Any) -> Any:
    """Coerce an attribute to a type netCDF can store (str, number, or 1-D numeric array)."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (str, int, float, np.integer, np.floating)):
        return value
    if isinstance(value, (list, tuple, np.ndarray)) and len(value) and all(
            isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            for v in value):
        return np.asarray(value)
    return json.dumps(value, default=str, sort_keys=True)


def _clean_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _attr_value(v) for k, v in attrs.items() if v is not None}


# A text-valued dimension coordinate (e.g. ``architecture``) is written as the label variable
# ``<dim>_label`` with this attribute naming its dimension: CF's coordinate variables are numeric.
LABEL_OF = "nqf_label_of"


def _plain_text(ds: xr.Dataset) -> xr.Dataset:
    """Variable-width text (numpy's StringDType, kind ``T``, which pandas >= 3 gives an Index of
    strings) as fixed-width numpy text, so that it is written as CF character arrays as well."""
    for name in [n for n, v in ds.variables.items() if v.dtype.kind == "T"]:
        var = ds[name]
        text = np.array([str(v) for v in var.values.ravel()]).reshape(var.shape)
        put = ds.assign_coords if name in ds.coords else ds.assign
        ds = put({name: (var.dims, text, var.attrs)})
    return ds


def _labels_apart(ds: xr.Dataset) -> xr.Dataset:
    """Text-valued dimension coordinates moved to ``<dim>_label`` (CF auxiliary coordinates)."""
    text = [dim for dim in ds.dims if dim in ds.coords and ds[dim].dtype.kind in "USO"]
    for dim in text:
        var = ds[dim]
        ds = ds.drop_vars(dim).assign_coords({f"{dim}_label": (dim, var.values, {**var.attrs, LABEL_OF: dim})})
    return ds


def restore_labels(ds: xr.Dataset) -> xr.Dataset:
    """The inverse of the writer's label split: each ``<dim>_label`` becomes the index of ``dim``
    again, so that ``ds.sel(architecture="mlp")`` works as on the Dataset that was written."""
    dataset("ds", ds)
    for name in [n for n, v in ds.variables.items() if LABEL_OF in v.attrs]:
        var = ds[name]
        dim = str(var.attrs[LABEL_OF])
        attrs = {k: v for k, v in var.attrs.items() if k != LABEL_OF}
        ds = ds.drop_vars(name).assign_coords({dim: (dim, var.values, attrs)})
    return ds


def write_dataset(ds: xr.Dataset, path: str | os.PathLike, *, title: str,
                  config: Mapping[str, Any] | None = None, source: str | None = None,
                  origin: Origin | None = None) -> Path:
    """Write ``ds`` to ``path`` atomically, compressed, with CF and provenance attributes.

    ``title`` describes the file; ``config`` is the configuration that produced it (stored as
    JSON in ``config_json``); ``origin`` is what ran it (the workflow passes its snakemake call
    and checkout; without one, this process's command line and nqf's checkout are recorded:
    :mod:`nqf.io.provenance`). Boolean variables are stored as int8 with ``flag_values``.
    """
    dataset("ds", ds)
    if not isinstance(title, str):
        raise TypeError(f"title must be a string describing the file; got a {type(title).__name__}.")
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping (the configuration that produced the file) or None; "
                        f"got a {type(config).__name__}.")
    if source is not None and not isinstance(source, str):
        raise TypeError(f"source must be a string or None; got a {type(source).__name__}.")
    path = Path(path)
    ds = _plain_text(ds.copy())
    for name in list(ds.variables):
        var = ds[name]
        if var.dtype == bool:
            ds[name] = var.astype(np.int8)
            ds[name].attrs.update(var.attrs)
            ds[name].attrs.update(flag_values=np.array([0, 1], dtype=np.int8),
                                  flag_meanings="false true")
        ds[name].attrs = _clean_attrs(ds[name].attrs)  # a new dict: the caller's Dataset keeps its own
    describe_variables(ds)  # long_name and units on every variable (nqf.io.cf_names)
    ds = _labels_apart(ds)
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    made_by = provenance(config, origin)
    ds.attrs = _clean_attrs({
        **ds.attrs,
        "Conventions": "CF-1.8",
        "title": title,
        "source": source or "nqf: Neural Quadratic Forms pipeline (arXiv 2608.13335)",
        **made_by,
        "history": f"{now}: {command_line(origin)} (written by nqf {made_by['nqf_version']})",
    })
    encoding = {name: {"zlib": True, "complevel": 4}
                for name, var in ds.data_vars.items() if var.dtype.kind in "fiu"}
    # text as CF character arrays (NC_CHAR, readable by every netCDF tool and CF checker); the
    # character dimension's name ends in its length, as xarray reads a trailing number (a name
    # such as f0_strlen would read as length 0, and xarray would warn and rename it)
    encoding.update({name: {"dtype": "S1", "char_dim_name": f"{name}_strlen{_encoded_length(var)}"}
                     for name, var in ds.variables.items() if var.dtype.kind in "USO"})
    return atomic_write(path, lambda tmp: ds.to_netcdf(tmp, engine=ENGINE, encoding=encoding))


def _encoded_length(var) -> int:
    """The longest value of a text variable in UTF-8 bytes (at least 1): its character dimension."""
    values = np.asarray(var.values).ravel()
    return max([1, *(len(v if isinstance(v, bytes) else str(v).encode("utf-8")) for v in values)])


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write a text file atomically (temporary file in the same folder, then os.replace)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str (written as UTF-8); got a {type(text).__name__}.")
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def open_result(path: str | os.PathLike, *, made_by: str | None = None,
                require: tuple[str, ...] = ()) -> xr.Dataset:
    """Open an nqf NetCDF file fully into memory, with a clear error if it is unusable.

    ``made_by`` names the workflow rule that produces the file, for the error message;
    ``require`` lists variables the caller needs.
    """
    if isinstance(require, str) or not all(isinstance(v, str) for v in require):
        raise TypeError(f"require must be a tuple of variable names, e.g. ('loss',); got {require!r:.60}.")
    path = Path(path)
    # in a workflow job, nqf.pipeline.jobs adds what happens to the file (moved aside) or what to do
    hint = f" (it is made by the rule '{made_by}')" if made_by else " (delete it and regenerate it)"
    if not path.exists():
        raise ResultFileError(f"The results file {path} does not exist{hint}.", path)
    try:
        with xr.open_dataset(path, engine=ENGINE) as ds:
            ds = from_file(restore_labels(ds.load()))  # a run file as computed (nqf.io.run_layout)
    except Exception as exc:  # netCDF4 raises OSError, ValueError, RuntimeError for bad files
        raise ResultFileError(f"The results file {path} cannot be read as NetCDF "
                              f"({type(exc).__name__}: {exc}){hint}.", path, unusable=True) from exc
    if "nqf_version" not in ds.attrs:
        raise ResultFileError(f"The file {path} was not written by nqf (no 'nqf_version' "
                              f"attribute){hint}.", path, unusable=True)
    missing = [v for v in require if v not in ds.variables]
    if missing:
        raise ResultFileError(f"The file {path} lacks the variable(s) {', '.join(missing)}{hint}.",
                              path, unusable=True)
    return ds


def config_of(ds: xr.Dataset) -> dict[str, Any]:
    """The configuration stored in a result's ``config_json`` attribute."""
    dataset("ds", ds)
    return json.loads(ds.attrs.get("config_json", "{}"))
