"""The steps at which a trajectory is recorded: log-spaced integer grids shared by the trainers
(nqf.training.loop) and the exact recursions (nqf.theory.recursions)."""
from __future__ import annotations

import numpy as np

from nqf import validate


def log_step_grid(steps: int, n_points: int) -> np.ndarray:
    """Integer steps 0..steps, log-spaced (about n_points of them, always including 0 and steps)."""
    steps = validate.integer("steps", steps, minimum=1)
    n_points = validate.integer("n_points", n_points, minimum=2)
    target = min(n_points - 1, steps)
    validate.memory(f"a step grid of {target + 1} points", 32 * (target + 1), "lower n_points (or n_record)")
    if target == steps:  # every step
        return np.arange(steps + 1, dtype=np.int64)
    k = target
    while True:  # rounding merges the small steps; sample more densely until n points remain
        grid = np.unique(np.rint(np.geomspace(1, steps, k)).astype(np.int64))
        if grid.size >= target:
            break
        k += target - grid.size
    return np.concatenate([[0], grid])


def record_grid(record_steps, steps: int) -> np.ndarray:
    """The recording steps: integers in [0, steps], at least one."""
    grid = np.unique(validate.array("record_steps", record_steps, ndim=1, nonempty=True))
    if np.any(grid != np.rint(grid)) or grid[0] < 0 or grid[-1] > steps:
        raise ValueError(f"record_steps must be integers in [0, {steps}]; got {validate.describe(grid)}.")
    return grid.astype(np.int64)
