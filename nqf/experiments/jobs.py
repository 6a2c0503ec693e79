"""Helpers for workflow jobs: logging to the rule's log file and clean failure messages.

Known user-facing errors (bad config, unreadable result files, divergence) end the job with one
sentence in the log and on stderr instead of a traceback; anything else is a bug and keeps its
traceback.
"""
from __future__ import annotations

import contextlib
import logging
import os
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
        message = str(exc)
        if isinstance(exc, ResultFileError):
            message += set_aside(exc)
        log.error("%s", message)
        print(f"nqf: {message}", file=sys.stderr)
        raise SystemExit(1) from None
    log.info("done %s", name)


def set_aside(exc: ResultFileError) -> str:
    """Move an unusable input file under results/ aside (to ``<name>.unusable``), so that the next
    snakemake call sees it missing and regenerates it; returns a sentence saying so."""
    path = exc.path
    if not (exc.unusable and path is not None and path.exists() and "results" in path.parts):
        return ""
    aside = path.with_name(path.name + ".unusable")
    try:
        os.replace(path, aside)
    except OSError:
        return ""
    return f" It was moved aside to {aside}, so the next snakemake call regenerates it."
