"""Result files that read fine but are wrong are named with their rule and set aside
(nqf.pipeline.verify_stage, nqf.pipeline.jobs.set_aside), non-NetCDF files and the temporary
files of killed writes are swept before a run (nqf.pipeline.results_tree). On small Datasets: no stage runs."""
import os
import time

import numpy as np
import pytest
import xarray as xr
from helpers import experiment_config, time_limit

from nqf.errors import ResultFileError
from nqf.io.atomic import HOST
from nqf.io.netcdf import write_dataset
from nqf.pipeline import results_tree
from nqf.pipeline.jobs import set_aside
from nqf.pipeline.verify_stage import (
    check_derived,
    expected_config,
    file_problems,
    open_stage,
    with_data_config,
)


@pytest.fixture(scope="module")
def exp():
    return experiment_config("collapse", architectures=["diagonal", "rectangular"], r=[1.0, 0.4], eps=[1.0e-3, 1.0e-6],
                             seeds=[0, 1])


def run_file(exp, run="diagonal_eps1e-03", **edit) -> xr.Dataset:
    ds = xr.Dataset({"loss": (("seed", "step"), np.ones((2, 4))), "z": (("seed", "step", "mode"), np.ones((2, 4, 2)))},
                    coords={"seed": [0, 1], "step": np.arange(4)})
    ds.attrs["config_json"] = __import__("json").dumps(expected_config(exp, "train", run))
    with_data_config(ds, exp)
    for name, value in edit.items():
        ds[name] = value
    return ds


def test_a_matching_file_has_no_problems(exp):
    assert file_problems(run_file(exp), "train", exp, "diagonal_eps1e-03") == []


def test_nan_in_a_run_is_named_but_a_recorded_divergence_is_not(exp):
    ds = run_file(exp)
    ds["loss"][1, 2] = np.nan
    (problem,) = file_problems(ds, "train", exp, "diagonal_eps1e-03")
    assert "'loss'" in problem and "1 NaN/inf" in problem and "seed=1, step=2" in problem
    ds.attrs["diverged"] = 1
    assert file_problems(ds, "train", exp, "diagonal_eps1e-03") == []


def test_declared_padding_may_hold_nan():
    real = experiment_config("real_data", base="schema", dataset="digits8x8", architectures=["mlp"], seeds=[0])
    ds = xr.Dataset({"r": (("arch", "mode"), [[1.0, np.nan]]), "loss_floor": ("arch", [np.nan])})
    ds.attrs["config_json"] = __import__("json").dumps(expected_config(real, "structure"))
    with_data_config(ds, real)
    (problem,) = file_problems(ds, "structure", real)  # r pads with NaN on purpose; loss_floor does not
    assert "'loss_floor'" in problem


def test_file_of_another_config_and_wrong_seeds(exp):
    (problem,) = file_problems(run_file(exp), "train", exp, "diagonal_eps1e-06")
    assert "another configuration" in problem and "'eps'" in problem
    ds = run_file(exp).assign_coords(seed=[0, 5])
    (problem,) = file_problems(ds, "train", exp, "diagonal_eps1e-03")
    assert "coordinate 'seed'" in problem and "'seeds'" in problem


def test_theory_with_fewer_modes_than_its_structure(tmp_path):
    structure = xr.Dataset({"r": ("mode", [1.0, 0.5, 0.2])})
    theory = xr.Dataset({"t_star": ("mode", [1.0, 2.0])})
    with pytest.raises(ResultFileError) as err:
        check_derived(structure, theory, tmp_path / "theory.nc", "theory")
    assert err.value.unusable and "'mode' has size 2" in str(err.value) and "rule 'theory'" in str(err.value)


def test_fit_claim_passed_without_a_measurement(exp):
    from nqf.experiments import KINDS
    from nqf.experiments.claims import Claim, claims_dataset

    ds = claims_dataset([Claim("t*", 1.0, 1.01, 0.05)])
    ds.attrs["config_json"] = __import__("json").dumps(expected_config(exp, "fit"))
    with_data_config(ds, exp)
    for name in KINDS["collapse"].FIT_VARIABLES:  # what a collapse fit writes beside its claims
        ds[name] = ("mode", [1.0, 2.0])
    assert file_problems(ds, "fit", exp) == []
    ds["claim_measured"][0] = np.nan
    (problem,) = file_problems(ds, "fit", exp)
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
    messages = results_tree.scan(res)
    assert time.perf_counter() - start < time_limit(1.0)
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
    removed = results_tree.remove_stale_temporaries(tmp_path / "results")
    assert set(removed) == {dead, old}
    assert live.exists() and other_host.exists()


def test_lock_hint_points_to_troubleshooting(tmp_path):
    assert results_tree.lock_hint(tmp_path) is None
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("x")
    assert "--unlock" in results_tree.lock_hint(tmp_path) and "Troubleshooting" in results_tree.lock_hint(tmp_path)


def _keep_mtime_write(path, data: bytes):
    st = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_scan_moves_truncated_hdf5_files_aside(tmp_path):
    # a truncated copy keeps the HDF5 signature and its old mtime: only the superblock's
    # end-of-file address tells (the HDF5 library refuses such a file: 'truncated file')
    res = tmp_path / "results"
    ds = xr.Dataset({"x": (("i", "j"), np.random.default_rng(0).normal(size=(40, 50)))})
    good, few, half = (res / "data" / f"{n}.nc" for n in ("good", "few", "half"))
    for p in (good, few, half):
        write_dataset(ds, p, title="t")
    size = good.stat().st_size
    assert results_tree.hdf5_end_of_file(good.read_bytes()[:96]) == size
    _keep_mtime_write(few, few.read_bytes()[:-3])
    _keep_mtime_write(half, half.read_bytes()[: size // 2])
    messages = results_tree.scan(res)
    assert len(messages) == 2 and all("is truncated" in m and "HDF5 superblock" in m for m in messages)
    assert any(str(few) in m and f"{size - 3:,} bytes of the {size:,}" in m for m in messages)
    assert good.exists() and not few.exists() and few.with_name("few.nc.unusable").exists()
    assert not half.exists() and half.with_name("half.nc.unusable").exists()
    with pytest.raises(OSError):  # what the moved-aside file would have given a job
        xr.open_dataset(few.with_name("few.nc.unusable"), engine="netcdf4").load()


def test_superblock_versions_and_user_block(tmp_path):
    # version 0 (base address at byte 24, end of file at 24 + 2 offsets), 8-byte offsets
    v0 = results_tree.HDF5_SIGNATURE + bytes([0, 0, 0, 0, 0, 8, 8, 0]) + bytes(8) \
        + (0).to_bytes(8, "little") + (2 ** 64 - 1).to_bytes(8, "little") + (5000).to_bytes(8, "little")
    assert results_tree.hdf5_end_of_file(v0) == 5000
    v1 = v0[:8] + bytes([1]) + v0[9:24] + bytes(4) + v0[24:]  # version 1: 4 more bytes first
    assert results_tree.hdf5_end_of_file(v1) == 5000
    undefined = v0[:40] + (2 ** 64 - 1).to_bytes(8, "little")
    assert results_tree.hdf5_end_of_file(undefined) is None
    assert results_tree.hdf5_end_of_file(results_tree.HDF5_SIGNATURE + bytes([9]) + bytes(80)) is None
    # a file whose superblock follows a 512-byte user block is found there (HDF5's search)
    res = tmp_path / "results"
    plain = res / "data" / "p.nc"
    write_dataset(xr.Dataset({"x": ("i", np.arange(500.0))}), plain, title="t")
    body = plain.read_bytes()
    block, cut = res / "data" / "u.nc", res / "data" / "c.nc"
    block.write_bytes(b"u" * 512 + body)
    cut.write_bytes(b"u" * 512 + body[: len(body) // 2])
    messages = results_tree.scan(res)
    assert len(messages) == 1 and str(cut) in messages[0] and "truncated" in messages[0]
    assert plain.exists() and block.exists()


def test_scan_of_300_files_stays_cheap(tmp_path):
    res = tmp_path / "results"
    first = res / "runs" / "0.nc"
    write_dataset(xr.Dataset({"x": ("i", np.arange(10.0))}), first, title="t")
    for i in range(1, 300):
        (res / "runs" / f"{i}.nc").write_bytes(first.read_bytes())
    start = time.perf_counter()
    assert results_tree.scan(res) == []
    assert time.perf_counter() - start < time_limit(0.5)


def test_old_form_plain_temporary_removed_only_when_old_and_not_open(tmp_path):
    res = tmp_path / "results" / "data"
    res.mkdir(parents=True)
    old, young, held = res / ".fw.nc.tmp", res / ".fw_b.nc.tmp", res / ".fw_c.nc.tmp"
    for p in (old, young, held):
        p.write_bytes(b"y" * 100)
    for p in (old, held):
        os.utime(p, (time.time() - 10 ** 6, time.time() - 10 ** 6))
    with open(held, "ab"):  # a writer that still runs (its name says nothing of its pid)
        removed = results_tree.remove_stale_temporaries(tmp_path / "results")
    assert removed == [old]
    assert young.exists() and held.exists()


def test_theory_predictions_must_be_finite_where_the_science_says():
    fw = experiment_config("featurewise", r=[1.0, 0.5])
    ds = xr.Dataset({"z": (("time", "mode"), np.ones((3, 2))), "glv_max_rel_error": ("mode", [np.nan, 0.0])})
    ds.attrs["config_json"] = __import__("json").dumps(expected_config(fw, "theory"))
    with_data_config(ds, fw)
    assert file_problems(ds, "theory", fw) == []  # a diagnostic may be NaN
    ds["z"][1, 1] = np.nan
    (problem,) = file_problems(ds, "theory", fw)
    assert "'z'" in problem and "time=1, mode=1" in problem
    comp = experiment_config("competition")
    ds = xr.Dataset({"loss": ("point", [1.0, 0.5]), "tau_suppressed": ("mode", [np.inf, np.nan, 1.0])})
    ds.attrs["config_json"] = __import__("json").dumps(expected_config(comp, "theory"))
    with_data_config(ds, comp)
    assert file_problems(ds, "theory", comp) == []  # a mode that is never suppressed: inf on purpose


def test_file_of_another_experiment_is_named(exp):
    ds = run_file(exp)
    ds.attrs["experiment"] = "other"
    (problem,) = file_problems(ds, "train", exp, "diagonal_eps1e-03", experiment="collapse")
    assert "experiment 'other', not 'collapse'" in problem
    assert file_problems(ds, "train", exp, "diagonal_eps1e-03", experiment="other") == []
    del ds.attrs["experiment"]  # a file of an earlier version: its title says
    ds.attrs["title"] = "nqf training run diagonal_eps1e-03 of experiment other"
    (problem,) = file_problems(ds, "train", exp, "diagonal_eps1e-03", experiment="collapse")
    assert "'other'" in problem


def test_square_matrix_cut_along_one_axis(exp):
    ds = xr.Dataset({"C": (("mode", "mode_j"), np.eye(3)[:2])})
    ds.attrs["config_json"] = __import__("json").dumps(expected_config(exp, "structure"))
    with_data_config(ds, exp)
    (problem,) = file_problems(ds, "structure", exp)
    assert "'mode' and 'mode_j'" in problem and "sizes 2 and 3" in problem


def test_runs_checked_against_structure_only_in_the_dims_given(tmp_path):
    structure = xr.Dataset({"r": ("mode", [1.0, 0.5, 0.2]), "lam": ("sample", [1.0, 2.0])})
    run = xr.Dataset({"z": (("step", "mode"), np.ones((4, 2))), "y": ("sample", [1.0])})
    check_derived(structure, run, tmp_path / "r.nc", "train", dims=())  # nothing asked
    with pytest.raises(ResultFileError) as err:
        check_derived(structure, run, tmp_path / "r.nc", "train", dims=("mode",))
    assert "'mode' has size 2" in str(err.value) and "rule 'train'" in str(err.value)


def test_sizes_the_config_fixes():
    fw = experiment_config("featurewise", r=[1.0, 0.5, 0.25])
    ds = xr.Dataset({"A_diag": (("sample", "param"), np.ones((3, 2)))})
    ds.attrs["config_json"] = __import__("json").dumps(expected_config(fw, "data"))
    (problem,) = file_problems(ds, "data", fw)
    assert "'param' has size 2, the config makes it 3" in problem
    ds = xr.Dataset({"A_diag": (("sample", "param"), np.ones((3, 3)))}, attrs=ds.attrs)
    assert file_problems(ds, "data", fw) == []


def test_variables_along_renamed_dimensions(exp):
    ds = run_file(exp)
    ds["loss"] = (("seed_x", "step_x"), ds["loss"].values)
    (problem,) = file_problems(ds, "train", exp, "diagonal_eps1e-03")
    assert "variable 'loss' is along (seed_x, step_x), not (..., step)" in problem
    data = xr.Dataset({"A_diag": (("sample_x", "param_x"), np.ones((2, 2))), "y": ("sample", [1.0, 2.0])})
    data.attrs["config_json"] = __import__("json").dumps(expected_config(exp, "data"))
    (problem,) = file_problems(data, "data", exp)
    assert "'A_diag' is along (sample_x, param_x), not (..., sample, param)" in problem


def test_fit_file_lacking_a_variable_its_kind_writes():
    from nqf.experiments import KINDS
    from nqf.experiments.claims import Claim, claims_dataset

    comp = experiment_config("competition")
    ds = claims_dataset([Claim("t*", 1.0, 1.01, 0.05)])
    ds.attrs["config_json"] = __import__("json").dumps(expected_config(comp, "fit"))
    with_data_config(ds, comp)
    for name in KINDS["competition"].FIT_VARIABLES:
        ds[name] = ("mode", [1.0, 2.0, 3.0])
    assert file_problems(ds, "fit", comp) == []
    (problem,) = file_problems(ds.drop_vars("staircase_gap"), "fit", comp)
    assert "lacks the variable(s) staircase_gap" in problem and "competition" in problem
    diverged = claims_dataset([Claim("t*", 1.0, 1.01, 0.05)])
    diverged.attrs.update(config_json=ds.attrs["config_json"], diverged_runs="eps1e-03")
    with_data_config(diverged, comp)
    assert file_problems(diverged, "fit", comp) == []  # a fit of diverged runs holds its claims only


def test_a_full_disk_is_one_sentence_and_leaves_no_temporary(tmp_path):
    # a real file size limit (ulimit -f): netCDF reports 'NetCDF: HDF error', text writes EFBIG
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import resource, signal, numpy as np, xarray as xr
        from nqf.io.netcdf import write_dataset, write_text
        from nqf.errors import ResultWriteError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
        for write in (lambda: write_dataset(xr.Dataset({{"x": ("i", np.random.default_rng(0).normal(size=9000))}}),
                                            {str(tmp_path / 'big.nc')!r}, title="t"),
                      lambda: write_text({str(tmp_path / 'big.txt')!r}, "x" * 50000)):
            try:
                write()
            except ResultWriteError as exc:
                print("REFUSED", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=time_limit(120))
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("REFUSED")]
    assert len(lines) == 2, out.stdout + out.stderr
    # the cause named (the limit, which netCDF reports as an HDF error) and the fix
    assert str(tmp_path / "big.nc") in lines[0] and "HDF error" in lines[0]
    assert all("file size limit of 20 kB" in ln and "raise the limit (`ulimit -f unlimited`)" in ln for ln in lines)
    assert "File too large, EFBIG" in lines[1]
    assert list(tmp_path.iterdir()) == []  # no temporary, no partial file


def test_data_variables_may_carry_leading_axes():
    """fourier_powerlaw's data hold one problem per theta: y (theta, sample), A_diag (theta,
    sample, param) are what its data stage writes, not a fault."""
    import xarray as xr

    from nqf.pipeline.verify_stage import dimension_problems

    ds = xr.Dataset({"y": (("theta", "sample"), np.zeros((3, 4))),
                     "A_diag": (("theta", "sample", "param"), np.zeros((3, 4, 2)))})
    assert dimension_problems(ds, "data") == []
    assert dimension_problems(ds.rename(sample="s"), "data")


def test_a_run_trained_on_other_data_is_refused(exp):
    """Issue 30: a run file whose own keys match the config but whose data differ (other r) used
    to pass every check and feed the fit; the data config it records must be the config's."""
    ds = run_file(exp)
    assert file_problems(ds, "train", exp, "diagonal_eps1e-03") == []
    other = dict(exp, r=[1.0, 0.6])
    with_data_config(ds, other)
    (problem,) = file_problems(ds, "train", exp, "diagonal_eps1e-03")
    assert "made from other data" in problem and "'r'" in problem
    del ds.attrs["data_config_json"]
    (problem,) = file_problems(ds, "train", exp, "diagonal_eps1e-03")
    assert "does not record the data it was made from" in problem


def test_a_fit_file_whose_claim_columns_were_edited_is_refused():
    """Issue 30: a fit file with claim_measured doubled (rel_error and passed untouched) passed
    verify and the summary printed measured 13.86 against predicted 6.91 with passed True."""
    from nqf.experiments.claims import Claim, claims_dataset
    from nqf.pipeline.verify_stage import claim_consistency_problems

    ds = claims_dataset([Claim("t*_1", 6.91, 6.93, 0.05), Claim("gap", 0.0, 0.01, 0.05, relative=False),
                         Claim("bound", 1.0, 0.5, 0.0, comparison="at_most")])
    assert claim_consistency_problems(ds) == []
    doubled = ds.copy(deep=True)
    doubled["claim_measured"].values[0] *= 2
    (problem,) = claim_consistency_problems(doubled)
    assert "claim 0 (\"t*_1\") has rel_error" in problem and "changed after the fit wrote it" in problem
    flipped = ds.copy(deep=True)
    flipped["claim_passed"].values[1] = False
    (problem,) = claim_consistency_problems(flipped)
    assert "claim 1 (\"gap\") is marked failed" in problem


def test_a_summary_row_is_checked_against_its_fit_file(tmp_path):
    """Issue 30: `verify` rebuilds each row of the summary and of a claims table from its fit file
    instead of trusting the table's columns."""
    import csv
    import io

    from nqf.experiments.claims import SUMMARY_COLUMNS, Claim, claims_dataset, summary_rows
    from nqf.pipeline.verify import table_problem

    results = tmp_path / "results"
    fit = claims_dataset([Claim("t*_1", 6.91, 6.93, 0.05), Claim("t*_2", 20.0, 21.0, 0.1)])
    write_dataset(fit, results / "fits" / "fw.nc", title="nqf fits of experiment fw")

    def table(rows):
        buffer = io.StringIO(newline="")
        writer = csv.DictWriter(buffer, fieldnames=SUMMARY_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
        return buffer.getvalue()

    rows = summary_rows("fw", fit)
    summary = results / "summary.csv"
    summary.write_text(table(rows))
    experiments = {"fw": {"kind": "featurewise"}}
    assert table_problem(summary, experiments, results, against_fits=True) is None
    rows[0]["measured"] = 13.86
    summary.write_text(table(rows))
    problem = table_problem(summary, experiments, results, against_fits=True)
    assert problem.startswith("has measured '13.86' for fw: 't*_1'") and "changed after the rule wrote it" in problem
    assert table_problem(summary, experiments, results) is None  # the cheap check does not open fit files
    summary.write_text(table(rows[1:]))
    assert "lacks 1 row(s)" in table_problem(summary, experiments, results, against_fits=True)
