"""Safe loading and numerical guards (issue 9): nothing from a config or data file reaches
eval/exec or an unpickler, and the theory code handles eps down to 1e-30 and modes that never
switch on (r_k <= 0) without overflow, NaN or warnings (RuntimeWarning is an error in this suite)."""
import re

import numpy as np
import pytest

import nqf
from nqf.closed_forms import corollary4, theorem5, theorem7_modes, theorem16
from nqf.ignition import predicted_ignition_times, predicted_seed_scatter
from nqf.lotka_volterra import glv, logistic_solution
from nqf.stability import max_stable_lr
from nqf.staircase import staircase, staircase_from_init

from helpers import ROOT

SOURCES = sorted([*(ROOT / "nqf").rglob("*.py"), *(ROOT / "workflow").rglob("*.py"),
                  *(ROOT / "workflow").rglob("*.smk"), ROOT / "Snakefile"])

FORBIDDEN = {
    r"(?<![\w.])eval\(": "eval",
    r"(?<![\w.])exec\(": "exec",
    r"\bpickle\b|\bdill\b|\bjoblib\b|\bmarshal\b": "an unpickler",
    r"yaml\.load\(|yaml\.unsafe_load|yaml\.full_load|Loader\s*=": "an unsafe YAML loader",
    r"allow_pickle\s*=\s*True": "numpy's pickle loading",
}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_unsafe_loading_in_the_code(path):
    text = path.read_text()
    for pattern, what in FORBIDDEN.items():
        assert not re.search(pattern, text), f"{path.name} uses {what}"
    # torch checkpoints, if any appear, must be loaded with weights_only=True
    for call in re.findall(r"torch\.load\([^)]*\)", text):
        assert "weights_only=True" in call, f"{path.name}: {call}"


R = np.array([1.0, 0.5, 0.0, -0.3])  # two modes that grow, one flat, one that decays
C = np.diag([1.0, 2.0, 1.0, 0.5])


@pytest.mark.parametrize("eps", [1e-5, 1e-15, 1e-30])
def test_mode_dynamics_at_tiny_eps_and_non_positive_rates(eps):
    t = np.linspace(0.0, 40.0 * np.log(1 / eps), 60)
    z0 = np.full(4, eps)
    for z in (logistic_solution(R, np.diag(C), z0, t), glv(R, C, z0, t), glv(R, C + 0.05, z0, t),
              theorem16(R, np.diag(C), z0, t), theorem7_modes(R, 1.0, z0, t)):
        assert np.all(np.isfinite(z)) and np.all(z >= 0)
        # never learnt: stays at its start (up to the integrators' relative tolerance) or decays
        assert z[-1, 2] <= eps * (1 + 1e-9) and z[-1, 3] < eps
    assert np.all(np.isfinite(corollary4(R, np.diag(C), z0, t)))
    t_star = predicted_ignition_times(R, np.diag(C), eps)
    assert np.all(np.isfinite(t_star[:2])) and np.all(np.isinf(t_star[2:]))
    assert np.all(np.isinf(predicted_seed_scatter(R, 4)[2:]))
    assert np.all(np.isinf(staircase_from_init(R, C, z0, eps).ignition_tau[2:]))


def test_staircase_and_samplewise_flows_with_unlearnable_parts():
    sc = staircase(R, C, -1.0, loss0=1.0)
    assert np.allclose(sc.ignition_tau[:2], [1.0, 2.0]) and np.all(np.isinf(sc.ignition_tau[2:]))
    lam = np.array([[1.0, 0.5, 0.0], [0.0, 0.0, 2.0]])
    z = theorem5(lam, np.array([1.0, -0.5]), np.full(3, 1e-30), np.linspace(0, 200, 40))
    assert np.all(np.isfinite(z)) and np.all(z >= 0)


def test_stable_lr_with_modes_that_are_never_learnt():
    # z* = 0 for the modes with r <= 0: they add nothing to the Hessian at the minimum
    z_star = np.array([1.0, 0.25, 0.0, 0.0])
    assert max_stable_lr(C, z_star) == pytest.approx(2.0)
    assert max_stable_lr(C, np.zeros(4)) == np.inf


def test_exponent_prediction_refuses_modes_that_never_switch_on():
    with pytest.raises(ValueError, match="never do"):
        nqf.predict_exponent(R, np.ones(4), t_star=np.arange(1.0, 5.0))
