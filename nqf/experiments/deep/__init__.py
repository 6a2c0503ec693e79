"""Experiment kind ``deep``: deep networks beside their 2-layer and 1-layer NQFs (paper Figure 8).

Per architecture (4-layer tanh MLP 8 -> 16 -> 16 -> 16 -> 1; 2-layer single-head attention, input
and hidden dim 8, length 10, output 1; nqf.training.deep) a teacher of the same architecture with fixed
Gaussian weights (std teacher_std / sqrt(fan-in)) labels m_train Gaussian inputs; the network, its
2-layer NQF (one NQF per block, Definition 2) and its 1-layer NQF (collapsed to match the network
at step zero) share the init and the learning rate, full batch, for each optimizer. Init
variances are read in the fan-in convention, W ~ N(0, var / fan-in) (see the schema).

Comparison metric: the escape step t of each model, the first step at which its train loss falls
below ``window_fraction`` of its initial value (the first descent from the small-weight plateau,
which is what an NQF of small weights describes; afterwards the network keeps learning beyond
any quadratic expansion), and D = |t_model / t_deep - 1|, worst seed. Loss ratios near a sharp
drop would amplify tiny shifts in time; the escape step compares the clocks directly.

Verdicts: the paper's claim that the 2-layer NQF tracks the network at the small init is judged
within an error budget times ``tolerances.safety_factor``: the network's own O(|W|^2) distance
from its 2-layer NQF at its weights (nqf.training.deep.truncation, Richardson over the Eq. 3 block
rescaling, so it does not depend on the NQF being compared), averaged over the steps before the
escape, plus the escape step's interpolation error on the recorded grid. The departures (the
1-layer NQF at the small init, the paper's 'but not 1-layer NQFs'; both NQFs at the large init,
this project's reading of the figure's contrast) are bounds: at least ``departure_ratio`` times
the 2-layer NQF's D of the same run.

Loss convention (``loss``, nqf.theory.losses): the three models minimise c L_Eq.26 (c = 1, 1/2, n, n/2
with n = n_train); the recorded losses are Eq. 26's and ``time`` = c lr step, the flow time of
GD and momentum. For Adam the convention changes only Adam's eps term (its step does not scale
with the gradient), and no flow clock applies.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from nqf.experiments.claims import NOT_REACHED, Claim, ErrorBudget, claims_dataset
from nqf.experiments.contract import PaperFigure
from nqf.experiments.sweeps import grid_cell, grid_runs, per_arch_dataset, teacher_generator
from nqf.experiments.verify_runs import check_runs
from nqf.theory.losses import flow_lr
from nqf.training.loop import log_step_grid

KIND = "deep"
# facts the generic checks and reports read (nqf.experiments.contract.OPTIONAL)
PAPER_FIGURE = PaperFigure("Fig. 8", "deep networks vs 2-layer and 1-layer NQFs", order=8)
NONFINITE = {"train": {"train_*": "NaN after a divergence the kind records as a failed escape",
                       "test_*": "NaN after a divergence", "truncation": "NaN after a divergence"}}
FINITE_THEORY = ("r", "C", "target_variance")
SEED_BLOCKS = True  # results depend on each seed alone; see nqf.experiments (seed blocks)
TITLES = {"mlp": "4-layer MLP", "attention": "2-layer attention"}
MODELS = ("deep", "nqf2", "nqf1")
LABELS = {"deep": "original", "nqf2": "2-layer NQF", "nqf1": "1-layer NQF"}
PAPER_SOURCE = ("Fig. 8 / App. C: 'under small initialization, the training dynamics of both models are well "
                "approximated by 2-layer NQFs but not 1-layer NQFs'")
LARGE_SOURCE = ("the contrast Fig. 8 draws with the large init (the paper states only that 'under small "
                "initialization, the dynamics overlap')")
_DATA = ("architectures", "sizes", "n_train", "n_test", "teacher_std", "data_seed")
STAGE_KEYS = {
    "data": _DATA,
    "structure": ("architectures",),
    "train": _DATA + ("optimizers", "loss", "lr", "steps", "init_variance", "seeds", "n_record", "momentum"),
    "theory": ("architectures",),
    "fit": ("architectures", "optimizers", "init_variance", "window_fraction", "tolerances"),
    "figure": ("description", "architectures", "optimizers", "init_variance"),
}


def run_id(arch: str, optimizer: str) -> str:
    return f"{arch}_{optimizer}"


# The config lists the run ids are made of (nqf.experiments.ids refuses a value listed twice).
RUN_ID_KEYS = ("architectures", "optimizers")


def runs(cfg: dict) -> list[str]:
    """One run per architecture x optimizer; it holds every init variance and seed."""
    return grid_runs(cfg, run_id, "architectures", "optimizers")


def run_config(cfg: dict, run: str) -> dict:
    a, o = grid_cell(cfg, run, run_id, "architectures", "optimizers")
    shared = ("n_train", "n_test", "teacher_std", "data_seed", "loss", "seeds", "n_record", "momentum")
    return {"architecture": a, "optimizer": o, "size": cfg["sizes"][a], "lr": cfg["lr"][a][o],
            "steps": cfg["steps"][a][o], "init_variance": cfg["init_variance"][a], **{k: cfg[k] for k in shared}}


def check(cfg: dict) -> list[tuple[str, str]]:
    """Sizes that must fit together: each architecture's model must build (the MLP needs an even
    number of weight layers)."""
    from nqf.training.deep import build_deep

    for a in cfg["architectures"]:
        try:
            build_deep(a, cfg["sizes"][a])
        except (ValueError, TypeError) as exc:
            return [(f"sizes.{a}", f"the {a} model cannot be built: {exc}")]
    return []


def estimate(cfg: dict) -> dict:
    """A floor for the largest run (nqf.experiments.machine): the train and test inputs, the
    weights of the network and its two NQFs for every init variance x seed of a job (with
    gradients and optimizer states) and their activations on the training set."""
    from nqf.experiments.machine import BYTES, job_seeds, largest_run
    from nqf.training.deep import build_deep

    R, n, held = 2 * job_seeds(cfg), int(cfg["n_train"]), int(cfg["n_train"]) + int(cfg["n_test"])
    runs = []
    for a in cfg["architectures"]:
        try:
            model = build_deep(a, cfg["sizes"][a])
        except (ValueError, TypeError):
            continue  # check names it
        P = sum(o * i for o, i in model.shapes)
        if a == "mlp":
            numel, act = model.dims[0], sum(model.dims[1:])
        else:
            numel = model.D * model.seq_len
            act = model.n_layers * model.seq_len * (3 * model.hidden + model.seq_len)
        parts = {"n_train": BYTES * (held * numel + 3 * R * n * act), f"sizes.{a}": BYTES * 3 * 4 * R * P}
        runs.append({"bytes": sum(parts.values()), "key": max(parts, key=parts.get),
                     "what": f"{a}: {held} inputs of {numel} values, {R} replicas of {P} weights in the network "
                             f"and its two NQFs with gradients and optimizer states, activations of {n} samples"})
    steps = max(int(cfg["steps"][a][o]) for a in cfg["architectures"] for o in cfg["optimizers"])
    return largest_run(runs, steps) if runs else {"bytes": 0, "steps": steps, "what": "no model"}


def work(cfg: dict, run: str) -> dict:
    """What run ``run`` computes (nqf.experiments.work.run_work): each step the network's forward
    and backward on the training set for every init variance x seed (counted on the meta device),
    three times (the network and its two NQFs), and each record about RECORD_STEPS steps."""
    import torch

    from nqf.experiments.machine import job_seeds
    from nqf.experiments.work import RECORD_STEPS, count_work
    from nqf.training.deep import build_deep

    rc = run_config(cfg, run)
    R, n = len(rc["init_variance"]) * job_seeds(cfg), int(cfg["n_train"])

    def step():
        model = build_deep(rc["architecture"], rc["size"])
        shape = (n, model.dims[0]) if rc["architecture"] == "mlp" else (n, model.D, model.seq_len)
        W = [w.requires_grad_(True) for w in model.init(R, 1.0, torch.Generator())]
        model.forward(W, torch.zeros(shape, dtype=torch.float64)).square().sum().backward()

    flops, ops, nbytes = count_work(step)
    return {"steps": int(rc["steps"]) + RECORD_STEPS * int(cfg["n_record"]), "flops": 3 * flops, "ops": 3 * ops,
            "bytes": 3 * nbytes}


def make_data(cfg: dict) -> xr.Dataset:
    """Per architecture: train and test inputs, the teacher's weights and targets."""
    # torch is imported where needed: the theory, fit and figure jobs run without it
    import torch

    from nqf.training.deep import build_deep

    variables, attrs = {}, {"experiment_kind": KIND, "architectures": ",".join(cfg["architectures"]),
                            "data_seed": cfg["data_seed"], "teacher_std": cfg["teacher_std"]}
    for a in cfg["architectures"]:
        model = build_deep(a, cfg["sizes"][a])
        gen = teacher_generator(cfg["data_seed"])  # offset from the students' init seeds
        W = model.init(1, cfg["teacher_std"], gen, fan_in=True)
        for split, m in (("train", cfg["n_train"]), ("test", cfg["n_test"])):
            x = model.sample_inputs(m, gen)
            with torch.no_grad():
                y = model.forward(W, x)[0, :, 0]
            dims = (f"{split}_sample",) + tuple(f"{a}_x_dim{i}" for i in range(1, x.ndim))
            variables[f"{a}_x_{split}"] = (dims, x.numpy(), {"units": "1", "long_name": f"{TITLES[a]} {split} inputs (standard Gaussian)"})
            variables[f"{a}_y_{split}"] = (f"{split}_sample", y.numpy(), {"units": "1", "long_name": f"{TITLES[a]} teacher output on the {split} inputs"})
        for l, w in enumerate(W):
            variables[f"{a}_teacher_W{l}"] = ((f"{a}_W{l}_row", f"{a}_W{l}_col"), w[0].numpy(), {
                "units": "1", "long_name": f"{TITLES[a]} teacher weight tensor {l}"})
    return xr.Dataset(variables, attrs=attrs)


def structure(data: xr.Dataset, cfg: dict) -> xr.Dataset:
    """One-mode GLV of the 1-layer NQF f_1 = v U x (x_avg for attention) on the training set.

    Its structure matrix is A = 1/2 [[0, x], [x^T, 0]] per output (Prop. 1 with phi'(0) = 1), so
    Y = (4/m) sum y A has top eigenvector psi = [beta_hat; 1] / sqrt(2), beta = (1/m) sum y x,
    lambda_mu = psi^T A_mu psi = beta_hat . x_mu / 2, r = (8/m) sum lambda_mu y_mu = 4 |beta| and
    C = (8/m) sum lambda_mu^2. The deep models have no such single mode (they are quartic at 0).
    """
    archs = list(cfg["architectures"])
    r, C, var = (np.zeros(len(archs)) for _ in range(3))
    for i, a in enumerate(archs):
        x = data[f"{a}_x_train"].values
        x = x.mean(-1) if x.ndim == 3 else x
        y = data[f"{a}_y_train"].values
        beta = x.T @ y / y.size
        lam = x @ (beta / np.linalg.norm(beta)) / 2
        r[i], C[i], var[i] = 8.0 / y.size * lam @ y, 8.0 / y.size * lam @ lam, y.var()
    return per_arch_dataset(KIND, archs, r=(r, "growth rate of the 1-layer NQF's top mode, r = 4 |(1/m) sum y x|"),
                            C=(C, "self-interaction of that mode, C = (8/m) sum lambda_mu^2"),
                            target_variance=(var, "variance of the training targets"))


def theory(structure_ds: xr.Dataset, cfg: dict) -> xr.Dataset:
    """No closed form for deep NQFs: the comparison is model against model (stores the loss scale)."""
    return structure_ds.copy().assign_attrs(experiment_kind=KIND, note="no closed-form prediction for deep NQFs")


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """The network, its 2-layer and 1-layer NQFs for every init variance x seed of one run."""
    import torch

    from nqf.training.deep import build_deep, train_deep_trio

    rc = cfg if "architecture" in cfg else run_config(cfg, run)
    a, opt = rc["architecture"], rc["optimizer"]
    model = build_deep(a, rc["size"])
    xtr, xte = (torch.as_tensor(data[f"{a}_x_{s}"].values) for s in ("train", "test"))
    ytr, yte = (torch.as_tensor(data[f"{a}_y_{s}"].values)[:, None] for s in ("train", "test"))
    per_seed = [model.init(1, 1.0, torch.Generator().manual_seed(int(s)), fan_in=True) for s in rc["seeds"]]
    G = [torch.cat([w[l] for w in per_seed]) for l in range(len(per_seed[0]))]
    variances = np.asarray(rc["init_variance"], float)
    W0 = [torch.cat([math.sqrt(v) * g for v in variances]) for g in G]
    steps = int(rc["steps"])
    loss = rc.get("loss", "mean")
    res = train_deep_trio(model, W0, xtr, ytr, xte, yte, lr=float(rc["lr"]), steps=steps, optimizer=opt,
                          record_steps=log_step_grid(steps, int(rc["n_record"])), momentum=rc["momentum"],
                          loss=loss)
    index = pd.MultiIndex.from_product([variances, np.asarray(rc["seeds"])], names=["init_variance", "seed"])
    ds = xr.Dataset(coords={"step": res["step"], "replica": np.arange(len(index))})
    h = flow_lr(float(rc["lr"]), loss, ytr.shape[0])
    ds = ds.assign_coords(time=("step", h * res["step"].astype(float), {
        "units": "1", "long_name": "Eq. 26 flow time c eta step (c: loss convention factor; no flow clock for Adam)"}))
    for split in ("train", "test"):
        for n in MODELS:
            ds[f"{split}_{n}"] = (("replica", "step"), res[f"{split}_{n}"], {
                "units": "1", "long_name": f"{LABELS[n]} {split} MSE (1/m) sum (f - y)^2 (NaN after divergence)"})
    ds["truncation"] = (("replica", "step"), res["truncation"], {
        "units": "1", "long_name": "network's relative O(|W|^2) distance from its 2-layer NQF at its own weights "
                                   "(Richardson from the block rescalings s = 1, 1/2; nqf.training.deep.truncation)"})
    ds = ds.assign_coords(xr.Coordinates.from_pandas_multiindex(index, "replica")).unstack("replica")
    ds = ds.transpose("init_variance", "seed", "step")
    ds["init_variance"].attrs.update(units="1", long_name="init variance var (weights N(0, var / fan-in))")
    ds.attrs.update(run=run, experiment_kind=KIND, architecture=a, optimizer=opt, lr=float(rc["lr"]), steps=steps,
                    loss_convention=loss, loss_factor=res["loss_factor"])
    return ds


def escape_step(loss: np.ndarray, steps: np.ndarray, fraction: float, *, log: bool = True) -> np.ndarray:
    """First step at which the loss falls below ``fraction`` of its initial value, interpolated
    linearly in ln(loss) between recorded steps (linearly in the loss itself with ``log=False``);
    inf if never (or after divergence, NaN loss).

    ``loss`` is (..., step); returns the leading shape.
    """
    loss = np.asarray(loss, float)
    steps = np.asarray(steps, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ll = np.log(loss) if log else loss
        target = np.log(fraction * loss[..., :1]) if log else fraction * loss[..., :1]
    flat, tflat = ll.reshape(-1, ll.shape[-1]), target.reshape(-1)
    out = np.full(flat.shape[0], np.inf)
    for i, (row, t) in enumerate(zip(flat, tflat)):  # one pass per replica over ~100 recorded steps
        below = np.nonzero(row < t)[0]
        if below.size == 0 or np.isnan(row[:below[0] + 1]).any():
            continue
        j = below[0]
        if j == 0:
            out[i] = steps[0]
            continue
        out[i] = steps[j - 1] + (steps[j] - steps[j - 1]) * (row[j - 1] - t) / (row[j - 1] - row[j])
    return out.reshape(loss.shape[:-1])


def escape_deviation(loss: np.ndarray, ref: np.ndarray, steps: np.ndarray, fraction: float) -> np.ndarray:
    """|t_model / t_deep - 1| of the escape steps (:func:`escape_step`); inf if the model never
    escapes, NaN if the network itself never escapes within the run (no clock to compare with)."""
    t_m, t_ref = escape_step(loss, steps, fraction), escape_step(ref, steps, fraction)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.where(np.isfinite(t_m), np.abs(t_m / t_ref - 1.0), np.inf)
    return np.where(np.isfinite(t_ref), d, np.nan)


def truncation_until(truncation: np.ndarray, steps: np.ndarray, t_escape: np.ndarray) -> np.ndarray:
    """Per seed, the mean over steps 0..t_escape of the network's relative distance from its
    2-layer NQF (trapezoid in the step; the value at step 0 if no later recorded step precedes
    the escape); NaN where the network never escapes."""
    steps = np.asarray(steps, float)
    out = np.full(len(t_escape), np.nan)
    for i, (row, te) in enumerate(zip(np.atleast_2d(truncation), t_escape)):  # a few seeds
        if not np.isfinite(te):
            continue
        keep = steps <= te
        out[i] = float(np.trapezoid(row[keep], steps[keep]) / steps[keep][-1]) if steps[keep][-1] > 0 else float(row[0])
    return out


def interpolation_error(loss: np.ndarray, steps: np.ndarray, fraction: float) -> np.ndarray:
    """Per seed, |t_ln - t_lin| / t_ln of the escape step interpolated linearly in ln(loss) and in
    the loss: the size of the interpolation error on the recorded grid (both interpolants err by
    the curve's curvature between the two recorded steps around the escape)."""
    t_log, t_lin = escape_step(loss, steps, fraction), escape_step(loss, steps, fraction, log=False)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.abs(t_log - t_lin) / t_log


def _finite_max(values) -> float:
    values = np.asarray(values, float)
    return float(np.max(values)) if values.size and np.all(np.isfinite(values)) else math.nan


# -- fit: measuring ------------------------------------------------------------------------------

TRUNCATION_TERM = ("NQF truncation O(|W|^2): mean over steps <= escape of the network's relative distance from its "
                   "2-layer NQF, worst seed")
INTERPOLATION_TERM = "escape-step interpolation on the recorded grid (network + NQF)"


@dataclass(frozen=True)
class RunMeasurement:
    """What the fit measures on one run (an architecture x optimizer): ``D`` (model nqf2/nqf1,
    init small/large), worst seed (NaN where the network never escapes within the run); the run's
    last recorded step; and, where the network escapes at both inits, the terms of the 2-layer
    NQF's error budget at the small init (None otherwise)."""

    D: np.ndarray
    end: int
    budget_terms: dict[str, float] | None

    @property
    def reached(self) -> bool:
        return self.budget_terms is not None


def init_pair(cfg: dict, arch: str) -> tuple[float, float]:
    """The small and the large init variance of ``arch``."""
    small, large = sorted(cfg["init_variance"][arch])[:2]
    return small, large


def measure_deviations(run: xr.Dataset, inits, fraction: float) -> np.ndarray:
    """D = |t_model / t_deep - 1| of the escape steps, worst seed, as (model nqf2/nqf1, init)."""
    steps = run["step"].values
    D = np.full((2, len(inits)), np.nan)
    for k, v in enumerate(inits):
        r = run.sel(init_variance=v)
        for n_i, n in enumerate(("nqf2", "nqf1")):
            D[n_i, k] = escape_deviation(r[f"train_{n}"].values, r["train_deep"].values, steps, fraction).max()
    return D


def agreement_terms(run: xr.Dataset, small: float, fraction: float) -> dict[str, float]:
    """The terms of the 2-layer NQF's error budget at the init variance ``small`` (see :func:`fit`):
    the network's truncation averaged up to its escape and the escape step's interpolation error,
    worst seed each."""
    steps = run["step"].values
    r = run.sel(init_variance=small)
    t_deep = escape_step(r["train_deep"].values, steps, fraction)
    trunc = truncation_until(r["truncation"].values, steps, t_deep)
    interp = interpolation_error(r["train_deep"].values, steps, fraction) + interpolation_error(
        r["train_nqf2"].values, steps, fraction)
    return {TRUNCATION_TERM: _finite_max(trunc), INTERPOLATION_TERM: _finite_max(interp)}


def measure_run(run: xr.Dataset, inits, fraction: float) -> RunMeasurement:
    """:class:`RunMeasurement` of one run at the init variances ``inits`` (small, large)."""
    D = measure_deviations(run, inits, fraction)
    terms = None if np.isnan(D).any() else agreement_terms(run, inits[0], fraction)
    return RunMeasurement(D, int(run["step"].values[-1]), terms)


# -- fit: judging --------------------------------------------------------------------------------


def _paper_rows(where: str, small: float, large: float, ratio: float) -> tuple:
    """(quantity, checks, source) of the rows that compare D, in their order after the agreement row."""
    return ((f"{where} var={small:g}: D(1-layer NQF) >= {ratio:g} D(2-layer NQF, var={small:g})", "paper",
             PAPER_SOURCE),
            (f"{where} var={large:g}: D(2-layer NQF) >= {ratio:g} D(2-layer NQF, var={small:g})", "ours",
             LARGE_SOURCE),
            (f"{where} var={large:g}: D(1-layer NQF) >= {ratio:g} D(2-layer NQF, var={small:g})", "ours",
             LARGE_SOURCE))


def not_reached_claims(arch: str, opt: str, inits, m: RunMeasurement, *, fraction: float,
                       ratio: float) -> list[Claim]:
    """The rows of a run in which the network's first descent lies beyond the run at an init: the
    comparison was not reached, so the rows that need it (the paper's among them) are not judged,
    never missed."""
    where, (small, large) = f"{arch} {opt}", inits
    which = " and ".join(f"var={v:g}" for k, v in enumerate(inits) if np.isnan(m.D[:, k]).any())
    reason = (f"{NOT_REACHED} (the run ends at step {m.end} before the network's first descent at "
              f"{which}, where its train loss falls below {fraction:g} x its initial value; no closed form "
              f"predicts that step: raise steps.{arch}.{opt})")
    claims = [Claim(f"{where}: the network escapes its plateau within the run", 1.0, 0.0, math.nan,
                    comparison="at_least", checks="ours",
                    source="precondition of the comparison: the network's first descent lies within the run",
                    tolerance_source="a yes/no precondition (no prediction, no budget)").not_judged(reason)]
    rows = ((f"{where} var={small:g}: D(2-layer NQF) within the NQF's error budget", "paper", PAPER_SOURCE),
            *_paper_rows(where, small, large, ratio))
    for quantity, checks, source in rows:
        claims.append(Claim(quantity, math.nan, math.nan, math.nan, comparison="at_least", checks=checks,
                            source=source, tolerance_source="not reached").not_judged(reason))
    return claims


def judged_claims(arch: str, opt: str, inits, m: RunMeasurement, *, fraction: float, factor: float,
                  ratio: float) -> tuple[list[Claim], float]:
    """The rows of a run in which the network escapes at both inits, and the 2-layer NQF's
    tolerance: its agreement at the small init within its error budget, the departures as bounds."""
    where, (small, large) = f"{arch} {opt}", inits
    d2s, d1s, d2l, d1l = m.D[0, 0], m.D[1, 0], m.D[0, 1], m.D[1, 1]
    budget = ErrorBudget(m.budget_terms, factor)
    adam = ("; Adam: no flow clock (its step does not scale with the gradient, and the loss convention "
            "changes only its eps term), the same first-order budget bounds the shift" if opt == "adam" else "")
    claims = [budget.claim(
        f"{where} var={small:g}: D(2-layer NQF) within the NQF's error budget", 0.0, d2s, relative=False,
        checks="paper", source=PAPER_SOURCE,
        note=(f"D = |t_2NQF / t_deep - 1| of the escape step (train loss below {fraction:g} x initial), worst seed; "
              + ("the 2-layer NQF keeps the network's clock" if d2s <= budget.tolerance else
                 "MISS: the 2-layer NQF's escape differs by more than its truncation error explains") + adam))]
    bound = (f"bound: at least departure_ratio ({ratio:g}) times the 2-layer NQF's D at var={small:g} in the "
             f"same run (two deviations measured on the same grid and seeds), so no error budget enters")
    for (quantity, checks, source), name, d, what in zip(
            _paper_rows(where, small, large, ratio), ("1-layer NQF", "2-layer NQF", "1-layer NQF"), (d1s, d2l, d1l),
            (f"var={small:g}", f"var={large:g}", f"var={large:g}")):
        d = d if np.isfinite(d) else float(np.finfo(float).max)  # never escaped or diverged: departed
        ok = d >= ratio * d2s
        outside = (f"; {'outside' if d > budget.tolerance else 'inside'} the 2-layer NQF's error budget "
                   f"{budget.tolerance:.3g}")
        claims.append(Claim(
            quantity, ratio * d2s, d, math.nan, comparison="at_least", checks=checks, source=source,
            tolerance_source=bound,
            note=(f"ratio {d / max(d2s, 1e-300):.3g}" + (" (never escaped within the run, or diverged)" if d == np.finfo(float).max else "")
                  + outside
                  + ("" if ok else "; MISS: " + ("the 1-layer NQF's two factors escape the plateau on nearly the same clock as the network at this optimizer"
                                                 if "1-layer" in name and what.endswith(f"{small:g}") else
                                                 "at this init the network stays close to its NQFs over the first descent")))))
    return claims, budget.tolerance


def judge_run(arch: str, opt: str, inits, m: RunMeasurement, *, fraction: float, factor: float,
              ratio: float) -> tuple[list[Claim], float]:
    """The claims of one run and the 2-layer NQF's tolerance (NaN where the comparison was not reached)."""
    if not m.reached:
        return not_reached_claims(arch, opt, inits, m, fraction=fraction, ratio=ratio), math.nan
    return judged_claims(arch, opt, inits, m, fraction=fraction, factor=factor, ratio=ratio)


def deviation_dataset(D: np.ndarray, tolerance: np.ndarray, archs: list, opts: list, fraction: float) -> xr.Dataset:
    """The fit's measured D (model, arch, optimizer, init) and the 2-layer NQF's tolerances."""
    return xr.Dataset(
        {"D": (("model", "arch", "optimizer", "init"), D, {"units": "1", "long_name": "|t_model / t_deep - 1| of the escape step of the train loss, worst seed (inf: never escaped)"}),
         "agree_tolerance": (("arch", "optimizer"), tolerance, {"units": "1", "long_name": "error budget of the 2-layer NQF's D at the small init, times the safety factor"})},
        coords={"model": ["nqf2", "nqf1"], "arch": archs, "optimizer": opts, "init": ["small", "large"]},
        attrs={"experiment_kind": KIND, "window_fraction": fraction})


# -- fit -----------------------------------------------------------------------------------------


def fit(structure_ds: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """D for each model x architecture x optimizer x init variance (worst seed), and the claims.

    The 2-layer NQF's agreement at the small init is judged within its error budget times
    ``tolerances.safety_factor``: the network's relative distance from its 2-layer NQF at its own
    weights, averaged over the steps up to the escape (to first order a relative error delta(t) of
    the model's rate shifts the escape step by the fraction mean_{t < t_esc} delta, whatever the
    optimizer's clock), worst seed, plus the escape step's interpolation error on the recorded
    grid (network and NQF). The departures (1-layer NQF at the small init, both NQFs at the large
    init) are bounds against the 2-layer NQF's own D: at least ``tolerances.departure_ratio``
    times it. Measured by :func:`measure_run`, judged by :func:`judge_run`.
    """
    check_runs(run_ds, {run_id(a, o): {"experiment_kind": KIND, "architecture": a, "optimizer": o,
                                         "init_variance": cfg["init_variance"][a]}
                          for a in cfg["architectures"] for o in cfg["optimizers"]})
    archs, opts, tol = list(cfg["architectures"]), list(cfg["optimizers"]), cfg["tolerances"]
    frac = float(cfg["window_fraction"])
    factor, ratio = float(tol["safety_factor"]), float(tol["departure_ratio"])
    D = np.full((2, len(archs), len(opts), 2), np.nan)
    tolerance = np.full((len(archs), len(opts)), np.nan)
    claims = []
    for i, a in enumerate(archs):
        inits = init_pair(cfg, a)
        for j, o in enumerate(opts):
            m = measure_run(run_ds[run_id(a, o)], inits, frac)
            D[:, i, j] = m.D
            rows, tolerance[i, j] = judge_run(a, o, inits, m, fraction=frac, factor=factor, ratio=ratio)
            claims += rows
    return xr.merge([deviation_dataset(D, tolerance, archs, opts, frac), claims_dataset(claims)])
