"""nqf: Neural Quadratic Forms (Ziyin, Xu, Poggio, Chuang, arXiv 2608.13335) as a library.

The top level holds the names a first session needs (the tour of docs/library.md); everything else is
imported from its submodule (``nqf.theory.closed_forms.theorem5``, ``nqf.theory.scaling.power_law_test``,
``nqf.theory.staircase.staircase_from_init``, ``nqf.training.loop.log_step_grid``, ...).

* Structure: ``DenseForm``, ``DiagonalForm``, ``StructureForm`` (nqf.theory.forms); ``structure_matrix``
  and ``expansion`` of any unit function (nqf.theory.taylor); ``architectures`` (the module registry).
* Predictions: ``predict`` (picks the exact solution that applies; nqf.theory.solutions), ``mflow``
  (closed M-flow), ``discrete_flow`` (exact GD recursions), ``LotkaVolterra``, ``glv``,
  ``logistic_solution``, ``lv_coefficients``, ``shared_eigenbasis`` (nqf.theory.lotka_volterra),
  ``staircase`` (eps -> 0 limit), ``predicted_ignition_times``, ``ignition_times``,
  ``predicted_seed_scatter`` (nqf.theory.ignition), ``predict_exponent``, ``fit_power_law`` (nqf.theory.scaling).
* Your own layer: ``ModuleUnits`` (an ordinary torch.nn.Module read as units; structure_matrix,
  expansion and train take the module with ``units=`` directly).
* Training: ``QuadraticModel``, ``train``, ``TrainingDiverged``.
* ``NQFWarning``: the category of every warning about a usable but degraded result (a run that
  did not settle, a half-precision loss floor, ZGZ failing); ``warnings.simplefilter("error",
  nqf.NQFWarning)`` turns them into errors.

The names are resolved on first use (PEP 562): ``import nqf`` loads no submodule, so a workflow
job that needs only the theory (numpy, scipy) never pays for importing torch.
"""
from __future__ import annotations

import importlib
import importlib.util

__version__ = "0.1.0"

# public name -> the submodule that defines it
_SOURCES = {
    **dict.fromkeys(("DenseForm", "DiagonalForm", "StructureForm"), "nqf.theory.forms"),
    **dict.fromkeys(("expansion", "structure_matrix"), "nqf.theory.taylor"),
    **dict.fromkeys(("Solution", "predict"), "nqf.theory.solutions"),
    "mflow": "nqf.theory.mflow",
    "discrete_flow": "nqf.theory.recursions",
    **dict.fromkeys(("LotkaVolterra", "glv", "logistic_solution", "lv_coefficients", "shared_eigenbasis"),
                    "nqf.theory.lotka_volterra"),
    "staircase": "nqf.theory.staircase",
    **dict.fromkeys(("ignition_times", "predicted_ignition_times", "predicted_seed_scatter"), "nqf.theory.ignition"),
    **dict.fromkeys(("fit_power_law", "predict_exponent"), "nqf.theory.scaling"),
    "ModuleUnits": "nqf.architectures.module_units",
    "QuadraticModel": "nqf.training.quadratic",
    "train": "nqf.training.loop",
    "TrainingDiverged": "nqf.errors",
    "open_runs": "nqf.io.runs",
    "NQFWarning": "nqf.errors",
}

__all__ = [*_SOURCES, "architectures"]


def _lazy_names(namespace: dict, sources: dict[str, str], public: list[str]):
    """PEP 562 ``__getattr__`` and ``__dir__`` for the package whose globals are ``namespace``: a
    name of ``sources`` is read from its submodule on first use, any other name that is a
    submodule is imported as after an eager import (nqf.theory.forms etc.); later look-ups find the
    name in the globals and skip the function."""
    package = namespace["__name__"]

    def __getattr__(name: str):
        if name in sources:
            value = getattr(importlib.import_module(sources[name]), name)
        elif not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    return __getattr__, __dir__


__getattr__, __dir__ = _lazy_names(globals(), _SOURCES, __all__)
