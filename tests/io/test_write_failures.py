"""A write that fails for a reason the user can fix is one sentence naming the cause and the fix,
on every path a workflow job writes by (NetCDF, text, figures, its log) and at the end of the
run (issue 30: a full disk under results/ was reported as a job that 'exited with status 1
without nqf's message', its message lost with the log it could not be written to)."""
import errno
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest
import xarray as xr
from helpers import restored_root_logging, time_limit

from nqf.errors import ResultWriteError
from nqf.io import write_failures
from nqf.io.netcdf import write_dataset, write_text
from nqf.io.write_failures import write_error
from nqf.pipeline import job_failures

FULL = "No space left on device"


def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, FULL)


@pytest.fixture
def root_logging():
    """jobs.job sets up the root logger (force=True); put the test session's back afterwards."""
    with restored_root_logging():
        yield


def _write_figure(path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nqf.plotting import save

    fig, ax = plt.subplots()
    ax.plot([0, 1])
    save(fig, [path])


WRITERS = {
    "netcdf": ("to_netcdf", lambda p: write_dataset(xr.Dataset({"x": ("i", np.arange(3.0))}), p, title="t")),
    "text": ("write", lambda p: write_text(p, "some text")),
    "temporary file": ("mkstemp", lambda p: write_text(p, "some text")),
    "figure": ("savefig", _write_figure),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_says_the_disk_is_full(writer, tmp_path, monkeypatch):
    where, write = WRITERS[writer]
    if where == "to_netcdf":
        monkeypatch.setattr(xr.Dataset, "to_netcdf", _full)
    elif where == "mkstemp":
        monkeypatch.setattr(tempfile, "mkstemp", _full)
    elif where == "savefig":
        import matplotlib.figure

        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", _full)
    else:  # the text itself fails to go to the temporary file (which is then removed)
        from pathlib import Path

        monkeypatch.setattr(Path, "write_text", _full)
    path = tmp_path / "results" / ("out.png" if writer == "figure" else "out.nc")
    with pytest.raises(ResultWriteError) as failed:
        write(path)
    assert str(failed.value) == (f"Could not write {path}: the disk holding it is full ({FULL}, ENOSPC); free space "
                                 f"on it and rerun the same snakemake command (the files written so far are "
                                 f"complete and are kept).")
    assert list((tmp_path / "results").iterdir()) == []  # no temporary file left


def test_each_cause_gets_its_sentence(tmp_path, monkeypatch):
    path = tmp_path / "results" / "fits" / "fw.nc"
    say = write_failures.write_failure
    denied = PermissionError(errno.EACCES, "Permission denied")
    assert say(path, denied) == (f"Could not write {path}: permission denied (Permission denied, EACCES) in "
                                 f"{tmp_path}; make that folder writable for you (`ls -ld {tmp_path}` shows its "
                                 f"owner and mode) and rerun the same snakemake command (the files written so "
                                 f"far are complete and are kept).")
    quota = say(path, OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert quota.startswith(f"Could not write {path}: your disk quota there is used up (Disk quota exceeded, EDQUOT)")
    read_only = say(path, OSError(errno.EROFS, "Read-only file system"))
    assert "its file system is read-only (Read-only file system, EROFS)" in read_only
    assert say(path, KeyError("x")) is None and say(path, OSError(errno.ENOENT, "No such file")) is None
    assert say(path, KeyboardInterrupt()) is None
    # a file system that is full whatever error it reports (some report EACCES): a full disk
    monkeypatch.setattr(write_failures, "free_space", lambda p: {"bytes": 0, "size": 10**9, "inodes": 5})
    assert say(path, denied).startswith(f"Could not write {path}: the disk holding it is full (Permission denied, "
                                        f"EACCES; 0 bytes free there); free space on it and rerun")
    monkeypatch.setattr(write_failures, "free_space", lambda p: {"bytes": 10**9, "size": 10**10, "inodes": 0})
    assert "(No space left on device, ENOSPC; no free inodes: too many files there); delete files on it" in \
        say(path, OSError(errno.ENOSPC, FULL))


def test_a_job_says_the_disk_is_full_whatever_write_filled_it(tmp_path, capsys, root_logging):
    from nqf.pipeline.jobs import job

    log = tmp_path / "job.log"
    with pytest.raises(SystemExit) as stopped:
        with job(str(log), "train"):
            raise OSError(errno.ENOSPC, FULL, "results/runs/fw/gd.pt")  # a write outside nqf's writers
    assert stopped.value.code == 1
    message = (f"Could not write results/runs/fw/gd.pt: the disk holding it is full ({FULL}, ENOSPC); free space on "
               f"it and rerun the same snakemake command")
    assert f"nqf: {message}" in capsys.readouterr().err and message in log.read_text()
    with pytest.raises(SystemExit):
        with job(str(log), "data"):
            raise MemoryError("Unable to allocate 5.84 GiB for an array with shape (1000000, 28, 28)")
    assert "nqf: the data job ran out of memory (Unable to allocate 5.84 GiB" in capsys.readouterr().err


def test_a_log_the_disk_cannot_take_is_said_once_in_nqfs_words(tmp_path, capsys, monkeypatch, root_logging):
    from nqf.pipeline import jobs

    log = tmp_path / "logs" / "job.log"
    monkeypatch.setattr(jobs, "log_to_file", lambda path, **_: _full(path))
    with pytest.raises(SystemExit):
        with jobs.job(str(log), "fit"):
            pass
    assert f"nqf: Could not write {log}: the disk holding it is full ({FULL}, ENOSPC)" in capsys.readouterr().err
    monkeypatch.undo()
    log.parent.mkdir()
    with pytest.raises(SystemExit):
        with jobs.job(str(log), "fit") as logger:
            handler = next(h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler))
            handler.stream = type("FullStream", (), {"write": _full, "flush": _full, "close": lambda self: None})()
            logger.info("a progress message")
            raise write_error("results/fits/fw.nc", OSError(errno.ENOSPC, FULL))
    err = capsys.readouterr().err
    assert err.count(f"nqf: Could not write {log}: the disk holding it is full") == 1
    assert "Logging error" not in err and "Traceback" not in err
    assert "nqf: Could not write results/fits/fw.nc: the disk holding it is full" in err


def test_the_end_of_the_run_names_a_disk_too_full_for_the_jobs_log(tmp_path, monkeypatch):
    log = tmp_path / "snakemake.log"
    log.write_text("CalledProcessError in file \"/w/workflow/rules/fit.smk\", line 3:\n"
                   "Command 'python x.fit.py' returned non-zero exit status 1.\n"
                   "Error in rule fit:\n    output: results/fits/fw.nc\n"
                   "    log: results/logs/fit/fw.log (check log file(s) for error details)\n")
    monkeypatch.setattr(write_failures, "free_space", lambda p: {"bytes": 10**11, "size": 10**12, "inodes": 10**6})
    (plain,) = job_failures.summary(log)
    assert "exited with status 1 without nqf's message" in plain
    monkeypatch.setattr(write_failures, "free_space", lambda p: {"bytes": 12_000, "size": 10**12, "inodes": 10**6})
    (full,) = job_failures.summary(log)
    assert full == ("nqf: the job of rule 'fit' for results/fits/fw.nc stopped because the disk holding "
                    "results/logs/fit/ is full (12 kB free there): not even nqf's message reached its log "
                    "(results/logs/fit/fw.log); free space on it and rerun the same snakemake command (the "
                    "finished jobs are kept).")
    # a traceback of a failed write in the job's log: want of space, not a bug in nqf
    job_log = tmp_path / "fit.log"
    job_log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                       f"OSError: [Errno 28] {FULL}\n")
    told = job_failures.explain({"rule": "fit", "output": ["results/fits/fw.nc"], "log": [str(job_log)], "error": ""})
    assert f"stopped because a write failed for want of space (OSError: [Errno 28] {FULL})" in told
    assert "bug" not in told


def test_the_results_lock_holds_on_a_full_disk(tmp_path, monkeypatch):
    """nqf's lock on results/ is taken when Snakemake parses the Snakefile: writing who holds it
    into the lock file failed with a bare OSError there ('OSError in file housekeeping.smk'),
    before any job could say the disk is full. The lock holds without that line."""
    from nqf.pipeline import housekeeping

    real_open = open

    class FullFile:
        def __init__(self, fh):
            self.fh = fh

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def write(self, text):
            _full()

    monkeypatch.setattr(housekeeping, "open", lambda *a, **k: FullFile(real_open(*a, **k)), raising=False)
    monkeypatch.setattr(housekeeping, "_held", [])
    assert housekeeping.take_results_lock(tmp_path / "results") is None
    assert len(housekeeping._held) == 1
    housekeeping._held[0].close()


def _can_mount_tmpfs() -> bool:
    if not shutil.which("unshare") or sys.platform != "linux":
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, timeout=time_limit(30))
    return probe.returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs unshare and a tmpfs mount in a user namespace")
def test_a_real_full_disk(tmp_path):
    """A job on a tmpfs of 64 kB filled to the last byte: its log cannot be opened for writing, and
    each writer says the disk is full with what is free."""
    disk = tmp_path / "disk"
    disk.mkdir()
    code = textwrap.dedent(f"""
        import os, sys
        from nqf.io.netcdf import write_text
        from nqf.errors import ResultWriteError
        fd = os.open({str(disk / 'filler')!r}, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"x" * 4096)
        except OSError:
            os.close(fd)
        try:
            write_text({str(disk / 'results' / 'summary.csv')!r}, "x" * 100000)
        except ResultWriteError as exc:
            print("REFUSED", exc)
        from nqf.pipeline.jobs import job
        with job({str(disk / 'results.log')!r}, "summary"):
            write_text({str(disk / 'results' / 'summary.csv')!r}, "x" * 100000)
    """)
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size=64k tmpfs "{disk}" && '
                           f'exec "{sys.executable}" -c "$NQF_TEST_CODE"'], env={**os.environ, "NQF_TEST_CODE": code},
                          capture_output=True, text=True, timeout=time_limit(120))
    refused = [ln for ln in proc.stdout.splitlines() if ln.startswith("REFUSED")]
    assert refused and "the disk holding it is full (No space left on device, ENOSPC; 0 bytes free there)" in \
        refused[0], proc.stdout + proc.stderr
    assert proc.returncode == 1 and "nqf: Could not write" in proc.stderr and "Traceback" not in proc.stderr, \
        proc.stderr
