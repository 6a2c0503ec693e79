"""Public library calls refuse bad arguments at the call (issue 16, item 9).

Each case is a call that used to return garbage (a broadcast target, a corner of a wrong-shaped
C, NaN read as 0, an indefinite C integrated, negative z, inf/NaN ignition times, a float32 init
that underflows) or to fail with a raw numpy/torch error far from the cause. Now each raises
ValueError or TypeError in one sentence that names the argument; the words listed must appear.
"""
import math

import numpy as np
import pytest
import torch
import xarray as xr

from nqf import architectures as arch
from nqf import validate
from nqf.architectures.effective import effective_matrix, singular_values, teacher_weights
from nqf.architectures.mode_designs import design
from nqf.architectures.mode_designs import initial_weights as design_weights
from nqf.data.datasets import load_digit_task
from nqf.data.orthogonal import random_orthogonal
from nqf.errors import ZGZWarning
from nqf.io.netcdf import config_of, open_result, restore_labels, write_dataset, write_text
from nqf.io.runs import by_record, open_runs, with_run_coordinates
from nqf.pipeline.local import run_experiment
from nqf.theory.closed_forms import (
    corollary4,
    corollary4_init,
    corollary4_modes,
    theorem4,
    theorem5,
    theorem7,
    theorem7_modes,
    theorem16,
)
from nqf.theory.forms import DenseForm, DiagonalForm
from nqf.theory.fourier_modes import fourier_features, predicted_windows
from nqf.theory.ignition import (
    ignition_times,
    mode_ignition_times,
    predicted_ignition_times,
    predicted_seed_scatter,
)
from nqf.theory.losses import flow_lr, loss_factor
from nqf.theory.lotka_volterra import (
    LotkaVolterra,
    glv,
    logistic_solution,
    lv_coefficients,
    shared_eigenbasis,
)
from nqf.theory.mflow import SecondMoment, mflow
from nqf.theory.mode_theory import ordered_seed_scatter, slope_fit, std_relative_error
from nqf.theory.recursions import discrete_flow
from nqf.theory.scaling import (
    count_drops,
    fit_power_law,
    power_law_test,
    predict_exponent,
    theory_window,
    window_sensitivity,
)
from nqf.theory.solutions import predict
from nqf.theory.spectra import deviation
from nqf.theory.stability import hessian_at_minimum, max_stable_lr
from nqf.theory.staircase import staircase, staircase_from_init
from nqf.theory.taylor import expansion, structure_matrix
from nqf.training.loop import log_step_grid, train
from nqf.training.quadratic import QuadraticModel

NAN = float("nan")
R2 = np.array([1.0, 0.5])
C2 = np.diag([1.0, 2.0])
T5 = np.linspace(0.0, 5.0, 5)
LAM = np.array([[1.0, 0.0], [0.0, 2.0]])
Y2 = np.array([1.0, 0.5])
INDEFINITE = np.array([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and -1
TT = np.logspace(0, 3, 40)
ZETA = 1.0 / np.arange(1, 31) ** 1.2
V30 = 1.0 / np.arange(1, 31) ** 2.0
TSTAR = np.log(1e6) / ZETA


def form():
    return DiagonalForm(torch.as_tensor(LAM))


def model(W0=None, **kw):
    kw.setdefault("device", "cpu")
    return QuadraticModel(form(), 0.1 * np.eye(2) if W0 is None else W0, **kw)


def unit(w, x):
    return torch.tanh(w @ x) ** 2


X3 = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64)

# (id, call, exception type, words the message must contain)
CASES = [
    # targets that would broadcast, NaN targets, shapes
    ("train: y of length 1 for 2 samples", lambda: train(model(), [1.0], lr=0.1, steps=3), ValueError, ["y", "(2,)"]),
    ("train: y NaN", lambda: train(model(), [1.0, NAN], lr=0.1, steps=3), ValueError, ["y", "finite"]),
    ("train: y of shape (2, 3)", lambda: train(model(), np.ones((2, 3)), lr=0.1, steps=3), ValueError, ["y", "(2, 3)"]),
    ("train: lr a string", lambda: train(model(), Y2, lr="0.1", steps=3), TypeError, ["lr", "real number"]),
    ("train: lr NaN", lambda: train(model(), Y2, lr=NAN, steps=3), ValueError, ["lr", "> 0"]),
    ("train: steps 2.5", lambda: train(model(), Y2, lr=0.1, steps=2.5), TypeError, ["steps", "integer"]),
    ("train: momentum NaN", lambda: train(model(), Y2, lr=0.1, steps=3, optimizer="momentum", momentum=NAN),
     ValueError, ["momentum", "< 1"]),
    ("train: weight_decay -1", lambda: train(model(), Y2, lr=0.1, steps=3, weight_decay=-1.0), ValueError,
     ["weight_decay", ">= 0"]),
    ("train: record_steps empty", lambda: train(model(), Y2, lr=0.1, steps=3, record_steps=[]), ValueError,
     ["record_steps", "empty"]),
    ("train: record_steps 1.5", lambda: train(model(), Y2, lr=0.1, steps=3, record_steps=[0, 1.5]), ValueError,
     ["record_steps", "integers"]),
    ("log_step_grid: n_points 1", lambda: log_step_grid(10, 1), ValueError, ["n_points", ">= 2"]),
    ("QuadraticModel: W0 NaN", lambda: model(np.array([[NAN, 0.0], [0.0, 1.0]])), ValueError, ["W0", "finite"]),
    ("QuadraticModel: W0 1-D", lambda: model(np.ones(2)), ValueError, ["W0", "2-D or 3-D"]),
    ("QuadraticModel: device 'tpu'", lambda: model(device="tpu"), ValueError, ["device", "'cpu'"]),
    ("QuadraticModel: device 'cuda:x'", lambda: model(device="cuda:x"), ValueError, ["device", "'cuda:<n>'"]),
    ("QuadraticModel: float32 init that rounds to no change (eps 1e-90)",
     lambda: model(math.sqrt(1e-90) * np.eye(2), dtype=torch.float32), ValueError, ["W0", "float32", "eps >= 1.38e-76"]),
    ("QuadraticModel: float32 subnormal init (eps 1e-80)",
     lambda: model(math.sqrt(1e-80) * np.eye(2), dtype=torch.float32), ValueError, ["W0", "float32", "1.18e-38"]),
    ("QuadraticModel: float32 overflow", lambda: model(1e39 * np.eye(2), dtype=torch.float32), ValueError,
     ["W0", "float32", "largest"]),
    ("QuadraticModel: dtype int", lambda: model(dtype=torch.int64), TypeError, ["dtype", "floating"]),
    # structure forms and A(x)
    ("DenseForm: A NaN", lambda: DenseForm(torch.full((2, 2, 2), NAN, dtype=torch.float64)), ValueError, ["A", "finite"]),
    ("DiagonalForm: diag NaN", lambda: DiagonalForm(torch.tensor([[1.0, NAN]], dtype=torch.float64)), ValueError,
     ["diag", "finite"]),
    ("DiagonalForm: no samples", lambda: DiagonalForm(torch.zeros((0, 2), dtype=torch.float64)), ValueError,
     ["diag", "at least one sample"]),
    ("structure_matrix: x NaN", lambda: structure_matrix(unit, torch.tensor([NAN, 0.1, 0.2], dtype=torch.float64), 3),
     ValueError, ["x", "finite"]),
    ("structure_matrix: p 0", lambda: structure_matrix(unit, X3, 0), ValueError, ["p", ">= 1"]),
    ("structure_matrix: p 2.5", lambda: structure_matrix(unit, X3, 2.5), TypeError, ["p", "integer"]),
    ("structure_matrix: p does not fit the unit", lambda: structure_matrix(unit, X3, 4), ValueError, ["p = 4", "unit"]),
    ("expansion: p -1", lambda: expansion(unit, X3, -1), ValueError, ["p", ">= 1"]),
    # Lotka-Volterra reduction and solutions
    ("lv_coefficients: y of length 1 for 2 samples", lambda: lv_coefficients(LAM, [1.0]), ValueError, ["y", "m = 2"]),
    ("lv_coefficients: lam NaN", lambda: lv_coefficients([[NAN, 1.0], [0.0, 1.0]], Y2), ValueError, ["lam", "finite"]),
    ("lv_coefficients: lam 1-D", lambda: lv_coefficients([1.0, 2.0], Y2), ValueError, ["lam", "2-D"]),
    ("glv: C 3 x 3 for 2 modes", lambda: glv(R2, np.eye(3), [0.1, 0.1], T5), ValueError, ["C", "2 x 2"]),
    ("glv: C diagonal of length 3", lambda: glv(R2, np.ones(3), [0.1, 0.1], T5), ValueError, ["C", "(2,)"]),
    ("glv: z0 NaN", lambda: glv(R2, np.eye(2) + 0.1, [NAN, 0.1], T5), ValueError, ["z0", "finite"]),
    ("glv: z0 negative", lambda: glv(R2, C2, [-0.1, 0.1], T5), ValueError, ["z0", "non-negative"]),
    ("glv: z0 of length 3", lambda: glv(R2, C2, [0.1, 0.1, 0.1], T5), ValueError, ["z0", "one entry per mode"]),
    ("glv: r NaN", lambda: glv([NAN, 1.0], C2, [0.1, 0.1], T5), ValueError, ["r", "finite"]),
    ("glv: t NaN", lambda: glv(R2, C2, [0.1, 0.1], [0.0, NAN, 2.0]), ValueError, ["t", "finite"]),
    ("glv: t decreasing", lambda: glv(R2, C2, [0.1, 0.1], [0.0, 2.0, 1.0]), ValueError, ["t", "increasing"]),
    ("glv: t empty", lambda: glv(R2, C2, [0.1, 0.1], []), ValueError, ["t", "empty"]),
    ("glv: t negative", lambda: glv(R2, C2, [0.1, 0.1], [-1.0, 1.0]), ValueError, ["t", ">= 0"]),
    ("glv: C indefinite", lambda: glv(R2, INDEFINITE, [0.1, 0.1], T5), ValueError,
     ["C", "positive semi-definite", "-1"]),
    ("glv: C not symmetric", lambda: glv(R2, np.array([[1.0, 0.5], [0.0, 1.0]]), [0.1, 0.1], T5), ValueError,
     ["C", "symmetric"]),
    ("glv: negative diagonal C", lambda: glv(R2, [-1.0, 1.0], [0.1, 0.1], T5), ValueError, ["C", "non-negative"]),
    ("glv: method 'euler'", lambda: glv(R2, C2, [0.1, 0.1], T5, method="euler"), ValueError, ["method", "Radau"]),
    ("LotkaVolterra: indefinite C", lambda: LotkaVolterra(r=R2, C=INDEFINITE, lam=LAM, y=Y2, basis=np.eye(2)),
     ValueError, ["C", "positive semi-definite"]),
    ("LotkaVolterra: C 3 x 3", lambda: LotkaVolterra(r=R2, C=np.eye(3), lam=LAM, y=Y2, basis=np.eye(2)), ValueError,
     ["C", "2 x 2"]),
    ("LotkaVolterra.from_data: y of length 1", lambda: LotkaVolterra.from_data(form(), [1.0]), ValueError, ["y", "(2)"]),
    ("logistic_solution: c < 0", lambda: logistic_solution(R2, [-1.0, 1.0], [0.1, 0.1], T5), ValueError,
     ["c", "non-negative"]),
    ("logistic_solution: z0 < 0", lambda: logistic_solution(R2, [1.0, 1.0], [-0.1, 0.1], T5), ValueError,
     ["z0", "non-negative"]),
    ("logistic_solution: t NaN", lambda: logistic_solution(R2, [1.0, 1.0], [0.1, 0.1], [0.0, NAN]), ValueError,
     ["t", "finite"]),
    ("logistic_solution: t 2-D", lambda: logistic_solution(R2, [1.0, 1.0], [0.1, 0.1], np.ones((2, 2))), ValueError,
     ["t", "1-D"]),
    ("logistic_solution: c of length 3", lambda: logistic_solution(R2, [1.0, 1.0, 1.0], [0.1, 0.1], T5), ValueError,
     ["c", "one entry per mode"]),
    ("shared_eigenbasis: not a form", lambda: shared_eigenbasis(np.eye(2)), TypeError, ["form", "StructureForm"]),
    # ignition times
    *[(f"predicted_ignition_times: eps {eps}", lambda eps=eps: predicted_ignition_times(R2, [1.0, 2.0], eps),
       ValueError, ["eps", "> 0"]) for eps in (0.0, -1.0)],
    *[(f"predicted_ignition_times: eps {eps}", lambda eps=eps: predicted_ignition_times(R2, [1.0, 2.0], eps),
       ValueError, ["eps", "finite"]) for eps in (NAN, math.inf)],
    ("train: y of shape (R, m) with R = 2 replicas of a QuadraticModel",
     lambda: train(model(np.stack([0.1 * np.eye(2)] * 2)), np.ones((2, 2)), lr=0.1, steps=3), ValueError, ["y", "(2,)"]),
    ("predicted_ignition_times: rho 0", lambda: predicted_ignition_times(R2, [1.0, 2.0], 1e-3, rho=0.0), ValueError,
     ["rho", "> 0"]),
    ("predicted_ignition_times: a 0", lambda: predicted_ignition_times(R2, [1.0, 2.0], 1e-3, a=0.0), ValueError,
     ["a", "> 0"]),
    ("predicted_ignition_times: C_k < 0", lambda: predicted_ignition_times(R2, [-1.0, 2.0], 1e-3), ValueError,
     ["C_k", "non-negative"]),
    ("predicted_ignition_times: zeta NaN", lambda: predicted_ignition_times([NAN, 1.0], [1.0, 2.0], 1e-3), ValueError,
     ["zeta", "finite"]),
    ("predicted_ignition_times: shapes 2 and 3", lambda: predicted_ignition_times(R2, [1.0, 2.0, 3.0], 1e-3),
     ValueError, ["C_k (3,)", "broadcastable"]),
    ("predicted_seed_scatter: zeta NaN", lambda: predicted_seed_scatter([NAN, 1.0], 4), ValueError, ["zeta", "finite"]),
    ("predicted_seed_scatter: d 2.5", lambda: predicted_seed_scatter(R2, 2.5), TypeError, ["d", "integer"]),
    ("ignition_times: t NaN", lambda: ignition_times([0.0, NAN, 2.0], np.ones((3, 2))), ValueError, ["t", "finite"]),
    ("ignition_times: t decreasing", lambda: ignition_times([0.0, 2.0, 1.0], np.ones((3, 2))), ValueError,
     ["t", "increasing"]),
    ("ignition_times: z NaN", lambda: ignition_times([0.0, 1.0, 2.0], [[0.1, NAN], [0.5, 0.5], [1.0, 1.0]]),
     ValueError, ["z", "finite"]),
    ("ignition_times: z with 2 time points for 3", lambda: ignition_times([0.0, 1.0, 2.0], np.ones((2, 2))),
     ValueError, ["z", "one row per entry of t"]),
    ("mode_ignition_times: M 2-D", lambda: mode_ignition_times([0.0, 1.0], np.eye(2)), ValueError, ["M", "(..., T, p, p)"]),
    # staircase
    ("staircase: r NaN", lambda: staircase([NAN, 1.0], C2), ValueError, ["r", "finite"]),
    ("staircase: C 3 x 3", lambda: staircase(R2, np.eye(3)), ValueError, ["C", "2 x 2"]),
    ("staircase: negative diagonal C", lambda: staircase([-1.0, 1.0], [-1.0, 1.0]), ValueError, ["C", "non-negative"]),
    ("staircase: indefinite C", lambda: staircase(R2, INDEFINITE), ValueError, ["C", "positive semi-definite"]),
    ("staircase: x0 +inf", lambda: staircase(R2, C2, np.inf), ValueError, ["x0", "+inf"]),
    ("staircase_from_init: eps 1", lambda: staircase_from_init(R2, C2, [1e-3, 1e-3], 1.0), ValueError, ["eps", "< 1"]),
    # flows and predictions
    ("mflow: t NaN", lambda: mflow(form(), M0=0.01 * np.eye(2), t=[0.0, NAN], y=Y2), ValueError, ["t", "finite"]),
    ("mflow: M0 NaN", lambda: mflow(form(), M0=np.array([[NAN, 0], [0, 0.1]]), t=T5, y=Y2), ValueError,
     ["M0", "finite"]),
    ("mflow: M0 indefinite", lambda: mflow(form(), M0=np.array([[-1.0, 0], [0, 0.1]]), t=T5, y=Y2), ValueError,
     ["M0", "positive semi-definite"]),
    ("mflow: y of length 1", lambda: mflow(form(), M0=0.01 * np.eye(2), t=T5, y=[1.0]), ValueError, ["y", "(2)"]),
    ("mflow: y NaN", lambda: mflow(form(), M0=0.01 * np.eye(2), t=T5, y=[1.0, NAN]), ValueError, ["y", "finite"]),
    ("mflow: y missing", lambda: mflow(form(), M0=0.01 * np.eye(2), t=T5), ValueError, ["y", "needed"]),
    ("mflow: weight_decay NaN", lambda: mflow(form(), M0=0.01 * np.eye(2), t=T5, y=Y2, weight_decay=NAN), ValueError,
     ["weight_decay", ">= 0"]),
    ("discrete_flow: lr NaN", lambda: discrete_flow(form(), M0=0.01 * np.eye(2), y=Y2, lr=NAN, steps=3), ValueError,
     ["lr", "> 0"]),
    ("discrete_flow: M0 3 x 3", lambda: discrete_flow(form(), M0=np.eye(3), y=Y2, lr=0.1, steps=3), ValueError,
     ["M0", "2 x 2"]),
    ("discrete_flow: steps 0", lambda: discrete_flow(form(), M0=0.01 * np.eye(2), y=Y2, lr=0.1, steps=0), ValueError,
     ["steps", ">= 1"]),
    ("predict: t empty", lambda: predict(form(), Y2, [], M0=0.01 * np.eye(2)), ValueError, ["t", "empty"]),
    ("predict: t NaN", lambda: predict(form(), Y2, [0.0, NAN], M0=0.01 * np.eye(2)), ValueError, ["t", "finite"]),
    ("predict: M0 3 x 3", lambda: predict(form(), Y2, T5, M0=np.eye(3)), ValueError, ["M0", "2 x 2"]),
    ("predict: W0 NaN", lambda: predict(form(), Y2, T5, W0=np.array([[NAN], [0.1]])), ValueError, ["W0", "finite"]),
    ("predict: W0 with 3 rows", lambda: predict(form(), Y2, T5, W0=np.ones((3, 1))), ValueError, ["W0", "p = 2"]),
    ("predict: y of length 1", lambda: predict(form(), [1.0], T5, M0=0.01 * np.eye(2)), ValueError, ["y", "(2)"]),
    ("predict: tol -1", lambda: predict(form(), Y2, T5, M0=0.01 * np.eye(2), tol=-1.0), ValueError, ["tol", ">= 0"]),
    ("theorem7: c NaN", lambda: theorem7(np.eye(2), NAN, T5, M0=0.01 * np.eye(2)), ValueError, ["c", "finite"]),
    ("theorem5: y of length 1", lambda: theorem5(LAM, [1.0], 0.01, T5), ValueError, ["y", "(2,)"]),
    ("theorem4: z0 negative", lambda: theorem4([1.0, 2.0], [1.0], [1.0], [-0.1, 0.1], T5), ValueError,
     ["z0", "non-negative"]),
    ("max_stable_lr: C 3 x 3 for 2 modes", lambda: max_stable_lr(np.eye(3), [1.0, 1.0]), ValueError, ["C", "2 x 2"]),
    # power laws
    ("fit_power_law: t NaN", lambda: fit_power_law(np.where(TT > 50, NAN, TT), TT ** -0.5, (2.0, 10.0), n_boot=10),
     ValueError, ["t", "finite"]),
    ("fit_power_law: confidence 1.5", lambda: fit_power_law(TT, TT ** -0.5, (2.0, 100.0), n_boot=10, confidence=1.5),
     ValueError, ["confidence", "< 1"]),
    ("predict_exponent: t_star NaN", lambda: predict_exponent(np.array([4.0, 3.0, 2.0, 1.0]), np.array([1.0, 0.5, 0.25, 0.1]),
                                                              t_star=[1.0, NAN, 3.0, 4.0]), ValueError, ["t_star", "NaN"]),
    ("predict_exponent: a -1", lambda: predict_exponent(np.array([4.0, 3.0, 2.0, 1.0]), np.ones(4), t_star=np.arange(1.0, 5.0),
                                                        a=-1.0), ValueError, ["a", "> 0"]),
    # issue 16 audit (/work/audit/library_audit.py): calls that raised raw errors or returned garbage
    ("structure_matrix: unit returns a float", lambda: structure_matrix(lambda w, x: 1.0, X3, 3), TypeError,
     ["unit", "floating torch tensor", "float"]),
    ("structure_matrix: unit returns an int tensor", lambda: structure_matrix(lambda w, x: (w @ x > 0).long(), X3, 3),
     TypeError, ["unit", "torch.int64"]),
    ("structure_matrix: unit cuts autograd with .item()",
     lambda: structure_matrix(lambda w, x: torch.tensor(float((w @ x).item()) ** 2), X3, 3), ValueError,
     ["unit", "does not depend on w", ".item()"]),
    ("structure_matrix: x on the meta device", lambda: structure_matrix(unit, torch.empty(3, device="meta"), 3),
     ValueError, ["x", "meta device"]),
    ("structure_matrix: dtype int64", lambda: structure_matrix(unit, X3, 3, dtype=torch.int64), TypeError,
     ["dtype", "floating"]),
    ("structure_matrix: max_check_samples 0",
     lambda: structure_matrix(unit, X3[None].repeat(2, 1), 3, batched=True, max_check_samples=0), ValueError,
     ["max_check_samples", ">= 1"]),
    ("structure_matrix: batched 0-d x", lambda: structure_matrix(unit, torch.tensor(1.0, dtype=torch.float64), 3,
                                                                 batched=True), ValueError, ["x", "0-d"]),
    ("structure_matrix: batched leading sizes 2 and 3",
     lambda: structure_matrix(lambda w, x: (w @ x[0]) * (w @ x[1]), (torch.ones(2, 3, dtype=torch.float64),
                              torch.ones(3, 3, dtype=torch.float64)), 3, batched=True), ValueError, ["x", "[2, 3]"]),
    ("TwoLayerMLP: D 0", lambda: arch.TwoLayerMLP(D=0), ValueError, ["TwoLayerMLP: D", ">= 1"]),
    ("TwoLayerMLP: n_outputs 0", lambda: arch.TwoLayerMLP(n_outputs=0), ValueError, ["n_outputs", ">= 1"]),
    ("TwoLayerMLP: init_std NaN", lambda: arch.TwoLayerMLP(init_std=NAN), ValueError, ["init_std", "finite"]),
    ("TwoLayerMLP: dtype int64", lambda: arch.TwoLayerMLP(dtype=torch.int64), TypeError, ["dtype", "floating"]),
    ("OneLayerCNN: image (4,)", lambda: arch.OneLayerCNN(image=(4,)), ValueError, ["image", "pair"]),
    ("OneLayerCNN: width -2", lambda: arch.OneLayerCNN(width=-2), ValueError, ["width", ">= 1"]),
    ("MultiHeadAttention: seq_len 0", lambda: arch.MultiHeadAttention(seq_len=0), ValueError, ["seq_len", ">= 1"]),
    ("MixtureOfExperts: gate 'relu6'", lambda: arch.MixtureOfExperts(gate="relu6"), ValueError, ["gate", "'tanh'"]),
    ("FourierMLP: theta NaN", lambda: arch.FourierMLP(theta=NAN), ValueError, ["theta", "finite"]),
    ("MatrixCompletion: n_rows -1", lambda: arch.MatrixCompletion(n_rows=-1), ValueError, ["n_rows", ">= 1"]),
    ("build: seed 1.5", lambda: arch.build("mlp", seed=1.5), TypeError, ["seed", "integer"]),
    ("initial_weights: no seeds", lambda: arch.initial_weights(arch.TwoLayerMLP(), []), ValueError, ["seeds", "non-empty"]),
    ("initial_weights: seed 1.5", lambda: arch.initial_weights(arch.TwoLayerMLP(), [1.5]), TypeError, ["seeds", "integer"]),
    ("initial_weights: scale NaN", lambda: arch.initial_weights(arch.TwoLayerMLP(), [0], [NAN]), ValueError,
     ["scales", "finite"]),
    ("QuadraticModel: W0 with d = 0", lambda: model(np.zeros((2, 0))), ValueError, ["W0", "at least one column"]),
    ("QuadraticModel: W0 meta", lambda: model(torch.empty(2, 2, device="meta")), ValueError, ["W0", "meta device"]),
    ("QuadraticModel: W0 complex", lambda: model(np.eye(2) * (0.1 + 0.1j)), TypeError, ["W0", "not complex"]),
    ("DenseForm: complex A", lambda: DenseForm(torch.eye(2, dtype=torch.complex128)[None]), TypeError, ["A", "complex"]),
    ("DenseForm: A meta", lambda: DenseForm(torch.empty(1, 2, 2, device="meta")), ValueError, ["A", "meta device"]),
    ("train: y complex", lambda: train(model(), Y2 * (1 + 1j), lr=0.1, steps=2), TypeError, ["y", "not complex"]),
    ("train: n_record 1", lambda: train(model(), Y2, lr=0.1, steps=3, n_record=1), ValueError, ["n_record", ">= 2"]),
    ("train: replica_coords of 3 for 1 replica", lambda: train(model(), Y2, lr=0.1, steps=2, replica_coords=[1, 2, 3]),
     ValueError, ["replica_coords", "one entry per replica (1)"]),
    ("train: model a function", lambda: train(lambda: torch.zeros(1, 2), Y2, lr=0.1, steps=2), TypeError,
     ["model", "torch.nn.Module"]),
    ("train: progress_seconds NaN", lambda: train(model(), Y2, lr=0.1, steps=2, progress_seconds=NAN), ValueError,
     ["progress_seconds", ">= 0"]),
    ("glv: r complex", lambda: glv(R2 + 0j, C2, 0.1, T5), TypeError, ["r", "not complex"]),
    ("LotkaVolterra.loss: scalar z", lambda: LotkaVolterra(r=R2, C=C2, lam=LAM, y=Y2, basis=np.eye(2)).loss(0.1),
     ValueError, ["z", "(..., 2)"]),
    ("LotkaVolterra.modes_of: M 3 x 3", lambda: LotkaVolterra(r=R2, C=C2, lam=LAM, y=Y2, basis=np.eye(2)).modes_of(np.eye(3)),
     ValueError, ["M", "(..., 2, 2)"]),
    ("corollary4: tau NaN", lambda: corollary4([NAN, 1.0], [1.0, 1.0], [0.1, 0.1], T5), ValueError, ["tau", "finite"]),
    ("corollary4: rho0 negative", lambda: corollary4([1.0, 1.0], [1.0, 1.0], [-0.1, 0.1], T5), ValueError,
     ["rho0", "non-negative"]),
    ("corollary4: tau text", lambda: corollary4("abc", [1.0], [0.1], T5), TypeError, ["tau", "real numbers"]),
    ("theorem16: kappa negative", lambda: theorem16([1.0, 1.0], [-1.0, 1.0], [0.1, 0.1], T5), ValueError,
     ["kappa", "non-negative"]),
    ("theorem7_modes: gamma inf", lambda: theorem7_modes([math.inf, 1.0], 1.0, [0.1, 0.1], T5), ValueError,
     ["gamma", "finite"]),
    ("theorem7: Y not symmetric", lambda: theorem7(np.array([[1.0, 1.0], [0.0, 1.0]]), 0.5, T5, M0=0.01 * np.eye(2)),
     ValueError, ["Y", "symmetric"]),
    ("corollary4_modes: S and y lengths 2 and 3", lambda: corollary4_modes(np.ones((2, 2, 3)), [1.0, 1.0, 1.0]),
     ValueError, ["y", "(2,)"]),
    ("corollary4_init: rho0 negative", lambda: corollary4_init(np.eye(2), np.eye(2), [-0.1, 0.1], 3), ValueError,
     ["rho0", "non-negative"]),
    ("corollary4_init: d 2.5", lambda: corollary4_init(np.eye(2), np.eye(2), [0.1, 0.1], 2.5), TypeError, ["d", "integer"]),
    ("predicted_ignition_times: C_k 0 with zeta > 0", lambda: predicted_ignition_times(R2, [0.0, 2.0], 1e-3),
     ValueError, ["C_k", "> 0", "zeta > 0"]),
    ("predicted_ignition_times: a text", lambda: predicted_ignition_times(R2, [1.0, 2.0], 1e-3, a="2"), TypeError,
     ["a", "text"]),
    ("ignition_times: saturation of 3 for 2 modes",
     lambda: ignition_times([0.0, 1.0, 2.0], np.ones((3, 2)), saturation=[1.0, 1.0, 1.0]), ValueError,
     ["saturation", "(2,)"]),
    ("staircase_from_init: z0 of 3 for 2 modes", lambda: staircase_from_init(R2, C2, [1e-3] * 3, 1e-3), ValueError,
     ["z0", "one entry per mode (2)"]),
    ("mflow: method 'euler'", lambda: mflow(DenseForm(torch.eye(2, dtype=torch.float64)[None]), M0=0.01 * np.eye(2),
                                            t=T5, y=[1.0], method="euler"), ValueError, ["method", "'DOP853'"]),
    ("mflow: data an array", lambda: mflow(np.eye(2), M0=0.01 * np.eye(2), t=T5, y=Y2), TypeError,
     ["data", "SecondMoment"]),
    ("SecondMoment.from_form: rank_rtol NaN", lambda: SecondMoment.from_form(form(), Y2, rank_rtol=NAN), ValueError,
     ["rank_rtol", "finite"]),
    ("discrete_flow: n_record 1", lambda: discrete_flow(form(), M0=0.01 * np.eye(2), y=Y2, lr=0.1, steps=3, n_record=1),
     ValueError, ["n_record", ">= 2"]),
    ("predict: seed -1", lambda: predict(form(), Y2, T5, M0=0.01 * np.eye(2), seed=-1), ValueError, ["seed", ">= 0"]),
    ("predict: seed 1.5", lambda: predict(form(), Y2, T5, M0=0.01 * np.eye(2), seed=1.5), TypeError, ["seed", "integer"]),
    ("fit_power_law: window a number", lambda: fit_power_law(TT, TT ** -0.5, 5.0, n_boot=10), ValueError,
     ["window", "pair"]),
    ("fit_power_law: window of 3", lambda: fit_power_law(TT, TT ** -0.5, (1.0, 2.0, 3.0), n_boot=10), ValueError,
     ["window", "pair"]),
    ("fit_power_law: window text", lambda: fit_power_law(TT, TT ** -0.5, ("a", "b"), n_boot=10), TypeError,
     ["window", "real number"]),
    ("fit_power_law: seed -1", lambda: fit_power_law(TT, TT ** -0.5, (2.0, 100.0), n_boot=10, seed=-1), ValueError,
     ["seed", ">= 0"]),
    ("fit_power_law: n_boot -1", lambda: fit_power_law(TT, TT ** -0.5, (2.0, 100.0), n_boot=-1), ValueError,
     ["n_boot", ">= 0"]),
    ("power_law_test: max_drift NaN", lambda: power_law_test(TT, TT ** -0.5, (2.0, 100.0), max_drift=NAN), ValueError,
     ["max_drift", ">= 0"]),
    ("predict_exponent: z0 0", lambda: predict_exponent(ZETA, V30, C=np.ones(30), z0=0.0), ValueError, ["z0", "> 0"]),
    ("predict_exponent: cutoff text", lambda: predict_exponent(ZETA, V30, t_star=TSTAR, cutoff="0.1"), TypeError,
     ["cutoff", "real number"]),
    ("predict_exponent: constant zeta", lambda: predict_exponent(np.full(30, 0.5), V30, t_star=np.arange(1.0, 31.0)),
     ValueError, ["zeta", "alpha2 > 0"]),
    ("predict_exponent: t_star decreasing", lambda: predict_exponent(ZETA, V30, t_star=TSTAR[::-1]), ValueError,
     ["ordered by ignition time", "increasing", "mode 2"]),
    ("theory_window: resolution -1", lambda: theory_window(TSTAR, ZETA, V30, resolution=-1.0), ValueError,
     ["resolution", "> 0"]),
    ("load_digit_task: n_train -1", lambda: load_digit_task("digits8x8", n_train=-1, n_test=1), ValueError,
     ["n_train", ">= 2"]),
    ("load_digit_task: n_test 2.5", lambda: load_digit_task("digits8x8", n_train=10, n_test=2.5), TypeError,
     ["n_test", "integer"]),
    ("load_digit_task: seed -1", lambda: load_digit_task("digits8x8", n_train=10, n_test=10, seed=-1), ValueError,
     ["seed", ">= 0"]),
    ("write_dataset: ds a dict", lambda: write_dataset({"a": 1}, "/nonexistent/x.nc", title="x"), TypeError,
     ["ds", "xarray.Dataset"]),
    ("open_result: require a string", lambda: open_result("/nonexistent/x.nc", require="loss"), TypeError,
     ["require", "tuple"]),
    # issue 16 audit, second pass: other public functions
    ("open_runs: experiment an int", lambda: open_runs(123), ValueError, ["experiment", "experiment id"]),
    ("open_runs: experiment with '..'", lambda: open_runs("../runs/x"), ValueError, ["experiment", "path separators"]),
    ("with_run_coordinates: a dict", lambda: with_run_coordinates({"a": 1}), TypeError, ["ds", "xarray.Dataset"]),
    ("by_record: a list", lambda: by_record([1]), TypeError, ["ds", "xarray.Dataset"]),
    ("config_of: a dict", lambda: config_of({}), TypeError, ["ds", "xarray.Dataset"]),
    ("restore_labels: a path", lambda: restore_labels("x.nc"), TypeError, ["ds", "xarray.Dataset"]),
    ("write_dataset: title an int", lambda: write_dataset(xr.Dataset(), "/nonexistent/x.nc", title=3), TypeError,
     ["title", "string"]),
    ("write_dataset: config a list", lambda: write_dataset(xr.Dataset(), "/nonexistent/x.nc", title="x", config=[1]),
     TypeError, ["config", "mapping"]),
    ("write_text: bytes", lambda: write_text("/nonexistent/x.txt", b"x"), TypeError, ["text", "str"]),
    ("run_experiment: exp_cfg a string", lambda: run_experiment("featurewise"), TypeError, ["exp_cfg", "mapping"]),
    ("run_experiment: results an int", lambda: run_experiment({"kind": "featurewise"}, results=5), TypeError,
     ["results", "folder"]),
    ("run_experiment: experiment 'a/b'", lambda: run_experiment({"kind": "featurewise"}, experiment="a/b"), ValueError,
     ["experiment", "experiment id"]),
    ("TwoLayerMLP.forward: 4 features for D = 5", lambda: arch.TwoLayerMLP()(torch.ones(3, 4, dtype=torch.float64)),
     ValueError, ["input x", "(samples, 5)", "(3, 4)"]),
    ("TwoLayerMLP.forward: 1-D x (broadcast before)", lambda: arch.TwoLayerMLP()(torch.ones(5, dtype=torch.float64)),
     ValueError, ["input x", "(5,)"]),
    ("TwoLayerMLP.forward: numpy x", lambda: arch.TwoLayerMLP()(np.ones((3, 5))), TypeError, ["input x", "torch tensor"]),
    ("OneLayerCNN.forward: transposed images", lambda: arch.OneLayerCNN()(torch.ones(2, 5, 4, dtype=torch.float64)),
     ValueError, ["input x", "(samples, 4, 5)"]),
    ("MultiHeadAttention.forward: one part", lambda: arch.MultiHeadAttention()(torch.ones(2, 4, dtype=torch.float64)),
     ValueError, ["inputs", "2 part(s)"]),
    ("MultiHeadAttention.forward: context D 3", lambda: arch.MultiHeadAttention()(
        (torch.ones(2, 4, dtype=torch.float64), torch.ones(2, 3, 5, dtype=torch.float64))), ValueError,
     ["input context", "(samples, 4, any)"]),
    ("TwoLayerMLP.structure: complex x", lambda: arch.TwoLayerMLP().structure(torch.ones(2, 5, dtype=torch.complex128)),
     TypeError, ["input x", "complex"]),
    ("TwoLayerMLP.forward_with: W with p = 6", lambda: arch.TwoLayerMLP().forward_with(
        torch.ones(6, 4, dtype=torch.float64), torch.ones(2, 5, dtype=torch.float64)), ValueError, ["W", "(..., 7, any)"]),
    ("TwoLayerMLP.set_unit_weights: 3 units for 4", lambda: arch.TwoLayerMLP().set_unit_weights(
        torch.ones(7, 3, dtype=torch.float64)), ValueError, ["W", "(..., 7, 4)"]),
    ("build: size a string", lambda: arch.build("mlp", "D=3"), TypeError, ["size", "mapping"]),
    ("build: image (0, 5)", lambda: arch.build("mlp", image=(0, 5)), ValueError, ["image", "pair"]),
    ("effective_matrix: W with p = 6", lambda: effective_matrix(arch.TwoLayerMLP(), torch.ones(6, 4, dtype=torch.float64)),
     ValueError, ["W", "p = 7"]),
    ("singular_values: n 0", lambda: singular_values(arch.TwoLayerMLP(), torch.ones(7, 4, dtype=torch.float64), 0),
     ValueError, ["n", ">= 1"]),
    ("teacher_weights: s NaN", lambda: teacher_weights(arch.TwoLayerMLP(), [1.0, NAN], torch.Generator()), ValueError,
     ["s", "finite"]),
    ("deviation: s_target 0", lambda: deviation(np.ones((2, 3, 2)), np.ones((2, 3, 2)), [1.0, 0.0]), ValueError,
     ["s_target", "> 0"]),
    ("deviation: s_target of 3 for 2", lambda: deviation(np.ones((2, 3, 2)), np.ones((2, 3, 2)), [1.0] * 3), ValueError,
     ["s_target", "(2,)"]),
    ("design: n_modes 2.5", lambda: design("mlp", 2.5, 4, 0), TypeError, ["n_modes", "integer"]),
    ("design: seed -1", lambda: design("mlp", 2, 4, -1), ValueError, ["seed", ">= 0"]),
    ("mode_designs.initial_weights: eps 0", lambda: design_weights(design("mlp", 2, 4, 0), [1.0, 1.0], [0.0], [0], 1.0, 0),
     ValueError, ["eps", "> 0"]),
    ("mode_designs.initial_weights: seeds [-1]", lambda: design_weights(design("mlp", 2, 4, 0), [1.0, 1.0], [1e-3], [-1],
                                                                        1.0, 0), ValueError, ["seeds", ">= 0"]),
    ("hessian_at_minimum: z_star -1", lambda: hessian_at_minimum(C2, [-1.0, 1.0]), ValueError, ["z_star", "non-negative"]),
    ("loss_factor: n 2.5", lambda: loss_factor("sum", 2.5), TypeError, ["n", "integer"]),
    ("flow_lr: lr NaN", lambda: flow_lr(NAN, "mean", 4), ValueError, ["lr", "> 0"]),
    ("fourier_features: P 0", lambda: fourier_features([0.1], 0), ValueError, ["P", ">= 1"]),
    ("fourier_features: x NaN", lambda: fourier_features([NAN], 3), ValueError, ["x", "finite"]),
    ("predicted_windows: P 2", lambda: predicted_windows(2, 1.0, [1.0], 1e-6, 0.1), ValueError, ["P", ">= 3"]),
    ("ordered_seed_scatter: d 0", lambda: ordered_seed_scatter([1.0], 0, [0]), ValueError, ["d", ">= 1"]),
    ("std_relative_error: n 1", lambda: std_relative_error(4, 1), ValueError, ["n", ">= 2"]),
    ("slope_fit: one eps", lambda: slope_fit([1e-3], np.ones((1, 2))), ValueError, ["eps", "2 distinct"]),
    ("window_sensitivity: factor NaN", lambda: window_sensitivity(TT, TT ** -0.5, (2.0, 100.0), factor=NAN), ValueError,
     ["factor", "> 1"]),
    ("count_drops: depth NaN", lambda: count_drops(TT, TT ** -0.5, depth=NAN), ValueError, ["depth", "<= 1"]),
    ("random_orthogonal: rng an int", lambda: random_orthogonal(3, 0), TypeError, ["rng", "Generator"]),
    ("SecondMoment.apply_K: M 3 x 3", lambda: SecondMoment.from_form(form(), Y2).apply_K(np.eye(3)), ValueError,
     ["M", "(..., 2, 2)"]),
    ("structure_matrix: int x (not blamed on p)", lambda: structure_matrix(unit, torch.tensor([1, 2, 3]), 3), ValueError,
     ["x holds torch.int64", "floating"]),
    ("fit_power_law: one time", lambda: fit_power_law([1.0], [1.0], (0.5, 2.0), n_boot=10), ValueError,
     ["t", "at least 2"]),
    ("mflow: t None", lambda: mflow(form(), M0=0.01 * np.eye(2), y=Y2), ValueError, ["t", "needed"]),
    # the library audit (audit/library_audit.py): booleans read as 1/0, x that is not a tensor, empty zeta
    ("glv: r boolean", lambda: glv(np.array([True, False]), C2, [0.1, 0.1], T5), TypeError, ["r", "booleans"]),
    ("train: y boolean", lambda: train(model(), np.array([True, False]), lr=0.1, steps=2), TypeError, ["y", "booleans"]),
    ("QuadraticModel: W0 boolean", lambda: model(np.eye(2, dtype=bool)), TypeError, ["W0", "booleans"]),
    ("predict: t boolean", lambda: predict(form(), Y2, np.array([False, True]), M0=0.01 * np.eye(2)), TypeError,
     ["t", "booleans"]),
    ("DiagonalForm: bool tensor", lambda: DiagonalForm(torch.ones(2, 2, dtype=torch.bool)), TypeError,
     ["diag", "booleans"]),
    ("DenseForm: bool tensor", lambda: DenseForm(torch.ones(1, 2, 2, dtype=torch.bool)), TypeError, ["A", "booleans"]),
    ("structure_matrix: x None", lambda: structure_matrix(unit, None, 3), TypeError, ["x", "tensor"]),
    ("expansion: x text", lambda: expansion(unit, "abc", 3), TypeError, ["x", "tensor"]),
    ("theorem5: lam empty", lambda: theorem5(np.zeros((0, 0)), Y2, 0.01, T5), ValueError, ["lam", "empty"]),
    ("theorem7: Y empty", lambda: theorem7(np.zeros((0, 0)), 0.5, T5, M0=0.01 * np.eye(2)), ValueError,
     ["Y", "empty"]),
    ("predicted_seed_scatter: zeta empty", lambda: predicted_seed_scatter([], 4), ValueError, ["zeta", "empty"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_in_one_sentence_naming_it(call, error, words):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert "\n" not in message and len(message) < 600


def test_refusals_are_value_or_type_errors_not_raw_errors():
    assert all(c[2] in (ValueError, TypeError) for c in CASES) and len(CASES) >= 80


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_device_without_cuda_is_refused_at_the_call():
    with pytest.raises(ValueError, match=r"device is 'cuda' but CUDA is not available.*'cpu' or 'auto'"):
        model(device="cuda")
    with pytest.raises(ValueError, match="device is 'cuda:1'"):
        model(device="cuda:1")


def test_float32_underflow_boundary_is_the_smallest_normal_number():
    """W0 = sqrt(eps) I in float32 learns exactly as in float64 down to eps = tiny^2 = 1.38e-76; one ulp below
    the smallest normal number it is refused (subnormal weights learn late, at eps = 1e-90 never)."""
    tiny = np.finfo(np.float32).tiny
    model(tiny * np.eye(2), dtype=torch.float32)  # the boundary itself is accepted
    model(np.sqrt(1.4e-76) * np.eye(2), dtype=torch.float32)
    with pytest.raises(ValueError, match="smallest normal number 1.18e-38"):
        model(np.nextafter(tiny, 0.0) * np.eye(2), dtype=torch.float32)
    model(np.sqrt(1e-300) * np.eye(2))  # float64 keeps every eps the theory tests use
    model(np.array([[1e-20, 0.0], [0.0, 0.0]]), dtype=torch.float32)  # exact zeros are fine


def test_psd_tolerance_accepts_rounding_and_names_the_smallest_eigenvalue():
    Q = np.linalg.qr(np.random.default_rng(0).standard_normal((3, 3)))[0]
    near = Q @ np.diag([2.0, 1.0, -1e-13]) @ Q.T  # a Gram matrix computed with rounding
    near = (near + near.T) / 2
    glv(np.ones(3), near, 1e-3, T5)
    bad = Q @ np.diag([2.0, 1.0, -1e-6]) @ Q.T
    with pytest.raises(ValueError, match=r"smallest eigenvalue is -1e-06 \(allowed down to -1e-10 \* max\|C\|"):
        glv(np.ones(3), (bad + bad.T) / 2, 1e-3, T5)


def test_valid_edge_inputs_still_work():
    # eps >= 1 is allowed (the fits pass eps = 1 with the amplitudes in c): modes that start past the
    # threshold are NaN, as documented, the others get the exact logistic time
    t = predicted_ignition_times([1.0, 4.0], [1.0, 1.0], 1.0, c=[2.0, 0.5])
    assert np.isnan(t[0]) and np.isfinite(t[1]) and t[1] > 0
    # unordered times are fine for the closed forms, and a tiny negative c_k is rounding of 0
    z = logistic_solution([1.0, 1.0], [1.0, -1e-18], [0.1, 0.1], [3.0, 0.0, 1.0])
    assert np.all(np.isfinite(z)) and z[1, 0] == pytest.approx(0.1)
    # vector outputs: (samples, outputs) targets flattened into the form's m entries
    ds = train(QuadraticModel(form(), np.stack([0.1 * np.eye(2)] * 2), device="cpu"), Y2[:, None], lr=0.1, steps=2)
    assert ds.loss.shape == (2, 3)


def test_a_huge_bad_value_is_summarised_not_printed():
    big = np.zeros(10 ** 6)
    big[3] = NAN
    with pytest.raises(ValueError) as info:
        glv(np.ones(big.size), big, 0.1, T5)
    assert len(str(info.value)) < 300 and "1 NaN" in str(info.value)


def test_psd_check_is_one_cholesky_not_an_eigendecomposition(monkeypatch):
    """The checks run once per call and cost O(size) plus, for a coupled C, one Cholesky (K^3/3 flops, less
    than computing C itself); the eigenvalue is computed only for the message of a refusal. (Wall-clock
    numbers are in the issue's report, not here: a loaded machine would make them flaky.)"""
    lam = np.random.default_rng(1).standard_normal((60, 40))
    C = lv_coefficients(lam, np.ones(60))[1]

    def forbidden(*args, **kwargs):
        raise AssertionError("eigvalsh called on a valid C")

    monkeypatch.setattr(np.linalg, "eigvalsh", forbidden)
    validate.symmetric_psd("C", C)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="smallest eigenvalue"):
        validate.symmetric_psd("C", C - 2 * np.eye(40) * np.linalg.eigvalsh(C)[0] - np.eye(40))


def test_valid_calls_the_audit_found_refused_or_misread_now_work():
    """Each of these raised or returned garbage before the issue-16 audit; each is a legitimate call."""
    # numpy input to structure_matrix (was "Cannot access data pointer"), and a 0-d tensor lr (was refused)
    A = structure_matrix(unit, X3.numpy(), 3)
    assert tuple(A.shape) == (3, 3) and torch.allclose(A, structure_matrix(unit, X3, 3))
    ds = train(model(), Y2, lr=torch.tensor(0.1), steps=2)
    assert np.isfinite(ds.loss).all() and ds.attrs["lr"] == pytest.approx(0.1)
    # repeated times in glv's numerical path (LSODA refused an unsorted t_eval): equal rows
    z = glv(R2, np.array([[1.0, 0.2], [0.2, 1.0]]), 0.1, [0.0, 1.0, 1.0, 2.0])
    assert z.shape == (4, 2) and np.array_equal(z[1], z[2])
    assert np.allclose(z[[0, 1, 3]], glv(R2, np.array([[1.0, 0.2], [0.2, 1.0]]), 0.1, [0.0, 1.0, 2.0]), rtol=1e-8)
    # and in the M-flow's dense path (solve_ivp's t_eval)
    dense = DenseForm(torch.tensor([[[1.0, 0.3], [0.3, 0.5]], [[0.2, -0.1], [-0.1, 1.0]]], dtype=torch.float64))
    M = mflow(dense, M0=0.01 * np.eye(2), t=[0.0, 1.0, 1.0, 2.0], y=Y2)["M"].values
    assert np.array_equal(M[1], M[2]) and np.allclose(M[[0, 1, 3]], mflow(dense, M0=0.01 * np.eye(2), t=[0.0, 1.0, 2.0],
                                                                          y=Y2)["M"].values, rtol=1e-12)
    # an integer tensor A is cast to float64, like numpy input
    assert DenseForm(torch.eye(2, dtype=torch.int64)[None]).A.dtype == torch.float64
    # c_k = 0: a mode at exactly 0 is a fixed point and never switches on (inf, was NaN)
    t = predicted_ignition_times(R2, [1.0, 2.0], 1e-3, c=[0.0, 1.0])
    assert np.isinf(t[0]) and t[1] == predicted_ignition_times(R2, [1.0, 2.0], 1e-3)[1]
    # ZGZ failure is said even with check=False (the gradient is computed anyway)
    with pytest.warns(ZGZWarning):
        structure_matrix(lambda w, x: torch.sigmoid(w @ x), X3, 3, check=False)
    # sizes given as numpy integers and YAML lists are normalised
    assert arch.TwoLayerMLP(D=np.int64(3)).D == 3 and arch.build("cnn", {"image": [4, 5], "kernel": [2, 2]}).p == 6


def test_open_runs_names_a_run_file_that_is_not_netcdf(tmp_path):
    """A broken file among the runs is named (ResultFileError, with its rule), not a raw netCDF4/xarray error."""
    from nqf.errors import ResultFileError

    folder = tmp_path / "runs" / "exp"
    write_dataset(xr.Dataset({"loss": ("step", np.ones(3))}, coords={"step": [0, 1, 2]}, attrs={"run": "a"}),
                  folder / "a.nc", title="run")
    (folder / "b.nc").write_bytes(b"not a netcdf file")
    with pytest.raises(ResultFileError, match=r"b\.nc cannot be read as NetCDF.*rule 'train'"):
        open_runs("exp", results=tmp_path)
    (folder / "b.nc").unlink()
    assert open_runs("exp", results=tmp_path).sizes["run"] == 1


def test_module_inputs_checked_once_per_shape_and_token_axis_free():
    """forward() checks its inputs against sample_inputs' shapes (once per new shape: the check is a tuple
    comparison afterwards), leaving a sequence's token axis free; forward_with takes any number of units."""
    mha = arch.MultiHeadAttention()
    x = (torch.ones(2, 4, dtype=torch.float64), torch.ones(2, 4, 9, dtype=torch.float64))
    assert tuple(mha(x).shape) == (2, 2) and mha.__dict__["_checked_input_shapes"] == ((2, 4), (2, 4, 9))
    mlp = arch.TwoLayerMLP()
    assert tuple(mlp.forward_with(torch.ones(7, 9, dtype=torch.float64), torch.ones(3, 5, dtype=torch.float64)).shape) == (3, 2)


def test_open_runs_refuses_runs_whose_coordinate_values_differ(tmp_path):
    """deep's MLP and attention runs share the size of init_variance but not its values: refused in one
    sentence naming the coordinate and a separating selection, not xarray's AlignmentError."""
    folder = tmp_path / "runs" / "exp"
    for name, variances in (("mlp", [0.05, 0.5]), ("attention", [0.1, 1.0])):
        ds = xr.Dataset({"loss": (("init_variance", "step"), np.ones((2, 3)))},
                        coords={"init_variance": variances, "step": [0, 1, 2]}, attrs={"run": name})
        write_dataset(ds.assign_coords(architecture=name), folder / f"{name}.nc", title="run")
    with pytest.raises(ValueError, match=r"coordinate 'init_variance' differ between runs \(attention: \[0\.1, 1\], "
                                         r"mlp: \[0\.05, 0\.5\]\).*open_runs\('exp', architecture="):
        open_runs("exp", results=tmp_path)
    assert open_runs("exp", results=tmp_path, architecture="mlp").sizes["run"] == 1
