"""nqf.training.heap: a process's resident memory held within its budget by trimming the heap.

No float tolerances: the checks are which branch runs (trimmed or not) and that the training loop
asks after every record; the resident size itself is read from /proc, so those checks run on Linux.
"""
from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from nqf.pipeline.stages import set_memory_budget
from nqf.training import heap
from nqf.training.loop import train

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm is Linux's")


@pytest.fixture(autouse=True)
def no_budget_after():
    yield
    heap.set_budget(None)


@linux
def test_resident_size_is_read():
    rss = heap.resident_mb()
    assert rss is not None and rss > 1.0  # a Python process with torch loaded holds far more than 1 MB


@linux
def test_trims_only_above_the_fraction_of_the_budget(monkeypatch):
    calls = []
    monkeypatch.setattr(heap, "trim", lambda: calls.append(1) or True)
    assert not heap.keep_within_budget()  # no budget: nothing
    rss = heap.resident_mb()
    heap.set_budget(100 * rss)  # far above the resident size
    assert not heap.keep_within_budget() and not calls
    heap.set_budget(rss / 2)  # below it
    assert heap.keep_within_budget() and calls == [1]


@linux
def test_large_blocks_get_their_own_mappings_once_the_fraction_is_passed(monkeypatch):
    switched = []
    monkeypatch.setattr(heap, "trim", lambda: True)
    monkeypatch.setattr(heap, "map_large_blocks", lambda: switched.append(1) or monkeypatch.setattr(
        heap, "_mapping_large", True) or True)
    monkeypatch.setattr(heap, "_mapping_large", False)
    heap.set_budget(100 * heap.resident_mb(), hard=True)
    assert not heap.keep_within_budget() and not switched  # within the budget: the fast settings stay
    heap.set_budget(heap.resident_mb() / 2)  # a soft budget (a local run): trimmed, never switched
    assert heap.keep_within_budget() and not switched
    heap.set_budget(heap.resident_mb() / 2, hard=True)
    assert heap.keep_within_budget() and heap.keep_within_budget()
    assert switched == [1]  # once


# A child under the workflow's allocator settings frees a 256 MB array; its resident size after,
# minus before, in MB. With the switch (glibc's mallopt) the block was mapped on its own and went
# back when freed; without, the heap keeps it.
_CHILD = """
import sys
import numpy as np
from nqf.training import heap
if sys.argv[1] == "switch":
    assert heap.map_large_blocks()
before = heap.resident_mb()
a = np.ones(2 ** 25)  # 256 MB, touched
del a
print(heap.resident_mb() - before)
"""


@linux
@pytest.mark.skipif(heap._libc() is None, reason="mallopt and malloc_trim are glibc's")
def test_a_freed_large_block_goes_back_once_switched():
    import subprocess

    from nqf.pipeline.snakefile import ALLOCATOR_SETTINGS

    env = {**os.environ, **ALLOCATOR_SETTINGS}
    kept = {how: float(subprocess.run([sys.executable, "-c", _CHILD, how], env=env, capture_output=True,
                                      text=True, check=True).stdout) for how in ("keep", "switch")}
    # 256 MB either kept whole by the heap or handed back whole: 64 MB separates the two for
    # any other allocation the child makes meanwhile
    assert kept["keep"] > 192 and kept["switch"] < 64


@linux
def test_trim_returns_free_heap_pages():
    """glibc's malloc_trim(0) runs (where the C library is glibc) and the process goes on."""
    blocks = [bytearray(1 << 16) for _ in range(200)]  # 13 MB of heap blocks, then freed
    del blocks
    assert heap.trim() in (True, False)
    assert heap.resident_mb() > 0


def test_budget_must_be_positive():
    with pytest.raises(ValueError, match="positive number of MB"):
        heap.set_budget(0)
    heap.set_budget(512)
    assert heap.budget() == 512.0


def test_the_training_loop_checks_after_every_record(monkeypatch):
    checks = []
    monkeypatch.setattr(heap, "keep_within_budget", lambda: checks.append(1) or False)
    model = torch.nn.Linear(3, 1, bias=False).double()
    x = torch.randn(20, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = x.sum(1, keepdim=True)

    class Replicas(torch.nn.Module):  # one replica: (1, m, 1)
        def __init__(self):
            super().__init__()
            self.lin = model

        def forward(self):
            return self.lin(x)[None]

    ds = train(Replicas(), y, lr=0.05, steps=30, n_record=7)
    assert len(checks) >= ds.sizes["step"] == np.unique(ds["step"].values).size


def test_the_memory_limit_is_hard_in_a_slurm_job_or_when_said(monkeypatch):
    from nqf.pipeline.stages import memory_limit_is_hard

    assert not memory_limit_is_hard({})
    assert memory_limit_is_hard({"SLURM_JOB_ID": "42"})
    assert not memory_limit_is_hard({"SLURM_JOB_ID": "42", "NQF_MEMORY_LIMIT": "soft"})
    assert memory_limit_is_hard({"NQF_MEMORY_LIMIT": "Hard"})
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv("NQF_MEMORY_LIMIT", raising=False)
    set_memory_budget(SimpleNamespace(resources=SimpleNamespace(mem_mb=3754)))
    assert heap._hard


def test_a_job_gets_its_memory_request_as_budget():
    set_memory_budget(SimpleNamespace(resources=SimpleNamespace(mem_mb=3754)))
    assert heap.budget() == 3754.0
    set_memory_budget(SimpleNamespace(resources=SimpleNamespace()))  # no mem_mb: no budget
    assert heap.budget() is None
