"""The job server (nqf.pipeline.job_server): jobs run in forks of one warm process, with their own
directory, environment, streams, threads and exit status, and fall back to their own process.

The server runs in a fork of the test process, so the stage function it calls
(nqf.pipeline.stages.run_stage) is the test's stand-in below; the real stages go through it in
every workflow test (their runs use the server), and tests/workflow/test_job_server_results.py
compares the files with those of a run without the server."""
import json
import os
import signal
import socket
import sys
import time

import pytest

from nqf.pipeline import job_server, job_server_process, stages


def fake_stage(name, smk):
    """The stand-in stage: ``name`` says what to do, ``smk`` is a dict."""
    out = smk.get("out")
    if out:
        from threadpoolctl import threadpool_info

        info = {"pid": os.getpid(), "cwd": os.getcwd(), "env": os.environ.get("NQF_TEST_VALUE"),
                "blas": sorted({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})}
        with open(out, "w") as f:
            json.dump(info, f)
    if name == "print":
        print("to stdout from the job")
        print("to stderr from the job", file=sys.stderr)
    elif name == "exit":
        raise SystemExit(smk["code"])
    elif name == "raise":
        raise ValueError("a bug in the stage")
    elif name == "sleep":
        time.sleep(60)
    elif name == "spin":
        end = time.process_time() + smk["cpu_s"]
        while time.process_time() < end:
            pass


@pytest.fixture
def source(tmp_path, monkeypatch):
    """nqf's source as the server sees it (job_server_process.source_state): a file this test rewrites."""
    state = tmp_path / "source_state"
    state.write_text("as imported")
    monkeypatch.setattr(job_server_process, "source_state", state.read_text)
    return state


@pytest.fixture
def server(tmp_path, monkeypatch, source):
    """A job server in a fork of this process (its stage function the stand-in); yields the socket
    path, which the jobs of this test find through the environment."""
    monkeypatch.setattr(stages, "run_stage", fake_stage)
    path = str(tmp_path / "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            job_server_process.serve(listener, parent, preload=("threadpoolctl",))
        finally:
            os._exit(0)
    listener.close()
    monkeypatch.setenv(job_server.ENV_SOCKET, path)
    monkeypatch.delenv(job_server.ENV_SWITCH, raising=False)
    yield path
    # SIGKILL: a SIGTERM could arrive before serve() installs its handler, while the fork still
    # has pytest's, and leave the server running (and this test waiting for it)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_a_job_runs_in_a_fork_with_its_own_directory_environment_and_threads(server, tmp_path, monkeypatch):
    out = tmp_path / "info.json"
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("NQF_TEST_VALUE", "the job's")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")  # as Snakemake sets for a one-thread rule
    job_server.run_stage("ok", {"out": str(out)})
    info = json.loads(out.read_text())
    assert info["pid"] != os.getpid()  # ran in the server's child, not here
    assert info["cwd"] == str(work) and info["env"] == "the job's"
    assert info["blas"] == [1]
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    job_server.run_stage("ok", {"out": str(out)})
    assert json.loads(out.read_text())["blas"] == [2]


def test_a_job_writes_to_its_own_streams(server, capfd):
    job_server.run_stage("print", {})
    captured = capfd.readouterr()
    assert "to stdout from the job" in captured.out and "to stderr from the job" in captured.err


class Smk(dict):
    """A stand-in snakemake object with outputs."""
    output = ("results/out.nc",)


def test_what_each_job_used_is_written_to_the_usage_file(server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job_server.run_stage("spin", Smk(cpu_s=0.3))
    with pytest.raises(SystemExit):
        job_server.run_stage("exit", {"code": 3})
    usage = tmp_path / job_server_process.USAGE_FILE
    for _ in range(100):  # the server writes the line after it answers the job
        lines = usage.read_text().splitlines() if usage.exists() else []
        if len(lines) == 3:
            break
        time.sleep(0.02)
    rows = [dict(zip(lines[0].split("\t"), line.split("\t"))) for line in lines[1:]]
    assert lines[0].split("\t") == list(job_server_process.USAGE_COLUMNS)
    spin, failed = rows
    assert spin["rule"] == "spin" and spin["output"] == "results/out.nc" and spin["exit_status"] == "0"
    # the child spun 0.3 s of CPU (process_time counts user + system); the clock's tick is 10 ms
    assert float(spin["cpu_s"]) >= 0.3 - 0.02
    assert float(spin["wall_s"]) > 0  # (not >= cpu_s: a job's threads, BLAS's among them, add CPU)
    assert float(spin["cpu_s"]) == pytest.approx(float(spin["user_s"]) + float(spin["system_s"]), abs=2e-3)
    assert float(spin["max_rss_mb"]) > 0
    assert failed["rule"] == "exit" and failed["output"] == "" and failed["exit_status"] == "3"


@pytest.mark.parametrize("code", [1, 3])
def test_the_exit_status_of_the_child_is_the_jobs(server, code):
    with pytest.raises(SystemExit) as exc:
        job_server.run_stage("exit", {"code": code})
    assert exc.value.code == code


def test_an_uncaught_exception_ends_the_job_with_its_traceback(server, capfd):
    with pytest.raises(SystemExit) as exc:
        job_server.run_stage("raise", {})
    assert exc.value.code == 1
    assert "ValueError: a bug in the stage" in capfd.readouterr().err


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_child_kills_the_job_with_the_same_signal(server, tmp_path, how):
    """As a job's own process killed by the OOM killer would die: Snakemake then reports the signal
    (nqf.pipeline.job_failures names its likely causes)."""
    out = tmp_path / "info.json"
    pid = os.fork()
    if pid == 0:  # the job's process, waiting on its child
        code = 0
        try:
            job_server.run_stage("sleep", {"out": str(out)})
        except SystemExit as exc:
            code = exc.code
        finally:
            os._exit(code)
    child = _wait_for(out)["pid"]
    os.kill(child, how)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == how


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_stopping_a_job_stops_its_child(server, tmp_path, how):
    """Snakemake stopping a job (SIGTERM: forwarded) or the job's process dying outright (SIGKILL:
    the server sees its connection close) ends the child that runs it."""
    out = tmp_path / "info.json"
    pid = os.fork()
    if pid == 0:
        try:
            job_server.run_stage("sleep", {"out": str(out)})
        finally:
            os._exit(0)
    child = _wait_for(out)["pid"]
    os.kill(pid, how)
    os.waitpid(pid, 0)
    deadline = time.time() + 10
    while time.time() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def test_without_a_server_the_job_runs_here(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(stages, "run_stage", lambda name, smk: calls.append((name, os.getpid())))
    monkeypatch.setenv(job_server.ENV_SOCKET, str(tmp_path / "no-such-socket"))
    job_server.run_stage("ok", {})
    monkeypatch.delenv(job_server.ENV_SOCKET)
    job_server.run_stage("ok", {})
    assert calls == [("ok", os.getpid())] * 2


def test_a_server_whose_nqf_source_changed_forks_no_more_jobs(server, source, tmp_path):
    out = tmp_path / "info.json"
    job_server.run_stage("ok", {"out": str(out)})
    assert json.loads(out.read_text())["pid"] != os.getpid()
    source.write_text("edited")  # the server's code is no longer nqf's
    job_server.run_stage("ok", {"out": str(out)})
    assert json.loads(out.read_text())["pid"] == os.getpid()  # ran here, on the code as it is now


def test_a_job_of_another_nqf_package_runs_in_its_own_process(server, tmp_path, monkeypatch):
    """A run of another checkout or installation that finds this server (a shared one) must not run
    its jobs on the server's code: the server refuses it before unpickling anything."""
    out = tmp_path / "info.json"
    monkeypatch.setattr(job_server, "_NQF_ROOT", str(tmp_path / "another" / "nqf"))
    job_server.run_stage("ok", {"out": str(out)})
    assert json.loads(out.read_text())["pid"] == os.getpid()


def test_the_source_state_sees_an_edit_of_any_module(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mod.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("not code")
    before = job_server_process.source_state(str(tmp_path))
    assert [name for _, name, *_ in before] == ["mod.py"]
    (tmp_path / "notes.txt").write_text("still not code")
    assert job_server_process.source_state(str(tmp_path)) == before
    (tmp_path / "sub" / "mod.py").write_text("x = 22\n")
    assert job_server_process.source_state(str(tmp_path)) != before


def test_runs_share_a_server_that_the_environment_names(monkeypatch):
    """shared(): one server for the runs started inside the block; a run's start() uses it and
    its stop() leaves it running; the block's end stops it and restores the environment."""
    monkeypatch.delenv(job_server.ENV_SWITCH, raising=False)
    monkeypatch.setenv(job_server.ENV_SOCKET, "/the/callers/own")
    with job_server.shared() as path:
        assert os.environ[job_server.ENV_SOCKET] == path and path != "/the/callers/own"
        assert job_server.start(True) == path and job_server.start(True, jobs=1) == path
        job_server.stop()  # the run's end: not its server, left alone
        assert os.environ[job_server.ENV_SOCKET] == path and job_server._answers(path)
        assert job_server.start(False) is None  # jobs sent to a cluster: kept off the server
        assert job_server.ENV_SOCKET not in os.environ
    assert os.environ[job_server.ENV_SOCKET] == "/the/callers/own"
    assert not os.path.exists(os.path.dirname(path))


def test_a_server_imports_the_nqf_of_the_process_that_starts_it(monkeypatch, tmp_path):
    """Not another nqf that the working directory holds (python -m would put it first): a shared
    server started from another checkout's folder still forks this package's jobs."""
    (tmp_path / "nqf").mkdir()
    (tmp_path / "nqf" / "__init__.py").write_text("raise ImportError('the nqf of the working directory')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(job_server.ENV_SWITCH, raising=False)
    with job_server.shared(), pytest.raises(SystemExit) as ended:
        # the server's real stage table has no "spin": its child fails, and this process exits
        # with its status (run here instead, the stage would raise ValueError in this process)
        job_server.run_stage("spin", Smk())
    assert ended.value.code == 1
    rows = (tmp_path / "results" / "benchmarks" / "jobs.tsv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].split("\t")[0] == "spin"  # forked by the server, which loaded our nqf


def test_a_run_starts_its_own_server_where_the_named_one_does_not_answer(monkeypatch, tmp_path):
    monkeypatch.delenv(job_server.ENV_SWITCH, raising=False)
    monkeypatch.setenv(job_server.ENV_SOCKET, str(tmp_path / "gone"))
    assert job_server.start(True, jobs=1) is None and job_server.ENV_SOCKET not in os.environ
    monkeypatch.setenv(job_server.ENV_SOCKET, str(tmp_path / "gone"))
    path = job_server.start(True)
    try:
        assert path != str(tmp_path / "gone") and os.environ[job_server.ENV_SOCKET] == path
    finally:
        job_server.stop()


def test_off_in_the_environment_runs_the_job_here(server, monkeypatch):
    calls = []
    monkeypatch.setattr(stages, "run_stage", lambda name, smk: calls.append(os.getpid()))
    monkeypatch.setenv(job_server.ENV_SWITCH, "off")
    job_server.run_stage("ok", {})
    assert calls == [os.getpid()]


def test_the_server_is_used_only_where_jobs_run_here_in_this_environment(monkeypatch):
    monkeypatch.delenv(job_server.ENV_SWITCH, raising=False)
    assert job_server.usable(True)
    assert not job_server.usable(False)  # jobs submitted to a cluster
    assert not job_server.usable(True, ("conda",))  # jobs run in their own environment
    monkeypatch.setenv(job_server.ENV_SWITCH, "Off")
    assert not job_server.usable(True)


def test_start_and_stop(monkeypatch):
    monkeypatch.delenv(job_server.ENV_SWITCH, raising=False)
    monkeypatch.delenv(job_server.ENV_SOCKET, raising=False)
    assert job_server.start(False) is None and job_server.ENV_SOCKET not in os.environ
    path = job_server.start(True)
    try:
        assert os.environ[job_server.ENV_SOCKET] == path
        assert oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == "0o700"
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(path)  # listening from the start, before the server has loaded anything
        probe.close()
    finally:
        job_server.stop()
    assert job_server.ENV_SOCKET not in os.environ and not os.path.exists(os.path.dirname(path))


def _wait_for(path, seconds=20):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            time.sleep(0.05)
    raise AssertionError(f"{path} was never written")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (a child of the server not yet reaped) is dead too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_run_of_few_jobs_starts_no_server(monkeypatch):
    monkeypatch.delenv(job_server.ENV_SWITCH, raising=False)
    monkeypatch.delenv(job_server.ENV_SOCKET, raising=False)
    assert job_server.start(True, jobs=job_server.MIN_JOBS - 1) is None
    assert job_server.ENV_SOCKET not in os.environ


def test_jobs_get_the_allocator_settings_unless_the_environment_has_its_own():
    from nqf.pipeline.snakefile import ALLOCATOR_SETTINGS, tune_allocator

    environ = {"MALLOC_TRIM_THRESHOLD_": "0"}
    tune_allocator(environ)
    assert environ == {**ALLOCATOR_SETTINGS, "MALLOC_TRIM_THRESHOLD_": "0"}


PRELOAD_PROBE = r"""
import sys, numpy as np, torch, xarray as xr
from nqf.pipeline import job_server_process
job_server_process._preload(job_server_process.PRELOAD)
before = set(sys.modules)
import nqf
from nqf.io.netcdf import open_result, write_dataset
torch.manual_seed(0)
x = torch.randn(20, 3, dtype=torch.float64)
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
ds = nqf.train(model, (x[:, :1] ** 2).numpy(), x=x, units={"0.weight": 0, "2.weight": 1}, lr=0.05, steps=5,
               optimizer=sys.argv[2])
write_dataset(ds, sys.argv[1], config={}, title="probe")
open_result(sys.argv[1]).load()
new = set(sys.modules) - before
# the packages measured to cost a job 0.3-2.5 s of CPU each when it loads them itself
heavy = ("dask", "sympy", "torch._dynamo", "torch._inductor", "jinja2", "psutil", "scipy", "xarray", "netCDF4",
         "matplotlib")
print(" ".join(sorted(m for m in new if any(m == h or m.startswith(h + ".") for h in heavy))))
"""


@pytest.mark.parametrize("optimizer", ["gd", "adam"])
def test_the_server_preloads_every_package_a_training_and_its_file_load(tmp_path, optimizer):
    """A job in a child of the server loads none of the heavy packages itself: the server preloaded
    them (a torch optimizer's first use imports torch._dynamo and sympy, ~2.5 s of CPU; an xarray
    open imports dask, ~1 s)."""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", PRELOAD_PROBE, str(tmp_path / "run.nc"), optimizer],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == ""
