"""Result files that read fine but are wrong are named with their rule and set aside
(nqf.experiments.validate, nqf.experiments.jobs.set_aside), non-NetCDF files and the temporary
files of killed writes are swept before a run (nqf.results_check). On small Datasets: no stage runs."""
import os
import time

import numpy as np
import pytest
import xarray as xr

from helpers import kind_config
from nqf.experiments.jobs import set_aside
from nqf.experiments.validate import check_derived, expected_config, open_stage, problems
from nqf.netcdf import HOST, ResultFileError, write_dataset
from nqf import results_check


@pytest.fixture(scope="module")
def exp():
    return kind_config("collapse", architectures=["diagonal", "rectangular"], r=[1.0, 0.4], eps=[1.0e-3, 1.0e-6], seeds=[0, 1])


def run_file(exp, run="diagonal_eps1e-03", **edit) -> xr.Dataset:
    ds = xr.Dataset({"loss": (("seed", "step"), np.ones((2, 4))), "z": (("seed", "step", "mode"), np.ones((2, 4, 2)))},
                    coords={"seed": [0, 1], "step": np.arange(4)})
    ds.attrs["config_json"] = __import__("json").dumps(expected_config(exp, "train", run))
    for name, value in edit.items():
        ds[name] = value
    return ds


def test_a_matching_file_has_no_problems(exp):
    assert problems(run_file(exp), "train", exp, "diagonal_eps1e-03") == []


def test_nan_in_a_run_is_named_but_a_recorded_divergence_is_not(exp):
    ds = run_file(exp)
    ds["loss"][1, 2] = np.nan
    (problem,) = problems(ds, "train", exp, "diagonal_eps1e-03")
    assert "'loss'" in problem and "1 NaN/inf" in problem and "seed=1, step=2" in problem
    ds.attrs["diverged"] = 1
    assert problems(ds, "train", exp, "diagonal_eps1e-03") == []


def test_declared_padding_may_hold_nan():
    real = kind_config("real_data", dataset="digits8x8", architectures=["mlp"], seeds=[0])
    ds = xr.Dataset({"r": (("arch", "mode"), [[1.0, np.nan]]), "loss_floor": ("arch", [np.nan])})
    ds.attrs["config_json"] = __import__("json").dumps(expected_config(real, "structure"))
    (problem,) = problems(ds, "structure", real)  # r pads with NaN on purpose; loss_floor does not
    assert "'loss_floor'" in problem


def test_file_of_another_config_and_wrong_seeds(exp):
    (problem,) = problems(run_file(exp), "train", exp, "diagonal_eps1e-06")
    assert "another configuration" in problem and "'eps'" in problem
    ds = run_file(exp).assign_coords(seed=[0, 5])
    (problem,) = problems(ds, "train", exp, "diagonal_eps1e-03")
    assert "coordinate 'seed'" in problem and "'seeds'" in problem


def test_theory_with_fewer_modes_than_its_structure(tmp_path):
    structure = xr.Dataset({"r": ("mode", [1.0, 0.5, 0.2])})
    theory = xr.Dataset({"t_star": ("mode", [1.0, 2.0])})
    with pytest.raises(ResultFileError) as err:
        check_derived(structure, theory, tmp_path / "theory.nc", "theory")
    assert err.value.unusable and "'mode' has size 2" in str(err.value) and "rule 'theory'" in str(err.value)


def test_fit_claim_passed_without_a_measurement(exp):
    from nqf.experiments.common import Claim, claims_dataset

    ds = claims_dataset([Claim("t*", 1.0, 1.01, 0.05)])
    ds.attrs["config_json"] = __import__("json").dumps(expected_config(exp, "fit"))
    assert problems(ds, "fit", exp) == []
    ds["claim_measured"][0] = np.nan
    (problem,) = problems(ds, "fit", exp)
    assert "marked passed" in problem


def test_open_stage_raises_and_the_job_moves_the_file_aside_once(tmp_path, exp):
    path = tmp_path / "results" / "runs" / "collapse" / "diagonal_eps1e-03.nc"
    ds = run_file(exp)
    ds["loss"][0, 0] = np.inf
    write_dataset(ds.drop_attrs(), path, title="t", config=expected_config(exp, "train", "diagonal_eps1e-03"))
    with pytest.raises(ResultFileError) as err:
        open_stage(path, "train", exp)
    assert "readable but wrong" in str(err.value) and str(path) in str(err.value) and "rule 'train'" in str(err.value)
    assert "moved aside" in set_aside(err.value)
    assert not path.exists() and path.with_name(path.name + ".unusable").exists()
    # regenerated and wrong again: left in place, no loop
    time.sleep(0.01)
    write_dataset(ds.drop_attrs(), path, title="t", config=expected_config(exp, "train", "diagonal_eps1e-03"))
    assert "left in place" in set_aside(err.value) and path.exists()


def test_scan_moves_non_netcdf_files_aside(tmp_path):
    res = tmp_path / "results"
    good = res / "data" / "a.nc"
    write_dataset(xr.Dataset({"x": ("i", [1.0])}), good, title="t")
    zero, empty, folder = res / "data" / "z.nc", res / "fits" / "e.nc", res / "theory" / "d.nc"
    zero.write_bytes(b"\0" * 64)
    empty.parent.mkdir(parents=True)
    empty.write_bytes(b"")
    folder.mkdir(parents=True)
    start = time.perf_counter()
    messages = results_check.scan(res)
    assert time.perf_counter() - start < 1.0
    assert len(messages) == 3 and any("zero-filled" in m for m in messages)
    assert good.exists() and not zero.exists() and zero.with_name("z.nc.unusable").exists()
    assert not empty.exists() and not folder.exists()


def test_only_temporaries_of_dead_writers_are_removed(tmp_path):
    res = tmp_path / "results" / "runs"
    res.mkdir(parents=True)
    dead = res / f".r.nc.{2 ** 22 + 12345}@{HOST}.abcd1234.tmp"  # above the kernel's pid limit
    live = res / f".r.nc.{os.getpid()}@{HOST}.abcd1234.tmp"
    other_host = res / ".r.nc.12@elsewhere.abcd1234.tmp"
    old = res / ".r.nc.abcd1234.tmp"
    for p in (dead, live, other_host, old):
        p.write_bytes(b"x")
    os.utime(old, (0, 0))
    removed = results_check.remove_stale_temporaries(tmp_path / "results")
    assert set(removed) == {dead, old}
    assert live.exists() and other_host.exists()


def test_lock_hint_points_to_troubleshooting(tmp_path):
    assert results_check.lock_hint(tmp_path) is None
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("x")
    assert "--unlock" in results_check.lock_hint(tmp_path) and "Troubleshooting" in results_check.lock_hint(tmp_path)
