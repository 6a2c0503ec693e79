"""nqf.io.run_layout: run files that plain xarray opens correctly or refuses, never pads."""
from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from nqf.io.netcdf import open_result, write_dataset
from nqf.io.run_layout import from_file, to_file


def _run(run: str, steps, seeds=(0, 1), optimizers=("gd", "adam")) -> xr.Dataset:
    steps = np.asarray(steps)
    loss = np.arange(len(seeds) * len(steps) * len(optimizers), dtype=float).reshape(len(optimizers), len(seeds), -1)
    ds = xr.Dataset({"loss": (("optimizer", "seed", "step"), loss + len(run)),
                     "M": (("seed", "step", "row", "col"), np.ones((len(seeds), len(steps), 2, 2)))},
                    coords={"step": steps, "time": ("step", 0.1 * steps), "seed": list(seeds),
                            "optimizer": list(optimizers), "run": run, "eps": 1e-3})
    ds.attrs.update(run=run, lr=0.1)
    return ds


def test_round_trip_through_a_file_is_exact(tmp_path):
    ds = _run("a", [0, 1, 5, 20])
    write_dataset(to_file(ds), tmp_path / "a.nc", title="t")
    back = open_result(tmp_path / "a.nc")  # every nqf reader undoes the layout
    for name in ("loss", "M", "step", "time", "seed", "optimizer", "run", "eps"):
        xr.testing.assert_equal(back[name], ds[name])  # values, dims, coords (the writer adds CF attributes)
    assert set(back.indexes) == set(ds.indexes) and "nqf_run_layout" not in back.attrs
    with xr.open_dataset(tmp_path / "a.nc") as raw:  # CF 6.1: a text label has one axis besides its length
        assert raw["optimizer"].dims == ("optimizer_index",) and raw["seed"].dims == ("run", "seed_index")
    assert from_file(ds) is ds  # anything not in the layout: unchanged


def test_plain_xarray_joins_equal_axes_exactly_and_refuses_unequal_ones(tmp_path):
    """Equal lengths, different steps: nested along 'run' gives each file's own values and steps;
    the combine-by-coordinates default refuses (no index on 'run'); unequal lengths are refused,
    not padded."""
    files = []
    for run, steps in (("a", [0, 1, 5, 20]), ("bb", [0, 2, 9, 40])):
        files.append(tmp_path / f"{run}.nc")
        write_dataset(to_file(_run(run, steps)), files[-1], title="t")
    both = xr.open_mfdataset(files, combine="nested", concat_dim="run").load()
    assert both["step"].dims == ("run", "step_index")
    assert both["step"].values.tolist() == [[0, 1, 5, 20], [0, 2, 9, 40]]
    assert both["run_label"].values.tolist() == ["a", "bb"]
    for i, run in enumerate(("a", "bb")):
        np.testing.assert_array_equal(both["loss"].isel(run=i).values, _run(run, [0, 1, 5, 20])["loss"].values)
    assert not both["loss"].isnull().any()
    with pytest.raises(ValueError, match="Could not find any dimension coordinates"):
        xr.open_mfdataset(files)
    files.append(tmp_path / "c.nc")
    write_dataset(to_file(_run("c", [0, 1, 5])), files[-1], title="t")
    with pytest.raises(ValueError, match="conflicting dimension sizes"):
        xr.open_mfdataset(files, combine="nested", concat_dim="run")


def test_runs_with_other_variables_or_axes_are_refused_not_filled(tmp_path):
    """A variable one run lacks (xarray would fill it with NaN) or has along other axes (xarray
    would broadcast it): the runs' run_variables_<hash> coordinates differ, and xarray refuses."""
    base = tmp_path / "a.nc"
    write_dataset(to_file(_run("a", [0, 1, 5, 20])), base, title="t")
    lacking = _run("b", [0, 2, 9, 40]).drop_vars("M")
    wider = _run("c", [0, 2, 9, 40])
    wider["M"] = wider["M"].expand_dims(extra=2).copy()
    for i, other in enumerate((lacking, wider)):
        path = tmp_path / f"other{i}.nc"
        write_dataset(to_file(other), path, title="t")
        with pytest.raises(ValueError, match="run_variables_.* not present in all datasets"):
            xr.open_mfdataset([base, path], combine="nested", concat_dim="run")
    assert not any(str(c).startswith("run_variables_") for c in open_result(base).coords)


def test_a_run_needs_its_id():
    with pytest.raises(ValueError, match="scalar coordinate 'run'"):
        to_file(_run("a", [0, 1]).drop_vars("run"))
