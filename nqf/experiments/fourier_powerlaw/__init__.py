"""Experiment kind ``fourier_powerlaw``: power-law training curves of the Fourier MLP (paper Fig. 5).

Setting (Section 7, Eq. 50, App. C "Figure 5"). On the grid x_mu = mu / M (mu = 0..M-1) the
Fourier MLP f(x) = P^-1/2 sum_k W_k tanh(s_k a_k psi_k(x)), psi_k = sqrt2 cos(2 pi k x),
s_k = k^-theta, learns y = sum_k b_k psi_k, b_k = k^-beta, with the mean-squared loss of Eq. 26,
L = (1/M) sum_mu (f(x_mu) - y_mu)^2 (recorded), under the ``loss`` convention the optimizer sees
(nqf.theory.losses: a step of lr moves the Eq. 26 flow by c lr), full-batch GD from a_k, W_k ~ N(0, eps^2).
Baselines: its NQF
f_NQF = P^-1/2 sum_k s_k a_k W_k psi_k (Proposition 1, Eq. 296) from the same draw, and a standard
tanh MLP (1 -> H -> 1, biases) on the raw input x.

Derivation of the numbers (they fix the defaults; nqf.theory.fourier_modes derives them): the NQF's modes
are orthogonal features with r_k = 4 b_k s_k / sqrt(P), C_kk = 2 s_k^2 / P, V_k = b_k^2 = k^-2 beta
and zeta_k = r_k = (4/sqrt P) k^-(theta + beta), so alpha1 = 2 beta, alpha2 = theta + beta and the
loss falls as t^-(2 beta - 1)/(theta + beta): 4/3, 1, 0.8 for theta = 0, 0.5, 1 at beta = 1.5.
Theorem 6 with each seed's own z_k(0) is the NQF's exact loss curve.

Ignition (Theorem 8, rho = 1/2): t*_k = (1/r_k) ln(r_k / (C_kk z_k0)) with z_k0 = eps^2 chi^2_1 over
seeds (mean eps^2). At P = 64, eps = 1e-4: r_1 = 0.5, t*_1 = 42, and for theta = 1 t*_2 = 236,
t*_3 = 644, t*_19 = 6.2e4. The paper's lr = 0.02 x 30000 steps under the mean loss (c = 1) reaches
t = 600, where 2 (theta = 1) to 6 (theta = 0) modes have switched on: no fitting window exists
there. Under a loss (1/2) sum_mu (f - y)^2 (``loss: half_sum``, c = M/2 = 128) the same lr and
steps reach t = 76800, past the theta = 1 window's last mode, inside GD's stability limit
c lr < 2 / r_1 = 4 (the Hessian of a saturated mode is r_k): the paper's stated settings make
sense under that reading, which the default runs (the mean reading runs beside it and its rows
say it stops short). GD delays the ignition of mode k by the relative amount c lr r_k / 4 (per-step
growth (1 + c lr r_k / 2)^2 instead of e^(c lr r_k)): 2 % at the theta = 0 window's first mode,
0.4 % at its last, which steepens the fitted slope by about 1 %. ``steps: auto`` runs each theta
to ``auto_horizon`` times the end of its own window (theta = 1 needs far more steps than theta = 0).

What the fit finds at these settings (the window's extent, the exact curve's steepening inside it,
why P = 104 is the default, the tanh's departure from its NQF): nqf.experiments.fourier_powerlaw.fitting.

Computation: the features and the target are even about x = 1/2 on the grid, so the Fourier MLP
and its NQF are evaluated on the M/2 + 1 distinct points with weights (exact; checked against the
full grid in the tests). Every run trains each theta as one tensor program over its seeds (all
seeds at once for the raw MLP) with analytic gradients, in ``dtype`` (NQF) and ``mlp_dtype`` (tanh
networks).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from nqf.errors import ConfigError
from nqf.experiments.contract import PaperFigure
from nqf.experiments.fourier_powerlaw import fitting as fits
from nqf.experiments.verify_runs import check_runs
from nqf.theory.fourier_modes import designed_coefficients, fourier_features, lv_from_grid, predicted_windows
from nqf.theory.losses import flow_lr
from nqf.training.loop import log_step_grid, train

if TYPE_CHECKING:
    import torch

KIND = "fourier_powerlaw"
# facts the generic checks and reports read (nqf.experiments.contract.OPTIONAL)
PAPER_FIGURE = PaperFigure("Fig. 5", "power laws of the Fourier MLP", order=5)
_PAST_STEPS = "NaN beyond a theta's steps"
NONFINITE = {"train": {"loss": _PAST_STEPS, "coef": _PAST_STEPS, "u": _PAST_STEPS, "z": _PAST_STEPS,
                       "tanh_argument": _PAST_STEPS}}
# The paper states lr 0.02 for 30000 steps on 256 points but not its loss's normalisation: the
# mean of Eq. 26 or (1/2) sum, under which that lr reaches the fitting window (SCIENCE.md 7).
READING_CHOICES = {"loss": ("mean", "half_sum")}
RUNS = ("fourier_mlp", "nqf", "raw_mlp")
# The steps of the Fourier runs depend on the window the theory assigns (steps: auto), which is
# a function of these keys: the train and theory stages read them all.
_CLOCK = ("P", "M", "beta", "thetas", "eps", "loss", "lr", "steps", "auto_horizon", "window_cutoff")
TRAIN_KEYS = _CLOCK + ("n_record", "seeds", "dtype", "mlp_dtype")
RAW_KEYS = ("eps", "loss", "M", "n_record", "mlp_dtype", "raw_width", "raw_lr", "raw_steps", "raw_seeds")
STAGE_KEYS = {
    "data": ("P", "M", "beta", "thetas"),
    "structure": ("P", "M", "beta"),
    "train": tuple(dict.fromkeys(TRAIN_KEYS + RAW_KEYS)),
    "theory": _CLOCK + ("n_record", "seeds"),
    "fit": ("main_theta", "tolerances"),
    "figure": ("description", "main_theta", "loss"),
}


def runs(cfg: dict) -> list[str]:
    """The Fourier MLP, its NQF (same init draws) and the raw-input MLP baseline."""
    return list(RUNS)


def run_config(cfg: dict, run: str) -> dict:
    """The Fourier MLP and its NQF read the training keys; the raw MLP reads its own (raw_*)."""
    if run not in RUNS:
        raise ValueError(f"Run {run!r} is not one of {', '.join(RUNS)}.")
    return {k: cfg[k] for k in (RAW_KEYS if run == "raw_mlp" else TRAIN_KEYS)}


def theory_windows(cfg: dict, t_max=None) -> list:
    """nqf.theory.fourier_modes.predicted_windows at this experiment's P, beta, thetas, z_k(0) = eps^2 and
    window_cutoff; ``t_max`` (one per theta, or None) ends a window at the training horizon."""
    return predicted_windows(int(cfg["P"]), float(cfg["beta"]), cfg["thetas"], float(cfg["eps"]) ** 2,
                             float(cfg["window_cutoff"]), t_max)


def theta_steps(cfg: dict) -> list[int]:
    """GD steps of the Fourier runs, one per theta: ``steps`` as given (an integer for every theta,
    or a list), or with ``steps: auto`` the steps at which the Eq. 26 flow time c lr step reaches
    ``auto_horizon`` times the end of that theta's fitting window."""
    steps, T = cfg["steps"], len(cfg["thetas"])
    if isinstance(steps, int):
        return [int(steps)] * T
    if isinstance(steps, list):
        if len(steps) != T:
            raise ConfigError(f"Config key 'steps' lists {len(steps)} values for {T} thetas; give one per theta, "
                              "an integer, or auto.")
        return [int(v) for v in steps]
    dt = flow_lr(cfg["lr"], cfg["loss"], cfg["M"])
    return [int(math.ceil(float(cfg["auto_horizon"]) * w.window.t_hi / dt)) for w in theory_windows(cfg)]


def estimate(cfg: dict) -> dict:
    """The larger run (nqf.experiments.machine): a Fourier run holds the features (M x P per
    theta), four recorded per-mode variables (theta x seed x n_record x P) and the replicas'
    activations on the folded grid; the raw MLP run its activations (raw seeds x M x raw_width)."""
    from nqf.experiments.machine import BYTES

    P, M, T, S, n = int(cfg["P"]), int(cfg["M"]), len(cfg["thetas"]), len(cfg["seeds"]), int(cfg["n_record"])
    fourier = {"M": BYTES * (M * P * (T + 1) + 3 * T * S * (M // 2 + 1) * P), "n_record": BYTES * 4 * T * S * n * P}
    raw = BYTES * 3 * len(cfg["raw_seeds"]) * M * int(cfg["raw_width"])
    try:
        steps = max(theta_steps(cfg))  # 'auto': each theta's own horizon
    except ConfigError:  # a steps list of the wrong length: check names it
        steps = 1
    if raw > sum(fourier.values()):
        return {"bytes": raw, "key": "raw_width", "steps": max(int(steps), int(cfg["raw_steps"])),
                "what": f"the raw MLP: {len(cfg['raw_seeds'])} seeds x {M} points x {cfg['raw_width']} units"}
    return {"bytes": sum(fourier.values()), "key": max(fourier, key=fourier.get),
            "steps": max(int(steps), int(cfg["raw_steps"])),
            "what": f"{T} thetas x {S} seeds of {P} modes on {M} points, {n} recorded steps"}


def work(cfg: dict, run: str) -> dict:
    """What run ``run`` computes (nqf.experiments.work.run_work): the Fourier runs train each
    theta in turn for its own steps, every seed at once on the folded grid (M/2 + 1 points) of P
    features; the raw MLP its seeds on the M points; forward and backward are about 6 FLOPs per
    weight and point, in about 80 torch operations a step (the profile of benchmarks/workloads.py)."""
    from nqf.experiments.work import RECORD_STEPS

    M, S = int(cfg["M"]), len(cfg["seeds"])
    if run == "raw_mlp":
        steps, flops = int(cfg["raw_steps"]), 6 * len(cfg["raw_seeds"]) * M * 3 * int(cfg["raw_width"])
    else:
        steps, flops = sum(theta_steps(cfg)), 6 * S * (M // 2 + 1) * 2 * int(cfg["P"])
    dtype = cfg.get("dtype" if run == "nqf" else "mlp_dtype", "float64")  # as _dtype
    return {"steps": steps + RECORD_STEPS * int(cfg["n_record"]), "flops": float(flops), "ops": 80, "dtype": dtype}


def check(cfg: dict) -> list[tuple[str, str]]:
    """Cross-key problems found before any job starts: (key path, sentence) pairs."""
    if 2 * cfg["P"] >= cfg["M"]:
        return [("M", f"M = {cfg['M']} must exceed 2 P = {2 * cfg['P']}: the cosines psi_k are orthonormal on "
                      "the grid of M points only for k < M / 2.")]
    if isinstance(cfg["steps"], list) and len(cfg["steps"]) != len(cfg["thetas"]):
        return [("steps", f"lists {len(cfg['steps'])} values for {len(cfg['thetas'])} thetas; give one per "
                          "theta, an integer, or auto.")]
    return window_problems(cfg)


def window_problems(cfg: dict) -> list[tuple[str, str]]:
    """(key, sentence) where a theta's run ends before any fitting window exists (fewer than two
    modes switch on by its horizon, so the theory stage has nothing to fit): the steps that reach
    the second mode's ignition. A run that stops inside or short of the window the theory assigns
    is not refused: that is a reading of the paper's stated lr and steps, whose rows then say they
    were not reached (the horizon row records it)."""
    from nqf.experiments.claims import reach_problems

    dt = flow_lr(cfg["lr"], cfg["loss"], int(cfg["M"]))
    for theta, steps, full in zip(cfg["thetas"], theta_steps(cfg), theory_windows(cfg)):
        try:
            theory_windows({**cfg, "thetas": [theta]}, [dt * steps])
        except ValueError:
            second = float(np.sort(full.t_star)[1])
            key = "steps" if not isinstance(cfg["steps"], list) else f"steps.{list(cfg['thetas']).index(theta)}"
            return reach_problems(key, dt * steps, [second], [second], dt,
                                  [f"theta = {theta:g}: the second mode (the first fitting window needs two)"],
                                  event="any fitting window", margin="no margin: the least window there is")
    return []


# -- data and structure ---------------------------------------------------------------------
def make_data(cfg: dict) -> xr.Dataset:
    """The grid, the features psi_k(x_mu), b_k, s_k per theta and the target per theta."""
    P, M, beta = int(cfg["P"]), int(cfg["M"]), float(cfg["beta"])
    thetas = np.asarray(cfg["thetas"], float)
    if 2 * P >= M:
        raise ConfigError(f"Config key 'M' ({M}) must exceed 2 P = {2 * P}: the cosines psi_k are "
                          f"orthonormal on the grid of M points only for k < M / 2.")
    k = np.arange(1, P + 1, dtype=float)
    x = np.arange(M) / M
    psi = fourier_features(x, P)
    b = k ** -beta
    s = k[None, :] ** -thetas[:, None]
    y = np.broadcast_to(psi @ b, (thetas.size, M)).copy()
    return xr.Dataset(
        {
            "x": ("sample", x, {"units": "1", "long_name": "input x_mu = mu / M on [0, 1)"}),
            "psi": (("sample", "mode"), psi, {"units": "1", "long_name": "Fourier feature psi_k(x) = sqrt2 cos(2 pi k x)"}),
            "b": ("mode", b, {"units": "1", "long_name": "target coefficient b_k = k^-beta"}),
            "s": (("theta", "mode"), s, {"units": "1", "long_name": "feature scale s_k = k^-theta"}),
            "y": (("theta", "sample"), y, {"units": "1", "long_name": "target y(x) = sum_k b_k psi_k(x)"}),
        },
        coords={"theta": ("theta", thetas, {"units": "1", "long_name": "feature-scale exponent theta"}),
                "mode": ("mode", np.arange(1, P + 1), {"long_name": "unit / frequency index k"}),
                "sample": np.arange(M)},
        attrs={"experiment_kind": KIND, "P": P, "M": M, "beta": beta,
               "loss": "L = (1/M) sum_mu (f(x_mu) - y_mu)^2"},
    )


def structure(data: xr.Dataset, cfg: dict) -> xr.Dataset:
    """r, C (per theta, from the grid), V_k = r_k^2 / (8 C_kk), zeta = r, and their residuals
    against the analytic values."""
    P = int(cfg["P"])
    s, b = data["s"].values, data["b"].values
    r, C = lv_from_grid(data["psi"].values, s, data["y"].values, P)
    c_diag = np.diagonal(C, axis1=-2, axis2=-1)
    design = designed_coefficients(s, b[None, :], P)
    off = C - np.einsum("tk,kj->tkj", c_diag, np.eye(P))
    dims = ("theta", "mode")
    return xr.Dataset(
        {
            "r": (dims, r, {"units": "1", "long_name": "growth rate r_k = (8/M) sum lambda_mu,k y_mu"}),
            "C": (("theta", "mode", "mode_j"), C, {"units": "1", "long_name": "interaction C_kj = (8/M) sum lambda_mu,k lambda_mu,j"}),
            "zeta": (dims, r, {"units": "1", "long_name": "Theorem 9 growth rate zeta_k = r_k (Theorem 6 case, a = 1)"}),
            "V": (dims, r ** 2 / (8.0 * c_diag), {"units": "1", "long_name": "target strength V_k = r_k^2 / (8 C_kk)"}),
            "z_saturation": (dims, r / c_diag, {"units": "1", "long_name": "saturation z_k = r_k / C_kk (a_k W_k = b_k sqrt P / s_k)"}),
            "r_designed": (dims, design["r"], {"units": "1", "long_name": "analytic r_k = 4 b_k s_k / sqrt(P)"}),
            "C_designed": (dims, design["C_diag"], {"units": "1", "long_name": "analytic C_kk = 2 s_k^2 / P"}),
            "r_residual": ((), float(np.max(np.abs(r - design["r"])) / np.max(np.abs(design["r"]))), {
                "units": "1", "long_name": "max |r - r_designed| / max r_designed"}),
            "C_residual": ((), float(np.max(np.abs(c_diag - design["C_diag"])) / np.max(design["C_diag"])), {
                "units": "1", "long_name": "max |C_kk - C_designed| / max C_designed"}),
            "off_diagonal_residual": ((), float(np.max(np.abs(off)) / np.max(c_diag)), {
                "units": "1", "long_name": "max_k!=j |C_kj| / max C_kk (0: orthogonal features, Theorem 6)"}),
        },
        coords={"theta": data["theta"], "mode": data["mode"], "mode_j": data["mode"].values},
        attrs={"experiment_kind": KIND},
    )


# -- training -------------------------------------------------------------------------------
def _dtype(cfg: dict, run: str = "nqf") -> torch.dtype:
    """The NQF trains in ``dtype``; the two tanh networks in ``mlp_dtype`` (float32 makes their
    tanh-bound steps about 30 % cheaper; their comparisons with theory are exponents to a few per cent)."""
    # torch is imported where needed: the fit and figure jobs run without it (the theory draws
    # the seeds' initial weights with torch's generator, as training does)
    import torch

    key = "dtype" if run == "nqf" else "mlp_dtype"
    return torch.float64 if cfg.get(key, "float64") == "float64" else torch.float32


def _train(model, y, cfg: dict, record=None, *, lr: float, steps: int, record_steps=None):
    return train(model, y, lr=lr, steps=steps, optimizer="gd", loss=cfg["loss"], loss_samples=int(cfg["M"]),
                 n_record=int(cfg["n_record"]), record_steps=record_steps,
                 record=record or (lambda mod: {}), replica_dim="seed",
                 divergence_hint=" (GD is stable for c lr < 2 / r_1, c the loss convention's factor and "
                                 "r_1 = 4 b_1 s_1 / sqrt(P), for the NQF; the tanh networks may need less)")


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """GD on every seed of every theta (seeds only for the raw MLP). Each theta trains as one
    tensor program over its seeds for its own number of steps (``theta_steps``), recorded on the
    common log-spaced grid of the longest; a theta's record ends at its own horizon (NaN after)."""
    from nqf.training.fourier_training import (
        RawMLPReplicas,
        fold_even_grid,
        init_draws,
        raw_init_draws,
        train_per_theta,
    )
    from nqf.training.quadratic import resolve_device

    dev, dtype = resolve_device(device), _dtype(cfg, run)
    seeds = np.asarray(cfg["raw_seeds" if run == "raw_mlp" else "seeds"], int)
    thetas = data["theta"].values
    M = int(cfg["M"])  # both runs read M; the Fourier runs (not the raw MLP) read P below
    S = seeds.size
    if run == "raw_mlp":
        # raw_lr is the raw MLP's step of the Eq. 26 flow (its stability limit does not depend on
        # the convention); the optimizer's own learning rate under the convention is raw_lr / c.
        lr, steps = float(cfg["raw_lr"]) / flow_lr(1.0, cfg["loss"], M), int(cfg["raw_steps"])
        y = data["y"].values
        if not np.allclose(y, y[:1]):
            raise ValueError("The raw MLP baseline needs one target for every theta.")
        model = RawMLPReplicas(raw_init_draws(seeds, int(cfg["raw_width"]), float(cfg["eps"])),
                               data["x"].values, device=dev, dtype=dtype)
        ds = _train(model, np.repeat(y[:1], S, 0), cfg, lr=lr, steps=steps)
        out = xr.Dataset({"loss": (("seed", "step"), ds["loss"].values, ds["loss"].attrs)},
                         coords={"seed": seeds, "step": ds["step"], "time": ds["time"]})
        out.attrs.update(model=f"tanh MLP 1 -> {cfg['raw_width']} -> 1 with biases on the raw input x",
                         init="every parameter ~ N(0, eps^2)")
    elif run in ("fourier_mlp", "nqf"):
        lr = float(cfg["lr"])
        per_theta = theta_steps({**cfg, "thetas": [float(t) for t in thetas]})
        steps = max(per_theta)
        grid = log_step_grid(steps, int(cfg["n_record"]))
        idx, weights = fold_even_grid(M)
        psi = data["psi"].values[idx]
        if not np.allclose(data["y"].values, data["y"].values[:, (-np.arange(M)) % M], atol=1e-12):
            raise ValueError("The target is not even about x = 1/2: the folded grid does not apply.")
        P = int(cfg["P"])
        a0, W0 = init_draws(seeds, P, float(cfg["eps"]))

        rec = train_per_theta(a0, W0, data["s"].values, psi, weights, data["y"].values[:, idx],
                              nonlinear=run == "fourier_mlp", steps=per_theta, grid=grid, device=dev, dtype=dtype,
                              run_gd=lambda model, y, record, **kw: _train(model, y, cfg, record, lr=lr, **kw))
        time = flow_lr(lr, cfg["loss"], M) * grid.astype(float)
        pm = ("theta", "seed", "step", "mode")
        out = xr.Dataset(
            {"loss": (("theta", "seed", "step"), rec["loss"], {"units": "1", "long_name": "training loss (1/M) sum (f - y)^2 (Eq. 26; NaN beyond this theta's steps)"}),
             "coef": (pm, rec["coef"], {"units": "1", "long_name": "learned coefficient of psi_k, (1/M) sum f psi_k"}),
             "u": (pm, rec["u"], {"units": "1", "long_name": "NQF coefficient s_k a_k W_k / sqrt(P) of the same weights"}),
             "z": (pm, rec["z"], {"units": "1", "long_name": "growing-mode amplitude z_k = (a_k + W_k)^2 / 2"}),
             "tanh_argument": (pm, rec["arg"], {"units": "1", "long_name": "max_x |s_k a_k psi_k(x)| = sqrt2 s_k |a_k|"}),
             "steps_theta": ("theta", np.asarray(per_theta, np.int64), {"units": "1", "long_name": "GD steps of this theta (its record ends there)"})},
            coords={"theta": thetas, "seed": seeds, "step": grid,
                    "time": ("step", time, {"units": "1", "long_name": "Eq. 26 flow time c lr step (c: loss convention factor)"}),
                    "mode": data["mode"].values})
        out.attrs.update(model="Fourier MLP (Eq. 50)" if run == "fourier_mlp" else "its NQF (Eq. 296)",
                         init="a_k, W_k ~ N(0, eps^2), one draw per seed shared by every theta and both models",
                         grid="evaluated on the M/2 + 1 distinct points of the even features, with weights")
        steps = per_theta
    else:
        raise ValueError(f"Unknown run {run!r}; runs: {', '.join(RUNS)}.")
    out.attrs.update(run=run, experiment_kind=KIND, lr=lr, steps=steps, eps=float(cfg["eps"]), device=str(dev),
                     loss="(1/M) sum_mu (f(x_mu) - y_mu)^2 (Eq. 26), recorded whatever the convention",
                     loss_convention=cfg["loss"], flow_lr=flow_lr(lr, cfg["loss"], M))
    return out


# -- theory ---------------------------------------------------------------------------------
def theory(structure: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Predicted exponents and windows per theta (nqf.theory.scaling), and the exact NQF loss curves
    (mean init and the configured seeds' own draws) with their fitted exponents."""
    from nqf.theory.scaling import fit_power_law, predict_exponent
    from nqf.training.fourier_training import exact_nqf_loss, init_draws

    eps, M = float(cfg["eps"]), int(cfg["M"])
    per_steps = theta_steps(cfg)
    dt = flow_lr(cfg["lr"], cfg["loss"], M)
    step_grid = log_step_grid(max(per_steps), int(cfg["n_record"]))
    t = dt * step_grid.astype(float)
    thetas, P = structure["theta"].values, structure.sizes["mode"]
    seeds = np.asarray(cfg["seeds"], int)
    a0, W0 = init_draws(seeds, P, eps)
    zp0, zm0 = (a0 + W0) ** 2 / 2, (a0 - W0) ** 2 / 2
    full = theory_windows(cfg)  # the windows without the training horizon
    rows = []  # per theta
    for i in range(thetas.size):
        r = structure["r"].values[i]
        C = np.diagonal(structure["C"].values[i])
        V = structure["V"].values[i]
        horizon = dt * per_steps[i]
        try:
            pred = predict_exponent(r, V, C=C, z0=eps ** 2, t_max=horizon, cutoff=float(cfg["window_cutoff"]))
        except ValueError as exc:  # e.g. no mode ignites before the horizon: a config problem
            raise ConfigError(f"Experiment kind fourier_powerlaw, theta = {thetas[i]:g}: {exc} The run reaches "
                              f"t = c lr steps = {horizon:g}; raise steps (or use steps: auto) or lr.") from None
        w = pred.window
        loss_mean = exact_nqf_loss(r, C, np.full(P, eps ** 2), t)
        loss_seeds = exact_nqf_loss(r, C, zp0, t, zm0)
        f_mean = fit_power_law(t, loss_mean, w)
        f_seeds = fit_power_law(t, loss_seeds, w)
        rows.append({"asymptotic": pred.asymptotic, "corrected": pred.corrected, "staircase": pred.staircase,
                     "alpha1": pred.alpha1, "alpha2": pred.alpha2, "t_lo": w.t_lo, "t_hi": w.t_hi,
                     "k_lo": w.k_lo, "k_hi": w.k_hi, "note": w.note or "-", "t_star": pred.t_star,
                     "k_eff": pred.k_eff, "resolved": pred.resolved, "loss_mean": loss_mean,
                     "loss_seeds": loss_seeds, "b_mean": f_mean.exponent, "b_seeds": f_seeds.exponent,
                     "ci_lo": f_seeds.ci_low, "ci_hi": f_seeds.ci_high, "pl_seeds": f_seeds.is_power_law,
                     "gd_lo": dt * r[w.k_lo - 1] / 4, "gd_hi": dt * r[w.k_hi - 1] / 4,
                     "t_hi_full": full[i].window.t_hi, "k_hi_full": full[i].window.k_hi, "horizon": horizon})
    v = {key: np.array([row[key] for row in rows]) for key in rows[0]}
    th, tm = ("theta",), ("theta", "mode")
    unit = {"units": "1"}
    return xr.Dataset(
        {
            "exponent_asymptotic": (th, v["asymptotic"], {**unit, "long_name": "Theorem 9 exponent (alpha1 - 1) / alpha2"}),
            "exponent_corrected": (th, v["corrected"], {**unit, "long_name": "finite-eps exponent (App. C Eq. 292) over the window"}),
            "exponent_staircase": (th, v["staircase"], {**unit, "long_name": "slope of the finite staircase ln E_k vs ln t*_k over the window"}),
            "alpha1": (th, v["alpha1"], {**unit, "long_name": "V_k ~ k^-alpha1 over the window"}),
            "alpha2": (th, v["alpha2"], {**unit, "long_name": "zeta_k ~ k^-alpha2 over the window"}),
            "t_lo": (th, v["t_lo"], {**unit, "long_name": "fitting window start (gradient-flow time)"}),
            "t_hi": (th, v["t_hi"], {**unit, "long_name": "fitting window end (gradient-flow time)"}),
            "k_lo": (th, v["k_lo"], {**unit, "long_name": "first mode of the window"}),
            "k_hi": (th, v["k_hi"], {**unit, "long_name": "last mode of the window"}),
            "window_note": (th, v["note"].astype(object), {"long_name": "how the window was bounded"}),
            "t_star": (tm, v["t_star"], {**unit, "long_name": "Theorem 8 ignition time from z_k(0) = eps^2"}),
            "k_eff": (tm, v["k_eff"], {**unit, "long_name": "local exponent (alpha1 - 1) / (d ln t*_k / d ln k)"}),
            "resolved": (tm, v["resolved"], {"long_name": "drop of mode k separated from the next one"}),
            "loss_mean_init": (("theta", "time"), v["loss_mean"], {
                **unit, "long_name": "exact NQF loss, balanced mean init z_k(0) = eps^2 (Theorem 6)"}),
            "loss_seeds": (("theta", "seed", "time"), v["loss_seeds"], {
                **unit, "long_name": "exact NQF loss from each seed's own init draw (Theorem 6 + conserved a^2 - W^2)"}),
            "exponent_mean_init": (th, v["b_mean"], {**unit, "long_name": "fitted exponent of loss_mean_init over the window"}),
            "exponent_seeds": (th, v["b_seeds"], {**unit, "long_name": "fitted exponent of loss_seeds over the window (seed mean)"}),
            "exponent_seeds_ci_low": (th, v["ci_lo"], {**unit, "long_name": "95% bootstrap interval over seeds, low"}),
            "exponent_seeds_ci_high": (th, v["ci_hi"], {**unit, "long_name": "95% bootstrap interval over seeds, high"}),
            "seeds_power_law": (th, v["pl_seeds"], {"long_name": "nqf.theory.scaling.power_law_test verdict on loss_seeds"}),
            "gd_delay_lo": (th, v["gd_lo"], {**unit, "long_name": "GD's relative ignition delay lr r_k / 4 at the window's first mode"}),
            "gd_delay_hi": (th, v["gd_hi"], {**unit, "long_name": "GD's relative ignition delay lr r_k / 4 at the window's last mode"}),
            "t_hi_full": (th, v["t_hi_full"], {**unit, "long_name": "end of the fitting window without the training horizon (finite-P cutoff)"}),
            "k_hi_full": (th, v["k_hi_full"], {**unit, "long_name": "last mode of the fitting window without the training horizon"}),
            "horizon": (th, v["horizon"], {**unit, "long_name": "Eq. 26 flow time reached by this theta's run, c lr steps"}),
            "r": structure["r"], "V": structure["V"],
        },
        coords={"theta": thetas, "mode": structure["mode"].values, "seed": seeds,
                "time": ("time", t, {**unit, "long_name": "Eq. 26 flow time c lr step"}),
                "step": ("time", step_grid, {"long_name": "GD step"})},
        attrs={"experiment_kind": KIND, "eps": eps, "lr": float(cfg["lr"]), "flow_lr": dt, "loss_convention": cfg["loss"],
               "steps": per_steps, "beta": float(cfg["beta"]),
               # 1: the steps were chosen from the windows (steps: auto), so each run reaches its
               # window's end by construction (the fit labels that row "construction")
               "steps_auto": int(cfg["steps"] == "auto"),
               "window_cutoff": float(cfg["window_cutoff"])},
    )


# -- fit ------------------------------------------------------------------------------------


def fit(structure: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """Fitted exponents with bootstrap intervals beside the predictions, window sensitivity, the
    raw MLP's power-law test, the Fourier MLP's departure from its NQF, and the claims."""
    check_runs(run_ds, {**{run: {"experiment_kind": KIND, "eps": theory_ds.attrs.get("eps"), "lr": theory_ds.attrs.get("lr"),
                               "theta": theory_ds["theta"].values, "seeds": theory_ds["seed"].values}
                         for run in ("fourier_mlp", "nqf")},
                      "raw_mlp": {"experiment_kind": KIND, "eps": theory_ds.attrs.get("eps")}})
    return fits.fit(structure, theory_ds, run_ds, cfg)
