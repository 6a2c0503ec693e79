"""The job server's own process: import what the stages need once, then fork one child per job.

Started by :func:`nqf.pipeline.job_server.start` or :func:`~nqf.pipeline.job_server.shared` as
``python -m nqf.pipeline.job_server_process LISTENER_FD PARENT_PID``. :func:`serve` accepts requests on
the listening socket, checks each one (a peer of this user, a job of this nqf package, nqf's
source unchanged since the imports), forks a child that takes over the job's streams, directory,
environment and thread counts and runs its stage (:func:`nqf.pipeline.stages.run_stage`), sends
the child's pid and then its exit status back to the job's process, and appends what the child
used to :data:`USAGE_FILE`. It stops on SIGTERM or when the process that started it is gone.
The job's side of the protocol is in :mod:`nqf.pipeline.job_server`.
"""
from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback

from nqf.pipeline.job_server import _HEADER, _NQF_ROOT, _read_exactly

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

# what each job's child used, one line per job (relative to the job's working directory)
USAGE_FILE = os.path.join("results", "benchmarks", "jobs.tsv")
USAGE_COLUMNS = ("rule", "output", "wall_s", "cpu_s", "user_s", "system_s", "max_rss_mb", "exit_status")


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


def source_state(root: str = _NQF_ROOT) -> tuple:
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
