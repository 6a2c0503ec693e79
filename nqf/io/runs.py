"""Run files as one labelled dataset: the run parameters as coordinates, runs side by side.

Each training run of an experiment is one NetCDF file, ``results/runs/<experiment>/<run>.nc``.
The workflow writes every run's parameters (run id, experiment, eps, optimizer, architecture,
init, seed block, ...) into it as scalar coordinates (:func:`with_run_coordinates`), so that
the files concatenate along a new ``run`` dimension with each parameter as a coordinate of it.

Runs of one experiment record the same number of steps but not always the same steps (a run at
a smaller eps is longer): their ``step`` axes would align by an outer join into NaN padding.
:func:`by_record` relabels that axis by the record index (``record``; ``step`` and ``time`` stay
as coordinates along it), which is what :func:`open_runs` does when the steps differ, and what
``xr.open_mfdataset(..., preprocess=nqf.io.runs.by_record)`` does by hand (docs/results.md).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import xarray as xr

from nqf.io import run_layout
from nqf.io.netcdf import dataset, open_result, restore_labels

# An experiment id (a key under experiments: in the config) names files and folders: checked with
# fullmatch, which has no trailing-newline hole.
EXPERIMENT_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")

# Run attributes promoted to scalar coordinates (when the file has no dimension of that name),
# in this order; a run that lacks one simply does not carry it.
RUN_PARAMETERS = ("run", "experiment", "experiment_kind", "architecture", "model", "optimizer", "eps", "init",
                  "lr", "loss_convention", "seed_block_of")
# How open_runs / xr.concat join run files: nothing aligned by an outer join, no silent defaults.
CONCAT = dict(data_vars="all", coords="different", compat="equals", join="exact", combine_attrs="drop_conflicts")


def with_run_coordinates(ds: xr.Dataset, experiment: str | None = None) -> xr.Dataset:
    """``ds`` (a run file's Dataset) with its run parameters as scalar coordinates: each attribute
    of :data:`RUN_PARAMETERS` it holds (``experiment`` given here), unless a dimension has that
    name (an eps sweep inside one run keeps ``eps`` as its dimension). The attributes stay."""
    dataset("ds", ds)
    attrs = dict(ds.attrs)
    if experiment is not None:
        attrs["experiment"] = experiment
    coords = {}
    for name in RUN_PARAMETERS:
        if name in attrs and name not in ds.dims and name not in ds.data_vars:
            value = attrs[name]
            coords[name] = value.item() if isinstance(value, np.generic) else value
    out = ds.assign_coords(coords)
    if experiment is not None:
        out.attrs["experiment"] = experiment
    return out


def by_record(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with its ``step`` dimension relabelled ``record`` (0, 1, ...): ``step`` and every
    coordinate along it (``time``, ``tau``) become coordinates along ``record``. Runs that record
    the same number of steps then concatenate without NaN, whatever their steps. A run file as
    stored (nqf.io.run_layout) is first read as computed."""
    dataset("ds", ds)
    ds = run_layout.from_file(restore_labels(ds))  # a run file as xr.open_mfdataset's preprocess sees it
    if "step" not in ds.dims:
        return ds
    return ds.assign_coords(record=("step", np.arange(ds.sizes["step"]))).swap_dims(step="record")


def _join_seed_blocks(datasets: list[xr.Dataset], names: list[str]) -> tuple[list[xr.Dataset], list[str]]:
    """Files that each hold a block of one run's seeds (``seeds_per_job``) joined along ``seed``
    into that run, in seed order; other files as they are."""
    blocks: dict[str, list[xr.Dataset]] = {}
    out, out_names = [], []
    for ds, name in zip(datasets, names):
        base = ds.attrs.get("seed_block_of")
        if base is None:
            out.append(ds)
            out_names.append(name)
            continue
        if base not in blocks:
            blocks[base] = []
            out.append(base)  # placeholder, keeps the order of first appearance
            out_names.append(str(base))
        blocks[base].append(ds.drop_vars(["run", "seed_block_of"], errors="ignore"))
    for i, item in enumerate(out):
        if isinstance(item, str):
            joined = xr.concat(blocks[item], dim="seed", **CONCAT).sortby("seed")
            joined.attrs.pop("seed_block_of", None)
            joined.attrs["run"] = item
            out[i] = joined.assign_coords(run=item)
    return out, out_names


def _matches(ds: xr.Dataset, where: Mapping) -> bool:
    for key, want in where.items():
        if key not in ds.coords and key not in ds.attrs:
            return False
        have = ds[key].values.item() if key in ds.coords and ds[key].ndim == 0 else ds.attrs.get(key)
        if isinstance(want, (list, tuple, set)):
            if have not in want:
                return False
        elif have != want:
            return False
    return True


def _shape_problem(datasets: list[xr.Dataset], names: list[str]) -> str | None:
    """A dimension (other than the concatenation's) whose size differs between runs, described."""
    for dim in sorted({d for ds in datasets for d in ds.dims} - {"record", "step"}):
        sizes = {name: ds.sizes.get(dim) for name, ds in zip(names, datasets)}
        if len(set(sizes.values())) > 1:
            shown = ", ".join(f"{n}: {s if s is not None else 'absent'}" for n, s in list(sizes.items())[:6])
            return f"dimension '{dim}' differs between runs ({shown})"
    for dim in sorted({d for ds in datasets for d in ds.dims if d in ds.coords} - {"record", "step", "run"}):
        values = {name: ds[dim].values for name, ds in zip(names, datasets)}
        first = next(iter(values.values()))
        if any(not np.array_equal(v, first) for v in values.values()):
            shown = ", ".join(f"{n}: {_brief(v)}" for n, v in list(values.items())[:6])
            return f"the values of coordinate '{dim}' differ between runs ({shown})"
    return None


def _brief(values: np.ndarray) -> str:
    """A coordinate's values for a message: the first few."""
    shown = ", ".join(f"{v:g}" if isinstance(v, (float, np.floating)) else str(v) for v in values[:4])
    return f"[{shown}{', ...' if len(values) > 4 else ''}]"


def _separating(datasets: list[xr.Dataset]) -> str:
    """A run parameter whose values split the runs (for the error's suggestion)."""
    for name in ("architecture", "model", "optimizer", "eps"):
        values = {str(ds.coords[name].values) for ds in datasets if name in ds.coords and ds[name].ndim == 0}
        if len(values) > 1:
            return f"{name}={sorted(values)[0]!r}"
    runs = [str(ds.coords["run"].values) for ds in datasets if "run" in ds.coords]
    return f"run={runs[0]!r}" if runs else "run=[...]"


def open_runs(experiment: str, results: str | os.PathLike = "results", **where) -> xr.Dataset:
    """Every run file of ``experiment`` under ``results/runs/`` as one Dataset along ``run``.

    ``where`` keeps the runs whose run parameters have the given values (a value or a list), e.g.
    ``open_runs("collapse", architecture="rectangular")``, ``open_runs("teacher_student",
    architecture="mlp")``. Each parameter becomes a coordinate along
    ``run``; ``step`` stays the dimension when every run recorded the same steps, else the axis
    is ``record`` with ``step`` and ``time`` along (``run``, ``record``). Global attributes that
    all runs share are kept. Runs whose other dimensions differ in size (architectures with
    different numbers of modes or parameters) cannot share one Dataset without padding: that
    is refused, naming the dimension and a ``where`` that separates them.
    """
    if not isinstance(experiment, str) or not EXPERIMENT_ID.fullmatch(experiment):
        raise ValueError(f"experiment must be an experiment id (a letter, then letters, digits and '_'; no "
                         f"path separators); got {experiment!r:.60}.")
    folder = Path(results) / "runs" / experiment
    paths = sorted(folder.glob("*.nc"))
    if not paths:
        raise FileNotFoundError(f"No run files in {folder}: run the workflow for experiment '{experiment}' first "
                                f"(snakemake --cores all), or pass results= the folder holding runs/.")
    datasets, names = [], []
    for path in paths:
        ds = with_run_coordinates(open_result(path, made_by="train"), experiment)  # a bad file is named
        if "run" not in ds.coords:
            ds = ds.assign_coords(run=path.stem)
        if _matches(ds, where):
            datasets.append(ds)
            names.append(path.stem)
    if not datasets:
        raise ValueError(f"No run of experiment '{experiment}' has {where} (runs: {', '.join(p.stem for p in paths)}).")
    datasets, names = _join_seed_blocks(datasets, names)
    problem = _shape_problem(datasets, names)
    if problem:
        raise ValueError(f"The runs of experiment '{experiment}' cannot form one Dataset without padding: {problem}; "
                         f"select runs of one shape, e.g. open_runs({experiment!r}, {_separating(datasets)}).")
    steps = [ds["step"].values for ds in datasets if "step" in ds.dims]
    if steps and any(len(s) != len(steps[0]) or not np.array_equal(s, steps[0]) for s in steps):
        datasets = [by_record(ds) for ds in datasets]
        lengths = {name: ds.sizes["record"] for name, ds in zip(names, datasets) if "record" in ds.dims}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{n}: {k}" for n, k in list(lengths.items())[:6])
            raise ValueError(f"The runs of experiment '{experiment}' record different numbers of steps ({shown}), "
                             f"so they cannot form one Dataset without padding: select runs with where=, e.g. "
                             f"open_runs({experiment!r}, {_separating(datasets)}).")
    missing = sorted({v for ds in datasets for v in ds.data_vars} - set.intersection(*(set(ds.data_vars)
                                                                                      for ds in datasets)))
    if missing:
        raise ValueError(f"The runs of experiment '{experiment}' do not all hold the variable(s) {', '.join(missing)}: "
                         f"select runs of one kind with where=, e.g. open_runs({experiment!r}, {_separating(datasets)}).")
    return xr.concat(datasets, dim="run", **CONCAT)
