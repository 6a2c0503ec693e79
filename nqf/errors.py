"""Every error and warning nqf raises on purpose, in one place.

One message format: a sentence that names what is wrong (the argument, config key or file), the
value that was found and what to do instead. Library functions raise ``ValueError``/``TypeError``
subclasses for bad arguments (through :mod:`nqf.validate`); the workflow raises :class:`ConfigError`
for a bad config and :class:`ResultFileError`/:class:`ResultWriteError` for files; a usable but
degraded result warns with :class:`NQFWarning` (``warnings.simplefilter("error", NQFWarning)``
turns those into errors). Nothing here imports the rest of nqf.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key path and what is allowed."""


class StageKeyError(KeyError):
    """An experiment kind's stage read a config key that is not among the keys it was handed (its STAGE_KEYS)."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


class NQFWarning(UserWarning):
    """A result that nqf returns is usable but degraded (a precision floor, a run that did not
    settle); the message names the cause and the fix."""


class NotSmoothError(ValueError):
    """The unit function is not three times continuously differentiable at w = 0."""


class ZGZWarning(NQFWarning):
    """The gradient at w = 0 does not vanish: the pure NQF f(0) + Tr[W W^T A] does not apply."""


class TrainingDiverged(FloatingPointError):
    """The loss became non-finite; carries the step and the last loss values."""

    def __init__(self, step: int, loss: np.ndarray, lr: float, hint: str = ""):
        self.step, self.loss, self.lr = step, loss, lr
        super().__init__(
            f"Training diverged at step {step}: loss {np.array2string(loss, precision=3)} is not "
            f"finite with learning rate {lr:g}. Lower the learning rate{hint}.")


class ResultFileError(RuntimeError):
    """A results file is missing, truncated, or was not written by nqf.

    ``path`` is the file; ``unusable`` is true when it exists but cannot serve as a result
    (truncated, foreign, lacking variables), so that a workflow job may move it aside.
    """

    def __init__(self, message: str, path: os.PathLike | None = None, unusable: bool = False):
        super().__init__(message)
        self.path = Path(path) if path is not None else None
        self.unusable = unusable


class ResultWriteError(RuntimeError):
    """A file of a job could not be written for a reason the user can fix; the message is one
    sentence naming the file, the cause and the fix (built by :func:`nqf.io.write_failures.write_error`).
    The temporary file is removed; the files written before are complete and stay."""

    def __init__(self, path: os.PathLike | str, message: str):
        super().__init__(message)
        self.path = Path(path)
