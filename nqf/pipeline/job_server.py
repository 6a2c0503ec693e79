"""Run the workflow's jobs in forks of one warm process: job start-up without the imports.

A workflow job of nqf is a short Python process whose imports (torch, xarray, netCDF4, SciPy,
matplotlib: 1-3 s of CPU) often cost more than its work. When Snakemake runs the jobs on this
machine, the main snakemake process starts one *job server* (:func:`start`, from the Snakefile's
``onstart``, for a run of at least :data:`MIN_JOBS` jobs): a process that imports all of that once and then, for each job, forks a child that
runs the job's stage. The job's own process (the rule's ``script:``) only hands its ``snakemake``
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
  processes) and, once nqf's source files have changed since it started (:func:`source_state`),
  none at all: they run in their own processes, on the new code.
* **Signals:** a job killed by Snakemake (Ctrl-C, a failed run being stopped) kills its child; the
  server stops with the run (``onsuccess``/``onerror``) or when the snakemake process is gone.
* **Benchmarks:** Snakemake's benchmark files measure the job's own process tree, which no longer
  holds the work: with the server their ``s`` (wall time) is right, but ``cpu_time`` and memory
  are the client's. The server writes what each child used to ``results/benchmarks/jobs.tsv``
  (:data:`USAGE_FILE`: rule, output, wall and CPU seconds, peak resident memory, which counts the
  pages shared with the server, exit status; one line per job, appended). Set ``NQF_JOB_SERVER=off`` to measure jobs one process each.
* **Safety:** the socket lives in a new folder only its user can enter (mode 0700), and the
  server takes requests from that user only.
"""
from __future__ import annotations

import atexit
import contextlib
import gc
import os
import pickle
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback

ENV_SWITCH = "NQF_JOB_SERVER"  # "off" (or 0/no/false) keeps every job in its own process
ENV_SOCKET = "NQF_JOB_SERVER_SOCKET"  # set by start() for the jobs of this run
OFF = {"off", "0", "no", "false"}

# what the stages import, loaded once by the server (a module missing here is loaded by the job).
# Besides nqf's own imports, what they pull in on first use, measured in the jobs' children
# (sys.modules after a stage against before): every stage's first xarray open imports dask.array
# (xarray looks for chunk managers; ~1 s of CPU), jinja2 and psutil come with Snakemake's script
# object, and a training's first torch optimizer imports torch._dynamo with sympy (~2.5 s).
PRELOAD = (
    "numpy", "scipy.integrate", "scipy.optimize", "scipy.stats", "xarray", "netCDF4", "torch",
    "torch._dynamo", "dask.array", "jinja2", "psutil", "yaml",
    "matplotlib.pyplot", "snakemake.script", "nqf.pipeline.stages", "nqf.experiments", "nqf.training",
    "nqf.plotting", "nqf.io.netcdf", "nqf.pipeline.verify_stage", "nqf.pipeline.reproduction",
)

# a run of fewer jobs starts no server: its imports (~7 s of CPU on a 2-core machine whose float32
# matmul peak was 57 GFLOP/s) would cost more than the 0.6-4 s that each job saves
MIN_JOBS = 4

# what each job's child used, one line per job (relative to the job's working directory)
USAGE_FILE = os.path.join("results", "benchmarks", "jobs.tsv")
USAGE_COLUMNS = ("rule", "output", "wall_s", "cpu_s", "user_s", "system_s", "max_rss_mb", "exit_status")

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
    if not usable(jobs_run_here, tuple(deployment_methods or ())):
        os.environ.pop(ENV_SOCKET, None)
        return None
    inherited = os.environ.get(ENV_SOCKET)
    if inherited and _answers(inherited):
        print(f"nqf: this run's jobs start as forks of the job server that {ENV_SOCKET} names (one shared by "
              f"several runs)", file=sys.stderr)
        return inherited
    os.environ.pop(ENV_SOCKET, None)
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
        [sys.executable, "-m", "nqf.pipeline.job_server", str(listener.fileno()), str(os.getpid())],
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


# ---------------------------------------------------------------------------------------------
# the server

def serve(listener: socket.socket, parent: int, preload=PRELOAD) -> None:
    """Accept jobs on ``listener`` until the process ``parent`` is gone or SIGTERM; one forked
    child per job, its exit status sent back to the job's process."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the jobs; the run stops us
    source, refused = source_state(), False  # before the imports: a change during them is a change
    _preload(preload)
    # what the imports made is kept out of the children's garbage collections: they neither walk it
    # nor, by touching it, copy its memory pages
    gc.collect()
    gc.freeze()
    running: dict[int, tuple[socket.socket, int | None]] = {}  # pid -> (connection, pidfd)
    jobs: dict[int, tuple] = {}  # pid -> (start time, request) for the usage record
    pidfds = hasattr(os, "pidfd_open")
    while os.getppid() == parent:
        watched = [listener] + [c for c, _ in running.values()] + [fd for _, fd in running.values() if fd is not None]
        timeout = 1.0 if (pidfds or not running) else 0.02
        readable, _, _ = select.select(watched, [], [], timeout)
        if listener in readable:
            conn, _ = listener.accept()
            if source_state() != source:  # the job would run nqf's old code: it runs in its own process
                if not refused:
                    print("nqf: nqf's source changed since the job server started; this server's jobs now run in "
                          "their own processes", file=sys.stderr, flush=True)
                    refused = True
                conn.close()
            else:
                inherited = [listener, conn] + [c for c, _ in running.values()]
                clock = time.monotonic()
                started = _start_job(conn, inherited, [fd for _, fd in running.values() if fd is not None])
                if started is not None:
                    child, request = started
                    running[child] = (conn, os.pidfd_open(child) if pidfds else None)
                    jobs[child] = (clock, request)
        for child, (conn, fd) in list(running.items()):
            pid, status, usage = os.wait4(child, os.WNOHANG)
            if pid:
                code = os.waitstatus_to_exitcode(status)
                _record_usage(*jobs.pop(child), usage, code)
                _send(conn, b"X", code)
                conn.close()
                if fd is not None:
                    os.close(fd)
                del running[child]
            elif conn in readable:  # the job's process is gone (killed): so goes its child
                try:
                    os.kill(child, signal.SIGTERM)
                except ProcessLookupError:
                    pass


# what Snakemake sets for a job with `threads` (snakemake.shell): the server's own thread pools
# start at one thread, and each child sets them to its job's values (_set_threads)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def source_state(root: str = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) -> tuple:
    """Each Python source file under ``root`` (the nqf package) with its modification time and
    size: a server whose state differs from what it was when it imported nqf forks no more jobs."""
    state = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                info = os.stat(os.path.join(folder, name))
                state.append((folder, name, info.st_mtime_ns, info.st_size))
    return tuple(state)


def _preload(modules) -> None:
    import importlib

    os.environ.setdefault("MPLBACKEND", "Agg")
    for variable in THREAD_VARIABLES:
        os.environ[variable] = "1"
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 (a module that does not load here loads in the job, or fails there)
            pass
    if "nqf.plotting" in modules:
        _warm_figures()


def _warm_figures() -> None:
    """Save one small figure as PNG and PDF, so that what every figure job would otherwise build
    on its first use is built once, here: mathtext's grammar, the fonts found and loaded, the
    PDF writer's font subsetter."""
    try:
        from nqf import plotting

        with tempfile.TemporaryDirectory() as folder, plotting.style():
            fig, ax = plotting.plt.subplots(figsize=(2, 1.5), layout="constrained")
            ax.loglog([1, 100], [1, 0.01], label="$s_k(t)$")
            ax.set(xlabel="step $t$", title="warm")
            plotting.legend(ax)
            plotting.save(fig, [os.path.join(folder, "warm.png"), os.path.join(folder, "warm.pdf")])
    except Exception:  # noqa: BLE001 (only a head start: each job builds what it needs anyway)
        pass


def _peer_is_us(conn: socket.socket) -> bool:
    """Whether the process at the other end of ``conn`` runs as this user (Linux's SO_PEERCRED;
    elsewhere the socket's private folder is the guard)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1] == os.getuid()


def _start_job(conn: socket.socket, inherited: list[socket.socket], pidfds: list[int]) -> tuple[int, tuple] | None:
    """Read one request from ``conn`` and fork its child, which closes the server's sockets
    (``inherited``) and process handles (``pidfds``); the child's pid and the request (None: a
    refused or malformed request, whose job then runs in its own process; refused: one from a
    client whose nqf package is not this server's, :data:`_NQF_ROOT`)."""
    if not _peer_is_us(conn):
        conn.close()
        return None
    fds: list[int] = []
    try:
        header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
        if len(header) < _HEADER.size:
            header += _read_exactly(conn, _HEADER.size - len(header)) or b""
        size, root_size = _HEADER.unpack(header)
        if _read_exactly(conn, root_size) != _NQF_ROOT.encode():
            raise LookupError("a job of another nqf package")  # never unpickled
        request = pickle.loads(_read_exactly(conn, size))
    except Exception:  # noqa: BLE001 (a malformed or refused request: close it, the job runs in its own process)
        for fd in fds:
            os.close(fd)
        conn.close()
        return None
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    child = os.fork()
    if child == 0:
        code = 1
        try:
            for sock in inherited:
                sock.close()
            for fd in pidfds:
                os.close(fd)
            code = _child(request, fds)
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    _send(conn, b"P", child)
    return child, request


def _record_usage(started: float, request, usage, code: int) -> None:
    """Append what a job's child used (``usage``, its ``resource.struct_rusage``) to the
    :data:`USAGE_FILE` under the job's working directory; a file that cannot be written is skipped
    (the record is for people, the job's result does not depend on it)."""
    name, smk, cwd = request[:3]
    outputs = list(getattr(smk, "output", None) or [])
    row = (name, str(outputs[0]) if outputs else "", f"{time.monotonic() - started:.3f}",
           f"{usage.ru_utime + usage.ru_stime:.3f}", f"{usage.ru_utime:.3f}", f"{usage.ru_stime:.3f}",
           f"{usage.ru_maxrss / 1024:.1f}", str(code))  # ru_maxrss: KiB on Linux
    path = os.path.join(cwd, USAGE_FILE)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        new = not os.path.exists(path)
        with open(path, "a") as f:
            if new:
                f.write("\t".join(USAGE_COLUMNS) + "\n")
            f.write("\t".join(row) + "\n")
    except OSError:
        pass


def _child(request, fds) -> int:
    """In the forked child: take over the job's streams, directory and environment, run the
    stage; its exit status."""
    name, smk, cwd, environ, argv = request
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # the interpreter's own streams on descriptors 0-2 (a host that replaced sys.stdout, as pytest
    # does, would otherwise keep the job's output)
    sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(environ)
    sys.argv = list(argv)
    tempfile.tempdir = None  # TMPDIR is the job's
    _set_threads(environ)
    try:
        from nqf.pipeline.stages import run_stage as run_here

        run_here(name, smk)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 (as an uncaught exception ends a Python process)
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    return code


def _set_threads(environ) -> None:
    """The BLAS and OpenMP thread counts a process started with ``environ`` would have had (the
    rule's threads where Snakemake set them, else one per CPU), in this forked child."""
    from threadpoolctl import threadpool_limits

    def count(*variables) -> int:
        for variable in variables:
            try:
                return max(1, int(environ[variable]))
            except (KeyError, ValueError):
                continue
        return os.cpu_count() or 1

    threadpool_limits(limits={"blas": count("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"),
                              "openmp": count("OMP_NUM_THREADS")})
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(count("OMP_NUM_THREADS"))


def _send(conn: socket.socket, kind: bytes, value: int) -> None:
    try:
        conn.sendall(kind + struct.pack("!q", value))
    except OSError:
        pass  # the job's process is gone


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])), int(sys.argv[2]))
