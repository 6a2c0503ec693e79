"""The on-disk layout of run files, safe to open with plain xarray.

An experiment's runs are files ``results/runs/<experiment>/<run>.nc`` whose axes need not agree
(steps, seeds, modes, eigenvalues per architecture). ``xr.open_mfdataset`` on such a folder
aligns every dimension that has an index by an outer join, which pads with NaN, or interleaves
runs along ``step``. So a run file is written in this layout (:func:`to_file`):

* ``run``, of length 1, is the first dimension of every variable and coordinate (text labels
  along an axis excepted: CF 6.1 gives a label variable one dimension besides its string
  length), so the files concatenate along ``run``, each run's labels with it. Its value, the run
  id, is text, stored as the CF label ``run_label``: ``run`` has no index in the file, so the
  plain ``xr.open_mfdataset(files)`` (combine by coordinates) refuses several files ("Could not
  find any dimension coordinates"), and ``xr.open_mfdataset(files, combine="nested",
  concat_dim="run")`` joins them in file order;
* every dimension ``d`` that had an index is renamed ``d_index`` and has none: its labels
  (``step``, ``time``, ``seed``, ...) are coordinates along it. Positional dimensions of equal
  size concatenate as they are (the labels stay each run's own, as coordinates over
  (``run``, ``d_index``)); of different sizes, xarray refuses them (AlignmentError: "conflicting
  dimension sizes"), since there is no index to pad by;
* a text coordinate ``run_variables_<hash>`` lists the run's data variables and their axes, and
  its name is their hash: runs whose variables differ (a variable some lack, which xarray would
  fill with NaN, or one with other axes, which it would broadcast) do not share it, and xarray
  refuses to join them ("coordinate ... not present in all datasets").

Every nqf reader (nqf.io.netcdf.open_result, nqf.open_runs) undoes it (:func:`from_file`): the
library and the workflow see the run as it was computed. The attribute ``nqf_run_layout`` marks
the layout and ``nqf_indexed_dimensions`` lists the renamed dimensions.
"""
from __future__ import annotations

import hashlib

import xarray as xr

LAYOUT = "run file v1: every variable along 'run' (length 1, the run id); each indexed dimension d stored as d_index"
SUFFIX = "_index"
SIGNATURE = "run_variables_"


def to_file(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` (a run with a scalar ``run`` coordinate, nqf.io.runs.with_run_coordinates) in the
    file layout of the module docstring."""
    if "run" not in ds.coords or ds["run"].ndim != 0:
        raise ValueError("a run file needs its run id as a scalar coordinate 'run' "
                         "(nqf.io.runs.with_run_coordinates).")
    indexed = [d for d in ds.dims if d in ds.indexes]
    clash = [d for d in indexed if d + SUFFIX in ds.dims or d + SUFFIX in ds.variables]
    if clash:
        raise ValueError(f"run file layout: dimension(s) {clash} cannot be renamed to '<name>{SUFFIX}', "
                         f"a name the run already uses.")
    out = ds.expand_dims("run").rename_dims({d: d + SUFFIX for d in indexed})
    run = out["run"].values
    out = out.assign_coords({name: out[name].expand_dims(run=run) for name in out.coords
                             if name != "run" and "run" not in out[name].dims and not _text_along_an_axis(out[name])})
    out = out.assign_coords(_signature(out))
    out.attrs.update(nqf_run_layout=LAYOUT, nqf_indexed_dimensions=" ".join(indexed))
    # no unlimited dimensions kept from a file this run was read from: they may be renamed now
    out.encoding = {k: v for k, v in out.encoding.items() if k != "unlimited_dims"}
    return out


def _signature(ds: xr.Dataset) -> dict:
    """The coordinate ``run_variables_<hash>`` (run): the data variables and their axes, named by
    their hash. xarray's concat fills a variable that some files lack with NaN and broadcasts one
    whose axes differ; a coordinate that some files lack it refuses ("not present in all
    datasets"), so runs whose variables differ do not join."""
    text = "; ".join(sorted(f"{name}({', '.join(map(str, var.dims))})" for name, var in ds.data_vars.items()))
    name = f"{SIGNATURE}{hashlib.sha1(text.encode()).hexdigest()[:8]}"
    return {name: ("run", [text] * ds.sizes["run"], {
        "long_name": "the run's data variables and their axes (files with other ones do not concatenate)"})}


def _text_along_an_axis(var: xr.DataArray) -> bool:
    """A text coordinate along an axis (optimizer names, readings) stays 1-D: CF 6.1 allows a
    label variable one dimension besides its string length."""
    return var.ndim > 0 and var.dtype.kind in "USOT"  # T: numpy StringDType (pandas >= 3 indexes)


def from_file(ds: xr.Dataset) -> xr.Dataset:
    """A run file's Dataset as the run was computed (the inverse of :func:`to_file`); any other
    Dataset unchanged."""
    if ds.attrs.get("nqf_run_layout") != LAYOUT:
        return ds
    out = ds.drop_vars([name for name in ds.coords if str(name).startswith(SIGNATURE)]).isel(run=0)
    for d in ds.attrs.get("nqf_indexed_dimensions", "").split():
        out = out.swap_dims({d + SUFFIX: d})
    out.attrs = {k: v for k, v in out.attrs.items() if k not in ("nqf_run_layout", "nqf_indexed_dimensions")}
    return out
