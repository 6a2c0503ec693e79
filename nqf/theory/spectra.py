"""Measures on recorded singular-value trajectories, kept free of torch so that the fit jobs
that compute them run without importing it (re-exported by nqf.training.approximation)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def deviation(s_module: np.ndarray, s_nqf: np.ndarray, s_target: Sequence[float]) -> np.ndarray:
    """D = max over steps and k of |s_k,module - s_k,NQF| / s_k, per leading replica index.

    Arrays are (..., step, k); the result has the leading shape.
    """
    from nqf import validate

    s_module = validate.array("s_module", s_module, finite=None)
    s_nqf = validate.array("s_nqf", s_nqf, finite=None)
    if s_module.ndim < 2 or s_module.shape != s_nqf.shape:
        raise ValueError(f"s_module and s_nqf must have one shape (..., step, k); got {s_module.shape} and {s_nqf.shape}.")
    s = validate.positive("s_target", validate.array("s_target", s_target, shape=(s_module.shape[-1],)),
                         what=" (the target's singular values divide the deviation)")
    return np.max(np.abs(s_module - s_nqf) / s, axis=(-2, -1))
