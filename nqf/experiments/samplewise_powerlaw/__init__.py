"""Experiment kind ``samplewise_powerlaw``: the sample-wise scaling law (Theorems 10-11, Eq. 47-49)
with a measured exponent and its confidence interval beside the predictions.

Data: m mutually orthogonal diagonal data matrices; sample mu owns its own block of K diagonal
indices [mu K, mu K + K) with entries lambda_mu * ``entries`` (K = 2 with (1, 1.5) by default, so
Eq. 36 is genuinely multi-entry). Targets y_mu = mu^-gamma1 and lambda_mu = m zeta_mu /
(8 y_mu max(entries)), so that zeta_mu = (8/m) max_k lambda_mu,k y_mu = zeta1 mu^-gamma2 exactly.
In the eps -> 0 limit L = (1/m) sum y_mu^2 1(tau < 1/zeta_mu), i.e. V_mu = y_mu^2 / m,
alpha1 = 2 gamma1, alpha2 = gamma2, and L(t) ~ t^-(2 gamma1 - 1)/gamma2 (Theorem 11).

Initial profile: every mode of sample mu starts at eps mu^-beta0; beta0 = 2 gamma1 - gamma2 makes
ln(zeta_mu / (C_k z_0)) the same for every sample (the sample-wise analogue of beta0 >= alpha1 -
alpha2 in Theorem 9). Seeds are Gaussian as in ``featurewise_powerlaw``. Theory: Eq. 36 (one
implicit integral per sample, ``nqf.theory.closed_forms.theorem5``) with the exact half-saturation times.

Loss convention (``loss``, nqf.theory.losses): GD minimises c L_Eq.26 with c = 1, 1/2, m, m/2 (mean,
half_mean, sum, half_sum), i.e. steps h = c lr of the Eq. 26 flow; the run's time and the
theory's clock are both t = h step. The paper has no figure for Theorem 11, so every exponent row
checks a theorem: the asymptotic (2 gamma1 - 1)/gamma2 (Theorem 11), the finite-eps corrected
exponent and the exact Eq. 36 curve, each within the error budget of ``featurewise_powerlaw``
(GD's O(lr) term with the samples' rates zeta_mu, the seeds' CI, the exact curve's staircase
ripple, and the finite-eps and finite-size terms against the asymptotic) times
``tolerances.safety_factor``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from nqf.experiments.claims import claims_dataset
from nqf.experiments.contract import PaperFigure
from nqf.experiments.machine import seed_draw
from nqf.experiments.powerlaw import (
    SHIFTS,
    exponent_claims,
    exponent_variables,
    fit_seeds,
    seeded_init,
    train_loss_only,
    window_reach_problems,
)
from nqf.experiments.verify_runs import check_runs
from nqf.theory.closed_forms import theorem5, theorem5_ignition_times
from nqf.theory.losses import flow_lr
from nqf.theory.scaling import predict_exponent
from nqf.training.loop import log_step_grid

if TYPE_CHECKING:
    from nqf.theory.forms import DiagonalForm

KIND = "samplewise_powerlaw"
# facts the generic checks and reports read (nqf.experiments.contract.OPTIONAL)
PAPER_FIGURE = PaperFigure("Theorem 11", "sample-wise power law (no figure in the paper)", order=9)
FINITE_THEORY = ("excess_loss", "r", "V")
STAGE_KEYS = {
    "data": ("m", "gamma1", "gamma2", "zeta1", "entries"),
    "structure": (),
    "train": ("eps", "beta0", "loss", "lr", "steps", "n_record", "seeds", "width", "init_seed", "dtype"),
    "theory": ("eps", "beta0", "loss", "lr", "steps", "n_record", "n_boot"),
    "fit": ("n_boot", "tolerances"),
    "figure": ("description", "eps", "gamma1", "gamma2"),
}
THEOREM = "Theorem 11 (sample-wise power law)"
ASYMPTOTIC_SOURCE = "Theorem 11 (sample-wise power law): L(tau) = Theta(tau^-(2 gamma1 - 1)/gamma2), Eq. 49"


def runs(cfg: dict) -> list[str]:
    """One run: all seeds as replicas of one tensor program."""
    return ["seeds"]


def check(cfg: dict) -> list[tuple[str, str]]:
    """Cross-key problems found before any job starts: an lr at which GD cannot settle at the end
    point its flow reaches from the mean initial profile (the Hessian's largest eigenvalue there
    is about zeta_1 = zeta1; nqf.theory.stability.sample_block_curvature), and steps that end the run
    before twice the end of the theory's fitting window (nqf.experiments.powerlaw.window_reach_problems)."""
    from nqf.experiments.divergence import lr_at_or_above
    from nqf.theory.stability import sample_block_curvature

    m = int(cfg["m"])
    d = design(m, cfg["gamma1"], cfg["gamma2"], cfg["zeta1"], cfg["entries"])
    z0 = init_profile(m, d["lam"].shape[1], float(cfg["eps"]), float(cfg["beta0"])).reshape(d["lam"].shape)
    curvature = sample_block_curvature(d["lam"], d["y"], z0)
    problems = lr_at_or_above(cfg["lr"], cfg["loss"], m, 2.0 / float(curvature.max()))
    if problems:
        return problems
    # the window the theory assigns without a horizon (exact Eq. 36 times): the run must reach twice its end
    t_half = theorem5_ignition_times(dense_diagonals(d["lam"]), d["y"], z0.ravel())
    pred = predict_exponent(d["zeta"], d["V"], t_star=t_half)
    return window_reach_problems(pred, flow_lr(cfg["lr"], cfg["loss"], m), int(cfg["steps"]))


def estimate(cfg: dict) -> dict:
    """The run (nqf.experiments.machine): the data's m x mK diagonals and W of seeds x mK x width."""
    m, K, d, S = int(cfg["m"]), len(cfg["entries"]), int(cfg["width"]), len(cfg["seeds"])
    draw, drawn = seed_draw(cfg, m * K * d)
    own = 8 * (2 * m * m * K + 4 * S * m * K * d)
    return {"bytes": own + draw, "key": "seeds" if draw > own else "m",
            "what": f"the {m}x{m * K} diagonals of {m} samples x {K} entries, {drawn}", "steps": int(cfg["steps"])}


def design(m: int, gamma1: float, gamma2: float, zeta1: float, entries) -> dict[str, np.ndarray]:
    """Targets y_mu = mu^-gamma1, rates zeta_mu = zeta1 mu^-gamma2, the per-sample scale lambda_mu
    and the block entries lam[mu, j] = lambda_mu * entries[j]; V_mu = y_mu^2 / m."""
    mu = np.arange(1, m + 1, dtype=float)
    entries = np.asarray(entries, float)
    y = mu ** -gamma1
    zeta = zeta1 * mu ** -gamma2
    scale = m * zeta / (8.0 * y * entries.max())
    return {"mu": mu, "y": y, "zeta": zeta, "scale": scale, "lam": scale[:, None] * entries[None, :],
            "V": y ** 2 / m}


def dense_diagonals(lam_blocks: np.ndarray) -> np.ndarray:
    """(m, m K) diagonals of the A_mu: sample mu's K entries on indices [mu K, mu K + K)."""
    m, K = lam_blocks.shape
    out = np.zeros((m, m * K))
    out[np.repeat(np.arange(m), K), np.arange(m * K)] = lam_blocks.ravel()
    return out


def init_profile(m: int, K: int, eps: float, beta0: float) -> np.ndarray:
    """z_(mu, j)(0) = eps mu^-beta0 for each of sample mu's K modes (mode order mu K + j)."""
    return np.repeat(eps * np.arange(1, m + 1, dtype=float) ** -beta0, K)


def make_data(cfg: dict) -> xr.Dataset:
    """Block-diagonal data stored compactly as the (sample, entry) block values."""
    d = design(int(cfg["m"]), cfg["gamma1"], cfg["gamma2"], cfg["zeta1"], cfg["entries"])
    m, K = d["lam"].shape
    return xr.Dataset(
        {
            "lam": (("sample", "entry"), d["lam"], {"units": "1", "long_name": "non-zero diagonal entries of A(x_mu) on indices [mu K, mu K + K)"}),
            "y": ("sample", d["y"], {"units": "1", "long_name": "target y_mu = mu^-gamma1"}),
        },
        coords={"sample": np.arange(m), "entry": np.arange(K)},
        attrs={"structure_form": "block_diagonal", "experiment_kind": KIND, "gamma1": cfg["gamma1"],
               "gamma2": cfg["gamma2"], "zeta1": cfg["zeta1"],
               "design": "y_mu = mu^-gamma1, lambda_mu = m zeta1 mu^-gamma2 / (8 y_mu max(entries))"},
    )


def form_of(data: xr.Dataset) -> DiagonalForm:
    """The DiagonalForm of the block-diagonal data (m samples, p = m K parameters)."""
    # torch is imported where needed: the theory, fit and figure jobs run without it
    import torch

    from nqf.theory.forms import DiagonalForm

    return DiagonalForm(torch.as_tensor(dense_diagonals(data["lam"].values)))


def block_interaction(lam_blocks: np.ndarray, m: int) -> np.ndarray:
    """C = (8/m) Lambda^T Lambda for block-diagonal data: block mu is (8/m) lam_mu lam_mu^T (modes of
    one sample compete; modes of different samples do not interact)."""
    n, K = lam_blocks.shape
    C = np.zeros((n * K, n * K))
    blocks = 8.0 / m * lam_blocks[:, :, None] * lam_blocks[:, None, :]
    idx = np.arange(n)[:, None] * K + np.arange(K)[None, :]
    C[idx[:, :, None], idx[:, None, :]] = blocks
    return C


def structure(data: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Per-mode r and block-diagonal C, per-sample zeta and V, from the compact blocks."""
    lam, y = data["lam"].values, data["y"].values
    m, K = lam.shape
    r = (8.0 / m * lam * y[:, None]).ravel()
    c = (8.0 / m * lam ** 2).ravel()
    one = {"units": "1"}
    return xr.Dataset(
        {
            "r": ("mode", r, {**one, "long_name": "Lotka-Volterra growth rate r_k = (8/m) lambda_mu,k y_mu"}),
            "C": (("mode", "mode_j"), block_interaction(lam, m), {
                **one, "long_name": "Lotka-Volterra interaction C_kj = (8/m) lambda_mu,k lambda_mu,j within sample mu's block, 0 across samples"}),
            "C_diag": ("mode", c, {**one, "long_name": "C_kk = (8/m) lambda_mu,k^2"}),
            "lam": (("sample", "entry"), lam, {**one, "long_name": "block entries lambda_mu,j"}),
            "y": ("sample", y, {**one, "long_name": "target y_mu"}),
            "zeta": ("sample", 8.0 / m * np.max(lam * y[:, None], axis=1), {
                **one, "long_name": "zeta_mu = (8/m) max_k lambda_mu,k y_mu"}),
            "V": ("sample", y ** 2 / m, {**one, "long_name": "loss share V_mu = y_mu^2 / m"}),
            "min_loss": ((), 0.0, {**one, "long_name": "smallest loss (every y_mu > 0 is reachable)"}),
            "commutator_residual": ((), 0.0, {**one, "long_name": "Assumption 1 residual (0: diagonal data commute)"}),
        },
        coords={"mode": np.arange(m * K), "mode_j": np.arange(m * K), "sample": np.arange(m),
                "entry": np.arange(K)},
        attrs={"experiment_kind": KIND},
    )


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """GD of all seeds from Gaussian W0 with E|W_k|^2 = eps mu^-beta0."""
    if run != "seeds":
        raise ValueError(f"Run {run!r} is not a run of a {KIND} experiment (runs: seeds).")
    form = form_of(data)
    m, K = data["lam"].shape
    z0 = init_profile(m, K, cfg["eps"], cfg["beta0"])
    W0 = seeded_init(z0, cfg["seeds"], cfg["width"], cfg["init_seed"])
    ds, dev = train_loss_only(form, W0, data["y"].values, lr=cfg["lr"], steps=cfg["steps"],
                              n_record=cfg["n_record"], device=device, dtype=cfg["dtype"],
                              replica_dim="seed", replica_coords=np.asarray(cfg["seeds"], dtype=np.int64),
                              loss=cfg.get("loss", "mean"))
    ds["loss"].attrs["long_name"] = "training loss (Eq. 26) (1/m) sum_mu (f_mu - y_mu)^2 (minimum 0)"
    ds.attrs.update(run=run, experiment_kind=KIND, model="quadratic", beta0=cfg["beta0"], device=dev,
                    init=f"W0 rows N(0, z0/d I_d), z0 = eps mu^-beta0, d = {cfg['width']}, seed {cfg['init_seed']}")
    return ds


def theory(structure_ds: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Eq. 36 loss curve, exact per-sample ignition times and the predicted exponents."""
    lam_b, y = structure_ds["lam"].values, structure_ds["y"].values
    zeta, V = structure_ds["zeta"].values, structure_ds["V"].values
    m, K = lam_b.shape
    lam = dense_diagonals(lam_b)
    steps = log_step_grid(cfg["steps"], cfg["n_record"])
    h = flow_lr(cfg["lr"], cfg["loss"], m)
    t = h * steps.astype(float)
    z0 = init_profile(m, K, cfg["eps"], cfg["beta0"])
    z = theorem5(lam, y, z0, t)
    loss = np.mean((z @ lam.T - y) ** 2, axis=1)
    t_half = theorem5_ignition_times(lam, y, z0)
    pred = predict_exponent(zeta, V, t_star=t_half, t_max=float(t[-1]))
    eps_mu = z0[::K]
    one = {"units": "1"}
    return xr.Dataset(
        {
            "excess_loss": ("time", loss, {**one, "long_name": "Eq. 36 (Theorem 5) training loss = excess loss"}),
            "t_star": ("sample", t_half, {**one, "long_name": "time f_mu reaches y_mu / 2 (Eq. 36, exact)"}),
            "t_star_asymptotic": ("sample", np.log(1.0 / eps_mu) / zeta, {
                **one, "long_name": "ln(1/z_mu(0)) / zeta_mu (Eq. 47 with the sample's own init scale)"}),
            "zeta": ("sample", zeta, {**one, "long_name": "zeta_mu"}),
            "V": ("sample", V, {**one, "long_name": "V_mu = y_mu^2 / m"}),
            "r": ("sample", zeta, {**one, "long_name": "growth rate of the sample's leading mode (= zeta_mu)"}),
            "k_eff": ("sample", pred.k_eff, {**one, "long_name": "local exponent (alpha1 - 1) / (d ln t*_mu / d ln mu)"}),
            "resolved": ("sample", pred.resolved, {"long_name": "drop of sample mu separated from the next"}),
            **exponent_variables(pred, t, loss, cfg["n_boot"]),
        },
        coords={"time": ("time", t, {**one, "long_name": "Eq. 26 gradient-flow time t = c lr step"}),
                "step": ("time", steps, {"long_name": "equivalent GD step t / (c lr), c the loss convention's factor"}),
                "sample": np.arange(1, m + 1),
                "shift": ("shift", np.array(SHIFTS, dtype=object), {"long_name": "window end shifted by a factor 2"})},
        attrs={"experiment_kind": KIND, "eps": cfg["eps"], "beta0": cfg["beta0"], "flow_lr": h,
               "loss_convention": cfg["loss"],
               "solution": "Theorem 5 (Eq. 36), exact half-saturation times, nqf.theory.scaling.predict_exponent",
               "window_note": pred.window.note or "none"},
    )


def fit(structure_ds: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """The GD exponent over seeds with its bootstrap CI beside the predictions."""
    check_runs(run_ds, {"seeds": {"experiment_kind": KIND, "eps": theory_ds.attrs.get("eps"),
                                  "beta0": theory_ds.attrs.get("beta0")}})
    sf = fit_seeds(run_ds["seeds"], theory_ds, float(structure_ds["min_loss"]), cfg["n_boot"])
    claims = exponent_claims(theory_ds, sf.fit, sf.shifted, sf.shifted_half, h=sf.h, rates=theory_ds["zeta"].values,
                             factor=float(cfg["tolerances"]["safety_factor"]), what="GD loss",
                             asymptotic_checks="theorem", asymptotic_source=ASYMPTOTIC_SOURCE, theorem=THEOREM,
                             asymptotic_name="(2 gamma1 - 1)/gamma2", t_end=float(sf.run["time"].values[-1]))
    # The ignition law behind the exponent: slope of ln t*_mu (exact Eq. 36 times) against ln mu
    # over the window (gamma2 as eps -> 0); recorded, not claimed (the corrected exponent uses it).
    k = np.arange(int(theory_ds["window_k_lo"]), int(theory_ds["window_k_hi"]) + 1)
    slope = float(np.polyfit(np.log(k), np.log(theory_ds["t_star"].values[k - 1]), 1)[0])
    exponent, test = sf.variables(theory_ds, "GD loss")
    ds = xr.Dataset(
        {
            **exponent, **sf.flow_variable(), **test,
            "t_star_slope": ((), slope, {"units": "1", "long_name": "slope of ln t*_mu (Eq. 36) against ln mu over the window"}),
            **{key: theory_ds[key] for key in ("exponent_asymptotic", "exponent_corrected", "exponent_staircase",
                                               "theory_exponent", "window_t_lo", "window_t_hi", "alpha2_fit")},
        },
        coords=sf.coords(theory_ds), attrs=sf.attrs(KIND),
    )
    return xr.merge([ds, claims_dataset(claims)])
