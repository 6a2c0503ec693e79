"""Experiment kind ``featurewise``: the feature-wise staircase of paper Figure 3 (left, middle).

m diagonal data matrices A_mu = Diag(lambda_mu) whose diagonals are the scaled columns of a
random orthogonal matrix Q, so that the Lotka-Volterra interaction matrix is C = C_diag * I
(orthogonal features, Theorem 6) and the growth rates are the configured r. Gradient descent
from W(0) = sqrt(eps) I keeps W diagonal, so z_k = M_kk are the eigenvalues of W W^T.
"""
from __future__ import annotations

import numpy as np
import torch
import xarray as xr

from nqf.experiments.common import Claim, claims_dataset, lv_from_structure
from nqf.forms import DiagonalForm
from nqf.ignition import ignition_times, predicted_ignition_times
from nqf.lotka_volterra import glv, logistic_solution
from nqf.quadratic import QuadraticModel
from nqf.training import log_step_grid, train

KIND = "featurewise"
# Which config keys each stage reads: they become the rule's params, so a change reruns
# exactly the stages that depend on it.
STAGE_KEYS = {
    "data": ("r", "C_diag", "data_seed"),
    "train": ("eps", "lr", "steps", "n_record", "dtype"),
    "theory": ("eps", "lr", "steps", "n_record"),
    "fit": ("eps", "tolerances"),
    "figure": ("description", "eps"),
}


def runs(cfg: dict) -> list[str]:
    """One full-batch gradient-descent run (the initialisation is deterministic)."""
    return ["gd"]


def random_orthogonal(n: int, rng: np.random.Generator) -> np.ndarray:
    """Haar-random orthogonal matrix (QR of a Gaussian matrix with the sign fix)."""
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def make_data(cfg: dict) -> xr.Dataset:
    """Diagonal data matrices and targets with C = C_diag I and growth rates r."""
    r = np.asarray(cfg["r"], float)
    m = r.size
    c = float(cfg["C_diag"])
    Q = random_orthogonal(m, np.random.default_rng(cfg["data_seed"]))
    # lambda_{mu,k} = sqrt(m c / 8) Q_{k,mu}  =>  C = (8/m) Lambda^T Lambda = c I.
    lam = (np.sqrt(m * c / 8.0) * Q).T
    # r = (8/m) Lambda^T y  =>  y = Q^T b with b_k = r_k sqrt(m / (8 c)).
    y = Q.T @ (r * np.sqrt(m / (8.0 * c)))
    return xr.Dataset(
        {
            "A_diag": (("sample", "param"), lam, {"units": "1", "long_name": "diagonal of the structure matrix A(x_mu)"}),
            "y": ("sample", y, {"units": "1", "long_name": "target y_mu"}),
            "Q": (("param", "sample"), Q, {"units": "1", "long_name": "random orthogonal matrix whose columns build A_mu"}),
            "r_target": ("param", r, {"units": "1", "long_name": "configured growth rates r_k"}),
        },
        coords={"sample": np.arange(m), "param": np.arange(m)},
        attrs={"structure_form": "diagonal", "experiment_kind": KIND},
    )


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """Full-batch GD on the quadratic model from W(0) = sqrt(eps) I."""
    form = DiagonalForm(torch.as_tensor(data["A_diag"].values))
    p = form.p
    dtype = torch.float64 if cfg["dtype"] == "float64" else torch.float32
    W0 = np.sqrt(cfg["eps"]) * np.eye(p)
    model = QuadraticModel(form, W0, device=device, dtype=dtype)
    ds = train(model, data["y"].values, lr=cfg["lr"], steps=cfg["steps"], optimizer="gd",
               n_record=cfg["n_record"])
    ds["z"] = (("seed", "step", "mode"), np.einsum("sikk->sik", ds["M"].values), {
        "units": "1", "long_name": "mode amplitude z_k = M_kk (eigenvalue of W W^T; W stays diagonal)"})
    ds = ds.assign_coords(mode=np.arange(p))
    ds.attrs.update(run=run, experiment_kind=KIND, model="quadratic", eps=cfg["eps"],
                    init="W(0) = sqrt(eps) I", device=str(model.W.device))
    return ds


def theory(structure: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Theorem 6 closed form, numerical GLV, Theorem 8 ignition times and plateau losses."""
    lv = lv_from_structure(structure)
    steps = log_step_grid(cfg["steps"], cfg["n_record"])
    t = cfg["lr"] * steps.astype(float)
    z0 = np.full(lv.modes, cfg["eps"])
    z_glv = glv(lv.r, lv.C, z0, t)
    c_diag = np.diag(lv.C)
    z_closed = logistic_solution(lv.r, c_diag, z0, t)
    t_star = predicted_ignition_times(lv.r, c_diag, cfg["eps"])
    loss_min = float(structure["min_loss"])
    # Plateaus: after the first j modes (in ignition order) saturate at r_k / C_kk.
    order = np.argsort(t_star)
    z_plateau = np.zeros((lv.modes + 1, lv.modes))
    for j in range(1, lv.modes + 1):
        z_plateau[j] = z_plateau[j - 1]
        k = order[j - 1]
        z_plateau[j, k] = max(lv.r[k], 0.0) / c_diag[k]
    with np.errstate(divide="ignore", invalid="ignore"):
        glv_err = np.max(np.abs(z_glv - z_closed) / z_closed, axis=0)
    ds = xr.Dataset(
        {
            "z": (("time", "mode"), z_glv, {"units": "1", "long_name": "z_k(t), numerical GLV integration"}),
            "z_closed_form": (("time", "mode"), z_closed, {"units": "1", "long_name": "z_k(t), Theorem 6 closed form"}),
            "loss": ("time", lv.loss(z_glv), {"units": "1", "long_name": "predicted training loss"}),
            "excess_loss": ("time", lv.loss(z_glv) - loss_min, {"units": "1", "long_name": "predicted loss minus its minimum"}),
            "t_star": ("mode", t_star, {"units": "1", "long_name": "Theorem 8 ignition time (half saturation), gradient-flow time"}),
            "ignition_order": ("rank", order, {"long_name": "modes sorted by predicted ignition time"}),
            "plateau_loss": ("plateau", lv.loss(z_plateau), {"units": "1", "long_name": "loss after the first j modes have saturated"}),
            "glv_max_rel_error": ("mode", glv_err, {"units": "1", "long_name": "max_t |z_GLV - z_Thm6| / z_Thm6"}),
        },
        coords={"time": ("time", t, {"units": "1", "long_name": "gradient-flow time"}),
                "step": ("time", steps, {"long_name": "equivalent GD step t / lr"}),
                "mode": np.arange(lv.modes), "rank": np.arange(lv.modes),
                "plateau": np.arange(lv.modes + 1)},
        attrs={"experiment_kind": KIND, "eps": cfg["eps"], "solution": "Theorem 6 (C diagonal)"},
    )
    return ds


def fit(structure: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset],
        cfg: dict) -> xr.Dataset:
    """Measured ignition times and trajectory errors beside the predictions, with claims."""
    tol = cfg["tolerances"]
    gd = run_ds["gd"].isel(seed=0)
    t = gd["time"].values
    z = gd["z"].values
    t_meas = ignition_times(t, z)
    t_pred = theory_ds["t_star"].values
    # Theorem 6 evaluated at the run's own recorded times (cheap and exact), so the comparison
    # never depends on the theory file sharing the run's time grid.
    lv = lv_from_structure(structure)
    z_thm = logistic_solution(lv.r, np.diag(lv.C), np.full(lv.modes, cfg["eps"]), t)
    z_err = np.max(np.abs(z - z_thm) / z_thm, axis=0)
    t_err = np.abs(t_meas - t_pred) / t_pred
    ds = xr.Dataset(
        {
            "t_star_measured": ("mode", t_meas, {"units": "1", "long_name": "ignition time measured from GD (half of final z_k)"}),
            "t_star_predicted": ("mode", t_pred, {"units": "1", "long_name": "Theorem 8 ignition time"}),
            "t_star_rel_error": ("mode", t_err, {"units": "1", "long_name": "|measured - predicted| / predicted"}),
            "z_max_rel_error": ("mode", z_err, {"units": "1", "long_name": "max_t |z_GD - z_Thm6| / z_Thm6"}),
            "r": structure["r"], "C_diag": ("mode", np.diag(structure["C"].values)),
        },
        coords={"mode": theory_ds["mode"].values},
        attrs={"experiment_kind": KIND, "lr": float(run_ds["gd"].attrs["lr"])},
    )
    claims = [Claim(f"ignition time t*_{k + 1} (r = {structure['r'].values[k]:.4g})",
                    float(t_pred[k]), float(t_meas[k]), tol["t_star_rel_error"],
                    note="Theorem 8, rho = 1/2; GD time = lr * step")
              for k in range(t_pred.size)]
    claims.append(Claim("max_t,k |z_GD - z_Thm6| / z_Thm6", 0.0, float(np.max(z_err)),
                        tol["z_rel_error"], relative=False,
                        note=f"O(lr) discretisation error at lr = {ds.attrs['lr']:g}"))
    claims.append(Claim("max_t,k |z_GLV - z_Thm6| / z_Thm6", 0.0,
                        float(np.nanmax(theory_ds["glv_max_rel_error"].values)),
                        tol["glv_rel_error"], relative=False, note="log-z Radau integrator, rtol 1e-10"))
    claims.append(Claim("shared-eigenbasis commutator residual (Assumption 1)", 0.0,
                        float(structure["commutator_residual"]), 1e-10, relative=False,
                        note="diagonal data matrices commute exactly"))
    return xr.merge([ds, claims_dataset(claims)])


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Figure 3 (left, middle): z_k(t) of GD on Theorem 6, and the excess loss with plateaus."""
    from nqf import plotting

    gd = run_ds["gd"].isel(seed=0)
    t, z = gd["time"].values, gd["z"].values
    tt = theory_ds["time"].values
    t_star = theory_ds["t_star"].values
    colors = plotting.mode_colors(z.shape[1])
    loss_min = float(theory_ds["loss"].values[-1] - theory_ds["excess_loss"].values[-1])
    with plotting.style(font_size, dpi):
        fig, (ax_z, ax_l) = plotting.plt.subplots(1, 2, figsize=(7.2, 2.9), constrained_layout=True)
        keep = t > 0
        # Thin the markers to about 60 per mode, evenly in t, so the theory line stays visible.
        idx = np.unique(np.searchsorted(t, np.linspace(t[keep][0], t[-1], 60)))
        for k, col in enumerate(colors):
            ax_z.plot(tt[1:], theory_ds["z_closed_form"].values[1:, k], color=col, linewidth=1.1)
            ax_z.plot(t[idx], z[idx, k], color=col, **plotting.MARKERS,
                      label=f"$r_{k + 1}$ = {fit_ds['r'].values[k]:.4g}")
            for ax in (ax_z, ax_l):
                ax.axvline(t_star[k], color=col, **plotting.IGNITION)
        ax_z.set_yscale("log")
        ax_z.set_xlabel(r"gradient-flow time $t = \eta \cdot$step")
        ax_z.set_ylabel(r"eigenvalue $z_k$ of $WW^\top$")
        ax_z.set_title(r"modes: GD (markers), Theorem 6 (lines)")
        ax_z.legend(loc="lower right", ncol=1, handlelength=1.0)
        ax_l.plot(t[keep], gd["loss"].values[keep] - loss_min, color="k", label="GD", **plotting.EXPERIMENT)
        ax_l.plot(tt[1:], theory_ds["excess_loss"].values[1:], color="tab:red", label="GLV theory",
                  **plotting.THEORY)
        for level in theory_ds["plateau_loss"].values[:-1] - loss_min:
            ax_l.axhline(level, color="0.6", linewidth=0.6, linestyle=(0, (1, 3)))
        ax_l.set_yscale("log")
        ax_l.set_xlabel(r"gradient-flow time $t = \eta \cdot$step")
        ax_l.set_ylabel(r"excess loss $L - L_{\min}$")
        ax_l.set_title(r"loss plateaus; dashed: $t^*_k$ (Thm 8)")
        ax_l.legend(loc="upper right")
        fig.suptitle(f"{cfg['description']} ($\\epsilon$ = {cfg['eps']:g}, "
                     f"lr = {fit_ds.attrs['lr']:g})", fontsize=font_size + 1)
        plotting.save(fig, paths)
