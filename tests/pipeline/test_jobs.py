"""nqf.pipeline.jobs: a job's messages name the job they come from."""
import logging
import re

import pytest
from helpers import restored_root_logging

from nqf.pipeline.jobs import job


@pytest.fixture
def root_logging():
    """jobs.job sets up the root logger (force=True); put the test session's back afterwards."""
    with restored_root_logging():
        yield


def test_progress_lines_name_the_run_in_the_log_and_on_the_terminal(tmp_path, capsys, root_logging):
    log = tmp_path / "gd.log"
    with job(str(log), "train", "featurewise/gd"):
        logging.getLogger("nqf.train").info("step 2100/125032 (2%)")
    line = "featurewise/gd nqf.train INFO: step 2100/125032 (2%)"
    assert line in log.read_text()
    assert line in capsys.readouterr().err


def test_without_a_label_the_lines_are_as_before(tmp_path, root_logging):
    log = tmp_path / "summary.log"
    with job(str(log), "summary"):
        logging.getLogger("nqf.job.summary").info("done")
    # date, time, logger: nothing between
    assert re.search(r"^\S+ \S+ nqf\.job\.summary INFO: done$", log.read_text(), re.M)


def test_fonttools_timestamp_warnings_stay_out_of_job_logs(tmp_path, root_logging):
    log = tmp_path / "figure.log"
    with job(str(log), "figure", "init_scaling"):
        logging.getLogger("fontTools.ttLib.tables._h_e_a_d").warning("'created' timestamp seems very low")
        logging.getLogger("fontTools.subset").error("a real fontTools error")
    text = log.read_text()
    assert "timestamp" not in text and "a real fontTools error" in text
