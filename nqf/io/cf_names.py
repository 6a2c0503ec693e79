"""CF attributes of the names every stage uses, so that no file carries an undescribed variable.

:func:`nqf.io.netcdf.write_dataset` fills ``long_name`` and ``units`` from :data:`DEFAULTS` where a
writer left them out (a writer's own attributes always win). CF asks ``units`` of every numeric
variable that is not a flag (booleans are written as int8 flags with ``flag_values``; counts and
indices are dimensionless, "1"); text variables have no units. A name not listed here gets a
``long_name`` made from the name itself, so the CF checker finds no undescribed variable, but a
writer should say what a new variable is.
"""
from __future__ import annotations

import fnmatch

import numpy as np
import xarray as xr

# name (or fnmatch pattern) -> (long_name, units); units None for text
DEFAULTS: dict[str, tuple[str, str | None]] = {
    "step": ("optimizer step (0 = initial weights)", "1"),
    "record": ("index of the recorded step within a run", "1"),
    "seed": ("random seed of the replica (initial weights or data draw)", "1"),
    "mode": ("Lotka-Volterra mode index k (shared-eigenbasis direction)", "1"),
    "mode_j": ("Lotka-Volterra mode index j (second index of C_kj)", "1"),
    "sample": ("training sample index mu", "1"),
    "test_sample": ("test sample index", "1"),
    "entry": ("entry index of a sample's data matrix", "1"),
    "param": ("index of a unit's parameter (row of W)", "1"),
    "row": ("row index of a p x p matrix", "1"),
    "col": ("column index of a p x p matrix", "1"),
    "eig": ("eigenvalue index (descending)", "1"),
    "k": ("singular value index (1 = largest)", "1"),
    "unit": ("unit (neuron) index i of W = [w_1 ... w_d]", "1"),
    "teacher_unit": ("unit index of the teacher", "1"),
    "output": ("output index c (vector outputs, App. B.2)", "1"),
    "probe": ("probe input index", "1"),
    "plateau": ("plateau index of the predicted staircase", "1"),
    "drop": ("index of a loss drop", "1"),
    "rank": ("rank in the ignition order (0 = first)", "1"),
    "claim": ("index of a checked claim", "1"),
    "eps": ("initial scale eps of the weights", "1"),
    "lr": ("learning rate", "1"),
    "run": ("run id (file name under results/runs/<experiment>/)", None),
    "experiment": ("experiment id of the config", None),
    "experiment_kind": ("experiment kind", None),
    "architecture": ("architecture", None),
    "arch": ("architecture", None),
    "model": ("model that was trained", None),
    "optimizer": ("optimizer", None),
    "init": ("initialisation of the weights", None),
    "loss_convention": ("loss convention the optimizer saw (nqf.theory.losses)", None),
    "seed_block_of": ("run whose seeds this file holds a block of", None),
    "regime": ("solved regime the prediction uses", None),
    "C_diag": ("diagonal of the interaction matrix C_kk", "1"),
    "claim_quantity": ("what the claim measures", None),
    "claim_checks": ("what the claim checks (paper, theorem or ours; construction: holds by construction, not counted)", None),
    "claim_reading": ("reading (convention) the claim ran under", None),
    "claim_source": ("source of the claim (figure and sentence)", None),
    "claim_tolerance_source": ("error budget the tolerance comes from", None),
    "claim_note": ("why the claim misses, or what it shows", None),
    "claim_predicted": ("predicted value", "1"),
    "claim_measured": ("measured value", "1"),
    "claim_rel_error": ("relative error |measured / predicted - 1|", "1"),
    "claim_tolerance": ("tolerance of the comparison", "1"),
    "claim_passed": ("claim holds", None),
    "claim_judged": ("claim judged (0: the run could not reach what it measures, or its tolerance is off the scale)", None),
    "digit_*": ("digit label of the image", "1"),
    "drop_*": ("index of the mode or sample whose drop this is", "1"),
    "k_V": ("rank k_V of the data span", "1"),
    "*_order": ("order index", "1"),
}


def _default(name: str) -> tuple[str, str | None] | None:
    if name in DEFAULTS:
        return DEFAULTS[name]
    for pattern, value in DEFAULTS.items():
        if any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(name, pattern):
            return value
    return None


def is_flag(var: xr.Variable) -> bool:
    """A boolean stored as int8 flags (CF ``flag_values``): no units."""
    return "flag_values" in var.attrs


def describe_variables(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with ``long_name`` and, for numeric non-flag variables, ``units`` on every variable
    and coordinate (writer's attributes kept; defaults from :data:`DEFAULTS`). Changes ``ds``."""
    for name in list(ds.variables):
        var = ds.variables[name]
        default = _default(str(name))
        if "long_name" not in var.attrs and "standard_name" not in var.attrs:
            var.attrs["long_name"] = default[0] if default else str(name).replace("_", " ")
        numeric = np.dtype(var.dtype).kind in "fiuc"
        if numeric and not is_flag(var) and "units" not in var.attrs:
            var.attrs["units"] = default[1] if default and default[1] else "1"
    return ds
