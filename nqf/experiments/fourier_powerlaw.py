"""Experiment kind ``fourier_powerlaw``: power-law training curves of the Fourier MLP (paper Fig. 5).

Setting (Section 7, Eq. 50, App. C "Figure 5"). On the grid x_mu = mu / M (mu = 0..M-1) the
Fourier MLP f(x) = P^-1/2 sum_k W_k tanh(s_k a_k psi_k(x)), psi_k = sqrt2 cos(2 pi k x),
s_k = k^-theta, learns y = sum_k b_k psi_k, b_k = k^-beta, with the mean-squared loss of Eq. 26,
L = (1/M) sum_mu (f(x_mu) - y_mu)^2 (recorded), under the ``loss`` convention the optimizer sees
(nqf.losses: a step of lr moves the Eq. 26 flow by c lr), full-batch GD from a_k, W_k ~ N(0, eps^2).
Baselines: its NQF
f_NQF = P^-1/2 sum_k s_k a_k W_k psi_k (Proposition 1, Eq. 296) from the same draw, and a standard
tanh MLP (1 -> H -> 1, biases) on the raw input x.

Derivation of the numbers (they fix the defaults). Write c_k = s_k / sqrt(P), u_k = a_k W_k. For
k < M/2 the psi_k are orthonormal on the grid, (1/M) sum_mu psi_k psi_j = delta_kj, so the NQF's
loss is exactly L = sum_k (c_k u_k - b_k)^2: every unit is its own 2 x 2 problem. Its structure
matrix A_k(x) = (c_k psi_k(x) / 2) [[0, 1], [1, 0]] has eigenvectors (1, +-1)/sqrt2 with
eigenvalues lambda_mu,k = +- c_k psi_k(x_mu) / 2, so in the growing direction
z_k = (a_k + W_k)^2 / 2 and

    r_k = (8/M) sum_mu lambda_mu,k y_mu = 4 b_k s_k / sqrt(P)  (= 2 gamma_k of Theorem 7, a = 2,
          gamma_k = 2 b_k s_k / sqrt(P)),
    C_kk = (8/M) sum_mu lambda_mu,k^2 = 2 s_k^2 / P,   C_kj = 0 (k != j, orthogonal features),
    V_k = r_k^2 / (8 C_kk) = b_k^2 = k^-2 beta,   zeta_k = r_k = (4/sqrt P) k^-(theta + beta),

so alpha1 = 2 beta, alpha2 = theta + beta and the loss falls as t^-(2 beta - 1)/(theta + beta):
4/3, 1, 0.8 for theta = 0, 0.5, 1 at beta = 1.5. Mode k saturates at z_k = r_k / C_kk = 2 b_k / c_k,
i.e. a_k W_k = b_k sqrt(P) / s_k. The shrinking direction z_k^- = (a_k - W_k)^2 / 2 obeys
z_k z_k^- = const (a_k^2 - W_k^2 is conserved by the flow), so its only effect on z_k is a source
C_kk z_k(0) z_k^-(0) that is 1e-9 of r_k z_k: Theorem 6 with each seed's own z_k(0) is the NQF's
exact loss curve, L = sum_k (c_k (z_k - z_k^-) / 2 - b_k)^2 with z_k^- = z_k(0) z_k^-(0) / z_k.

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

The window itself (nqf.scaling) is bounded by the finite number of modes, not by the horizon, for
theta = 0 and 0.5: it starts where consecutive drops merge (modes 6, 8, 11 for theta = 0, 0.5, 1)
and ends where the missing tail beyond k = P exceeds ``window_cutoff`` of the excess loss (mode 19
at 10 %). That is 0.6-0.7 decades in t at P = 64, and inside it the cut-off tail steepens the curve:
the exact NQF curve from the balanced mean init fits 1.47, 1.07, 0.85, i.e. 10 %, 7 %, 7 % above the
asymptotic values and 4-6 % above the finite-eps corrected ones; nqf.scaling's ``staircase``
prediction, which keeps the finite size, is within 1 % of it. Gaussian draws scatter each t*_k by
about 11 % (chi^2_1), so the seed-averaged exact curve moves by a few per cent with the seed set
(seeds 0-5: 1.44, 1.03, 0.79). All three predictions are reported beside each fit. P = 104 is the
smallest P at which every theta's window spans a decade (1.03, 1.07, 1.15 decades): the default.

The tanh is far from linear at the saturated weights: with a_k = W_k the argument s_k a_k psi_k
reaches sqrt(2 s_k b_k sqrt P) sqrt2 = 4 k^-(theta + beta)/2 (4 for k = 1, 1 at k = 3 for theta = 1),
so the Fourier MLP departs from its NQF from the first mode on; the fit stage measures how far
(loss ratio, and each mode's learned coefficient against its NQF value s_k a_k W_k / sqrt P).

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

from nqf.config import ConfigError
from nqf.losses import flow_lr
from nqf.training import log_step_grid, train

if TYPE_CHECKING:
    import torch

# nqf.fourier_training's names, re-exported (tests build models as fourier_powerlaw.FourierReplicas);
# imported on first use by __getattr__ since that module imports torch
_REEXPORTED = ("FourierReplicas", "RawMLPReplicas", "exact_nqf_loss", "fold_even_grid", "init_draws",
               "raw_init_draws")


def __getattr__(name: str):
    if name in _REEXPORTED:
        from nqf import fourier_training

        return getattr(fourier_training, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


KIND = "fourier_powerlaw"
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
    """nqf.scaling's fitting window per theta from the analytic coefficients (designed_coefficients,
    equal to the grid's to 1e-12), with the balanced mean init z_k(0) = eps^2; ``t_max`` (one per
    theta, or None) ends a window at the training horizon."""
    from nqf.scaling import predict_exponent

    P, beta = int(cfg["P"]), float(cfg["beta"])
    k = np.arange(1, P + 1, dtype=float)
    out = []
    for j, theta in enumerate(cfg["thetas"]):
        d = designed_coefficients(k ** -float(theta), k ** -beta, P)
        horizon = None if t_max is None else float(t_max[j])
        out.append(predict_exponent(d["r"], d["V"], C=d["C_diag"], z0=float(cfg["eps"]) ** 2, t_max=horizon,
                                    cutoff=float(cfg["window_cutoff"])))
    return out


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


def check(cfg: dict) -> list[tuple[str, str]]:
    """Cross-key problems found before any job starts: (key path, sentence) pairs."""
    if 2 * cfg["P"] >= cfg["M"]:
        return [("M", f"M = {cfg['M']} must exceed 2 P = {2 * cfg['P']}: the cosines psi_k are orthonormal on "
                      "the grid of M points only for k < M / 2.")]
    if isinstance(cfg["steps"], list) and len(cfg["steps"]) != len(cfg["thetas"]):
        return [("steps", f"lists {len(cfg['steps'])} values for {len(cfg['thetas'])} thetas; give one per "
                          "theta, an integer, or auto.")]
    return []


# -- data and structure ---------------------------------------------------------------------
def fourier_features(x, P: int) -> np.ndarray:
    """psi_k(x) = sqrt2 cos(2 pi k x) for k = 1..P: (len(x), P)."""
    k = np.arange(1, P + 1)
    return math.sqrt(2.0) * np.cos(2 * math.pi * np.outer(np.asarray(x, float), k))


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


def designed_coefficients(s, b, P: int) -> dict[str, np.ndarray]:
    """The analytic Lotka-Volterra coefficients of the growing modes z_k = (a_k + W_k)^2 / 2:
    r_k = 4 b_k s_k / sqrt(P), C_kk = 2 s_k^2 / P, V_k = r_k^2 / (8 C_kk) = b_k^2 (module docstring)."""
    s, b = np.asarray(s, float), np.asarray(b, float)
    r = 4.0 * b * s / math.sqrt(P)
    C = 2.0 * s ** 2 / P
    return {"r": r, "C_diag": C, "V": r ** 2 / (8.0 * C)}


def lv_from_grid(psi, s, y, P: int) -> tuple[np.ndarray, np.ndarray]:
    """r_k = (8/M) sum_mu lambda_mu,k y_mu and C_kj = (8/M) sum_mu lambda_mu,k lambda_mu,j from the
    grid, lambda_mu,k = s_k psi_k(x_mu) / (2 sqrt P) (the growing eigenvalue of unit k's A_k(x_mu)).
    ``s`` (..., P) and ``y`` (..., M) carry leading (theta) axes."""
    psi = np.asarray(psi, float)
    lam = np.asarray(s, float)[..., None, :] * psi / (2.0 * math.sqrt(P))  # (..., M, P)
    M = psi.shape[0]
    r = 8.0 / M * np.einsum("...mk,...m->...k", lam, np.asarray(y, float))
    C = 8.0 / M * np.einsum("...mk,...mj->...kj", lam, lam)
    return r, C


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
    from nqf.fourier_training import FourierReplicas, RawMLPReplicas, fold_even_grid, init_draws, raw_init_draws
    from nqf.quadratic import resolve_device

    dev, dtype = resolve_device(device), _dtype(cfg, run)
    seeds = np.asarray(cfg["raw_seeds" if run == "raw_mlp" else "seeds"], int)
    thetas = data["theta"].values
    M = int(cfg["M"])  # both runs read M; the Fourier runs (not the raw MLP) read P below
    S, T = seeds.size, thetas.size
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

        def record(mod):
            a, W = mod.theta[:, 0], mod.theta[:, 1]
            return {"coef": mod.coefficients(), "u": mod.s * a * W * mod.scale,
                    "z": (a + W) ** 2 / 2, "arg": math.sqrt(2.0) * (mod.s * a).abs()}

        names = ("loss", "coef", "u", "z", "arg")
        rec = {n: np.full((T, S, grid.size) + (() if n == "loss" else (P,)), np.nan) for n in names}
        for j in range(T):
            keep = grid <= per_theta[j]
            s = np.repeat(data["s"].values[j][None], S, 0)
            model = FourierReplicas(a0, W0, s, psi, weights, nonlinear=run == "fourier_mlp", device=dev, dtype=dtype)
            ds = _train(model, np.repeat(data["y"].values[j, idx][None], S, 0), cfg, record, lr=lr,
                        steps=per_theta[j], record_steps=grid[keep])
            for n in names:
                rec[n][j][:, keep] = ds[n].values
        time = flow_lr(lr, cfg["loss"], M) * grid.astype(float)
        pm = ("theta", "seed", "step", "mode")
        out = xr.Dataset(
            {"loss": (("theta", "seed", "step"), rec["loss"], {"units": "1", "long_name": "training loss (1/M) sum (f - y)^2 (Eq. 26; NaN beyond this theta's steps)"}),
             "coef": (pm, rec["coef"], {"units": "1", "long_name": "learned coefficient of psi_k, (1/M) sum f psi_k"}),
             "u": (pm, rec["u"], {"units": "1", "long_name": "NQF coefficient s_k a_k W_k / sqrt(P) of the same weights"}),
             "z": (pm, rec["z"], {"units": "1", "long_name": "growing-mode amplitude z_k = (a_k + W_k)^2 / 2"}),
             "tanh_argument": (pm, rec["arg"], {"units": "1", "long_name": "max_x |s_k a_k psi_k(x)| = sqrt2 s_k |a_k|"}),
             "steps_theta": ("theta", np.asarray(per_theta, np.int64), {"units": "step", "long_name": "GD steps of this theta (its record ends there)"})},
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
    """Predicted exponents and windows per theta (nqf.scaling), and the exact NQF loss curves
    (mean init and the configured seeds' own draws) with their fitted exponents."""
    from nqf.fourier_training import exact_nqf_loss, init_draws
    from nqf.scaling import fit_power_law, predict_exponent

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
    per_theta = {key: [] for key in ("asymptotic", "corrected", "staircase", "alpha1", "alpha2", "t_lo", "t_hi",
                                     "k_lo", "k_hi", "note", "t_star", "k_eff", "resolved", "loss_mean", "loss_seeds",
                                     "b_mean", "b_seeds", "ci_lo", "ci_hi", "pl_seeds", "gd_lo", "gd_hi",
                                     "t_hi_full", "k_hi_full", "horizon")}
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
        for key, val in (("asymptotic", pred.asymptotic), ("corrected", pred.corrected), ("staircase", pred.staircase),
                         ("alpha1", pred.alpha1), ("alpha2", pred.alpha2), ("t_lo", w.t_lo), ("t_hi", w.t_hi),
                         ("k_lo", w.k_lo), ("k_hi", w.k_hi), ("note", w.note or "-"), ("t_star", pred.t_star),
                         ("k_eff", pred.k_eff), ("resolved", pred.resolved), ("loss_mean", loss_mean),
                         ("loss_seeds", loss_seeds), ("b_mean", f_mean.exponent), ("b_seeds", f_seeds.exponent),
                         ("ci_lo", f_seeds.ci_low), ("ci_hi", f_seeds.ci_high), ("pl_seeds", f_seeds.is_power_law),
                         ("gd_lo", dt * r[w.k_lo - 1] / 4), ("gd_hi", dt * r[w.k_hi - 1] / 4),
                         ("t_hi_full", full[i].window.t_hi), ("k_hi_full", full[i].window.k_hi), ("horizon", horizon)):
            per_theta[key].append(val)
    v = {key: np.array(val) for key, val in per_theta.items()}
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
            "seeds_power_law": (th, v["pl_seeds"], {"long_name": "nqf.scaling.power_law_test verdict on loss_seeds"}),
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
               "window_cutoff": float(cfg["window_cutoff"])},
    )


# -- fit ------------------------------------------------------------------------------------
def _geo_mean(loss) -> np.ndarray:
    """Geometric mean over seeds (axis -2), the curve nqf.scaling fits."""
    with np.errstate(divide="ignore"):
        return np.exp(np.mean(np.log(np.asarray(loss, float)), axis=-2))


PAPER_RIGHT = ("Fig. 5 (right): 'The power-law exponent of the Fourier MLP (solid lines) matches the theory "
               "(dashed lines) for theta in {0, 0.5, 1}'")
PAPER_LEFT = ("Fig. 5 (left): 'the Fourier MLP descends as the predicted power law t^-(2 beta - 1)/(theta + beta) "
              "and is tracked by its NQF approximation'")
PAPER_RAW = "Fig. 5 (left): 'a standard tanh MLP trained on the raw input x, which does not exhibit the power law'"
PAPER_STEEP = ("Sec. 7 / App. C: 'The small systematic steepening of the empirical power law relative to theory is "
               "the finite-initialization effect' (k_eff, Eq. 292)")


def finite_record(run: xr.Dataset, j: int) -> tuple[np.ndarray, np.ndarray]:
    """Times and losses (seeds, times) of theta j up to that theta's horizon (its record)."""
    loss = run["loss"].values[j]
    keep = np.isfinite(loss).all(0)
    return run["time"].values[keep], loss[:, keep]


def fit(structure: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """Fitted exponents with bootstrap intervals beside the predictions, window sensitivity, the
    raw MLP's power-law test, the Fourier MLP's departure from its NQF, and the claims."""
    from nqf.experiments.common import Claim, ErrorBudget, claims_dataset
    from nqf.experiments.powerlaw import SHIFTS
    from nqf.scaling import fit_power_law, power_law_test, window_sensitivity

    tol = cfg["tolerances"]
    factor = float(tol["safety_factor"])
    thetas = theory_ds["theta"].values
    windows = [(float(lo), float(hi)) for lo, hi in zip(theory_ds["t_lo"].values, theory_ds["t_hi"].values)]
    models = ("fourier_mlp", "nqf")
    shape = (len(models), thetas.size)
    out = {name: np.full(shape, np.nan) for name in ("exponent", "ci_low", "ci_high", "residual_rms", "slope_drift",
                                                   "subwindow_spread", "max_window_shift")}
    power_law = np.zeros(shape, bool)
    reasons = np.empty(shape, dtype=object)
    sens = np.full(shape + (len(SHIFTS),), np.nan)
    seeds = run_ds["nqf"].sizes["seed"]
    per_seed = np.full(shape + (seeds,), np.nan)
    for i, name in enumerate(models):
        for j, win in enumerate(windows):
            t, loss = finite_record(run_ds[name], j)
            f = fit_power_law(t, loss, win)
            for key in ("exponent", "ci_low", "ci_high", "residual_rms", "slope_drift", "subwindow_spread"):
                out[key][i, j] = getattr(f, key)
            power_law[i, j], reasons[i, j], per_seed[i, j] = f.is_power_law, f.reason, f.per_seed
            shifted = window_sensitivity(t, loss, win)
            sens[i, j] = [shifted[k] for k in SHIFTS]
            out["max_window_shift"][i, j] = np.nanmax(np.abs(sens[i, j] - f.exponent)) if np.any(np.isfinite(sens[i, j])) else np.nan
    # Raw MLP: the quantitative test over each theta's window that its record covers.
    raw = run_ds["raw_mlp"]
    t_raw = raw["time"].values
    raw_ok = np.full(thetas.size, np.nan)
    raw_exp = np.full(thetas.size, np.nan)
    raw_reason = np.empty(thetas.size, dtype=object)
    for j, (lo, hi) in enumerate(windows):
        if hi > t_raw[-1]:
            raw_reason[j] = f"not covered: the raw MLP's record ends at t = {t_raw[-1]:g}"
            continue
        ok, st = power_law_test(t_raw, raw["loss"].values, (lo, hi))
        raw_ok[j], raw_exp[j], raw_reason[j] = float(ok), st["exponent"], st["reason"]
    # Departure of the Fourier MLP from its NQF (same seeds, same times), up to the window's end,
    # and the learned coefficients at the end of each theta's record.
    mlp, nqf = run_ds["fourier_mlp"], run_ds["nqf"]
    departure = np.full(thetas.size, np.nan)
    coef_ratio = np.full((thetas.size, mlp.sizes["mode"]), np.nan)
    arg_final = np.full((thetas.size, mlp.sizes["mode"]), np.nan)
    for j, (_, hi) in enumerate(windows):
        t, lm = finite_record(mlp, j)
        _, ln = finite_record(nqf, j)
        sel = (t > 0) & (t <= hi)
        departure[j] = np.max(np.abs(np.log(_geo_mean(lm)[sel] / _geo_mean(ln)[sel])))
        last = int(np.nonzero(np.isfinite(mlp["loss"].values[j]).all(0))[0][-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            coef_ratio[j] = np.median(mlp["coef"].values[j, :, last] / mlp["u"].values[j, :, last], axis=0)
        arg_final[j] = np.median(mlp["tanh_argument"].values[j, :, last], axis=0)
    k_lo = theory_ds["k_lo"].values.astype(int)
    k_hi = theory_ds["k_hi"].values.astype(int)
    # NQF GD against the exact Theorem 6 curve of the same seeds (checks the O(lr) claim).
    exact = np.array([fit_power_law(theory_ds["time"].values, theory_ds["loss_seeds"].values[j], w).exponent
                      for j, w in enumerate(windows)])
    dims = ("model", "theta")
    unit = {"units": "1"}
    decades = np.log10(np.array([hi / lo for lo, hi in windows]))
    flow = float(theory_ds.attrs.get("flow_lr", nqf.attrs.get("flow_lr", math.nan)))
    ds = xr.Dataset(
        {
            "exponent": (dims, out["exponent"], {**unit, "long_name": "fitted exponent b of loss ~ t^-b (geometric mean over seeds)"}),
            "exponent_ci_low": (dims, out["ci_low"], {**unit, "long_name": "95% percentile-bootstrap interval over seeds, low"}),
            "exponent_ci_high": (dims, out["ci_high"], {**unit, "long_name": "95% percentile-bootstrap interval over seeds, high"}),
            "exponent_per_seed": (dims + ("seed",), per_seed, {**unit, "long_name": "fitted exponent of each seed"}),
            "is_power_law": (dims, power_law, {"long_name": "nqf.scaling.power_law_test verdict"}),
            "power_law_reason": (dims, reasons, {"long_name": "power_law_test verdict and its reasons"}),
            "residual_rms": (dims, out["residual_rms"], {**unit, "long_name": "residual rms / fitted drop"}),
            "slope_drift": (dims, out["slope_drift"], {**unit, "long_name": "change of the log-log slope across the window / b"}),
            "subwindow_spread": (dims, out["subwindow_spread"], {**unit, "long_name": "spread of 4 sub-window exponents / b"}),
            "shifted_exponent": (dims + ("shift",), sens, {**unit, "long_name": "exponent with one window end shifted by a factor 2"}),
            "max_window_shift": (dims, out["max_window_shift"], {**unit, "long_name": "max |exponent(shifted window) - exponent|"}),
            "exponent_exact_seeds": ("theta", exact, {**unit, "long_name": "fitted exponent of the exact NQF flow curve of the same seeds"}),
            "window_decades": ("theta", decades, {**unit, "long_name": "log10(t_hi / t_lo) of the fitting window"}),
            "raw_is_power_law": ("theta", raw_ok, {**unit, "long_name": "raw MLP power_law_test verdict over this theta's window (1 yes, 0 no, NaN not covered)"}),
            "raw_exponent": ("theta", raw_exp, {**unit, "long_name": "raw MLP log-log slope over this theta's window"}),
            "raw_reason": ("theta", raw_reason, {"long_name": "raw MLP power_law_test reasons"}),
            "mlp_nqf_log_loss_gap": ("theta", departure, {
                **unit, "long_name": "max_t<=t_hi |ln(L_FourierMLP / L_NQF)|, geometric means over seeds"}),
            "coef_over_nqf": (("theta", "mode"), coef_ratio, {
                **unit, "long_name": "Fourier MLP's learned coefficient of psi_k / its NQF value s_k a_k W_k / sqrt P (end, median over seeds)"}),
            "tanh_argument_final": (("theta", "mode"), arg_final, {
                **unit, "long_name": "max_x |s_k a_k psi_k(x)| at the end (median over seeds)"}),
            "exponent_asymptotic": theory_ds["exponent_asymptotic"], "exponent_corrected": theory_ds["exponent_corrected"],
            "exponent_staircase": theory_ds["exponent_staircase"], "t_lo": theory_ds["t_lo"], "t_hi": theory_ds["t_hi"],
            "t_hi_full": theory_ds["t_hi_full"], "horizon": theory_ds["horizon"],
        },
        coords={"model": list(models), "theta": thetas, "shift": list(SHIFTS), "seed": run_ds["nqf"]["seed"].values,
                "mode": theory_ds["mode"].values},
        attrs={"experiment_kind": KIND, "lr": float(nqf.attrs["lr"]), "raw_lr": float(raw.attrs["flow_lr"]),
               "eps": float(nqf.attrs["eps"]), "flow_lr": flow,
               "loss_convention": str(nqf.attrs.get("loss_convention", "mean"))},
    )
    claims = []
    label = {"fourier_mlp": "Fourier MLP", "nqf": "NQF"}
    for j, theta in enumerate(thetas):
        asym, corr = float(theory_ds["exponent_asymptotic"][j]), float(theory_ds["exponent_corrected"][j])
        stair = float(theory_ds["exponent_staircase"][j])
        horizon, t_full = float(theory_ds["horizon"][j]), float(theory_ds["t_hi_full"][j])
        short = horizon < t_full
        win_note = (f"window t in [{windows[j][0]:.4g}, {windows[j][1]:.4g}] (modes {k_lo[j]}-{k_hi[j]}, "
                    f"{decades[j]:.2f} decades)" + (f"; CUT by the run's horizon t = {horizon:.4g}: the theory's "
                                                     f"window ends at t = {t_full:.4g} (mode {int(theory_ds['k_hi_full'][j])})"
                                                     if short else ""))
        sub_decade = ("; a window under one decade measures a local slope of a staircase whose drops are partly "
                      "resolved, where finite-P steepening and the asymptotic law are not separated "
                      f"(staircase {stair:.3f} vs asymptotic {asym:.3f})" if decades[j] < 1 else "")
        claims.append(Claim(
            f"theta = {theta:g}: the run reaches the end of the theory's fitting window", t_full, horizon, math.nan,
            kind="at_least", checks="ours", source="the paper's window (its Fig. 5 fits) must lie inside the run",
            tolerance_source="bound: the window's end from Theorem 8 ignition times and the finite-P cutoff",
            note=(f"run reaches Eq. 26 time t = c lr steps = {horizon:.4g} (c lr = {flow:g})"
                  + (f": MISS under this reading, only modes up to {k_hi[j]} switch on before the run ends, so the "
                     f"exponent rows below fit a truncated window" if short else ""))))
        if short:  # this reading cannot draw the paper's figure: one row per model says so, with its numbers
            for i, name in enumerate(models):
                b = out["exponent"][i, j]
                claims.append(Claim(  # not measurable here: NaN, a miss, whatever a truncated fit gives
                    f"{label[name]}, theta = {theta:g}: exponent vs (2 beta - 1)/(theta + beta)", asym, math.nan,
                    tol["asymptotic_rel_error"], checks="paper", source=PAPER_RIGHT if name == "fourier_mlp" else PAPER_LEFT,
                    tolerance_source="the paper's comparison (tolerances.asymptotic_rel_error)",
                    note=(f"MISS under this reading: the run ends at t = {horizon:.4g}, before the theory's window "
                          f"[{float(theory_ds['t_lo'][j]):.4g}, {t_full:.4g}] (modes {k_lo[j]}-{int(theory_ds['k_hi_full'][j])}); "
                          f"fitted over the truncated window t in [{windows[j][0]:.4g}, {windows[j][1]:.4g}] "
                          f"({decades[j]:.2f} decades, modes {k_lo[j]}-{k_hi[j]}, partly resolved drops) it gives {b:.4f}; "
                          f"power_law_test: {reasons[i, j]}")))
            continue
        claims.append(Claim(
            f"theta = {theta:g}: the fitting window spans at least one decade of t", 1.0, float(decades[j]), math.nan,
            kind="at_least", checks="ours", source="a power law is measured over at least one decade",
            tolerance_source="bound: one decade",
            note=win_note + sub_decade))
        for i, name in enumerate(models):
            b, lo, hi = out["exponent"][i, j], out["ci_low"][i, j], out["ci_high"][i, j]
            half = 0.5 * (hi - lo)
            base = f"{label[name]}, theta = {theta:g}"
            common = (f"fit {b:.4f}, 95% CI [{lo:.4f}, {hi:.4f}] over {seeds} seeds; {win_note}; "
                      f"finite staircase (P, eps) {stair:.4f}, corrected {corr:.4f}, asymptotic {asym:.4f}" + sub_decade)
            src = PAPER_RIGHT if name == "fourier_mlp" else PAPER_LEFT
            claims.append(Claim(f"{base}: exponent vs (2 beta - 1)/(theta + beta)", asym, b, tol["asymptotic_rel_error"],
                                checks="paper", source=src,
                                tolerance_source=(f"the paper's comparison of fitted slopes with the asymptotic law "
                                                  f"(tolerances.asymptotic_rel_error); the theory's own finite-eps and "
                                                  f"finite-P corrections here are {abs(corr - asym) / asym:.1%} and "
                                                  f"{abs(stair - corr) / asym:.1%}"),
                                note=common))
            claims.append(Claim(f"{base}: exponent vs finite-eps corrected (App. C Eq. 292)", corr, b,
                                tol["corrected_rel_error"], checks="paper", source=PAPER_STEEP,
                                tolerance_source=(f"the paper's explanation of the steepening (tolerances.corrected_rel_error); "
                                                  f"the finite-P steepening left out of Eq. 292 is {abs(stair - corr) / corr:.1%} here"),
                                note=common))
            if name == "nqf":
                gd = max(float(theory_ds["gd_delay_lo"][j]) - float(theory_ds["gd_delay_hi"][j]), 0.0)
                budget = ErrorBudget({
                    "seed CI half-width / b": half / b,
                    "GD O(lr): (lr r_klo - lr r_khi) / (4 ln(t_hi/t_lo))": gd / math.log(windows[j][1] / windows[j][0]),
                    "staircase vs exact mean-init curve": abs(float(theory_ds["exponent_mean_init"][j]) - stair) / stair},
                    factor)
                claims.append(budget.claim(f"{base}: exponent vs the finite staircase (Theorems 6, 8, 9 at finite P, eps)",
                                           stair, b, checks="theorem",
                                           source="Theorem 9 with Theorem 8 ignition times, finite P and eps",
                                           note=common))
            shifted = ", ".join(f"{k}: {v:.3f}" for k, v in zip(SHIFTS, sens[i, j]) if np.isfinite(v))
            shift = out["max_window_shift"][i, j]
            claims.append(Claim(f"{base}: max exponent change with a window end shifted by 2x (<= CI half-width)", half,
                                shift, math.nan, kind="at_most", checks="ours",
                                source="the fitted exponent does not depend on the window's ends",
                                tolerance_source="bound: the seed CI half-width",
                                note=f"shifted windows {shifted} (ends outside the record or < 2x wide are skipped); "
                                     + ("stable" if shift <= half else "NOT stable: the curve's local slope still "
                                        "changes there (partly resolved drops below, finite-P steepening above)")))
            claims.append(Claim(f"{base}: power_law_test verdict (1 = power law)", 1.0, float(power_law[i, j]), 0.0,
                                relative=False, checks="paper" if name == "fourier_mlp" else "ours",
                                source=PAPER_LEFT if name == "fourier_mlp" else "the NQF's loss is a power law over the window",
                                tolerance_source="a verdict of nqf.scaling.power_law_test (slope drift <= 0.3 b, "
                                                 "sub-window spread <= 0.5 b, residual rms <= 5 % of the drop)",
                                note=str(reasons[i, j]) + f"; residual rms {out['residual_rms'][i, j]:.3f}, "
                                f"drift {out['slope_drift'][i, j]:.2f}, sub-window spread {out['subwindow_spread'][i, j]:.2f}"))
        gd_lo, gd_hi = float(theory_ds["gd_delay_lo"][j]), float(theory_ds["gd_delay_hi"][j])
        half_nqf = 0.5 * (out["ci_high"][1, j] - out["ci_low"][1, j])
        budget = ErrorBudget({"GD O(lr): (lr r_klo - lr r_khi) / (4 ln(t_hi/t_lo))":
                              max(gd_lo - gd_hi, 0.0) / math.log(windows[j][1] / windows[j][0])}, factor)
        claims.append(budget.claim(f"NQF, theta = {theta:g}: GD exponent vs the exact flow curve of the same seeds",
                                   exact[j], out["exponent"][1, j], checks="theorem",
                                   source="Theorem 6 (orthogonal features): GD samples the flow at t = c lr step",
                                   note=f"Theorem 6 per seed; GD delays mode k's ignition by lr r_k / 4 = {gd_lo:.2%} "
                                        f"(first window mode) to {gd_hi:.2%} (last); same seed draws, so no seed term"))
        half_mlp = 0.5 * (out["ci_high"][0, j] - out["ci_low"][0, j])
        budget = ErrorBudget({"Fourier MLP CI half-width / b": half_mlp / out["exponent"][1, j],
                              "NQF CI half-width / b": half_nqf / out["exponent"][1, j]}, factor)
        claims.append(budget.claim(f"theta = {theta:g}: Fourier MLP exponent vs its NQF's", out["exponent"][1, j],
                                   out["exponent"][0, j], checks="paper", source=PAPER_LEFT,
                                   note=f"max |ln(L_MLP / L_NQF)| up to t_hi = {departure[j]:.3f}; at the end the tanh "
                                        f"argument of mode 1 is {arg_final[j, 0]:.2f} and the learned coefficient of psi_k over "
                                        f"its NQF value is {np.round(coef_ratio[j, :4], 3).tolist()} for k = 1..4 "
                                        f"(tanh is not linear there: the MLP departs from its NQF from mode 1 on)"))
        if np.isfinite(raw_ok[j]):
            claims.append(Claim(f"raw-input MLP, theta = {theta:g} window: power_law_test verdict (0 = not a power law)",
                                0.0, raw_ok[j], 0.0, relative=False, checks="paper", source=PAPER_RAW,
                                tolerance_source="a verdict of nqf.scaling.power_law_test",
                                note=f"{raw_reason[j]}; slope {raw_exp[j]:.3g}; raw MLP lr {ds.attrs['raw_lr']:g}"))
    uncovered = [f"{th:g}" for th, ok in zip(thetas, raw_ok) if not np.isfinite(ok)]
    claims.append(Claim("structure: max |r_k (grid) - 4 b_k s_k / sqrt P| / max r", 0.0, float(structure["r_residual"]),
                        1e-12, relative=False, checks="theorem",
                        source="App. C Eq. 297: the Fourier MLP's NQF has orthogonal features (Theorem 6 applies)",
                        tolerance_source="float64 rounding of sums over M grid points (M eps_machine << 1e-12)",
                        note="and C_kj off-diagonal / max C_kk = "
                             f"{float(structure['off_diagonal_residual']):.1e} (orthogonal features)"
                             + (f"; raw MLP windows not covered by its record (t <= {t_raw[-1]:g}) for theta = "
                                f"{', '.join(uncovered)}: raise raw_steps" if uncovered else "")))
    return xr.merge([ds, claims_dataset(claims)])
