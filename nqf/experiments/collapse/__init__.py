"""Experiment kind ``collapse``: different A, equal Lotka-Volterra coefficients, one curve.

The theory says training depends on the data only through the GLV coefficients (r, C) of the
shared eigenbasis. Three quadratic models with different structure matrices are built on the
same coefficients (orthogonal features, C = C_diag I, growth rates r):

* ``diagonal``     A_mu = Diag(lambda_mu)                    (diagonal linear network)
* ``rotated``      A_mu = P Diag(lambda_mu) P^T, P random     (commuting matrix sensing)
* ``rectangular``  A_mu = 1/2 [[0, S_mu], [S_mu^T, 0]], S_mu = Diag(2 lambda_mu)
                   (two-layer linear network; eigenvalues +-lambda_mu,k: the '-' modes have
                   r < 0 and never ignite)

From Gaussian inits of scale eps (different for every model, since the bases differ) their
losses against rescaled time tau = t / ln(1/eps) fall on one curve as eps -> 0: the
ignition times differ at finite eps only through ln(c_k) / (r_k ln(1/eps)), with
z_k(0) = eps c_k (Theorem 8), and converge to tau*_k = 1 / r_k.

Loss convention (``loss``, nqf.theory.losses): one GD step of lr advances the Eq. 26 flow by eta = c lr;
each run takes ceil(tau_max ln(1/eps) / eta) steps and records time in that clock.

Claims and their tolerances (``tolerances.safety_factor`` times the run's error budget,
nqf.experiments.claims.ErrorBudget):

* per architecture and mode, GD's ignition time against Theorem 8 with each seed's own profile
  c_k = z_k(0) / eps (max over eps and seeds). GD multiplies z by (1 + eta g / 2)^2 per step
  where the flow multiplies it by exp(eta g), so it reaches half saturation later by
  (eta / 4) ln(z_half / z_k(0)), relative (eta / 4) ln(z_half / z_k(0)) / t*_k. The rectangular
  model's partner modes (eigenvalue -lambda: r = -r_k, C_kk' = -C_kk) start at z_k'(0) ~ eps
  and decay at rate r_k; until then they add C_kk z_k'(0) / r_k to ln z_k, which advances the
  ignition by C_kk z_k'(0) / (r_k^2 t*_k) relative. The tolerance is the safety factor times the
  largest of each term over eps and seeds.
* bounds: the spread of tau*_k across architectures shrinks as eps falls (Theorem 8 puts it at
  |ln(c_k ratio)| / (r_k ln(1/eps))), and at the smallest eps |tau*_k - 1/r_k| is at most
  Theorem 8's own offset there (each seed's c_k) plus the GD tolerance above.

A run too short for an ignition is not a miss: an (eps, seed) whose ignition was not measured and
whose Theorem 8 time (each seed's own c_k, plus the row's tolerance) lies beyond the run's end is
left out of the row's maximum, and a row with none left says "not reached: run too short" with the
tau_max that would reach it and is not judged. ``check`` refuses a tau_max below what the mean
initial amplitude (c_k = 1) needs before any job starts (:func:`needed_taus`).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import xarray as xr

from nqf.data.orthogonal import random_orthogonal
from nqf.experiments.claims import (
    LAG_MARGIN,
    Claim,
    ErrorBudget,
    claims_dataset,
    reach_problems,
    run_too_short,
)
from nqf.experiments.ids import exact_number
from nqf.experiments.machine import seed_draw
from nqf.experiments.sweeps import grid_cell, grid_runs
from nqf.experiments.verify_runs import check_runs
from nqf.theory.ignition import ignition_times, predicted_ignition_times
from nqf.theory.losses import flow_lr
from nqf.theory.lotka_volterra import LotkaVolterra
from nqf.training.loop import train

KIND = "collapse"
# facts the generic checks and reports read (nqf.experiments.contract.OPTIONAL)
FINITE_THEORY = ("r", "C_diag", "plateau_loss")
FIT_VARIABLES = ("tau_star_measured", "tau_star_theorem8", "gd_delay", "partner_advance", "tau_star_limit")
INIT_SEED = 12345  # torch generator seed of W0: the same draws for every eps and architecture
ARCHITECTURES = ("diagonal", "rotated", "rectangular")
SOURCE_THM8 = "Theorem 8 (ignition time)"
STAGE_KEYS = {
    "data": ("r", "C_diag", "data_seed"),
    "structure": (),
    "train": ("architectures", "eps", "seeds", "tau_max", "loss", "lr", "n_record", "dtype", "data_seed"),
    "theory": (),
    "fit": ("architectures", "eps", "loss", "lr", "tolerances"),
    "figure": ("description", "eps"),
}


RUN_ID_KEYS = ("architectures", "eps")


def run_id(arch: str, eps: float) -> str:
    """'diagonal_eps1e-03': eps in its shortest exact form (nqf.experiments.ids), one id per value."""
    return f"{arch}_eps{exact_number(eps)}"


def runs(cfg: dict) -> list[str]:
    return grid_runs(cfg, run_id, "architectures", "eps")


def run_config(cfg: dict, run: str) -> dict:
    arch, eps = grid_cell(cfg, run, run_id, "architectures", "eps")
    return {"architecture": arch, "eps": float(eps),
            **{k: cfg[k] for k in ("seeds", "tau_max", "loss", "lr", "n_record", "dtype", "data_seed")}}


def check(cfg: dict) -> list[tuple[str, str]]:
    """Cross-key problems found before any job starts: an lr at which GD cannot settle at the
    saturation z_k = r_k / C_diag of every architecture (equal LV coefficients: the Hessian's
    eigenvalues there are the r_k)."""
    from nqf.experiments.divergence import unstable_lr

    r = np.asarray(cfg["r"], float)
    problems = unstable_lr(cfg["lr"], cfg["loss"], r.size, float(cfg["C_diag"]) * np.eye(r.size),
                           r / float(cfg["C_diag"]))
    if problems:
        return problems
    eta = flow_lr(cfg["lr"], cfg["loss"], r.size)
    names, predicted, needed = needed_taus(r, float(cfg["C_diag"]), [float(e) for e in cfg["eps"]], eta)
    return reach_problems("tau_max", float(cfg["tau_max"]), needed, predicted, None, names, to_key=tau_max_to_reach,
                          clock="tau = tau_max", unit="tau",
                          margin=f"Theorem 8 at the mean initial amplitude c_k = 1, delayed by {LAG_MARGIN:g} x "
                                 f"GD's O(lr) lag")


def needed_taus(r, c_diag: float, eps_list: list[float], eta: float):
    """Per (eps, mode): names, Theorem 8's ignition time in tau = t / ln(1/eps) at the mean initial
    amplitude z_k(0) = eps (c_k = 1), and the tau a run must reach for the row to see it: that time
    delayed by LAG_MARGIN times GD's first-order lag (eta / 4) ln(z_half / eps). (A seed whose c_k
    falls below 1 ignites later; the fit leaves it out if it lies beyond the run.)"""
    r = np.asarray(r, float)
    names, predicted, needed = [], [], []
    for eps in eps_list:
        t8 = predicted_ignition_times(r, np.full(r.size, c_diag), eps)
        lag = eta * np.log(np.maximum(r / (2 * c_diag), eps) / eps) / 4
        for k in range(r.size):
            names.append(f"mode {k + 1} (r = {r[k]:.4g}) at eps {eps:.0e}")
            predicted.append(t8[k] / np.log(1 / eps))
            needed.append((t8[k] + LAG_MARGIN * lag[k]) / np.log(1 / eps))
    return names, np.array(predicted), np.array(needed)


def tau_max_to_reach(tau: float) -> float:
    """The tau_max that reaches ``tau``, rounded up to two decimals."""
    return float(np.ceil(float(tau) * 100 - 1e-9) / 100)


def estimate(cfg: dict) -> dict:
    """The largest run (nqf.experiments.machine): the recorded M history of every seed (n_record x
    p^2, p = 2K for the rectangular model), the dense data matrices, and its steps at the smallest eps."""
    K, S, n = len(cfg["r"]), len(cfg["seeds"]), int(cfg["n_record"])
    p = 2 * K if "rectangular" in cfg["architectures"] else K
    eta = flow_lr(cfg["lr"], cfg.get("loss", "mean"), K)
    eps = min(float(e) for e in cfg["eps"])
    draw, drawn = seed_draw(cfg, p * p)
    own = 8 * (2 * S * n * p * p + K * p * p + 4 * S * p * p)
    return {"bytes": own + draw, "key": "seeds" if draw > own else "n_record",
            "what": f"{S} seeds x {n} recorded steps of M of {p}x{p}, {drawn}",
            "steps": int(np.ceil(cfg["tau_max"] * np.log(1 / eps) / eta)), "steps_key": "lr",
            "steps_what": f"tau_max ln(1/eps) / (c lr) at eps {eps:g}, lr {cfg['lr']:g}"}


def eigenvalues(cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """Lambda (m, K) with (8/m) Lambda^T Lambda = C_diag I and targets y giving growth rates r."""
    r = np.asarray(cfg["r"], float)
    m, c = r.size, float(cfg["C_diag"])
    Q = random_orthogonal(m, np.random.default_rng(cfg["data_seed"]))
    lam = (np.sqrt(m * c / 8.0) * Q).T
    return lam, Q.T @ (r * np.sqrt(m / (8.0 * c)))


def structure_matrices(arch: str, lam: np.ndarray, seed: int) -> np.ndarray:
    """Dense (m, p, p) structure matrices of one architecture with eigenvalues lam."""
    m, K = lam.shape
    if arch == "diagonal":
        return np.einsum("mk,kl->mkl", lam, np.eye(K))
    if arch == "rotated":
        P = random_orthogonal(K, np.random.default_rng(seed + 1000))
        return np.einsum("pk,mk,qk->mpq", P, lam, P)
    if arch == "rectangular":
        A = np.zeros((m, 2 * K, 2 * K))
        idx = np.arange(K)
        A[:, idx, K + idx] = lam  # 1/2 S_mu with S_mu = Diag(2 lambda_mu)
        A[:, K + idx, idx] = lam
        return A
    raise ValueError(f"Unknown architecture {arch!r}; choose from {', '.join(ARCHITECTURES)}.")


def make_data(cfg: dict) -> xr.Dataset:
    """The shared eigenvalues and targets; each architecture builds its A from them."""
    lam, y = eigenvalues(cfg)
    return xr.Dataset(
        {"A_diag": (("sample", "param"), lam, {"units": "1", "long_name": "eigenvalues lambda_mu,k shared by all architectures"}),
         "y": ("sample", y, {"units": "1", "long_name": "target y_mu"})},
        coords={"sample": np.arange(y.size), "param": np.arange(lam.shape[1])},
        attrs={"structure_form": "diagonal", "experiment_kind": KIND, "data_seed": cfg["data_seed"]},
    )


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """Gaussian init W0 ~ N(0, eps / d), d = p units (E z_k(0) = eps), seeds as replicas: seed s
    is row s of one draw of max(seeds) + 1 rows from the INIT_SEED generator, the same for every
    eps and architecture (seeds [0, ..., n-1] draw what the old count n drew; torch's CPU sampler
    redraws the last block of 16 values, so a row can change with the largest seed)."""
    # torch is imported where needed: the theory, fit and figure jobs run without it
    import torch

    from nqf.theory.forms import DenseForm
    from nqf.training.quadratic import QuadraticModel

    arch, eps = cfg["architecture"], cfg["eps"]
    lam, y = data["A_diag"].values, data["y"].values
    A = structure_matrices(arch, lam, int(cfg["data_seed"]))
    form = DenseForm(torch.as_tensor(A))
    lv = LotkaVolterra.from_data(form, y)
    p = form.p
    gen = torch.Generator().manual_seed(INIT_SEED)
    seeds = [int(s) for s in cfg["seeds"]]
    draws = torch.randn(max(seeds) + 1, p, p, generator=gen, dtype=torch.float64)
    W0 = draws[torch.as_tensor(seeds)] * np.sqrt(eps / p)
    dtype = torch.float64 if cfg["dtype"] == "float64" else torch.float32
    model = QuadraticModel(form, W0, device=device, dtype=dtype)
    loss = cfg.get("loss", "mean")
    eta = flow_lr(cfg["lr"], loss, y.size)  # the Eq. 26 flow step of one GD step
    # the 1e-9 absorbs rounding in eta = c lr, so lr / c under convention c takes the same steps
    steps = int(np.ceil(cfg["tau_max"] * np.log(1 / eps) / eta - 1e-9))
    ds = train(model, y, lr=cfg["lr"], steps=steps, loss=loss, n_record=cfg["n_record"],
               replica_coords=np.asarray(seeds))
    z = lv.modes_of(ds["M"].values)
    ds = ds.drop_vars("M")  # the modes carry everything the loss depends on
    ds["z"] = (("seed", "step", "mode"), z, {"units": "1", "long_name": "z_k = (P^T M P)_kk in the shared eigenbasis"})
    ds["r"] = ("mode", lv.r, {"units": "1", "long_name": "growth rate of each eigenbasis mode"})
    ds = ds.assign_coords(tau=("step", ds["time"].values / np.log(1 / eps), {
        "units": "1", "long_name": "rescaled time t / ln(1/eps)"}))
    ds.attrs.update(run=run, experiment_kind=KIND, architecture=arch, eps=eps,
                    init="W0 ~ N(0, eps/d), d = p", init_seed=INIT_SEED, commutator_residual=lv.residuals["commutator"])
    return ds


def theory(structure: xr.Dataset, cfg: dict) -> xr.Dataset:
    """The shared eps -> 0 limit: tau*_k = 1 / r_k and the plateau losses (Theorem 6 staircase)."""
    r, c = structure["r"].values, np.diag(structure["C"].values)
    order = np.argsort(-r)
    loss0 = float(np.mean(structure["y"].values ** 2))
    drops = np.cumsum(np.where(r[order] > 0, r[order] ** 2 / (8 * c[order]), 0.0))
    return xr.Dataset(
        {"tau_star": ("mode", np.where(r > 0, 1 / np.where(r > 0, r, 1), np.inf), {
            "units": "1", "long_name": "eps -> 0 ignition time in tau = t / ln(1/eps)"}),
         "plateau_loss": ("plateau", np.concatenate([[loss0], loss0 - drops]), {
             "units": "1", "long_name": "loss after the first j modes have ignited"}),
         "r": structure["r"], "C_diag": ("mode", c)},
        coords={"mode": structure["mode"].values, "plateau": np.arange(r.size + 1)},
        attrs={"experiment_kind": KIND},
    )


def _matched_modes(run: xr.Dataset, r_ref: np.ndarray) -> np.ndarray:
    """Indices of the run's eigenbasis modes whose growth rates equal the reference rates."""
    r = run["r"].values
    return np.array([int(np.argmin(np.abs(r - rk))) for rk in r_ref])


def _partner_modes(run: xr.Dataset, r_ref: np.ndarray) -> np.ndarray | None:
    """The rectangular model's partner of each reference mode (r = -r_k), or None if the run has
    no modes beyond the reference ones (diagonal, rotated)."""
    r = run["r"].values
    if r.size == r_ref.size:
        return None
    return np.array([int(np.argmin(np.abs(r + rk))) for rk in r_ref])


@dataclass(frozen=True)
class Ignitions:
    """Per (architecture, eps, seed, mode) (eps from large to small): GD's ignition time and
    Theorem 8's with each seed's own c_k = z_k(0) / eps, both / ln(1/eps), and the budget terms
    of their comparison (GD's delay; the rectangular model's partner modes' advance); the tau each
    run ends at (architecture, eps) and each event needs (needed_taus)."""

    archs: list
    eps_list: list
    seeds: np.ndarray
    r_ref: np.ndarray
    eta: float
    tau_meas: np.ndarray
    tau_thm8: np.ndarray
    gd_term: np.ndarray
    partner_term: np.ndarray
    tau_end: np.ndarray
    needed: np.ndarray

    def too_short(self, a: int, k: int, tolerance: float = 0.0) -> str:
        """Why architecture a's mode k was not reached: its latest Theorem 8 time (each seed's c_k)
        lies beyond the run's end, and the tau_max that would reach it."""
        t8 = np.where(np.isfinite(self.tau_thm8[a, ..., k]), self.tau_thm8[a, ..., k], -np.inf).max(axis=1)  # per eps
        e = int(np.argmax(t8 - self.tau_end[a]))
        latest = float(t8[e])
        return run_too_short(float(self.tau_end[a, e]), latest,
                             tau_max_to_reach(max(float(np.nanmax(self.needed)), latest * (1 + tolerance))),
                             what=f"Theorem 8 (each seed's c_k) puts it at eps {self.eps_list[e]:.0e} at",
                             key="tau_max", clock="tau")

    def unreached(self) -> list[tuple[int, int]]:
        """(architecture, mode) that some run did not reach (every measurement NaN, its prediction
        beyond the run's end)."""
        return [(a, k) for a in range(len(self.archs)) for k in range(self.r_ref.size)
                if not np.isfinite(self.tau_meas[a, ..., k]).any()
                and np.all(self.tau_thm8[a, ..., k] > self.tau_end[a][:, None])]


def measure(structure: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> Ignitions:
    """GD's ignition times per architecture, eps and seed beside Theorem 8 with each seed's own
    profile c_k, and the terms of their error budget."""
    r_ref = structure["r"].values
    c_ref = np.diag(structure["C"].values)
    eta = flow_lr(cfg["lr"], cfg["loss"], structure.sizes["sample"])
    archs = list(cfg["architectures"])
    eps_list = sorted((float(e) for e in cfg["eps"]), reverse=True)
    tau_meas = np.full((len(archs), len(eps_list), cfg_seeds(run_ds), r_ref.size), np.nan)
    tau_thm8 = np.full_like(tau_meas, np.nan)
    gd_term = np.full_like(tau_meas, np.nan)
    partner_term = np.zeros_like(tau_meas)
    z_half = r_ref / (2 * c_ref)
    for a, arch in enumerate(archs):
        for e, eps in enumerate(eps_list):
            run = run_ds[run_id(arch, eps)]
            idx = _matched_modes(run, r_ref)
            partners = _partner_modes(run, r_ref)
            z = run["z"].values[:, :, idx]  # (seed, step, K)
            t = run["time"].values  # the Eq. 26 flow clock
            for s in range(z.shape[0]):
                tau_meas[a, e, s] = ignition_times(t, z[s], saturation=r_ref / c_ref) / np.log(1 / eps)
                c_k = z[s, 0] / eps  # the actual initial profile of this seed
                t8 = predicted_ignition_times(r_ref, c_ref, eps, c=c_k)
                tau_thm8[a, e, s] = t8 / np.log(1 / eps)
                gd_term[a, e, s] = eta * np.log(z_half / z[s, 0]) / (4 * t8)
                if partners is not None:
                    partner_term[a, e, s] = c_ref * run["z"].values[s, 0, partners] / (r_ref ** 2 * t8)
    # the tau each run ends at (its ceil(tau_max ln(1/eps) / eta) steps), per (architecture, eps)
    tau_end = np.array([[float(run_ds[run_id(arch, eps)]["tau"].values[-1]) for eps in eps_list] for arch in archs])
    _, _, needed = needed_taus(r_ref, float(c_ref[0]), eps_list, eta)
    return Ignitions(archs, eps_list, next(iter(run_ds.values()))["seed"].values, r_ref, eta, tau_meas, tau_thm8,
                     gd_term, partner_term, tau_end, needed)


def fit_dataset(ms: Ignitions, theory_ds: xr.Dataset, cfg: dict) -> xr.Dataset:
    """The measured and predicted ignitions of the fit file (FIT_VARIABLES)."""
    dims = ("architecture", "eps", "seed", "mode")
    return xr.Dataset(
        {"tau_star_measured": (dims, ms.tau_meas, {"units": "1", "long_name": "GD ignition time / ln(1/eps)"}),
         "tau_star_theorem8": (dims, ms.tau_thm8, {
             "units": "1", "long_name": "Theorem 8 with each seed's initial profile c_k, / ln(1/eps)"}),
         "gd_delay": (dims, ms.gd_term, {
             "units": "1", "long_name": "GD's first-order relative delay (eta/4) ln(z_half / z_k(0)) / t*_k"}),
         "partner_advance": (dims, ms.partner_term, {
             "units": "1", "long_name": "relative advance from the partner modes C_kk z_k'(0) / (r_k^2 t*_k) (rectangular)"}),
         "tau_star_limit": ("mode", theory_ds["tau_star"].values, {"units": "1", "long_name": "1 / r_k"})},
        coords={"architecture": ms.archs, "eps": ms.eps_list, "seed": ms.seeds, "mode": np.arange(ms.r_ref.size)},
        attrs={"experiment_kind": KIND, "lr": float(cfg["lr"]), "loss_convention": cfg["loss"], "flow_lr": ms.eta},
    )


def judge_theorem8(ms: Ignitions, factor: float) -> list[Claim]:
    """Per architecture and mode, GD's ignition against Theorem 8 (max over eps and seeds reached)
    within the largest GD delay and partner advance, times ``factor``."""
    rel = np.abs(ms.tau_meas - ms.tau_thm8) / ms.tau_thm8
    claims = []
    for a, arch in enumerate(ms.archs):
        for k in range(ms.r_ref.size):
            terms = {"GD O(lr): max eta ln(z_half/z0)/(4 t*)": float(np.nanmax(ms.gd_term[a, ..., k]))}
            if np.any(ms.partner_term[a, ..., k] > 0):
                terms["partner modes: max C z'0/(r^2 t*)"] = float(np.max(ms.partner_term[a, ..., k]))
            budget = ErrorBudget(terms, factor)
            # an (eps, seed) whose ignition was not measured and whose Theorem 8 time (plus the
            # tolerance) lies beyond the run's end was not reached: left out, not a miss
            beyond = (~np.isfinite(ms.tau_meas[a, ..., k])
                      & ~(ms.tau_thm8[a, ..., k] * (1 + budget.tolerance) <= ms.tau_end[a][:, None]))
            kept = rel[a, ..., k][~beyond]
            left_out = (f"; {int(beyond.sum())} of {beyond.size} (eps, seed) not reached within the run (their "
                        f"Theorem 8 time lies beyond its end), left out" if beyond.any() and kept.size else "")
            claim = budget.claim(
                f"{arch} mode {k + 1} (r = {ms.r_ref[k]:.4g}): GD ignition vs Theorem 8 (max over eps, seeds)", 0.0,
                float(np.max(kept)) if kept.size else float("nan"), relative=False, checks="theorem",
                source=SOURCE_THM8,
                note="each seed's own c_k = z_k(0) / eps; NaN if a mode never reached half saturation" + left_out)
            if not kept.size:
                claim = claim.not_judged(ms.too_short(a, k, budget.tolerance))
            claims.append(claim)
    return claims


def judge_spread(ms: Ignitions, unreached: list[tuple[int, int]]) -> list[Claim]:
    """The bound: the spread of tau*_k across architectures shrinks from each eps to the next
    smaller one (a mode some run did not reach has no spread: then not judged, not missed)."""
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices of modes not reached
        spread = np.nanmax(ms.tau_meas, axis=0) - np.nanmin(ms.tau_meas, axis=0)  # across architectures
        worst = np.nanmax(spread, axis=(1, 2))  # per eps
    claims = []
    for e in range(1, len(ms.eps_list)):
        claim = Claim(f"spread of tau*_k across architectures shrinks: eps {ms.eps_list[e]:.0e} vs {ms.eps_list[e - 1]:.0e}",
                      float(worst[e - 1]), float(worst[e]), np.nan, comparison="at_most", checks="ours",
                      source="collapse: equal LV coefficients give one curve in tau = t / ln(1/eps)",
                      tolerance_source="bound: Theorem 8 puts the spread at |ln(c_k ratio)| / (r_k ln(1/eps)), "
                                       "so it must fall as eps does; no tolerance",
                      note="collapse: the spread is O(1 / ln(1/eps))")
        if unreached and not claim.passed:
            claim = claim.not_judged(ms.too_short(*unreached[0]))
        claims.append(claim)
    return claims


def judge_limit(ms: Ignitions, limit: np.ndarray, unreached: list[tuple[int, int]], factor: float) -> list[Claim]:
    """Per mode, the bound: at the smallest eps |tau*_k - 1/r_k| (``limit``) is at most Theorem 8's
    own offset there plus the GD budget in tau."""
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        dev = np.nanmax(np.abs(ms.tau_meas[:, -1] - limit), axis=(0, 1))
    offset = np.nanmax(np.abs(ms.tau_thm8[:, -1] - limit), axis=(0, 1))
    # the same budget, evaluated at the smallest eps, in units of tau
    allowance = factor * np.nanmax((ms.gd_term[:, -1] + ms.partner_term[:, -1]) * ms.tau_thm8[:, -1], axis=(0, 1))
    claims = []
    for k in range(ms.r_ref.size):
        claim = Claim(
            f"mode {k + 1}: |tau*_k - 1/r_k| at eps {ms.eps_list[-1]:.0e}, all architectures", float(offset[k] + allowance[k]),
            float(dev[k]), np.nan, comparison="at_most", checks="theorem",
            source="Theorem 8 (eps -> 0: t*_k / ln(1/eps) -> 1 / r_k)",
            tolerance_source=f"bound: Theorem 8's own finite-eps offset {offset[k]:.3g} (each seed's c_k) plus "
                             f"{factor:g} x the GD-vs-Theorem-8 budget at this eps in tau: {allowance[k]:.3g}",
            note="the eps -> 0 limit is approached as 1 / ln(1/eps)")
        short = [(a, kk) for a, kk in unreached if kk == k]
        if short and not np.isfinite(dev[k]):
            claim = claim.not_judged(ms.too_short(*short[0]))
        claims.append(claim)
    return claims


def fit(structure: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """Ignition times per architecture, eps and seed beside Theorem 8 and the eps -> 0 limit,
    with the error budget of each comparison (see the module docstring).

    Theorem 8 is applied with each seed's own profile c_k = z_k(0) / eps. It ignores the
    rectangular model's partner modes (r < 0, coupled by -C_kk), whose O(C_kk eps / r_k) effect
    is a term of the budget.
    """
    check_runs(run_ds, {run_id(a, e): {"experiment_kind": KIND, "architecture": a, "eps": float(e), "lr": cfg["lr"],
                                        "loss": cfg["loss"]} for a in cfg["architectures"] for e in cfg["eps"]})
    factor = float(cfg["tolerances"]["safety_factor"])
    ms = measure(structure, run_ds, cfg)
    unreached = ms.unreached()
    claims = (judge_theorem8(ms, factor) + judge_spread(ms, unreached)
              + judge_limit(ms, theory_ds["tau_star"].values, unreached, factor))
    return xr.merge([fit_dataset(ms, theory_ds, cfg), claims_dataset(claims)])


def cfg_seeds(run_ds: dict[str, xr.Dataset]) -> int:
    return next(iter(run_ds.values())).sizes["seed"]
