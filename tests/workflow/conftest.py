"""Fixtures of the workflow tests."""
import os
import shutil

import pytest
from filelock import FileLock
from helpers import ROOT, snakemake


def _finish(work):
    cfg = work / "test.yaml"
    cfg.write_text((ROOT / "config" / "test.yaml").read_text())
    snakemake(work, "--configfile", str(cfg))
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
