"""Library input audit: >= 250 calls to nqf's public API, each labelled "refuse" or "valid",
classified automatically. Run: PYTHONPATH=. python audit/library_audit.py
Writes audit/results/library_audit.md and audit/results/library_audit.csv."""
import csv, math, sys, time, warnings
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import torch

import nqf
from nqf import architectures as arch
from nqf.theory.closed_forms import corollary4, theorem5, theorem7
from nqf.theory.forms import DenseForm, DiagonalForm
from nqf.theory.mflow import SecondMoment
from nqf.io.runs import open_runs

NAN, INF = float("nan"), float("inf")
LAM = np.array([[1.0, 0.0], [0.0, 2.0]])
Y2 = np.array([1.0, 0.5])
R2 = np.array([1.0, 0.5])
C2 = np.diag([1.0, 2.0])
T5 = np.linspace(0.0, 5.0, 5)
M0 = 0.01 * np.eye(2)
INDEF = np.array([[1.0, 2.0], [2.0, 1.0]])
TT = np.logspace(0, 3, 40)
X3 = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64)
NQF_ERRORS = tuple(getattr(__import__(m, fromlist=[n]), n) for m, n in
                   [("nqf.training.loop", "TrainingDiverged"), ("nqf.io.netcdf", "ResultFileError"), ("nqf.theory.taylor", "NotSmoothError")])

# Bad-looking calls whose behaviour the docstring states on purpose: reported as "documented", not bugs.
DOCUMENTED = {
    ("logistic_solution", "t decreasing"): "closed form: any times, in any order (time_grid increasing=False)",
    ("logistic_solution", "t empty"): "closed form: empty t gives an empty (0, K) result by design",
    ("corollary4", "t empty"): "closed form: empty t allowed (nonempty=False)",
    ("theorem7 (theorem6 path: predict)", "t empty"): "closed form: empty t allowed (nonempty=False)",
    ("ignition_times", "saturation NaN"): "docstring: NaN saturation = a mode with no level, gives NaN",
    ("fit_power_law", "loss NaN"): "loss read with finite=None: NaN points are dropped by design",
    ("fit_power_law", "loss inf"): "loss read with finite=None: non-finite points dropped by design",
    ("fit_power_law", "n_boot 0"): "n_boot minimum=0: no bootstrap, point estimate only",
    ("staircase", "max_events 0"): "max_events minimum=0 by design",
    ("staircase", "loss0 None"): "loss0=None is the default (no loss curve)",
    ("train", "record_steps decreasing"): "record_steps are sorted and deduplicated (np.unique) by design",
}


def form():
    return DiagonalForm(torch.as_tensor(LAM))


def model(W0=None, **kw):
    kw.setdefault("device", "cpu")
    return nqf.QuadraticModel(form(), 0.1 * np.eye(2) if W0 is None else W0, **kw)


def unit(w, x):
    return torch.tanh(w @ x) ** 2


CASES = []  # (function, description, expected, argument named, call)


def case(fn, desc, exp, arg, call):
    CASES.append((fn, desc, exp, arg, call))


# bad values substituted into every array argument
BAD_ARRAYS = {"NaN": lambda a: _put(a, NAN), "inf": lambda a: _put(a, INF),
              "complex": lambda a: np.asarray(a) * (1 + 1j), "str": lambda a: "abc", "None": lambda a: None,
              "bool": lambda a: np.asarray(a) > 0, "empty": lambda a: np.zeros((0,) * np.ndim(a))}


def _put(a, v):
    a = np.array(a, dtype=float, copy=True)
    a.flat[0] = v
    return a


def sweep(fn, call, args, kinds=tuple(BAD_ARRAYS)):
    """call(**{arg: value}) with each bad kind for each array argument."""
    for arg, good in args.items():
        for k in kinds:
            bad = BAD_ARRAYS[k](good)
            case(fn, f"{arg} {k}", "refuse", arg, lambda arg=arg, bad=bad: call(**{arg: bad}))


BAD_SCALARS = {"NaN": NAN, "inf": INF, "str": "0.1", "None": None, "complex": 0.1 + 1j}


def scalar_sweep(fn, call, args, extra=None):
    for arg in args:
        for k, v in {**BAD_SCALARS, **(extra or {}).get(arg, {})}.items():
            case(fn, f"{arg} {k}", "refuse", arg, lambda arg=arg, v=v: call(**{arg: v}))


# ---- train
def _train(y=Y2, lr=0.1, steps=3, **kw):
    return nqf.train(model(), y, lr=lr, steps=steps, **kw)


case("train", "valid", "valid", "", lambda: _train())
case("train", "y list", "valid", "", lambda: _train(y=[1.0, 0.5]))
case("train", "y shape (m,1)", "valid", "", lambda: _train(y=Y2[:, None]))
case("train", "float32 model, representable eps", "valid", "",
     lambda: nqf.train(model(dtype=torch.float32), Y2, lr=0.1, steps=3))
sweep("train", _train, {"y": Y2})
case("train", "y length 1 for 2 samples", "refuse", "y", lambda: _train(y=[1.0]))
case("train", "y ragged list", "refuse", "y", lambda: _train(y=[[1.0], [1.0, 2.0]]))
scalar_sweep("train", _train, ["lr"], {"lr": {"negative": -0.1, "zero": 0.0}})
for k, v in {"zero": 0, "negative": -1, "float": 2.5, "NaN": NAN, "str": "3", "None": None}.items():
    case("train", f"steps {k}", "refuse", "steps", lambda v=v: _train(steps=v))
case("train", "optimizer unknown", "refuse", "optimizer", lambda: _train(optimizer="adamw"))
case("train", "loss unknown", "refuse", "loss", lambda: _train(loss="l1"))
case("train", "unknown keyword", "refuse", "lrate", lambda: _train(lrate=0.1))
case("train", "momentum 1.5", "refuse", "momentum", lambda: _train(optimizer="momentum", momentum=1.5))
case("train", "weight_decay NaN", "refuse", "weight_decay", lambda: _train(weight_decay=NAN))
case("train", "record_steps beyond steps", "refuse", "record_steps", lambda: _train(record_steps=[0, 10]))
case("train", "record_steps decreasing", "refuse", "record_steps", lambda: _train(record_steps=[2, 1]))

# ---- QuadraticModel
case("QuadraticModel", "valid", "valid", "", lambda: model())
case("QuadraticModel", "W0 list", "valid", "", lambda: model([[0.1, 0.0], [0.0, 0.1]]))
case("QuadraticModel", "W0 3-D replicas", "valid", "", lambda: model(np.stack([0.1 * np.eye(2)] * 2)))
sweep("QuadraticModel", lambda W0: nqf.QuadraticModel(form(), W0, device="cpu"), {"W0": 0.1 * np.eye(2)})
case("QuadraticModel", "W0 wrong p (3 rows)", "refuse", "W0", lambda: model(np.ones((3, 1))))
case("QuadraticModel", "W0 ragged", "refuse", "W0", lambda: model([[0.1], [0.1, 0.2]]))
case("QuadraticModel", "device cuda on CPU-only", "refuse", "device", lambda: model(device="cuda")
     if not torch.cuda.is_available() else (_ for _ in ()).throw(ValueError("device: cuda present; skip")))
case("QuadraticModel", "device unknown", "refuse", "device", lambda: model(device="gpu0"))
case("QuadraticModel", "float32 tiny eps underflows W0", "refuse", "W0",
     lambda: model(math.sqrt(1e-90) * np.eye(2), dtype=torch.float32))
case("QuadraticModel", "dtype complex", "refuse", "dtype", lambda: model(dtype=torch.complex128))
case("QuadraticModel", "dtype bool", "refuse", "dtype", lambda: model(dtype=torch.bool))
case("QuadraticModel", "form not a form", "refuse", "form", lambda: nqf.QuadraticModel(np.eye(2), 0.1 * np.eye(2)))
case("QuadraticModel", "unknown keyword", "refuse", "seed", lambda: model(seed=1))

# ---- forms
case("DenseForm", "valid", "valid", "", lambda: DenseForm(torch.eye(2, dtype=torch.float64)[None]))
case("DiagonalForm", "valid", "valid", "", lambda: DiagonalForm(torch.as_tensor(LAM)))
case("DiagonalForm", "float32 diag", "valid", "", lambda: DiagonalForm(torch.as_tensor(LAM, dtype=torch.float32)))
for k, v in {"NaN": NAN, "inf": INF}.items():
    case("DenseForm", f"A {k}", "refuse", "A", lambda v=v: DenseForm(torch.full((1, 2, 2), v, dtype=torch.float64)))
    case("DiagonalForm", f"diag {k}", "refuse", "diag",
         lambda v=v: DiagonalForm(torch.tensor([[1.0, v]], dtype=torch.float64)))
case("DenseForm", "A 2-D", "refuse", "A", lambda: DenseForm(torch.eye(2, dtype=torch.float64)))
case("DenseForm", "A not square", "refuse", "A", lambda: DenseForm(torch.ones(1, 2, 3, dtype=torch.float64)))
case("DenseForm", "A int (cast to float64, as numpy ints)", "valid", "", lambda: DenseForm(torch.ones(1, 2, 2, dtype=torch.int64)))
case("DenseForm", "A numpy array", "valid", "", lambda: DenseForm(np.ones((1, 2, 2))))
case("DenseForm", "A empty", "refuse", "A", lambda: DenseForm(torch.zeros(0, 2, 2, dtype=torch.float64)))
case("DenseForm", "A None", "refuse", "A", lambda: DenseForm(None))
case("DiagonalForm", "diag 1-D", "refuse", "diag", lambda: DiagonalForm(torch.ones(2, dtype=torch.float64)))
case("DiagonalForm", "diag bool", "refuse", "diag", lambda: DiagonalForm(torch.ones(2, 2, dtype=torch.bool)))
case("DiagonalForm", "diag complex", "refuse", "diag", lambda: DiagonalForm(torch.ones(2, 2, dtype=torch.complex128)))
case("DiagonalForm", "diag None", "refuse", "diag", lambda: DiagonalForm(None))

# ---- predict
def _predict(form_=None, y=Y2, t=T5, **kw):
    kw.setdefault("M0", M0)
    return nqf.predict(form() if form_ is None else form_, y, t, **kw)


case("predict", "valid", "valid", "", lambda: _predict())
case("predict", "lists", "valid", "", lambda: _predict(y=[1.0, 0.5], t=list(T5), M0=M0.tolist()))
case("predict", "y (m,1)", "valid", "", lambda: _predict(y=Y2[:, None]))
case("predict", "W0 instead of M0", "valid", "", lambda: _predict(M0=None, W0=0.1 * np.eye(2)))
sweep("predict", _predict, {"y": Y2, "t": T5, "M0": M0})
case("predict", "t decreasing", "refuse", "t", lambda: _predict(t=[0.0, 2.0, 1.0]))
case("predict", "y length 1", "refuse", "y", lambda: _predict(y=[1.0]))
case("predict", "method unknown", "refuse", "method", lambda: _predict(method="magic"))
case("predict", "M0 and W0 both missing", "refuse", "M0", lambda: _predict(M0=None))
case("predict", "form not a form", "refuse", "form", lambda: nqf.predict(np.eye(2), Y2, T5, M0=M0))
case("predict", "unknown keyword", "refuse", "m0", lambda: _predict(m0=M0))
scalar_sweep("predict", _predict, ["tol"])

# ---- mflow / SecondMoment / discrete_flow
def _mflow(M0=M0, t=T5, y=Y2, **kw):
    return nqf.mflow(form(), M0=M0, t=t, y=y, **kw)


case("mflow", "valid", "valid", "", lambda: _mflow())
case("mflow", "lists", "valid", "", lambda: _mflow(M0=M0.tolist(), t=list(T5), y=[1.0, 0.5]))
case("mflow", "SecondMoment input", "valid", "",
     lambda: nqf.mflow(SecondMoment.from_form(form(), Y2), M0=M0, t=T5))
sweep("mflow", _mflow, {"M0": M0, "t": T5, "y": Y2})
case("mflow", "t decreasing", "refuse", "t", lambda: _mflow(t=[0.0, 2.0, 1.0]))
case("mflow", "M0 wrong shape", "refuse", "M0", lambda: _mflow(M0=np.eye(3)))
case("mflow", "method unknown", "refuse", "method", lambda: _mflow(method="euler"))
scalar_sweep("mflow", _mflow, ["weight_decay", "rtol"], {"rtol": {"negative": -1.0}})
case("mflow", "unknown keyword", "refuse", "lr", lambda: _mflow(lr=0.1))
case("SecondMoment", "valid", "valid", "", lambda: SecondMoment.from_form(form(), Y2))
sweep("SecondMoment", lambda y: SecondMoment.from_form(form(), y), {"y": Y2})
case("SecondMoment", "y length 1", "refuse", "y", lambda: SecondMoment.from_form(form(), [1.0]))
case("SecondMoment", "form not a form", "refuse", "form", lambda: SecondMoment.from_form(np.eye(2), Y2))
case("SecondMoment", "rank_rtol NaN", "refuse", "rank_rtol", lambda: SecondMoment.from_form(form(), Y2, rank_rtol=NAN))


def _df(M0=M0, y=Y2, lr=0.1, steps=3, **kw):
    return nqf.discrete_flow(form(), M0=M0, y=y, lr=lr, steps=steps, **kw)


case("discrete_flow", "valid", "valid", "", lambda: _df())
case("discrete_flow", "lists", "valid", "", lambda: _df(M0=M0.tolist(), y=[1.0, 0.5]))
sweep("discrete_flow", _df, {"M0": M0, "y": Y2})
scalar_sweep("discrete_flow", _df, ["lr"], {"lr": {"negative": -0.1}})
case("discrete_flow", "steps negative", "refuse", "steps", lambda: _df(steps=-1))
case("discrete_flow", "optimizer unknown", "refuse", "optimizer", lambda: _df(optimizer="adam"))
case("discrete_flow", "momentum NaN", "refuse", "momentum", lambda: _df(optimizer="momentum", momentum=NAN))

# ---- Lotka-Volterra
def _glv(r=R2, C=C2, z0=(0.1, 0.1), t=T5, **kw):
    return nqf.glv(r, C, z0, t, **kw)


case("glv", "valid", "valid", "", lambda: _glv())
case("glv", "lists", "valid", "", lambda: _glv(r=[1.0, 0.5], C=[[1.0, 0.0], [0.0, 2.0]], t=list(T5)))
case("glv", "scalar z0 broadcast", "valid", "", lambda: _glv(z0=0.1))
case("glv", "diagonal C", "valid", "", lambda: _glv(C=[1.0, 2.0]))
sweep("glv", _glv, {"r": R2, "C": C2, "z0": np.array([0.1, 0.1]), "t": T5})
case("glv", "C indefinite", "refuse", "C", lambda: _glv(C=INDEF))
case("glv", "C ragged", "refuse", "C", lambda: _glv(C=[[1.0], [0.0, 2.0]]))
case("glv", "unknown keyword", "refuse", "tol", lambda: _glv(tol=1e-3))
scalar_sweep("glv", _glv, ["rtol"], {"rtol": {"negative": -1.0}})


def _log(r=R2, c=(1.0, 1.0), z0=(0.1, 0.1), t=T5):
    return nqf.logistic_solution(r, c, z0, t)


case("logistic_solution", "valid", "valid", "", lambda: _log())
case("logistic_solution", "scalar z0", "valid", "", lambda: _log(z0=0.1))
sweep("logistic_solution", _log, {"r": R2, "c": np.array([1.0, 1.0]), "z0": np.array([0.1, 0.1]), "t": T5})
case("logistic_solution", "c < 0", "refuse", "c", lambda: _log(c=[-1.0, 1.0]))
case("logistic_solution", "t decreasing", "refuse", "t", lambda: _log(t=[0.0, 2.0, 1.0]))

case("lv_coefficients", "valid", "valid", "", lambda: nqf.lv_coefficients(LAM, Y2))
case("lv_coefficients", "lists, y (m,1)", "valid", "", lambda: nqf.lv_coefficients(LAM.tolist(), [[1.0], [0.5]]))
sweep("lv_coefficients", lambda lam=LAM, y=Y2: nqf.lv_coefficients(lam, y), {"lam": LAM, "y": Y2})
case("lv_coefficients", "y length 1", "refuse", "y", lambda: nqf.lv_coefficients(LAM, [1.0]))

case("LotkaVolterra", "from_data valid", "valid", "", lambda: nqf.LotkaVolterra.from_data(form(), Y2))
sweep("LotkaVolterra", lambda y: nqf.LotkaVolterra.from_data(form(), y), {"y": Y2}, ("NaN", "inf", "complex", "None", "empty"))
case("LotkaVolterra", "integrate z0 NaN", "refuse", "z0",
     lambda: nqf.LotkaVolterra.from_data(form(), Y2).integrate([NAN, 0.1], T5))
case("LotkaVolterra", "integrate t decreasing", "refuse", "t",
     lambda: nqf.LotkaVolterra.from_data(form(), Y2).integrate([0.1, 0.1], [0.0, 2.0, 1.0]))
case("LotkaVolterra", "C indefinite", "refuse", "C",
     lambda: nqf.LotkaVolterra(r=R2, C=INDEF, lam=LAM, y=Y2, basis=np.eye(2)))

# ---- staircase
case("staircase", "valid", "valid", "", lambda: nqf.staircase(R2, C2, -1.0, loss0=1.0))
case("staircase", "lists", "valid", "", lambda: nqf.staircase([1.0, 0.5], [1.0, 2.0]))
sweep("staircase", lambda r=R2, C=C2: nqf.staircase(r, C), {"r": R2, "C": C2})
scalar_sweep("staircase", lambda x0=-1.0, loss0=1.0: nqf.staircase(R2, C2, x0, loss0=loss0), ["x0", "loss0"])
case("staircase", "loss0 None (default)", "valid", "", lambda: nqf.staircase(R2, C2, loss0=None))
case("staircase", "C indefinite", "refuse", "C", lambda: nqf.staircase(R2, INDEF))
case("staircase", "max_events 0", "refuse", "max_events", lambda: nqf.staircase(R2, C2, max_events=0))

# ---- ignition
def _pit(zeta=R2, C_k=(1.0, 2.0), eps=1e-3, **kw):
    return nqf.predicted_ignition_times(zeta, C_k, eps, **kw)


case("predicted_ignition_times", "valid", "valid", "", lambda: _pit())
case("predicted_ignition_times", "scalar eps 1e-30", "valid", "", lambda: _pit(eps=1e-30))
case("predicted_ignition_times", "float32 arrays", "valid", "", lambda: _pit(zeta=R2.astype(np.float32)))
sweep("predicted_ignition_times", _pit, {"zeta": R2, "C_k": np.array([1.0, 2.0])})
case("predicted_ignition_times", "eps 1 (documented: allowed)", "valid", "", lambda: _pit(zeta=[5.0, 5.0], eps=1.0))
for e in (0.0, -1.0, NAN, INF, "1e-3", None):
    case("predicted_ignition_times", f"eps {e!r}", "refuse", "eps", lambda e=e: _pit(eps=e))
scalar_sweep("predicted_ignition_times", _pit, ["rho", "a"], {"rho": {"one": 1.0, "zero": 0.0}})

case("ignition_times", "valid", "valid", "", lambda: nqf.ignition_times(T5, nqf.glv(R2, C2, [0.01, 0.01], T5)))
case("ignition_times", "lists", "valid", "", lambda: nqf.ignition_times(list(T5), nqf.glv(R2, C2, [0.01, 0.01], T5).tolist()))
sweep("ignition_times", lambda t=T5, z=np.ones((5, 2)): nqf.ignition_times(t, z), {"t": T5, "z": np.ones((5, 2))})
case("ignition_times", "t decreasing", "refuse", "t", lambda: nqf.ignition_times([0.0, 2.0, 1.0], np.ones((3, 2))))
case("ignition_times", "rho 2", "refuse", "rho", lambda: nqf.ignition_times(T5, np.ones((5, 2)), rho=2.0))
case("ignition_times", "saturation NaN", "refuse", "saturation",
     lambda: nqf.ignition_times(T5, np.ones((5, 2)), saturation=[NAN, 1.0]))

case("predicted_seed_scatter", "valid", "valid", "", lambda: nqf.predicted_seed_scatter(R2, 4))
sweep("predicted_seed_scatter", lambda zeta: nqf.predicted_seed_scatter(zeta, 4), {"zeta": R2})
for k, v in {"zero": 0, "negative": -2, "float": 2.5, "str": "4", "None": None}.items():
    case("predicted_seed_scatter", f"d {k}", "refuse", "d", lambda v=v: nqf.predicted_seed_scatter(R2, v))

# ---- scaling
def _fpl(t=TT, loss=TT ** -0.5, window=(2.0, 100.0), **kw):
    kw.setdefault("n_boot", 10)
    return nqf.fit_power_law(t, loss, window, **kw)


case("fit_power_law", "valid", "valid", "", lambda: _fpl())
case("fit_power_law", "lists", "valid", "", lambda: _fpl(t=list(TT), loss=list(TT ** -0.5)))
sweep("fit_power_law", _fpl, {"t": TT, "loss": TT ** -0.5})
case("fit_power_law", "window reversed", "refuse", "window", lambda: _fpl(window=(100.0, 2.0)))
case("fit_power_law", "window NaN", "refuse", "window", lambda: _fpl(window=(NAN, 100.0)))
case("fit_power_law", "window outside t", "refuse", "window", lambda: _fpl(window=(1e5, 1e6)))
case("fit_power_law", "loss negative", "refuse", "loss", lambda: _fpl(loss=-TT ** -0.5))
case("fit_power_law", "t and loss lengths differ", "refuse", "loss", lambda: _fpl(loss=TT[:-1] ** -0.5))
case("fit_power_law", "n_boot 0", "refuse", "n_boot", lambda: _fpl(n_boot=0))

ZETA = 1.0 / np.arange(1, 31) ** 1.2
V30 = 1.0 / np.arange(1, 31) ** 2.0
TSTAR = np.log(1e6) / ZETA
case("predict_exponent", "valid", "valid", "", lambda: nqf.predict_exponent(ZETA, V30, t_star=TSTAR))
case("predict_exponent", "lists", "valid", "", lambda: nqf.predict_exponent(list(ZETA), list(V30), t_star=list(TSTAR)))
sweep("predict_exponent", lambda zeta=ZETA, V=V30: nqf.predict_exponent(zeta, V, t_star=TSTAR), {"zeta": ZETA, "V": V30})
case("predict_exponent", "V length differs", "refuse", "V", lambda: nqf.predict_exponent(ZETA, V30[:-1], t_star=TSTAR))
scalar_sweep("predict_exponent", lambda a=1.0, cutoff=0.1: nqf.predict_exponent(ZETA, V30, t_star=TSTAR, a=a, cutoff=cutoff),
             ["a", "cutoff"])

# ---- structure_matrix / expansion
case("structure_matrix", "valid", "valid", "", lambda: nqf.structure_matrix(unit, X3, 3))
case("structure_matrix", "float32 x", "valid", "", lambda: nqf.structure_matrix(unit, X3.float(), 3))
for k, v in {"NaN": NAN, "inf": INF}.items():
    case("structure_matrix", f"x {k}", "refuse", "x",
         lambda v=v: nqf.structure_matrix(unit, torch.tensor([v, 0.1, 0.2], dtype=torch.float64), 3))
    case("expansion", f"x {k}", "refuse", "x",
         lambda v=v: nqf.expansion(unit, torch.tensor([v, 0.1, 0.2], dtype=torch.float64), 3))
case("structure_matrix", "x None", "refuse", "x", lambda: nqf.structure_matrix(unit, None, 3))
case("structure_matrix", "x str", "refuse", "x", lambda: nqf.structure_matrix(unit, "abc", 3))
case("structure_matrix", "x complex", "refuse", "x", lambda: nqf.structure_matrix(unit, X3 * (1 + 1j), 3))
case("structure_matrix", "x empty", "refuse", "x", lambda: nqf.structure_matrix(unit, torch.zeros(0, dtype=torch.float64), 3))
case("structure_matrix", "unit not callable", "refuse", "unit", lambda: nqf.structure_matrix(3, X3, 3))
case("structure_matrix", "unit ReLU (not C^3)", "refuse", "unit",
     lambda: nqf.structure_matrix(lambda w, x: torch.relu(w @ x), X3, 3))
for k, v in {"zero": 0, "float": 2.5, "str": "3", "None": None, "wrong": 5}.items():
    case("structure_matrix", f"p {k}", "refuse", "p", lambda v=v: nqf.structure_matrix(unit, X3, v))
    case("expansion", f"p {k}", "refuse", "p", lambda v=v: nqf.expansion(unit, X3, v))
case("expansion", "valid", "valid", "", lambda: nqf.expansion(unit, X3, 3))
case("expansion", "unit not callable", "refuse", "unit", lambda: nqf.expansion("tanh", X3, 3))
case("structure_matrix", "unknown keyword", "refuse", "batch", lambda: nqf.structure_matrix(unit, X3, 3, batch=True))

# ---- architectures
case("architectures.build", "valid mlp", "valid", "", lambda: arch.build("mlp", D=4, width=4))
for name in list(arch.ARCHITECTURES)[:6]:
    case("architectures.build", f"{name} default", "valid", "", lambda name=name: arch.build(name))
case("architectures.build", "unknown name", "refuse", "mlpp", lambda: arch.build("mlpp"))
case("architectures.build", "name None", "refuse", "None", lambda: arch.build(None))
case("architectures.build", "unknown keyword", "refuse", "widht", lambda: arch.build("mlp", widht=4))
case("architectures.build", "width 0", "refuse", "width", lambda: arch.build("mlp", width=0))
case("architectures.build", "width NaN", "refuse", "width", lambda: arch.build("mlp", width=NAN))
case("architectures.build", "width str", "refuse", "width", lambda: arch.build("mlp", width="4"))
case("architectures.build", "D negative", "refuse", "D", lambda: arch.build("mlp", D=-1))
case("ARCHITECTURES", "unknown key", "refuse", "nope", lambda: arch.ARCHITECTURES["nope"])
case("architectures.build", "structure of NaN x", "refuse", "x",
     lambda: arch.build("mlp", D=4, width=4).structure(torch.full((3, 4), NAN, dtype=torch.float64)))
case("architectures.build", "structure of wrong D", "refuse", "x",
     lambda: arch.build("mlp", D=4, width=4).structure(torch.ones((3, 5), dtype=torch.float64)))

# ---- issue 30, item 6: results that used to come out silently wrong, raw or after a hang
HALF = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _readme_data():
    """tests/training/test_loop.py's data of docs/library.md: diagonal C, r_1 = 8, so GD settles only for lr < 0.25."""
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.standard_normal((400, 6)))
    feats = np.sqrt(400) * Q * np.arange(1, 7) ** -0.5
    return DiagonalForm(torch.as_tensor(feats)), feats @ np.ones(6), np.sqrt(1e-5) * np.eye(6)


def _train_readme(lr=0.01, steps=60, dtype=torch.float64, **kw):
    form_, y, W0 = _readme_data()
    return nqf.train(nqf.QuadraticModel(form_, W0, dtype=dtype, device="cpu"), y, lr=lr, steps=steps, **kw)


def _half_train(dtype):
    """A half-precision run: warned of its loss floor; a TypeError (bfloat16 records used to raise
    one after training) counts as a raw error, not as a refusal."""
    try:
        return _train_readme(dtype=dtype, n_record=10)
    except TypeError as err:
        raise RuntimeError(f"TypeError after training: {err}") from err


def _quick(call, limit=5.0):
    """call(); a refusal that comes only after ``limit`` seconds counts as a raw error."""
    start = time.perf_counter()
    try:
        return call()
    except Exception as err:  # noqa: BLE001
        took = time.perf_counter() - start
        if took > limit:
            raise RuntimeError(f"refused only after {took:.1f} s: {type(err).__name__}: {err}") from err
        raise


def _structure_dtype(x, want):
    form_ = arch.build("mlp", D=4, width=4).structure(x)
    if form_.left.dtype != want:
        raise RuntimeError(f"structure() of {x.dtype} inputs gave a {form_.left.dtype} form, not {want}")
    return form_.dense()


def _in_place_unit(w, x):
    w.mul_(2.0)
    return (w @ x) ** 2


def _in_place_no_grad_unit(w, x):
    with torch.no_grad():
        w.add_(1.0)
    return (w @ x) ** 2


def _huge_dense():
    module = arch.build("mlp", D=1000, width=4, n_outputs=1)  # 20000 matrices of 1001 x 1001: 160 GB
    return module.structure(module.sample_inputs(20000, torch.Generator().manual_seed(0))).dense()


POW25 = lambda w, x: (w @ x).abs() ** 2.5  # noqa: E731 (C^2, infinite third derivative at w = 0)
case("expansion", "unit |w.x|^2.5 (third derivative infinite at 0)", "refuse", "unit", lambda: nqf.expansion(POW25, X3, 3))
case("structure_matrix", "unit |w.x|^2.5 (third derivative infinite at 0)", "refuse", "unit",
     lambda: nqf.structure_matrix(POW25, X3, 3))
case("expansion", "unit |w.x|^4 (C^3: expanded)", "valid", "", lambda: nqf.expansion(lambda w, x: (w @ x).abs() ** 4, X3, 3))
case("train", "GD lr 0.3 above the stability bound 2 / r_1 = 0.25", "refuse", "lr",
     lambda: _train_readme(lr=0.3, steps=400, n_record=10))
case("train", "GD lr 0.2 below the stability bound", "valid", "", lambda: _train_readme(lr=0.2, steps=400, n_record=10))
for name, dt in HALF.items():
    case("train", f"{name} parameters (loss floor; no TypeError)", "refuse", name, lambda dt=dt: _half_train(dt))
case("architectures.build", "structure of int64 x (read as float64)", "valid", "",
     lambda: _structure_dtype(torch.randint(-3, 4, (6, 4), generator=torch.Generator().manual_seed(7)), torch.float64))
for name, dt in HALF.items():
    case("architectures.build", f"structure of {name} x", "refuse", "x",
         lambda dt=dt: arch.build("mlp", D=4, width=4).structure(torch.ones(6, 4, dtype=dt)))
case("architectures.build", "structure of an empty batch (0, D)", "refuse", "x",
     lambda: arch.build("mlp", D=4, width=4).structure(torch.zeros(0, 4, dtype=torch.float64)))
for fn, call in (("structure_matrix", nqf.structure_matrix), ("expansion", nqf.expansion)):
    case(fn, "device cuda on CPU-only", "refuse", "device", lambda call=call: call(lambda w, x: (w @ x) ** 2, X3, 3, device="cuda")
         if not torch.cuda.is_available() else (_ for _ in ()).throw(ValueError("device: cuda present; skip")))
case("expansion", "unit edits w in place (w.mul_)", "refuse", "in place", lambda: nqf.expansion(_in_place_unit, X3, 3))
case("structure_matrix", "unit edits w in place under no_grad (w.add_)", "refuse", "in place",
     lambda: nqf.structure_matrix(_in_place_no_grad_unit, X3, 3))
case("structure_matrix", "unit edits a copy of w (w.clone().mul_)", "valid", "",
     lambda: nqf.structure_matrix(lambda w, x: (w.clone().mul_(2.0) @ x) ** 2, X3, 3))
case("train", "steps 1e9, n_record 1e9 (refused within 5 s)", "refuse", "n_record",
     lambda: _quick(lambda: _train_readme(steps=10 ** 9, n_record=10 ** 9)))
case("architectures.build", "dense() of 20000 x 1001 x 1001 (160 GB; refused within 5 s)", "refuse", "dense",
     lambda: _quick(_huge_dense))

# ---- runs
case("open_runs", "unknown experiment", "refuse", "experiment", lambda: open_runs("no_such_experiment", results="/nonexistent"))
case("open_runs", "experiment None", "refuse", "experiment", lambda: open_runs(None, results="/nonexistent"))
case("open_runs", "experiment int", "refuse", "experiment", lambda: open_runs(3, results="/nonexistent"))

# ---- closed forms
case("corollary4", "valid", "valid", "", lambda: corollary4([1.0, 1.0], [1.0, 1.0], [0.1, 0.1], T5))
sweep("corollary4", lambda tau=R2, c=np.ones(2), rho0=np.array([0.1, 0.1]), t=T5: corollary4(tau, c, rho0, t),
      {"tau": R2, "c": np.ones(2), "rho0": np.array([0.1, 0.1]), "t": T5}, ("NaN", "inf", "complex", "None", "empty"))
case("theorem5", "valid", "valid", "", lambda: theorem5(LAM, Y2, 0.01, T5))
sweep("theorem5", lambda lam=LAM, y=Y2, z0=np.array([0.01]), t=T5: theorem5(lam, y, z0, t),
      {"lam": LAM, "y": Y2, "z0": np.array([0.01]), "t": T5}, ("NaN", "inf", "complex", "None", "empty"))
case("theorem5", "z0 negative", "refuse", "z0", lambda: theorem5(LAM, Y2, -0.01, T5))
case("theorem7 (theorem6 path: predict)", "valid", "valid", "", lambda: theorem7(np.eye(2), 0.5, T5, M0=M0))
sweep("theorem7 (theorem6 path: predict)", lambda Y=np.eye(2), t=T5: theorem7(Y, 0.5, t, M0=M0),
      {"Y": np.eye(2), "t": T5}, ("NaN", "inf", "complex", "None", "empty"))
scalar_sweep("theorem7 (theorem6 path: predict)", lambda c=0.5: theorem7(np.eye(2), c, T5, M0=M0), ["c"])


# ---- classify
def _finite(x):
    try:
        if isinstance(x, (np.ndarray, torch.Tensor, list, tuple, float, int)):
            a = np.asarray(x.detach() if isinstance(x, torch.Tensor) else x, dtype=complex)
            return bool(np.all(np.isfinite(a)))
        if hasattr(x, "data_vars"):
            return all(_finite(v.values) for v in x.data_vars.values() if v.dtype.kind in "fc")
    except Exception:
        pass
    return True


def classify(exp, arg, call, key=None):
    if key in DOCUMENTED:
        try:
            call()
        except Exception as e:  # noqa: BLE001
            return "refused cleanly", f"{type(e).__name__}: {e}"
        return "documented", DOCUMENTED[key]
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        try:
            out = call()
            err = None
        except Exception as e:  # noqa: BLE001
            err, out = e, None
    wmsgs = [str(w.message) for w in ws if "nqf" in str(w.filename) or "torch" not in str(w.filename)]
    if err is not None:
        msg = f"{type(err).__name__}: {err}"
        # FileNotFoundError: Python's own error for a missing file (open_runs' results folder)
        # MemoryError: nqf's refusal of arrays estimated from the shapes, before allocating (nqf.validate.memory)
        clean = (isinstance(err, (ValueError, TypeError, FileNotFoundError, MemoryError, *NQF_ERRORS)) and len(str(err)) < 400
                 and arg in str(err))
        if exp == "valid":
            return "wrongly refused", msg
        if isinstance(err, KeyError) and arg in str(err):
            clean = True
        return ("refused cleanly" if clean else "raw error"), msg
    if exp == "valid":
        return ("accepted" if _finite(out) and not wmsgs else "wrongly refused"), "; ".join(wmsgs)[:300] or "ok"
    if wmsgs and any(arg in w for w in wmsgs):
        return "warned", "; ".join(wmsgs)[:300]
    return "garbage", ("finite" if _finite(out) else "non-finite") + " result" + ("; " + "; ".join(wmsgs)[:200] if wmsgs else "")


def main():
    t0 = time.time()
    rows = []
    for fn, desc, exp, arg, call in CASES:
        verdict, msg = classify(exp, arg, call, (fn, desc))
        rows.append(dict(function=fn, description=desc, expected=exp, argument=arg, verdict=verdict,
                         message=msg.replace("\n", " ")[:300]))
    elapsed = time.time() - t0
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    with open(out / "library_audit.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader(); w.writerows(rows)
    verdicts = ["refused cleanly", "warned", "raw error", "garbage", "accepted", "wrongly refused", "documented"]
    per = defaultdict(Counter)
    for r in rows:
        per[r["function"]][r["verdict"]] += 1
    lines = [f"# Library audit\n", f"{len(rows)} calls, {elapsed:.1f} s (torch {torch.__version__}, "
             f"cuda available: {torch.cuda.is_available()}).\n", "## Per function\n",
             "| function | calls | " + " | ".join(verdicts) + " |", "|---|---|" + "---|" * len(verdicts)]
    tot = Counter()
    for fn, c in per.items():
        tot.update(c)
        lines.append(f"| {fn} | {sum(c.values())} | " + " | ".join(str(c[v]) for v in verdicts) + " |")
    lines.append(f"| **total** | {len(rows)} | " + " | ".join(str(tot[v]) for v in verdicts) + " |")
    lines += ["", "## Per case\n", "| function | description | expected | verdict | message |", "|---|---|---|---|---|"]
    for r in rows:
        m = r["message"].replace("|", "\\|")
        lines.append(f"| {r['function']} | {r['description']} | {r['expected']} | {r['verdict']} | {m} |")
    (out / "library_audit.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:len(per) + 8]))
    bad = [r for r in rows if r["verdict"] in ("raw error", "garbage", "wrongly refused")]
    for r in bad:
        print("BAD", r["function"], "|", r["description"], "|", r["verdict"], "|", r["message"][:160])
    return 0


if __name__ == "__main__":
    sys.exit(main())
