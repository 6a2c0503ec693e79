"""Helpers for workflow jobs: logging to the rule's log file and clean failure messages.

Known user-facing errors (bad config, unreadable result files, divergence) end the job with one
sentence in the log and on stderr instead of a traceback; anything else is a bug and keeps its
traceback.
"""
from __future__ import annotations

import contextlib
import logging
import sys

from nqf.config import ConfigError
from nqf.experiments.common import log_to_file
from nqf.netcdf import ResultFileError
from nqf.training import TrainingDiverged

USER_ERRORS = (ConfigError, ResultFileError, TrainingDiverged)


@contextlib.contextmanager
def job(log_path: str | None, name: str):
    """Run a workflow job body with logging; exit 1 with one sentence on a user error."""
    log_to_file(log_path)
    log = logging.getLogger(f"nqf.job.{name}")
    log.info("start %s", name)
    try:
        yield log
    except USER_ERRORS as exc:
        log.error("%s", exc)
        print(f"nqf: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    log.info("done %s", name)
