"""nqf.pipeline.snakefile: the jobs' scheduling priorities; end_scheduler_wakeups, the timers
Snakemake's scheduler arms after each round (--max-jobs-per-timespan in profiles/default), which
are cancelled when the run ends, and no other timer is."""
import threading
from pathlib import Path

import pytest
import yaml

from nqf.pipeline.snakefile import end_scheduler_wakeups

ROOT = Path(__file__).resolve().parents[2]


def _timer(filename: str) -> threading.Timer:
    # a timer whose function was defined in `filename`, as the scheduler's lambda is
    function = eval(compile("lambda: None", filename, "eval"))  # noqa: S307 (a constant lambda)
    timer = threading.Timer(600, function)
    timer.daemon = True  # a failing test leaves nothing that holds pytest open
    timer.start()
    return timer


def test_the_schedulers_timers_are_cancelled_and_no_other():
    scheduler = _timer(str(Path("site-packages", "snakemake", "scheduling", "job_scheduler.py")))
    other = _timer(str(Path("site-packages", "mypackage", "job_scheduler.py")))
    try:
        assert end_scheduler_wakeups() == 1
        scheduler.join(timeout=5)
        assert not scheduler.is_alive()  # cancelled: it ends without waiting its 600 s
        assert other.is_alive()
    finally:
        other.cancel()
        scheduler.cancel()
    assert end_scheduler_wakeups() == 0


def test_the_local_profile_sets_the_rate_whose_wakeups_are_cancelled():
    profile = yaml.safe_load((ROOT / "profiles" / "default" / "config.yaml").read_text())
    count, span = profile["max-jobs-per-timespan"].split("/")
    seconds = float(span[:-1]) * {"s": 1, "m": 60}[span[-1]]
    # no lower a rate of job starts than Snakemake's default (100 per second), over a timespan
    # long enough that the rounds it wakes are few
    assert int(count) / seconds >= 100 and seconds >= 5
    for hook in (ROOT / "Snakefile", ROOT / "workflow" / "rules" / "housekeeping.smk"):
        assert "nqf_snakefile.end_scheduler_wakeups()" in hook.read_text()


def test_data_jobs_first_then_the_longest_trainings_first():
    """The scheduling priorities (Workflow.DATA_PRIORITY, Workflow.train_priority): every data job
    above every training, the trainings ordered by the runtime model's seconds (1 + minutes,
    rounded), other rules at Snakemake's default 0."""
    from types import SimpleNamespace

    from helpers import ROOT

    from nqf.experiments import run_ids
    from nqf.pipeline.config import validate_config
    from nqf.pipeline.resources import JobResources
    from nqf.pipeline.snakefile import Workflow, callable_priority

    config = validate_config(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()))
    resources = JobResources(config["experiments"])
    priority = Workflow.train_priority.fget(SimpleNamespace(resources=resources))
    if not callable_priority():  # a Snakemake that takes only numbers: trainings first, in its order
        assert priority == 1
        pytest.skip("this Snakemake takes no function as a priority")
    runs = [(exp, run) for exp, cfg in config["experiments"].items() for run in run_ids(cfg)]
    seconds = {key: resources.train_seconds(*key) for key in runs}
    given = {key: priority(SimpleNamespace(exp=key[0], run=key[1])) for key in runs}
    for key in runs:
        assert given[key] == 1 + round(seconds[key] / 60) and given[key] < Workflow.DATA_PRIORITY
    longest = max(runs, key=seconds.get)
    assert given[longest] == max(given.values()) > min(given.values()) >= 1
    rules = {path.stem: path.read_text() for path in (ROOT / "workflow" / "rules").glob("*.smk")}
    assert "priority: NQF.DATA_PRIORITY" in rules["data"] and "priority: NQF.train_priority" in rules["train"]
    assert sum("priority:" in text for text in rules.values()) == 2
