"""nqf.job_failures: the end of a failed run says, per failed job, what stopped it (issue 16)."""
from nqf import job_failures as jf

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
