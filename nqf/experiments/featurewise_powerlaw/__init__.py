"""Experiment kind ``featurewise_powerlaw``: the feature-wise scaling law (paper Fig. 3 right,
Theorem 9, App. C) with a measured exponent, its confidence interval, and the resolved-to-merged
crossover of the loss staircase (this project's own result).

Data (App. C, "For the right side of Figure 3"): m single-entry diagonal data matrices, A_k with
the one entry (k, k) = sqrt(C_kk m / 8), targets y_k = m r_k / (8 A_kk), where r_k = k^-alpha2,
V_k = k^-alpha1 and C_kk = r_k^2 / (8 V_k). Then r = (8/m) Lambda^T y and C = (8/m) Lambda^T Lambda
are exactly the designed values, each M_kk follows its own logistic (Theorem 6), and the loss is
L = sum_k V_k (1 - z_k / z*_k)^2 with z*_k = r_k / C_kk, so its minimum is 0 and L is the excess loss.

Initial profile z_k(0) = eps k^-beta0. Seeds: W0 is p x d with Gaussian rows of variance
z_k(0) / d, so that E|W_k|^2 = z_k(0) and the seeds differ only through z_k(0) chi^2_d / d.
Crossover: one deterministic replica per eps in ``crossover_eps`` (|W_k|^2 = eps k^-beta0
exactly); the number of distinct loss drops is counted on GD and on the exact Theorem 6 curve.

Loss convention (``loss``, nqf.theory.losses): GD minimises c L_Eq.26 (c = 1, 1/2, m, m/2 for mean,
half_mean, sum, half_sum), i.e. takes steps h = c lr of the Eq. 26 flow. The run's ``time`` and
the theory's clock are both t = h step, so every prediction is exact under every convention.

Verdicts (summary rows): the paper's claim (Fig. 3 right: GD's slope matches (alpha1 - 1)/alpha2
before the finite-size cutoff), Theorem 9 with App. C's finite-eps correction, and Theorem 6's
exact curve are each compared with the GD exponent within a tolerance built from the run's
error budget (nqf.experiments.claims.ErrorBudget) times ``tolerances.safety_factor``; the
budget's terms (GD's O(lr) bias, seed CI, staircase ripple, finite-eps and finite-size
deviations) are described in nqf.experiments.powerlaw, which both power-law kinds share.

The crossover counts are integers compared exactly, and their slope against ln(1/eps) within
the safety factor times the standard errors of integer rounding.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from nqf.experiments.claims import Claim, ErrorBudget, claims_dataset
from nqf.experiments.contract import PaperFigure
from nqf.experiments.machine import seed_draw
from nqf.experiments.powerlaw import (
    SHIFTS,
    deterministic_init,
    exponent_claims,
    exponent_variables,
    fit_seeds,
    flow_step,
    seeded_init,
    train_loss_only,
    window_reach_problems,
)
from nqf.experiments.verify_runs import check_runs
from nqf.theory.ignition import predicted_ignition_times
from nqf.theory.losses import flow_lr
from nqf.theory.lotka_volterra import logistic_solution
from nqf.theory.scaling import count_drops, count_resolved, predict_exponent
from nqf.training.loop import log_step_grid

if TYPE_CHECKING:
    from nqf.theory.forms import DiagonalForm

KIND = "featurewise_powerlaw"
# facts the generic checks and reports read (nqf.experiments.contract.OPTIONAL)
PAPER_FIGURE = PaperFigure("Fig. 3 (right)", "feature-wise power law (Theorem 9)", order=3)
FINITE_THEORY = ("excess_loss", "r", "V", "z0")
SEED_KEYS = ("eps", "beta0", "loss", "lr", "steps", "n_record", "seeds", "width", "init_seed", "dtype")
CROSSOVER_KEYS = ("crossover_eps", "beta0", "loss", "lr", "steps", "n_record", "dtype")
STAGE_KEYS = {
    "data": ("m", "alpha1", "alpha2"),
    "structure": (),
    "train": tuple(dict.fromkeys(SEED_KEYS + CROSSOVER_KEYS)),
    "theory": ("eps", "beta0", "loss", "lr", "steps", "n_record", "crossover_eps", "n_boot"),
    "fit": ("eps", "crossover_eps", "n_boot", "tolerances"),
    "figure": ("description", "eps"),
}
PAPER_SOURCE = ("Fig. 3 right (Sec. 7): 'confirm that the slope predicted by Section 6 matches the curve obtained "
                "by GD'; caption: 'our predicted slope matches the loss trajectory before the finite-size cutoff'")
THEOREM = "Theorem 9 (feature-wise power law)"
# Points of the dense ln(1/eps) grid on which the theory's drop count is fitted to a line.
N_EPS_GRID = 41


# -- this kind ------------------------------------------------------------------------------
def runs(cfg: dict) -> list[str]:
    """Two runs, each one tensor program: the seeds (for the CI) and the crossover eps values."""
    return ["seeds", "crossover"]


def run_config(cfg: dict, run: str) -> dict:
    """Each run reads only its own keys: changing the crossover list does not retrain the seeds."""
    if run == "seeds":
        return {k: cfg[k] for k in SEED_KEYS}
    if run == "crossover":
        return {k: cfg[k] for k in CROSSOVER_KEYS}
    raise ValueError(f"Run {run!r} is not a run of a {KIND} experiment (runs: seeds, crossover).")


def check(cfg: dict) -> list[tuple[str, str]]:
    """Cross-key problems found before any job starts: an lr at which GD cannot settle at the
    saturation z_k = r_k / C_kk (diagonal C: the Hessian's eigenvalues there are the r_k, the
    largest r_1 = 1), and steps that end the run before twice the end of the theory's fitting
    window (nqf.experiments.powerlaw.window_reach_problems)."""
    from nqf.experiments.divergence import lr_at_or_above

    d = design(int(cfg["m"]), float(cfg["alpha1"]), float(cfg["alpha2"]))
    r = d["r"]
    problems = lr_at_or_above(cfg["lr"], cfg["loss"], r.size, 2.0 / float(r.max()))
    if problems:
        return problems
    # the window the theory assigns without a horizon: the run must reach twice its end
    pred = predict_exponent(r, d["V"], C=d["C"], z0=init_profile(r.size, float(cfg["eps"]), float(cfg["beta0"])))
    return window_reach_problems(pred, flow_lr(cfg["lr"], cfg["loss"], r.size), int(cfg["steps"]))


def estimate(cfg: dict) -> dict:
    """The larger run (nqf.experiments.machine): the single-entry data as m x m diagonals, and W of
    the replicas (seeds or crossover eps values) x m x width."""
    m, d = int(cfg["m"]), int(cfg["width"])
    R = max(len(cfg["seeds"]), len(cfg["crossover_eps"]))
    draw, drawn = seed_draw(cfg, m * d)
    own = 8 * (2 * m * m + 4 * R * m * d)
    return {"bytes": own + draw, "key": "seeds" if draw > own else "m",
            "what": f"the {m}x{m} diagonals of {m} modes, {drawn}", "steps": int(cfg["steps"])}


def design(m: int, alpha1: float, alpha2: float) -> dict[str, np.ndarray]:
    """The designed modes (App. C): r_k = k^-alpha2, V_k = k^-alpha1, C_kk = r_k^2 / (8 V_k),
    the single entries A_kk = sqrt(C_kk m / 8) and targets y_k = m r_k / (8 A_kk)."""
    k = np.arange(1, m + 1, dtype=float)
    r = k ** -alpha2
    V = k ** -alpha1
    C = r ** 2 / (8.0 * V)
    A = np.sqrt(C * m / 8.0)
    return {"k": k, "r": r, "V": V, "C": C, "A": A, "y": m * r / (8.0 * A)}


def init_profile(m: int, eps: float, beta0: float) -> np.ndarray:
    """z_k(0) = eps k^-beta0."""
    return eps * np.arange(1, m + 1, dtype=float) ** -beta0


def make_data(cfg: dict) -> xr.Dataset:
    """Single-entry data matrices, stored compactly: A_mu = A_kk e_k e_k^T with mu = k."""
    d = design(int(cfg["m"]), float(cfg["alpha1"]), float(cfg["alpha2"]))
    m = d["k"].size
    return xr.Dataset(
        {
            "A_entry": ("sample", d["A"], {"units": "1", "long_name": "the single non-zero entry (mu, mu) of A(x_mu)"}),
            "y": ("sample", d["y"], {"units": "1", "long_name": "target y_mu = m r_mu / (8 A_mu,mu)"}),
        },
        coords={"sample": np.arange(m)},
        attrs={"structure_form": "single_entry_diagonal", "experiment_kind": KIND,
               "alpha1": float(cfg["alpha1"]), "alpha2": float(cfg["alpha2"]),
               "design": "r_k = k^-alpha2, V_k = k^-alpha1, C_kk = r_k^2/(8 V_k), A_kk = sqrt(C_kk m/8)"},
    )


def form_of(data: xr.Dataset) -> DiagonalForm:
    """The DiagonalForm of the single-entry data: diagonals Diag(A_entry) (sample mu owns index mu)."""
    import torch

    from nqf.theory.forms import DiagonalForm

    return DiagonalForm(torch.diag(torch.as_tensor(data["A_entry"].values, dtype=torch.float64)))


def structure(data: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Lotka-Volterra coefficients computed from the stored entries and targets (no p x p matrices):
    r_k = (8/m) A_kk y_k, C = diag((8/m) A_kk^2), V_k = r_k^2 / (8 C_kk), z*_k = r_k / C_kk."""
    A, y = data["A_entry"].values, data["y"].values
    m = A.size
    r = 8.0 / m * A * y
    c = 8.0 / m * A ** 2
    one = {"units": "1"}
    return xr.Dataset(
        {
            "r": ("mode", r, {**one, "long_name": "Lotka-Volterra growth rate r_k = (8/m) sum lambda_mu,k y_mu"}),
            "C": (("mode", "mode_j"), np.diag(c), {**one, "long_name": "Lotka-Volterra interaction C_kj (diagonal: Theorem 6)"}),
            "C_diag": ("mode", c, {**one, "long_name": "C_kk = (8/m) A_kk^2"}),
            "V": ("mode", r ** 2 / (8.0 * c), {**one, "long_name": "target strength V_k = r_k^2 / (8 C_kk)"}),
            "z_star": ("mode", r / c, {**one, "long_name": "saturation z*_k = r_k / C_kk"}),
            "y": ("sample", y, {**one, "long_name": "target y_mu"}),
            "min_loss": ((), 0.0, {**one, "long_name": "smallest loss reachable with z >= 0 (z = z*)"}),
            "commutator_residual": ((), 0.0, {**one, "long_name": "Assumption 1 residual (0: diagonal data commute)"}),
            "C_is_diagonal": ((), True, {"long_name": "C is diagonal (Theorem 6 applies)"}),
        },
        coords={"mode": np.arange(m), "mode_j": np.arange(m), "sample": np.arange(m)},
        attrs={"experiment_kind": KIND},
    )


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """GD from the seeded Gaussian init (run 'seeds') or from each crossover eps (run 'crossover')."""
    form = form_of(data)
    m = form.m
    if run == "seeds":
        z0 = init_profile(m, cfg["eps"], cfg["beta0"])
        W0 = seeded_init(z0, cfg["seeds"], cfg["width"], cfg["init_seed"])
        dim, coords, init = "seed", np.asarray(cfg["seeds"], dtype=np.int64), (
            f"W0 rows N(0, z_k0/d I_d), z_k0 = eps k^-beta0, d = {cfg['width']}, seed {cfg['init_seed']}")
    elif run == "crossover":
        eps = np.asarray(cfg["crossover_eps"], float)
        W0 = deterministic_init(np.stack([init_profile(m, e, cfg["beta0"]) for e in eps]))
        dim, coords, init = "eps", eps, "W_k = sqrt(eps k^-beta0), one replica per eps"
    else:
        raise ValueError(f"Run {run!r} is not a run of a {KIND} experiment (runs: seeds, crossover).")
    ds, dev = train_loss_only(form, W0, data["y"].values, lr=cfg["lr"], steps=cfg["steps"],
                              n_record=cfg["n_record"], device=device, dtype=cfg["dtype"],
                              replica_dim=dim, replica_coords=coords, loss=cfg.get("loss", "mean"))
    ds["loss"].attrs["long_name"] = "training loss (Eq. 26) = excess loss sum_k V_k (1 - z_k/z*_k)^2"
    if dim == "eps":
        ds["eps"].attrs.update(units="1", long_name="initial scale eps, z_k(0) = eps k^-beta0")
    ds.attrs.update(run=run, experiment_kind=KIND, model="quadratic", init=init, beta0=cfg["beta0"],
                    device=dev)
    return ds


def excess_loss_curves(V, r, C, z0_rows, t) -> np.ndarray:
    """Theorem 6 excess loss sum_k V_k (1 - z_k(t)/z*_k)^2 for each initial profile (rows): (R, T)."""
    z_star = r / C
    out = np.empty((len(z0_rows), np.size(t)))
    for i, z0 in enumerate(z0_rows):  # a few dozen profiles; each is one vectorised (T, K) evaluation
        z = logistic_solution(r, C, z0, t)
        out[i] = ((1.0 - z / z_star) ** 2) @ V
    return out


def theory(structure_ds: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Exact Theorem 6 curves, the predicted exponents and window, and the predicted drop counts."""
    r, C, V = (structure_ds[k].values for k in ("r", "C_diag", "V"))
    m = r.size
    steps = log_step_grid(cfg["steps"], cfg["n_record"])
    h = flow_lr(cfg["lr"], cfg["loss"], structure_ds.sizes["sample"])
    t = h * steps.astype(float)
    z0 = init_profile(m, cfg["eps"], cfg["beta0"])
    E = excess_loss_curves(V, r, C, [z0], t)[0]
    pred = predict_exponent(r, V, C=C, z0=z0, t_max=float(t[-1]))
    # Crossover: drops of the exact curve at each configured eps, and on a dense ln(1/eps) grid
    # (for the linear law k_resolved ~ alpha2 ln(1/eps) / w, with w fitted: see drop_width_fit).
    eps_x = np.asarray(cfg["crossover_eps"], float)
    profiles = [init_profile(m, e, cfg["beta0"]) for e in eps_x]
    Ex = excess_loss_curves(V, r, C, profiles, t)
    drops = np.array([count_drops(t, e) for e in Ex])
    resolved = np.array([count_resolved(predicted_ignition_times(r, C, p), r) for p in profiles])
    grid = np.geomspace(eps_x.max(), eps_x.min(), N_EPS_GRID)
    Eg = excess_loss_curves(V, r, C, [init_profile(m, e, cfg["beta0"]) for e in grid], t)
    drops_grid = np.array([count_drops(t, e) for e in Eg])
    slope, intercept = np.polyfit(np.log(1.0 / grid), drops_grid, 1)
    one = {"units": "1"}
    ds = xr.Dataset(
        {
            "excess_loss": ("time", E, {**one, "long_name": "Theorem 6 excess loss for the mean init profile z_k0 = eps k^-beta0"}),
            "t_star": ("mode", pred.t_star, {**one, "long_name": "Theorem 8 ignition time (half saturation)"}),
            "k_eff": ("mode", pred.k_eff, {**one, "long_name": "local exponent (alpha1 - 1) / (d ln t*_k / d ln k)"}),
            "resolved": ("mode", pred.resolved, {"long_name": "drop of mode k separated from the next (gap > mean width ln 81 / r)"}),
            "r": ("mode", r, {**one, "long_name": "growth rate r_k"}),
            "V": ("mode", V, {**one, "long_name": "target strength V_k"}),
            "z0": ("mode", z0, {**one, "long_name": "initial amplitude z_k(0) = eps k^-beta0"}),
            **exponent_variables(pred, t, E, cfg["n_boot"]),
            "crossover_excess_loss": (("eps", "time"), Ex, {**one, "long_name": "Theorem 6 excess loss at each crossover eps"}),
            "drops_predicted": ("eps", drops, {**one, "long_name": "distinct drops of the exact curve (nqf.theory.scaling.count_drops)"}),
            "resolved_predicted": ("eps", resolved, {**one, "long_name": "modes resolved by ignition-time gap > width ln 81 / r (count_resolved)"}),
            "drops_grid": ("eps_grid", drops_grid, {**one, "long_name": "distinct drops of the exact curve on a dense eps grid"}),
            "drops_slope": ((), slope, {**one, "long_name": "least-squares slope of drops_grid against ln(1/eps) = alpha2 / w"}),
            "drops_intercept": ((), intercept, {**one, "long_name": "intercept of that line"}),
            "drop_width_fit": ((), pred.alpha2 / slope if slope > 0 else math.nan, {
                **one, "long_name": "w fitted from k_resolved = alpha2 ln(1/eps) / w + const (count_drops criterion)"}),
        },
        coords={"time": ("time", t, {**one, "long_name": "Eq. 26 gradient-flow time t = c lr step"}),
                "step": ("time", steps, {"long_name": "equivalent GD step t / (c lr), c the loss convention's factor"}),
                "mode": np.arange(1, m + 1),
                "shift": ("shift", np.array(SHIFTS, dtype=object), {"long_name": "window end shifted by a factor 2"}),
                "eps": ("eps", eps_x, {**one, "long_name": "initial scale eps of a crossover run"}),
                "eps_grid": ("eps_grid", grid, {**one, "long_name": "dense eps grid for the crossover law"})},
        attrs={"experiment_kind": KIND, "eps": cfg["eps"], "beta0": cfg["beta0"], "flow_lr": h,
               "loss_convention": cfg["loss"],
               "solution": "Theorem 6 (C diagonal), Theorem 8 ignition times, nqf.theory.scaling.predict_exponent",
               "window_note": pred.window.note or "none",
               "drop_width_resolved": math.log(81.0)},
    )
    return ds


CROSSOVER_SOURCE = ("resolved-to-merged crossover: the number of distinct loss drops grows linearly with "
                    "ln(1/eps) (this project's result; the ignition gaps grow as ln(1/eps), Eq. 44)")


def drop_claims(t, measured_loss, eps, predicted, tol_abs: float, what: str,
                gd_delay: float = math.nan) -> tuple[np.ndarray, list[Claim]]:
    """Distinct drops counted on each measured curve (rows) against the exact theory's count;
    ``gd_delay`` is GD's largest relative ignition delay h max_k r_k / 4 (for the row's reasoning)."""
    measured = np.array([count_drops(t, row) for row in measured_loss])
    source = (f"integer counts compared {'exactly' if tol_abs == 0 else f'within {tol_abs:g}'} "
              f"(tolerances.drops_abs_error): GD delays each ignition by at most the fraction h r_k / 4 "
              f"({gd_delay:.3g} here), which changes a count only if a drop's prominence ratio sits that "
              f"close to count_drops' depth criterion")
    claims = [Claim(f"{what}: distinct loss drops at eps = {e:.0e}", float(p), float(n), tol_abs,
                    relative=False, checks="ours", source=CROSSOVER_SOURCE, tolerance_source=source,
                    note="nqf.theory.scaling.count_drops on GD vs on the exact Theorem 6 curve (same time grid)")
              for e, p, n in zip(eps, predicted, measured)]
    return measured, claims


def fit(structure_ds: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """The GD exponent over seeds with its bootstrap CI beside the predictions; the crossover counts."""
    check_runs(run_ds, {"seeds": {"experiment_kind": KIND, "eps": cfg["eps"]},
                        "crossover": {"experiment_kind": KIND, "eps": cfg["crossover_eps"]}})
    tol = cfg["tolerances"]
    factor = float(tol["safety_factor"])
    sf = fit_seeds(run_ds["seeds"], theory_ds, float(structure_ds["min_loss"]), cfg["n_boot"])
    claims = exponent_claims(theory_ds, sf.fit, sf.shifted, sf.shifted_half, h=sf.h, rates=theory_ds["r"].values,
                             factor=factor, what="GD excess loss", asymptotic_checks="paper",
                             asymptotic_source=PAPER_SOURCE, theorem=THEOREM,
                             t_end=float(sf.run["time"].values[-1]))
    # Crossover.
    cross = run_ds["crossover"]
    eps = cross["eps"].values
    xloss = cross["loss"].values - float(structure_ds["min_loss"])
    pred_drops = theory_ds["drops_predicted"].sel(eps=eps).values
    measured, drop_c = drop_claims(cross["time"].values, xloss, eps, pred_drops, tol["drops_abs_error"],
                                   "crossover", gd_delay=flow_step(cross) * float(np.max(theory_ds["r"].values)) / 4.0)
    claims += drop_c
    x = np.log(1.0 / eps)
    slope_meas = float(np.polyfit(x, measured, 1)[0]) if eps.size >= 2 else math.nan
    # Integer counts carry a rounding error of variance 1/12 each: the standard error of a
    # least-squares slope through them is sqrt(1/12 / Sxx), for GD's eps values and for the
    # theory's dense grid.
    sxx = float(np.sum((x - x.mean()) ** 2))
    xg = np.log(1.0 / theory_ds["eps_grid"].values)
    sxx_grid = float(np.sum((xg - xg.mean()) ** 2))
    budget = ErrorBudget({"integer rounding s.e. of GD's slope sqrt(1/12/Sxx)": math.sqrt(1.0 / 12.0 / sxx) if sxx > 0 else math.inf,
                          "integer rounding s.e. of the theory's slope": math.sqrt(1.0 / 12.0 / sxx_grid)}, factor)
    claims.append(budget.claim("crossover: slope of GD drop count against ln(1/eps)", float(theory_ds["drops_slope"]),
                               slope_meas, relative=False, checks="ours", source=CROSSOVER_SOURCE,
                               note=f"theory: alpha2 / w with w = {float(theory_ds['drop_width_fit']):.3f} fitted to the "
                                    f"exact curve's counts on {N_EPS_GRID} eps values (the gap > width criterion gives "
                                    f"w = ln 81 = {math.log(81):.3f})"))
    one = {"units": "1"}
    exponent, test = sf.variables(theory_ds, "GD excess loss")
    ds = xr.Dataset(
        {
            **exponent, **test, **sf.flow_variable(),
            "drops_measured": ("eps", measured, {**one, "long_name": "distinct drops of GD's excess loss (count_drops)"}),
            "drops_predicted": ("eps", pred_drops, {**one, "long_name": "distinct drops of the exact Theorem 6 curve"}),
            **{k: theory_ds[k] for k in ("exponent_asymptotic", "exponent_corrected", "exponent_staircase",
                                         "theory_exponent", "window_t_lo", "window_t_hi", "drops_slope",
                                         "drops_intercept", "drop_width_fit", "alpha2_fit")},
        },
        coords={**sf.coords(theory_ds), "eps": cross["eps"]}, attrs=sf.attrs(KIND),
    )
    return xr.merge([ds, claims_dataset(claims)])
