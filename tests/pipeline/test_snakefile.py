"""nqf.pipeline.snakefile's end_scheduler_wakeups: the timers Snakemake's scheduler arms after each
round (--max-jobs-per-timespan in profiles/default) are cancelled when the run ends, and no other
timer is."""
import threading
from pathlib import Path

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
