"""Runs of an experiment over a grid of two config lists, per-architecture Datasets, and the
seed of a teacher drawn from the data seed."""
from __future__ import annotations

from typing import TYPE_CHECKING

import xarray as xr

if TYPE_CHECKING:
    import torch



# A teacher's random stream starts this far past its data seed, away from the students' init
# seeds (small integers), so that no student starts along the teacher (seed 0 is not the teacher).
TEACHER_SEED_OFFSET = 1_000_003


def teacher_generator(data_seed: int) -> torch.Generator:
    """The torch generator a kind draws its teacher (and then the teacher's inputs) from."""
    import torch

    return torch.Generator().manual_seed(TEACHER_SEED_OFFSET + data_seed)


def grid_runs(cfg: dict, run_id, rows: str, cols: str) -> list[str]:
    """The run ids of an experiment with one run per pair of entries of two config lists (e.g.
    architectures x optimizers): ``run_id(row, col)``, rows outermost."""
    return [run_id(a, b) for a in cfg[rows] for b in cfg[cols]]


def grid_cell(cfg: dict, run: str, run_id, rows: str, cols: str) -> tuple:
    """The (row, col) entries whose run id (:func:`grid_runs`) is ``run``; a ValueError naming the
    experiment's runs where there is none."""
    for a in cfg[rows]:
        for b in cfg[cols]:
            if run_id(a, b) == run:
                return a, b
    raise ValueError(f"Run {run!r} is not one of this experiment's runs "
                     f"({', '.join(grid_runs(cfg, run_id, rows, cols))}).")


def per_arch_dataset(kind: str, archs: list, **variables) -> xr.Dataset:
    """A Dataset of one number per architecture (dimension ``arch``): each keyword is a variable,
    ``name=(values, long_name)`` (units 1)."""
    return xr.Dataset({name: ("arch", values, {"units": "1", "long_name": long_name})
                       for name, (values, long_name) in variables.items()},
                      coords={"arch": archs}, attrs={"experiment_kind": kind})
