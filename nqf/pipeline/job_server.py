"""Run the workflow's jobs in forks of one warm process: job start-up without the imports.

A workflow job of nqf is a short Python process whose imports (torch, xarray, netCDF4, SciPy,
matplotlib: 1-3 s of CPU) often cost more than its work. When Snakemake runs the jobs on this
machine, the main snakemake process starts one *job server* (:func:`start`, from the Snakefile's
``onstart``, for a run of at least :data:`MIN_JOBS` jobs): a process that imports all of that
once and then, for each job, forks a child that runs the job's stage. The job's own process (the rule's ``script:``) only hands its ``snakemake``
object, working directory, environment and standard streams to the server over a Unix socket and
waits for the child's exit status (:func:`run_stage`), which becomes its own. What a job computes
and writes is the same either way: the child runs the same function on the same arguments.

* **When:** only where this snakemake process runs its jobs itself (a local run, not a cluster
  submission; not a cluster job on its node, which runs without hooks), not with a software
  deployment method (``--sdm conda``/``apptainer``: the jobs must run in their own environment),
  and not when the environment sets ``NQF_JOB_SERVER=off``. Anywhere else, and whenever the server
  cannot be reached, a job runs in its own process as before.
* **Shared by several runs:** :func:`shared` starts one server for every run that a process (a
  test session, a script or notebook calling snakemake many times) starts while it is open; a run
  whose environment names a server that answers uses it and neither starts nor stops its own.
  Jobs get nqf's code as the server imported it, so a server forks only the jobs of the same nqf
  package (its folder: a run of another checkout or installation runs its jobs in their own
  processes) and, once nqf's source files have changed since it started
  (:func:`nqf.pipeline.job_server_process.source_state`), none at all: they run in their own processes, on the new code.
* **Signals:** a job killed by Snakemake (Ctrl-C, a failed run being stopped) kills its child; the
  server stops with the run (``onsuccess``/``onerror``) or when the snakemake process is gone.
* **Benchmarks:** Snakemake's benchmark files measure the job's own process tree, which no longer
  holds the work: with the server their ``s`` (wall time) is right, but ``cpu_time`` and memory
  are the client's. The server writes what each child used to ``results/benchmarks/jobs.tsv``
  (:data:`nqf.pipeline.job_server_process.USAGE_FILE`: rule, output, wall and CPU seconds, peak
  resident memory, which counts the pages shared with the server, exit status; one line per job,
  appended). Set ``NQF_JOB_SERVER=off`` to measure jobs one process each.
* **Safety:** the socket lives in a new folder only its user can enter (mode 0700), and the
  server takes requests from that user only.

This module is what the snakemake process (start, stop, share the server) and each job's own
process (hand the job over, wait for its status) run; the server's process is
:mod:`nqf.pipeline.job_server_process`.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile

ENV_SWITCH = "NQF_JOB_SERVER"  # "off" (or 0/no/false) keeps every job in its own process
ENV_SOCKET = "NQF_JOB_SERVER_SOCKET"  # set by start() for the jobs of this run
OFF = {"off", "0", "no", "false"}

# a run of fewer jobs starts no server: its imports (~7 s of CPU on a 2-core machine whose float32
# matmul peak was 57 GFLOP/s) would cost more than the 0.6-4 s that each job saves
MIN_JOBS = 4

_HEADER = struct.Struct("!QI")  # the request's size, the size of the client's nqf folder name
# the nqf package this process runs: a server forks jobs only for clients of the same package
_NQF_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_server: dict = {}


def enabled(environ=os.environ) -> bool:
    """Whether the environment allows the job server (``NQF_JOB_SERVER`` is not off)."""
    return environ.get(ENV_SWITCH, "").strip().lower() not in OFF


def usable(jobs_run_here: bool, deployment_methods=()) -> bool:
    """Whether a run may use the job server: its jobs run here, in this environment, on POSIX."""
    return (jobs_run_here and not deployment_methods and enabled() and os.name == "posix"
            and hasattr(socket, "send_fds") and hasattr(os, "fork"))


# ---------------------------------------------------------------------------------------------
# the main snakemake process

def start(jobs_run_here: bool, deployment_methods=(), jobs: int | None = None) -> str | None:
    """Start the job server for this run's ``jobs`` jobs and return its socket path (None where it
    is not used: :func:`usable`, or fewer than :data:`MIN_JOBS` jobs). The jobs find it through
    ``NQF_JOB_SERVER_SOCKET``; :func:`stop` (and, failing that, the exit of this process) stops it.
    Where that variable already names a server that answers (:func:`shared`), the run uses that
    one and starts none; where the server may not be used, the variable is removed, so that no job
    of the run reaches a server through it."""
    if _server:
        return _server["path"]
    inherited = os.environ.pop(ENV_SOCKET, None)  # set again below only for a server this run uses
    if not usable(jobs_run_here, tuple(deployment_methods or ())):
        return None
    if inherited and _answers(inherited):
        os.environ[ENV_SOCKET] = inherited
        print(f"nqf: this run's jobs start as forks of the job server that {ENV_SOCKET} names (one shared by "
              f"several runs)", file=sys.stderr)
        return inherited
    if jobs is not None and jobs < MIN_JOBS:
        return None
    path, folder, process = _spawn()
    _server.update(path=path, folder=folder, process=process)
    os.environ[ENV_SOCKET] = path
    atexit.register(stop)
    print(f"nqf: this run's jobs start as forks of one process that imports torch, xarray and matplotlib once "
          f"(the job server; {ENV_SWITCH}=off runs each job in its own process)", file=sys.stderr)
    return path


def stop() -> None:
    """Stop the job server of this process, if any, and remove its socket."""
    if not _server:
        return
    process, folder = _server["process"], _server["folder"]
    os.environ.pop(ENV_SOCKET, None)
    _server.clear()
    _end(process, folder)


@contextlib.contextmanager
def shared():
    """One job server for every snakemake run this process starts inside the block: each run finds
    it through ``NQF_JOB_SERVER_SOCKET`` and uses it instead of starting its own, so a series of
    runs (a test session, a sweep script, a notebook) pays the server's imports (~10 s of CPU) once.
    Yields the socket path (None where no server may run here, :func:`usable`); the server stops
    when the block ends, or when this process is gone."""
    if not usable(True):
        yield None
        return
    before = os.environ.get(ENV_SOCKET)
    path, folder, process = _spawn()
    os.environ[ENV_SOCKET] = path
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop(ENV_SOCKET, None)
        else:
            os.environ[ENV_SOCKET] = before
        _end(process, folder)


def _spawn() -> tuple[str, str, subprocess.Popen]:
    """A new server process, child of this one: its socket path, the socket's folder, the process."""
    folder = tempfile.mkdtemp(prefix="nqf-jobs-")  # mode 0700
    path = os.path.join(folder, "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(256)  # bound before the server exists: no job can find it missing
    # the server imports this process's nqf package, wherever its working directory is (``-m`` would
    # put that directory, and any nqf in it, first on sys.path)
    paths = [os.path.dirname(_NQF_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    process = subprocess.Popen(
        [sys.executable, "-m", "nqf.pipeline.job_server_process", str(listener.fileno()), str(os.getpid())],
        pass_fds=(listener.fileno(),), stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": os.pathsep.join(paths)},
    )
    listener.close()
    return path, folder, process


def _answers(path: str) -> bool:
    """Whether a server listens on the socket ``path`` (the probe's empty request is dropped)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _end(process: subprocess.Popen, folder: str) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# a job's own process

def run_stage(name: str, smk) -> None:
    """Rule ``name``'s body for the ``snakemake`` object ``smk``: in a fork of the run's job server
    where there is one (this process then exits with the child's status), else here."""
    path = os.environ.get(ENV_SOCKET)
    if path and enabled():
        status = _run_on_server(path, (name, smk, os.getcwd(), dict(os.environ), sys.argv))
        if status is not None:
            if status:
                raise SystemExit(status)
            return
    from nqf.pipeline.stages import run_stage as run_here

    run_here(name, smk)


def _run_on_server(path: str, request) -> int | None:
    """Hand ``request`` and this process's standard streams to the server; the child's exit status,
    or None where the server cannot be reached (the job then runs here)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        root = _NQF_ROOT.encode()
        socket.send_fds(conn, [_HEADER.pack(len(payload), len(root))], [0, 1, 2])
        conn.sendall(root + payload)
        reply = _read_exactly(conn, 9)
    except OSError:
        conn.close()
        return None
    if reply is None or reply[:1] != b"P":
        conn.close()
        return None  # the server ended before it forked: the job runs here
    child = struct.unpack("!q", reply[1:])[0]

    def forward(signum, _frame):  # Snakemake stopping this job stops the child that runs it
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    try:
        reply = _read_exactly(conn, 9)
    finally:
        conn.close()
    if reply is None or reply[:1] != b"X":
        print(f"nqf: the job server ended while it ran this job (process {child}); rerun the same command "
              f"to resume, or set {ENV_SWITCH}=off to run each job in its own process.", file=sys.stderr)
        return 1
    code = struct.unpack("!q", reply[1:])[0]
    if code < 0:  # the child was killed by a signal (the OOM killer, kill): so is this process, as
        # Snakemake (and nqf.pipeline.job_failures) expect of a job killed that way
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # (those two have no handler to reset)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal whose default is not to end the process
    return code


def _read_exactly(conn: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk = conn.recv(n - len(data))
        except InterruptedError:
            continue
        if not chunk:
            return None
        data += chunk
    return data
