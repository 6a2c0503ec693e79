"""nqf: Neural Quadratic Forms (Ziyin, Xu, Poggio, Chuang, arXiv 2608.13335) as a library.

The public surface is small and flat; see the README for a tour.
"""
from nqf.forms import DenseForm, DiagonalForm, StructureForm
from nqf.ignition import ignition_times, predicted_ignition_times
from nqf.lotka_volterra import LotkaVolterra, glv, logistic_solution, lv_coefficients, shared_eigenbasis
from nqf.quadratic import QuadraticModel, resolve_device
from nqf.training import TrainingDiverged, log_step_grid, train

__version__ = "0.1.0"

__all__ = [
    "DenseForm", "DiagonalForm", "StructureForm", "LotkaVolterra", "QuadraticModel",
    "TrainingDiverged", "glv", "ignition_times", "log_step_grid", "logistic_solution",
    "lv_coefficients", "predicted_ignition_times", "resolve_device", "shared_eigenbasis", "train",
]
from nqf import architectures  # noqa: E402,F401
from nqf.taylor import Expansion, NotSmoothError, ZGZWarning, expansion, structure_matrix  # noqa: E402,F401

__all__ += ["Expansion", "NotSmoothError", "ZGZWarning", "architectures", "expansion", "structure_matrix"]
from nqf.closed_forms import ScalarFlow, corollary4, theorem4, theorem5, theorem7, theorem16  # noqa: E402
from nqf.ignition import mode_ignition_times, predicted_seed_scatter  # noqa: E402
from nqf.mflow import SecondMoment, mflow  # noqa: E402
from nqf.recursions import discrete_flow, sgd_moments  # noqa: E402
from nqf.solutions import Solution, integrate_glv, predict  # noqa: E402
from nqf.staircase import Staircase, staircase, staircase_from_init  # noqa: E402

__all__ += [
    "ScalarFlow", "SecondMoment", "Solution", "Staircase", "corollary4", "discrete_flow",
    "integrate_glv", "mflow", "mode_ignition_times", "predict", "predicted_seed_scatter",
    "sgd_moments", "staircase", "staircase_from_init", "theorem4", "theorem5", "theorem7", "theorem16",
]
from nqf.scaling import (ExponentPrediction, PowerLawFit, count_drops, fit_power_law,  # noqa: E402
                         power_law_test, predict_exponent, theory_window, window_sensitivity)

__all__ += ["ExponentPrediction", "PowerLawFit", "count_drops", "fit_power_law", "power_law_test",
            "predict_exponent", "theory_window", "window_sensitivity"]
