"""nqf.pipeline.job_failures: the end of a failed run says, per failed job, what stopped it (issue 16)."""
from nqf.pipeline import job_failures as jf

BLOCKS = """Building DAG of jobs...
[Sun Dec  6 03:04:17 2026]
Error in rule train:
    jobid: 7
    input: results/data/fw.nc
    output: results/runs/fw/gd.nc
    log: results/logs/train/fw/gd.log (check log file(s) for error details)
    wildcards: exp=fw, run=gd

Error in rule fit:
    jobid: 9
    output: results/fits/fw.nc
    log: {fitlog} (check log file(s) for error details)

Error in rule figure:
    jobid: 11
    output: results/figures/fw.pdf, results/figures/fw.png, results/figures/fw.claims.csv, results/figures/fw.claims.html
    log: {figlog} (check log file(s) for error details)
Shutting down, this might take some time.
Exiting because a job execution failed. Look below for error messages
Error in rule train:
    jobid: 7
    output: results/runs/fw/gd.nc
    log: results/logs/train/fw/gd.log (check log file(s) for error details)
"""


def test_each_failed_job_is_told_once_with_its_cause(tmp_path):
    fitlog, figlog = tmp_path / "fit.log", tmp_path / "figure.log"
    fitlog.write_text("2026-12-06 03:04:18,001 nqf.job.fit INFO: start fit\n"
                      "2026-12-06 03:04:19,002 nqf.job.fit ERROR: Could not write results/fits/fw.nc (No space "
                      "left on device): the disk or your quota is probably full\n")
    figlog.write_text("2026-12-06 03:04:18,001 nqf.job.figure INFO: start figure\nTraceback (most recent call "
                      "last):\n  File \"x.py\", line 1\nKeyError: 'a'\n")
    log = tmp_path / "snakemake.log"
    log.write_text(BLOCKS.format(fitlog=fitlog, figlog=figlog))
    jobs = jf.failed_jobs(log.read_text())
    assert [j["rule"] for j in jobs] == ["train", "fit", "figure"]
    assert jobs[0]["log"] == ["results/logs/train/fw/gd.log"] and len(jobs[2]["output"]) == 4
    train, fit, figure = jf.summary(log)
    # no log of the training job: it was killed without a word
    assert train.startswith("nqf: the job of rule 'train' for results/runs/fw/gd.nc ended without finishing")
    assert "rerunning the same command redoes it" in train
    assert fit == ("nqf: the job of rule 'fit' for results/fits/fw.nc stopped: Could not write results/fits/fw.nc "
                   "(No space left on device): the disk or your quota is probably full")
    assert "unexpected error, a bug in nqf" in figure and "and 1 more" in figure and str(figlog) in figure
    assert all("\n" not in s for s in (train, fit, figure))


def test_a_log_without_failures_or_missing_gives_nothing(tmp_path):
    assert jf.summary(None) == [] and jf.summary(tmp_path / "absent.log") == []
    (tmp_path / "ok.log").write_text("Building DAG of jobs...\nNothing to be done.\n")
    assert jf.summary(tmp_path / "ok.log") == []


def test_a_failure_in_snakemakes_own_step_is_told_with_its_error(tmp_path):
    """Snakemake writes each job's script to a temporary file first: under a file size limit
    that write fails before nqf's job starts, and its log stays empty."""
    log = tmp_path / "snakemake.log"
    log.write_text("RuleException:\nOSError in file \"/w/workflow/rules/train.smk\", line 19:\n"
                   "[Errno 27] File too large\n  File \"tempfile.py\", line 501, in __exit__\n"
                   "Error in rule train:\n    jobid: 9\n    output: results/runs/fw/gd.nc\n"
                   "    log: results/logs/train/fw/gd.log (check log file(s) for error details)\n"
                   "RuleException:\nKeyError in file \"/w/workflow/rules/fit.smk\", line 3:\n'x'\n"
                   "Error in rule fit:\n    output: results/fits/fw.nc\n")
    train, fit = jf.summary([str(log)])  # onerror hands a list of Snakemake's log files
    assert train.startswith("nqf: Could not write a file of the job of rule 'train' for results/runs/fw/gd.nc")
    assert "(OSError: [Errno 27] File too large)" in train and "ulimit -f" in train
    assert fit.startswith("nqf: the job of rule 'fit' for results/fits/fw.nc failed in Snakemake's own step")
    assert "KeyError: 'x'" in fit


def test_a_killed_job_and_a_silent_exit_are_told_apart(tmp_path):
    log = tmp_path / "snakemake.log"
    log.write_text("CalledProcessError in file \"/w/workflow/rules/train.smk\", line 19:\n"
                   "Command 'set -euo pipefail; python x.train.py' died with <Signals.SIGKILL: 9>.\n"
                   "Error in rule train:\n    output: results/runs/fw/gd.nc\n"
                   "CalledProcessError in file \"/w/workflow/rules/fit.smk\", line 3:\n"
                   "Command 'python x.fit.py' returned non-zero exit status 3.\n"
                   "Error in rule fit:\n    output: results/fits/fw.nc\n")
    train, fit = jf.summary(log)
    assert train.startswith("nqf: the job of rule 'train' for results/runs/fw/gd.nc was killed by SIGKILL "
                            "(out of memory, a cluster time limit, or kill -9)")
    assert "rerunning the same command redoes it" in train
    assert fit.startswith("nqf: the job of rule 'fit' for results/fits/fw.nc exited with status 3 without nqf's message")
