"""nqf: Neural Quadratic Forms (Ziyin, Xu, Poggio, Chuang, arXiv 2608.13335) as a library.

The public surface is small and flat; see the README for a tour.

The names below are resolved on first use (PEP 562): ``import nqf`` loads no submodule, so a
workflow job that needs only the theory (numpy, scipy) never pays for importing torch.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types

__version__ = "0.1.0"

# public name -> the submodule that defines it
_SOURCES = {
    **dict.fromkeys(("DenseForm", "DiagonalForm", "StructureForm"), "nqf.forms"),
    **dict.fromkeys(("ignition_times", "predicted_ignition_times", "mode_ignition_times",
                     "predicted_seed_scatter"), "nqf.ignition"),
    **dict.fromkeys(("LotkaVolterra", "glv", "logistic_solution", "lv_coefficients", "shared_eigenbasis"),
                    "nqf.lotka_volterra"),
    **dict.fromkeys(("QuadraticModel", "resolve_device"), "nqf.quadratic"),
    **dict.fromkeys(("TrainingDiverged", "log_step_grid", "train"), "nqf.training"),
    **dict.fromkeys(("Expansion", "NotSmoothError", "ZGZWarning", "expansion", "structure_matrix"), "nqf.taylor"),
    **dict.fromkeys(("ScalarFlow", "corollary4", "theorem4", "theorem5", "theorem7", "theorem16"),
                    "nqf.closed_forms"),
    **dict.fromkeys(("SecondMoment", "mflow"), "nqf.mflow"),
    **dict.fromkeys(("discrete_flow", "sgd_moments"), "nqf.recursions"),
    **dict.fromkeys(("Solution", "predict"), "nqf.solutions"),
    **dict.fromkeys(("Staircase", "staircase", "staircase_from_init"), "nqf.staircase"),
    **dict.fromkeys(("ExponentPrediction", "PowerLawFit", "count_drops", "fit_power_law", "power_law_test",
                     "predict_exponent", "theory_window", "window_sensitivity"), "nqf.scaling"),
}

__all__ = [
    "DenseForm", "DiagonalForm", "StructureForm", "LotkaVolterra", "QuadraticModel",
    "TrainingDiverged", "glv", "ignition_times", "log_step_grid", "logistic_solution",
    "lv_coefficients", "predicted_ignition_times", "resolve_device", "shared_eigenbasis", "train",
]
__all__ += ["Expansion", "NotSmoothError", "ZGZWarning", "architectures", "expansion", "structure_matrix"]
__all__ += [
    "ScalarFlow", "SecondMoment", "Solution", "Staircase", "corollary4", "discrete_flow",
    "mflow", "mode_ignition_times", "predict", "predicted_seed_scatter",
    "sgd_moments", "staircase", "staircase_from_init", "theorem4", "theorem5", "theorem7", "theorem16",
]
__all__ += ["ExponentPrediction", "PowerLawFit", "count_drops", "fit_power_law", "power_law_test",
            "predict_exponent", "theory_window", "window_sensitivity"]


def __getattr__(name: str):
    if name in _SOURCES:
        value = getattr(importlib.import_module(_SOURCES[name]), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")  # nqf.forms etc., as after an eager import
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The nqf package: importing the submodule nqf.mflow (or nqf.staircase) would set the package
    attribute of that name to the module, hiding the public function of the same name; the
    function keeps the name, as when the package imported it eagerly."""

    def __setattr__(self, name: str, value) -> None:
        if name in _SOURCES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
