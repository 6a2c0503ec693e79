"""nqf.pipeline.housekeeping and its helpers: what may move files under results/ before planning, and
what must not (a dry run, a run another one holds the folder against, a copy of the tree)."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import time_limit

from nqf.pipeline import housekeeping, results_record, results_tree


@pytest.mark.parametrize("argv, flag", [
    (["snakemake", "-n"], "-n"),
    (["snakemake", "-np", "--cores", "2"], "-n"),
    (["snakemake", "-pn"], "-n"),
    (["snakemake", "--dry-run"], "--dry-run"),
    (["snakemake", "--summary"], "--summary"),
    (["snakemake", "-S"], "--summary"),
    (["snakemake", "--lint"], "--lint"),
    (["snakemake", "--unlock"], "--unlock"),
    (["snakemake", "--report", "r.html"], "--report"),
    (["snakemake", "--list-changes", "params"], "--list-changes"),
    (["snakemake", "--dag"], "--dag"),
    (["snakemake", "--touch"], "--touch"),
    (["snakemake", "--executor", "dryrun"], "--executor dryrun"),
    (["snakemake", "--executor=touch"], "--executor touch"),
])
def test_calls_that_run_no_job_are_recognised(argv, flag):
    assert housekeeping.calls_no_job(argv) == flag


@pytest.mark.parametrize("argv", [
    ["snakemake"], ["snakemake", "--cores", "2"], ["snakemake", "-j4"], ["snakemake", "-c2", "-p"],
    ["snakemake", "--report-after-run", "--report", "r.html"], ["snakemake", "--executor", "slurm"],
    ["snakemake", "all", "--configfile", "config/test.yaml", "-k"],
])
def test_calls_that_run_jobs_are_not_taken_for_dry_runs(argv):
    assert housekeeping.calls_no_job(argv) is None


def test_a_run_holding_the_results_lock_keeps_a_second_one_from_moving_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(housekeeping, "_held", [])
    results = tmp_path / "results"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from nqf.pipeline import housekeeping as h; "
        f"assert h.take_results_lock({str(results)!r}) is None; print('held', flush=True); "
        f"time.sleep({time_limit(60)})")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        may_move, why = housekeeping.sweep_mode(["snakemake"], results, tmp_path)
        assert not may_move and "another snakemake run works on" in why and f"pid {holder.pid}" in why
    finally:
        holder.kill()
        holder.wait()
    # the kernel releases the lock of a killed process: the next run takes it
    assert housekeeping.sweep_mode(["snakemake"], results, tmp_path) == (True, "")
    housekeeping._held.pop().close()


def test_snakemake_lock_files_without_a_live_run_keep_the_call_from_moving(tmp_path, monkeypatch):
    monkeypatch.setattr(housekeeping, "_held", [])
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("results/x.nc\n")
    may_move, why = housekeeping.sweep_mode(["snakemake"], tmp_path / "results", tmp_path)
    assert not may_move and "Snakemake's lock files are present" in why
    assert housekeeping.sweep_mode(["snakemake", "--unlock"], tmp_path / "results", tmp_path)[0] is False
    assert housekeeping.sweep_mode(["snakemake", "--nolock"], tmp_path / "results", tmp_path)[0] is True


def test_a_dry_run_moves_nothing_and_says_what_a_run_would_do(tmp_path):
    results = tmp_path / "results"
    bad = results / "fits" / "x.nc"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\0" * 200)
    messages = results_tree.scan(results, move=False)
    assert bad.exists() and not bad.with_name("x.nc.unusable").exists()
    assert len(messages) == 1 and "zero-filled" in messages[0] and "left in place" in messages[0]
    assert "moved aside" in results_tree.scan(results)[0] and not bad.exists()


def test_moving_aside_twice_keeps_the_earlier_copy(tmp_path):
    path = tmp_path / "a.nc"
    for content in (b"first", b"second", b"third"):
        path.write_bytes(content)
        assert results_tree.move_aside(path, "is wrong")[0]
    assert (tmp_path / "a.nc.unusable").read_bytes() == b"third"  # the latest, as jobs.set_aside expects
    assert (tmp_path / "a.nc.1.unusable").read_bytes() == b"first"
    assert (tmp_path / "a.nc.2.unusable").read_bytes() == b"second"


def test_links_out_of_results_in_logs_and_benchmarks_are_removed_not_written_through(tmp_path):
    results = tmp_path / "results"
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    bench = results / "benchmarks" / "train" / "x.tsv"
    bench.parent.mkdir(parents=True)
    bench.symlink_to(outside)
    inside_target = results / "runs" / "a.nc"
    inside_target.parent.mkdir(parents=True)
    inside_target.write_text("x")
    (results / "logs").mkdir()
    (results / "logs" / "ok.log").symlink_to(inside_target)  # stays inside results/: left alone
    links = results_tree.outward_links(results)
    assert links == [(bench, str(outside.resolve()))]
    assert "left in place" in results_tree.remove_outward_links(links, move=False)[0] and bench.is_symlink()
    assert "removed the link" in results_tree.remove_outward_links(links)[0]
    assert not os.path.lexists(bench) and outside.read_text() == "keep me"


def test_a_folder_replaced_by_a_file_is_found(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "runs").write_text("not a folder")
    blocked = results_tree.blocked_folders([results / "runs" / "fw" / "gd.nc", results / "fits" / "fw.nc"], results)
    assert blocked == [results / "runs"]


def test_a_copy_with_its_times_is_known_to_the_record_by_content(tmp_path):
    results = tmp_path / "results"
    f = results / "runs" / "a.nc"
    f.parent.mkdir(parents=True)
    f.write_bytes(b"content")
    record = tmp_path / "record.json"
    results_record.update(results, record)
    st = f.stat()
    time.sleep(0.01)
    # rewritten with the same bytes and its times put back (cp -a): a new ctime, the same content
    f.write_bytes(b"content")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert results_record.new_to_record([f], record) == []
    f.write_bytes(b"CONTENT")  # other bytes with the same times: new
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert results_record.new_to_record([f], record) == [f]


def test_the_record_enters_linked_folders(tmp_path):
    scratch = tmp_path / "scratch" / "runs"
    scratch.mkdir(parents=True)
    (scratch / "a.nc").write_bytes(b"x")
    results = tmp_path / "results"
    results.mkdir()
    (results / "runs").symlink_to(scratch, target_is_directory=True)
    (results / "loop").symlink_to(results, target_is_directory=True)  # a cycle is walked once
    names = sorted(str(p.relative_to(results)) for p in results_record.files(results))
    assert names == [str(Path("runs") / "a.nc")]


def test_before_run_sweeps_only_in_the_main_process_and_a_dry_run_moves_nothing(tmp_path, monkeypatch, capsys):
    """What workflow/rules/housekeeping.smk calls when the Snakefile is parsed: a cluster job (not
    the main process) reads nothing; the main process of a dry run says what a run would move."""
    monkeypatch.setattr(housekeeping, "_held", [])
    bad = tmp_path / "results" / "fits" / "x.nc"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\0" * 200)
    housekeeping.before_run(type("W", (), {"is_main_process": False})(), {}, ["snakemake"],
                            tmp_path / "results", tmp_path)
    assert capsys.readouterr().err == "" and bad.exists()
    housekeeping.before_run(type("W", (), {"is_main_process": True})(), {}, ["snakemake", "-n"],
                            tmp_path / "results", tmp_path)
    err = capsys.readouterr().err
    assert "zero-filled" in err and "left in place" in err and bad.exists()
