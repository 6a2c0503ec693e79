"""nqf.experiments.estimate_cache: the planning estimates a snakemake call keeps on disk for the
next. What it must guarantee: a stored value is the computed one, a change of arguments or code
computes anew, an unreadable entry is recomputed, and a process with a warm cache plans without
torch's meta kernels (the ~4-5 s it saves per snakemake call)."""
import json
import os
import subprocess
import sys
import time

import pytest

from nqf.experiments import estimate_cache
from nqf.experiments.estimate_cache import cached


@pytest.fixture
def cache(tmp_path):
    folder = estimate_cache.enable(tmp_path / "cache")
    yield folder
    estimate_cache.disable()


def _counted(value):
    calls = []

    def compute():
        calls.append(1)
        return value

    return compute, calls


def test_off_by_default_computes_every_time():
    estimate_cache.disable()
    compute, calls = _counted({"bytes": 1.5})
    assert cached("f", [1], compute) == {"bytes": 1.5} and cached("f", [1], compute) == {"bytes": 1.5}
    assert len(calls) == 2


def test_a_stored_value_is_returned_for_the_same_arguments_only(cache):
    value = {"bytes": 123456789.25, "steps": 1000, "what": "mlp: 3 replicas", "flops": 1e-300}
    compute, calls = _counted(value)
    assert cached("estimate", ["kind", {"a": 1, "b": [1, 2]}], compute) == value
    # the same arguments in another key order: the stored value, exactly
    assert cached("estimate", ["kind", {"b": [1, 2], "a": 1}], compute) == value
    assert len(calls) == 1
    cached("estimate", ["kind", {"a": 2, "b": [1, 2]}], compute)  # another config
    cached("work", ["kind", {"a": 1, "b": [1, 2]}], compute)  # another function
    assert len(calls) == 3


def test_another_fingerprint_computes_anew(cache, monkeypatch):
    compute, calls = _counted(7.0)
    cached("f", [1], compute)
    monkeypatch.setattr(estimate_cache, "fingerprint", lambda: "an-edited-nqf")
    assert cached("f", [1], compute) == 7.0
    assert len(calls) == 2


def test_an_unreadable_entry_is_recomputed_and_replaced(cache):
    compute, calls = _counted([1, 2])
    cached("f", [1], compute)
    (entry,) = cache.glob("*.json")
    entry.write_text('{"key": ')  # a truncated write
    assert cached("f", [1], compute) == [1, 2] and len(calls) == 2
    assert json.loads(entry.read_text())["value"] == [1, 2]


def test_a_value_json_does_not_give_back_exactly_is_not_stored(cache):
    compute, calls = _counted((1, "a"))  # a tuple comes back as a list
    assert cached("f", [1], compute) == (1, "a")
    assert cached("f", [1], compute) == (1, "a")
    assert len(calls) == 2 and not list(cache.glob("*.json"))


def test_errors_are_not_stored(cache):
    def fails():
        raise ValueError("not computable")

    with pytest.raises(ValueError, match="not computable"):
        cached("f", [1], fails)
    assert not list(cache.glob("*.json"))


def test_off_in_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(estimate_cache.ENV, "off")
    assert estimate_cache.enable() is None
    monkeypatch.setenv(estimate_cache.ENV, str(tmp_path / "elsewhere"))
    assert estimate_cache.enable() == tmp_path / "elsewhere"
    estimate_cache.disable()


def test_day_old_entries_of_other_fingerprints_are_swept(cache, monkeypatch):
    cache.mkdir(parents=True)
    old, fresh = cache / "0ther-old.json", cache / "0ther-fresh.json"
    for path in (old, fresh):
        path.write_text("{}")
    day_ago = time.time() - estimate_cache.STALE_SECONDS - 60
    os.utime(old, (day_ago, day_ago))
    monkeypatch.setitem(estimate_cache._state, "swept", False)
    cached("f", [1], lambda: 1.0)
    assert not old.exists() and fresh.exists() and len(list(cache.glob("*.json"))) == 2


def test_a_warm_cache_plans_without_torchs_meta_kernels(tmp_path):
    """Two processes plan the same experiment (its config check, its largest run's estimate, a
    run's work, as the Snakefile does): the first computes on the meta device, the second reads
    the same numbers and loads neither torch's meta kernels nor torch._dynamo."""
    code = """
import json, sys
from nqf.experiments import estimate_cache, check_config
from nqf.pipeline.resources import JobResources
from helpers import experiment_config
estimate_cache.enable(sys.argv[1])
exp = experiment_config("nqf_approximation")
check_config({"experiments": {"e": exp}, "device": "cpu"})
jobs = JobResources({"e": exp})
print(json.dumps({"estimate": jobs.estimate("e"), "work": jobs.work("e", "mlp"),
                  "meta": "torch._meta_registrations" in sys.modules, "dynamo": "torch._dynamo" in sys.modules}))
"""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    runs = [json.loads(subprocess.run([sys.executable, "-c", code, str(tmp_path / "cache")], env=env, check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1]) for _ in range(2)]
    assert runs[0]["meta"]  # the first plans on the meta device ...
    assert not runs[1]["meta"] and not runs[1]["dynamo"]  # ... the second from the cache
    assert runs[1]["estimate"] == runs[0]["estimate"] and runs[1]["work"] == runs[0]["work"]
