"""Measures on recorded singular-value trajectories, kept free of torch so that the fit jobs
that compute them run without importing it (re-exported by nqf.approximation)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def deviation(s_module: np.ndarray, s_nqf: np.ndarray, s_target: Sequence[float]) -> np.ndarray:
    """D = max over steps and k of |s_k,module - s_k,NQF| / s_k, per leading replica index.

    Arrays are (..., step, k); the result has the leading shape.
    """
    s = np.asarray(s_target, float)
    return np.max(np.abs(np.asarray(s_module) - np.asarray(s_nqf)) / s, axis=(-2, -1))
