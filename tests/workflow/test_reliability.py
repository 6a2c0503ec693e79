"""Reliability through the snakemake CLI: unusable result files are named and regenerated, and
the same config gives identical results twice (issue 9)."""
from pathlib import Path

import pytest
import xarray as xr
import yaml
from helpers import read_test_config, snakemake, time_limit

pytestmark = pytest.mark.workflow


def small_config(tmp_path, ids=("featurewise", "collapse")) -> Path:
    """Experiments of config/test.yaml (one deterministic init, one with Gaussian seeds)."""
    cfg = read_test_config()
    cfg["experiments"] = {k: v for k, v in cfg["experiments"].items() if k in ids}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def featurewise_done(tmp_path_factory):
    """A finished run of config/test.yaml's featurewise experiment, made once for this file's
    tests: (its directory, its config file). A test damages its own copy (:func:`copy_of`)."""
    base = tmp_path_factory.mktemp("featurewise_done")
    cfg = small_config(base, ids=("featurewise",))
    work = base / "run"
    first = snakemake(work, "--configfile", str(cfg), check=False)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (work / ".snakemake" / "nqf_results.json").exists()  # written by onsuccess
    return work, cfg


def copy_of(done, tmp_path, name="run") -> tuple[Path, Path]:
    """A copy of the finished run ``done`` in ``tmp_path / name`` with its times (what
    ``cp -a`` makes: nqf knows its files by content) and of its config: (directory, config)."""
    import shutil

    work, cfg = done
    copy = tmp_path / name
    shutil.copytree(work, copy, symlinks=True)  # copy2: the files' times kept
    own = tmp_path / "config.yaml"
    shutil.copyfile(cfg, own)
    return copy, own


@pytest.mark.parametrize("damage", ["truncated", "foreign"])
def test_unusable_input_is_named_and_regenerated(featurewise_done, tmp_path, damage):
    work, cfg = copy_of(featurewise_done, tmp_path)
    data = work / "results" / "data" / "featurewise.nc"
    if damage == "truncated":
        raw = data.read_bytes()
        data.write_bytes(raw[: len(raw) // 2])
    else:
        xr.Dataset({"x": ("i", [1.0, 2.0])}).to_netcdf(data, engine="netcdf4")
    broken = snakemake(work, "--configfile", str(cfg), check=False)
    text = broken.stdout + broken.stderr
    if damage == "truncated":
        # shorter than its HDF5 superblock says: moved aside before planning, and this very call
        # regenerates it (nqf.pipeline.results_tree.scan)
        assert broken.returncode == 0, text[-3000:]
        assert f"nqf: {Path('results') / 'data' / 'featurewise.nc'} is truncated" in text and "moved aside" in text
        assert data.with_name(data.name + ".unusable").exists()
        with xr.open_dataset(data, engine="netcdf4") as ds:
            assert "nqf_version" in ds.attrs and "A_diag" in ds
        return
    # new to nqf's record of the results (written behind the workflow): checked by its reader's
    # checks before planning, named with the rule that makes it, moved aside, and regenerated in
    # this very call (nqf.pipeline.results_record, workflow/rules/housekeeping.smk)
    assert broken.returncode == 0, text[-3000:]
    assert "nqf: The " in text and "featurewise.nc" in text and "rule 'data'" in text
    assert "moved aside" in text and "Traceback" not in text
    assert data.with_name(data.name + ".unusable").exists()
    with xr.open_dataset(data, engine="netcdf4") as ds:
        assert "nqf_version" in ds.attrs and "A_diag" in ds


def test_divergence_stops_or_is_recorded(tmp_path):
    cfg = read_test_config()
    # teacher_student: online SGD of a module, whose lr has no bound that follows from the config
    # (the quadratic-model kinds' lr at or above GD's stability bound is refused at config time),
    # so the run diverges in its job
    exp = cfg["experiments"]["teacher_student"]
    exp.update(lr={"mlp": 1.0e4}, seeds_per_job="all")
    cfg["experiments"] = {"teacher_student": exp}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    stop = snakemake(tmp_path / "stop", "--configfile", str(path), check=False)
    text = stop.stdout + stop.stderr
    assert stop.returncode != 0
    assert "nqf: Training diverged at step" in text and "with learning rate 10000" in text
    assert "Traceback" not in text
    record = snakemake(tmp_path / "record", "--configfile", str(path), "--config", "on_divergence=record",
                       check=False)
    assert record.returncode == 0, record.stderr[-3000:]
    rows = (tmp_path / "record" / "results" / "summary.csv").read_text().splitlines()
    assert len(rows) == 2 and "run mlp diverged" in rows[1] and "False" in rows[1]
    assert (tmp_path / "record" / "results" / "figures" / "teacher_student.png").exists()


def test_wrong_files_and_leftovers_are_swept_and_regenerated(featurewise_done, tmp_path):
    """A run file that reads fine but holds NaN (rewritten, so its fit reruns), a zero-filled fit
    file that kept its old mtime (nothing would read it) and the temporary file of a killed write:
    the next call names the NaN run with its rule, moves both bad files aside and regenerates
    them, bit for bit as before (issue 16)."""
    import os
    import shutil

    import numpy as np

    from nqf.io.atomic import HOST
    from nqf.io.netcdf import config_of, open_result, write_dataset
    from nqf.io.run_layout import to_file

    work, cfg = copy_of(featurewise_done, tmp_path)
    clean = tmp_path / "clean"
    shutil.copytree(work / "results", clean)
    res = work / "results"
    run, fit = res / "runs" / "featurewise" / "gd.nc", res / "fits" / "featurewise.nc"
    ds = open_result(run)  # as computed; written back in the run-file layout (nqf.io.run_layout)
    ds["loss"][..., -3:] = np.nan
    nan_run = ds.drop_attrs()
    nan_run.attrs["data_config_json"] = ds.attrs["data_config_json"]  # the data it was made from stays
    write_dataset(to_file(nan_run), run, title=ds.attrs["title"], config=config_of(ds))
    st = fit.stat()
    fit.write_bytes(b"\0" * st.st_size)
    os.utime(fit, ns=(st.st_atime_ns, st.st_mtime_ns))
    stale = res / "runs" / "featurewise" / f".gd.nc.{2 ** 22 + 7}@{HOST}.abcd1234.tmp"
    stale.write_bytes(b"x" * 1000)
    # the NaN run is new to nqf's record of results (its times changed), so it is checked with
    # its readers' checks before planning: this very call regenerates all of them
    again = snakemake(work, "--configfile", str(cfg), check=False)
    text = again.stdout + again.stderr
    assert again.returncode == 0 and "Traceback" not in text, text[-3000:]
    assert "fits/featurewise.nc does not start with the HDF5/NetCDF signature (it is zero-filled)" in text
    assert f"removed {stale.relative_to(work)}" in text and not stale.exists()
    assert "runs/featurewise/gd.nc is readable but wrong: variable 'loss' holds 3 NaN" in text
    assert "rule 'train'" in text and "so this run regenerates it" in text
    assert run.with_name("gd.nc.unusable").exists() and run.exists()
    for path in clean.rglob("*.nc"):
        with xr.open_dataset(path, engine="netcdf4") as a, \
                xr.open_dataset(res / path.relative_to(clean), engine="netcdf4") as b:
            xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())
    assert (clean / "summary.csv").read_text() == (res / "summary.csv").read_text()


def test_files_changed_behind_their_mtime_are_regenerated_in_the_same_call(featurewise_done, tmp_path):
    """Bytes changed while the mtime stayed (an edit that keeps mtimes, cp -a of another file): a
    theory file whose loss became NaN (theory files may hold NaN by design, so only the record of
    what nqf wrote can tell), a run file copied over with its old mtime that holds NaN, and a
    summary whose verdict was flipped. The next call moves all three aside before planning and
    regenerates them, bit for bit (nqf.pipeline.results_record; issue 16)."""
    import os
    import shutil

    import numpy as np

    work, cfg = copy_of(featurewise_done, tmp_path)
    clean = tmp_path / "clean"
    shutil.copytree(work / "results", clean)
    res = work / "results"

    def keep_mtime(path, change):
        st = path.stat()
        change(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    def nan_in(var):
        def change(path):
            with xr.open_dataset(path, engine="netcdf4") as ds:
                ds = ds.load()
            ds[var].values = np.full_like(ds[var].values, np.nan)
            ds.to_netcdf(path, engine="netcdf4")
        return change

    theory, run, summary = res / "theory/featurewise.nc", res / "runs/featurewise/gd.nc", res / "summary.csv"
    keep_mtime(theory, nan_in("loss"))
    keep_mtime(run, nan_in("loss"))
    keep_mtime(summary, lambda p: p.write_text(p.read_text().replace("True", "False")))
    again = snakemake(work, "--configfile", str(cfg), check=False)
    text = again.stdout + again.stderr
    assert again.returncode == 0, text[-3000:]
    for path in (theory, run, summary):
        assert f"nqf: {path.relative_to(work)} changed since nqf recorded it while its mtime stayed the same" in text
        assert path.with_name(path.name + ".unusable").exists()
    for path in clean.rglob("*.nc"):
        with xr.open_dataset(path, engine="netcdf4") as a, \
                xr.open_dataset(res / path.relative_to(clean), engine="netcdf4") as b:
            xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())
    assert (clean / "summary.csv").read_text() == summary.read_text()
    # `python -m nqf verify` checks the whole tree on demand with the readers' checks
    import subprocess
    import sys

    def verify(*args):
        return subprocess.run([sys.executable, "-m", "nqf", "verify", "--directory", str(work), "--configfile",
                               str(cfg), *args], capture_output=True, text=True, timeout=time_limit(300))

    ok = verify()
    assert ok.returncode == 0 and "0 wrong" in ok.stdout, ok.stdout + ok.stderr
    data = res / "data/featurewise.nc"
    keep_mtime(data, nan_in("A_diag"))
    dry = verify("--dry-run")
    assert dry.returncode == 1 and "data/featurewise.nc is readable but wrong: variable 'A_diag'" in dry.stdout
    assert "left in place (this call moves nothing)" in dry.stdout and data.exists()
    moved = verify()
    assert moved.returncode == 1 and "so the next snakemake call regenerates it" in moved.stdout
    assert not data.exists() and "1 wrong; rerun snakemake" in moved.stdout


def test_a_dry_run_and_a_refused_run_change_nothing_while_a_run_trains(tmp_path):
    """Issue 30: while run A trains, a dry run with another config and a second real run (which
    Snakemake's lock refuses) used to move A's new files aside as 'made for another
    configuration', so that A died on its missing outputs. Both now change nothing: every file
    under results/ keeps its bytes, and A finishes."""
    import hashlib
    import subprocess
    import sys
    import time

    from helpers import ROOT

    cfg = read_test_config()
    fw = cfg["experiments"]["featurewise"]
    # featurewise finishes in seconds; featurewise_b trains for ~40 s, while the other calls run
    cfg["experiments"] = {"featurewise": fw, "featurewise_b": dict(fw, steps=100_000)}
    a_cfg, other = tmp_path / "a.yaml", tmp_path / "other.yaml"
    a_cfg.write_text(yaml.safe_dump(cfg))
    cfg["experiments"]["featurewise"] = dict(fw, eps=2e-3)
    other.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "run"
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(work)]
    run_a = subprocess.Popen([*cmd, "--cores", "2", "--configfile", str(a_cfg)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = work / "results" / "runs" / "featurewise" / "gd.nc"
        deadline = time.time() + time_limit(300)
        while not first.exists() and run_a.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert first.exists() and run_a.poll() is None, "run A finished before the other calls could start"

        def digest():
            return {p: hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in (work / "results").rglob("*") if p.is_file() and p.suffix == ".nc"}

        before = digest()
        dry = snakemake(work, "--configfile", str(other), "-n", check=False)
        refused = snakemake(work, "--configfile", str(other), check=False)
        assert run_a.poll() is None, "run A finished before the other calls ended: make it longer"
        after = digest()
        assert {p: after.get(p) for p in before} == before  # nothing moved, nothing rewritten
        for proc in (dry, refused):
            text = proc.stdout + proc.stderr
            assert "moved aside" not in text and "another snakemake run works on" in text, text[-2000:]
        assert refused.returncode != 0  # Snakemake's lock refuses it
        assert not list((work / "results").rglob("*.unusable"))
    finally:
        out, _ = run_a.communicate(timeout=time_limit(600))
    assert run_a.returncode == 0, out[-3000:]


def test_a_dry_run_on_a_copied_tree_after_a_stopped_run_moves_nothing(featurewise_done, tmp_path):
    """A finished tree copied with its times (cp -a, rsync -a) and its record lost (as after a
    stopped run, whose files nqf never recorded): a dry run with another config only says what a
    run would do; a real run with the same config finds every file known by content."""
    copy, cfg = copy_of(featurewise_done, tmp_path, "copy")  # copy2: the times, new ctimes
    files = {p: p.read_bytes() for p in (copy / "results").rglob("*.nc")}
    changed = yaml.safe_load(cfg.read_text())
    changed["experiments"]["featurewise"]["eps"] = 2e-3
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(changed))
    dry = snakemake(copy, "--configfile", str(other), "-n", check=False)
    text = dry.stdout + dry.stderr
    assert dry.returncode == 0 and "moved aside" not in text and "left in place" not in text, text[-2000:]
    assert all(p.read_bytes() == b for p, b in files.items()) and not list(copy.rglob("*.unusable"))
    (copy / ".snakemake" / "nqf_results.json").unlink()  # as after a stopped run
    dry = snakemake(copy, "--configfile", str(other), "-n", check=False)
    text = dry.stdout + dry.stderr
    assert "made for another configuration" in text and "left in place" in text and "moved aside" not in text
    assert all(p.read_bytes() == b for p, b in files.items()) and not list(copy.rglob("*.unusable"))
    again = snakemake(copy, "--configfile", str(cfg), check=False)
    assert again.returncode == 0 and "moved aside" not in again.stdout + again.stderr
    assert all(p.read_bytes() == b for p, b in files.items())


def test_a_results_folder_replaced_by_a_file_is_moved_aside_and_regenerated(featurewise_done, tmp_path):
    """Issue 30: `results/runs` replaced by a file gave Snakemake's NotADirectoryError on every
    run until removed by hand; a benchmark file linked to a file outside results/ was written
    through. The next run moves the file aside, removes the link, and regenerates the runs."""
    import shutil

    work, cfg = copy_of(featurewise_done, tmp_path)
    runs = work / "results" / "runs"
    shutil.rmtree(runs)
    runs.write_text("not a folder")
    precious = tmp_path / "precious.tsv"
    precious.write_text("keep me\n")
    bench = work / "results" / "benchmarks" / "train" / "featurewise" / "gd.tsv"
    bench.unlink()
    bench.symlink_to(precious)
    again = snakemake(work, "--configfile", str(cfg), check=False)
    text = again.stdout + again.stderr
    assert again.returncode == 0, text[-3000:]
    assert "results/runs is not a folder" in text and "moved aside to runs.unusable" in text
    assert "outside results/" in text and "removed the link" in text
    assert (runs / "featurewise" / "gd.nc").is_file() and (work / "results" / "runs.unusable").is_file()
    assert precious.read_text() == "keep me\n"
