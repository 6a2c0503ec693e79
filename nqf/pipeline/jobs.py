"""Helpers for workflow jobs: logging to the rule's log file and clean failure messages.

Known user-facing errors (bad config, unreadable result files, a full disk, divergence) end the job with one
sentence in the log and on stderr instead of a traceback; so do a write that fails for want of
space anywhere in the job (ENOSPC, EDQUOT, EFBIG: nqf.io.write_failures), a log file that cannot be
opened, and running out of memory. Anything else is a bug and keeps its traceback, written to
the rule's log as well as to stderr.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys

from nqf.errors import ConfigError, ResultFileError, ResultWriteError, TrainingDiverged
from nqf.io.write_failures import out_of_space, write_error
from nqf.pipeline.results_tree import aside_path

USER_ERRORS = (ConfigError, ResultFileError, ResultWriteError, TrainingDiverged)


@contextlib.contextmanager
def job(log_path: str | None, name: str, label: str | None = None):
    """Run a workflow job body with logging; exit 1 with one sentence on a user error. ``label``
    (the experiment, and the run of a training: ``featurewise/gd``) starts every message after its
    time, so that the progress lines of jobs running side by side say whose they are.

    A write past a file size limit (``ulimit -f``) would kill the job with SIGXFSZ before any
    message; with that signal ignored the write fails with EFBIG instead, which the writers
    report as :class:`ResultWriteError` (the limit, and what to do)."""
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        log_to_file(log_path, label=label)
    except OSError as exc:  # the log cannot be opened: a full disk, a folder not writable
        error = write_error(log_path, exc)
        if error is None:
            raise
        print(f"nqf: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    log = logging.getLogger(f"nqf.job.{name}")
    log.info("start %s", name)
    try:
        yield log
    except USER_ERRORS as exc:
        message = str(exc)
        if isinstance(exc, ResultFileError):
            message += set_aside(exc) or _what_to_do(exc)
        _stop(log, message)
    except OSError as exc:
        # a write outside nqf's writers (a library's cache, a file of another module) that failed
        # for want of space: the same sentence as theirs
        error = write_error(exc.filename or "a file of this job", exc) if out_of_space(exc) else None
        if error is None:
            log.exception("%s failed with an unexpected error (a bug in nqf: please report it with this log)", name)
            raise
        _stop(log, str(error))
    except MemoryError as exc:
        _stop(log, f"the {name} job ran out of memory ({str(exc) or 'MemoryError'}); run it where more memory is free "
                   f"(`python -m nqf check-config` estimates each experiment's largest run) or lower the "
                   f"experiment's sizes.")
    except Exception:
        # a bug, not a user error: the traceback goes to the rule's log as well as to stderr
        log.exception("%s failed with an unexpected error (a bug in nqf: please report it with this log)", name)
        raise
    log.info("done %s", name)


def _stop(log: logging.Logger, message: str) -> None:
    """End the job with nqf's one sentence, in its log and on stderr."""
    log.error("%s", message)
    print(f"nqf: {message}", file=sys.stderr)
    raise SystemExit(1) from None


def _what_to_do(exc: ResultFileError) -> str:
    """The advice for a results file that was not moved aside (missing, or outside results/)."""
    path = exc.path
    if path is not None and (path.exists() or path.is_symlink()):
        return " Delete it and rerun snakemake to regenerate it."
    return " Rerun snakemake to regenerate it." if path is not None else ""


def set_aside(exc: ResultFileError, regenerated_by: str = "the next snakemake call") -> str:
    """Move an unusable input file under results/ aside (to ``<name>.unusable``), so that the next
    snakemake call sees it missing and regenerates it; returns a sentence saying so.

    A file written after an earlier copy was set aside (its mtime is past the ``.unusable``'s
    ctime, the moment of that move) is a regenerated file that is wrong again: the fault is then
    in its rule or in the check, not in the file, and moving it aside again would only loop. It
    stays in place and the sentence says so."""
    path = exc.path
    if not (exc.unusable and path is not None and (path.exists() or path.is_symlink())
            and "results" in path.parts):
        return ""
    aside = path.with_name(path.name + ".unusable")
    try:
        if aside.exists() and path.lstat().st_mtime > aside.lstat().st_ctime:
            return (f" It was regenerated after an earlier copy was moved aside to {aside} and is wrong again, "
                    f"so it is left in place: the rule that writes it (or this check) is at fault; please "
                    f"report it (deleting both files retries once more).")
        os.replace(path, aside_path(path))  # an earlier .unusable is kept under a numbered name
    except OSError as err:
        return f" It could not be moved aside ({err.strerror}); delete it by hand."
    return f" It was moved aside to {aside}, so {regenerated_by} regenerates it."


class _JobLog(logging.FileHandler):
    """A workflow job's log file. A message it cannot take (the disk filled up, a quota) is said
    once on stderr in nqf's words (nqf.io.write_failures), not with logging's traceback per message;
    the messages still reach stderr, and the end of the run names the full disk (nqf.pipeline.job_failures)."""

    told = False

    def handleError(self, record):
        import sys

        from nqf.io.write_failures import write_error

        exc = sys.exc_info()[1]
        error = write_error(self.baseFilename, exc) if isinstance(exc, OSError) else None
        if error is None:
            return super().handleError(record)
        if not self.told:
            self.told = True
            print(f"nqf: {error} The job's further messages are on stderr only.", file=sys.stderr)


def log_to_file(path: str | None, label: str | None = None) -> None:
    """Send nqf's progress messages to a workflow job's log file (and stderr), each after its time
    and ``label`` (where given). Raises OSError where the log cannot be opened (nqf.pipeline.jobs
    says why in one sentence)."""
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if path:
        handlers.append(_JobLog(path, mode="w"))
    who = f"{label.replace('%', '%%')} " if label else ""
    logging.basicConfig(level=logging.WARNING, handlers=handlers, force=True,
                        format=f"%(asctime)s {who}%(name)s %(levelname)s: %(message)s")
    logging.getLogger("nqf").setLevel(logging.INFO)
    # fontTools, subsetting DejaVu into a figure's PDF for matplotlib, warns that the font's head
    # timestamps look low: true of the font and harmless to the figure, noise in every log
    logging.getLogger("fontTools").setLevel(logging.ERROR)
