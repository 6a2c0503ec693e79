"""Fixtures of the workflow tests."""
import os
import shutil

import pytest
from filelock import FileLock
from helpers import ROOT, snakemake

from nqf.pipeline import job_server


@pytest.fixture(scope="session", autouse=True)
def shared_job_server():
    """One job server (nqf.pipeline.job_server.shared) for the runs of every workflow test in this
    pytest process: each snakemake call uses it instead of starting its own, whose imports cost
    ~10 s of CPU a call. What a job computes is the same either way (the same stage, forked from a
    process that imported the same code). The finished run of the test config (``finished``)
    starts and stops a server of its own, as a user's run does."""
    with job_server.shared() as path:
        yield path


def _finish(work):
    """Run config/test.yaml in ``work`` as a user's run goes: with a job server of its own."""
    cfg = work / "test.yaml"
    cfg.write_text((ROOT / "config" / "test.yaml").read_text())
    shared = os.environ.pop(job_server.ENV_SOCKET, None)
    try:
        run = snakemake(work, "--configfile", str(cfg))
    finally:
        if shared is not None:
            os.environ[job_server.ENV_SOCKET] = shared
    assert "jobs start as forks of one process" in run.stderr
    return work, cfg


@pytest.fixture(scope="session")
def finished(tmp_path_factory):
    """A finished run of config/test.yaml: (its directory, its config file). Tests read it, run
    dry runs in it, write the HTML report into it, or copy it to change the copy. Made once per test session: under
    pytest-xdist every worker's session asks for it, the first makes it beside the workers' temporary
    folders while the others wait on its lock, and they all share it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return _finish(tmp_path_factory.mktemp("wf"))
    shared = tmp_path_factory.getbasetemp().parent
    work, done = shared / "finished_test_run", shared / "finished_test_run.done"
    with FileLock(str(shared / "finished_test_run.lock")):
        if not done.exists():
            if work.exists():  # a worker that failed to make it: try again, from nothing
                shutil.rmtree(work)
            work.mkdir()
            _finish(work)
            done.touch()
    return work, work / "test.yaml"
