"""Experiment kind ``samplewise``: sample-wise saddle-to-saddle dynamics (paper Figure 4).

m mutually orthogonal diagonal data matrices (A_mu A_nu = 0 for mu != nu, Theorem 5): sample mu
owns a block of K diagonal entries ``entries``. From W(0) = sqrt(eps) I each sample is learned
on its own clock; its loss drops near t*_mu = ln(1/eps) / zeta_mu with
zeta_mu = (8/m) max_k lambda_mu,k y_mu (Eq. 47). The theory curve is Eq. 36 (one implicit
integral per sample), cross-checked against numerical integration of the GLV.
"""
from __future__ import annotations

import numpy as np
import torch
import xarray as xr

from nqf.closed_forms import theorem5, theorem5_ignition_times
from nqf.experiments.common import Claim, claims_dataset, lv_from_structure
from nqf.forms import DiagonalForm
from nqf.ignition import ignition_times
from nqf.lotka_volterra import glv
from nqf.quadratic import QuadraticModel
from nqf.training import log_step_grid, train

KIND = "samplewise"
STAGE_KEYS = {
    "data": ("y", "entries"),
    "train": ("eps", "lr", "steps", "n_record", "dtype"),
    "theory": ("eps", "lr", "steps", "n_record"),
    "fit": ("eps", "tolerances"),
    "figure": ("description", "eps"),
}


def runs(cfg: dict) -> list[str]:
    return ["gd"]


def make_data(cfg: dict) -> xr.Dataset:
    """Block-diagonal A_mu: sample mu's entries on indices [mu K, mu K + K)."""
    y = np.asarray(cfg["y"], float)
    entries = np.asarray(cfg["entries"], float)
    m, K = y.size, entries.size
    lam = np.zeros((m, m * K))
    for mu in range(m):
        lam[mu, mu * K:(mu + 1) * K] = entries
    return xr.Dataset(
        {"A_diag": (("sample", "param"), lam, {"units": "1", "long_name": "diagonal of A(x_mu)"}),
         "y": ("sample", y, {"units": "1", "long_name": "target y_mu"})},
        coords={"sample": np.arange(m), "param": np.arange(m * K)},
        attrs={"structure_form": "diagonal", "experiment_kind": KIND},
    )


def zeta(lam: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Effective growth rate of each sample, (8/m) max_k lambda_mu,k y_mu."""
    return 8.0 / y.size * np.max(lam * y[:, None], axis=1)


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    form = DiagonalForm(torch.as_tensor(data["A_diag"].values))
    dtype = torch.float64 if cfg["dtype"] == "float64" else torch.float32
    model = QuadraticModel(form, np.sqrt(cfg["eps"]) * np.eye(form.p), device=device, dtype=dtype)

    def record(mod):
        return {"f": mod()}

    ds = train(model, data["y"].values, lr=cfg["lr"], steps=cfg["steps"], optimizer="gd",
               n_record=cfg["n_record"], record=record)
    ds = ds.rename({"f_dim0": "sample"}).assign_coords(sample=data["sample"].values)
    ds["f"].attrs.update(units="1", long_name="model output f_mu = Tr[W W^T A_mu]")
    ds["sample_loss"] = (ds["f"] - data["y"]) ** 2
    ds["sample_loss"].attrs.update(units="1", long_name="per-sample squared error (f_mu - y_mu)^2")
    ds.attrs.update(run=run, experiment_kind=KIND, model="quadratic", eps=cfg["eps"],
                    init="W(0) = sqrt(eps) I", device=str(model.W.device))
    return ds


def theory(structure: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Exact reduced dynamics, per-sample losses, and the eps -> 0 ignition times of Eq. 47."""
    lv = lv_from_structure(structure)
    steps = log_step_grid(cfg["steps"], cfg["n_record"])
    t = cfg["lr"] * steps.astype(float)
    z0 = np.full(lv.modes, cfg["eps"])
    z = theorem5(lv.lam, lv.y, z0, t)  # Eq. 36: one implicit integral per sample
    z_glv = glv(lv.r, lv.C, z0, t)  # independent cross-check: the coupled GLV integrated numerically
    with np.errstate(divide="ignore", invalid="ignore"):
        eq36_vs_glv = float(np.nanmax(np.abs(z - z_glv) / z_glv))
    f = z @ lv.lam.T
    zeta_mu = zeta(lv.lam, lv.y)
    t_half = theorem5_ignition_times(lv.lam, lv.y, z0)
    return xr.Dataset(
        {
            "z": (("time", "mode"), z, {"units": "1", "long_name": "z_k(t), Theorem 5 (Eq. 36)"}),
            "f": (("time", "sample"), f, {"units": "1", "long_name": "predicted output f_mu(t)"}),
            "sample_loss": (("time", "sample"), (f - lv.y) ** 2, {"units": "1", "long_name": "predicted (f_mu - y_mu)^2"}),
            "loss": ("time", lv.loss(z), {"units": "1", "long_name": "predicted training loss"}),
            "zeta": ("sample", zeta_mu, {"units": "1", "long_name": "zeta_mu = (8/m) max_k lambda_mu,k y_mu"}),
            "t_star_asymptotic": ("sample", np.log(1 / cfg["eps"]) / zeta_mu, {
                "units": "1", "long_name": "ln(1/eps) / zeta_mu (Eq. 47, eps -> 0)"}),
            "t_star": ("sample", t_half, {"units": "1", "long_name": "time f_mu reaches y_mu / 2 (Eq. 36, exact)"}),
            "eq36_vs_glv": ((), eq36_vs_glv, {"units": "1", "long_name": "max relative difference of z between Eq. 36 and GLV integration"}),
        },
        coords={"time": ("time", t, {"units": "1", "long_name": "gradient-flow time"}),
                "step": ("time", steps), "sample": np.arange(lv.y.size), "mode": np.arange(lv.modes)},
        attrs={"experiment_kind": KIND, "eps": cfg["eps"], "solution": "Theorem 5 (Eq. 36)"},
    )


def fit(structure: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    tol = cfg["tolerances"]
    gd = run_ds["gd"].isel(seed=0)
    y = structure["y"].values
    t_meas = ignition_times(gd["time"].values, gd["f"].values, saturation=y)
    t_pred = theory_ds["t_star"].values
    t_asym = theory_ds["t_star_asymptotic"].values
    ds = xr.Dataset(
        {"t_star_measured": ("sample", t_meas, {"units": "1", "long_name": "GD time f_mu reaches y_mu / 2"}),
         "t_star_predicted": ("sample", t_pred, {"units": "1", "long_name": "Eq. 36 time f_mu reaches y_mu / 2"}),
         "t_star_asymptotic": ("sample", t_asym, {"units": "1", "long_name": "ln(1/eps) / zeta_mu"})},
        coords={"sample": theory_ds["sample"].values},
        attrs={"experiment_kind": KIND, "lr": float(run_ds["gd"].attrs["lr"])},
    )
    claims = [Claim(f"sample {mu + 1} ignition time (y = {y[mu]:.4g})", float(t_pred[mu]), float(t_meas[mu]),
                    tol["t_star_rel_error"], note="GD vs Eq. 36 (Theorem 5)")
              for mu in range(y.size)]
    claims.append(Claim("max |z_Eq36 - z_GLV| / z_GLV", 0.0, float(theory_ds["eq36_vs_glv"]), 1e-6,
                        relative=False, note="two independent evaluations of the theory"))
    # Eq. 47 holds as eps -> 0; at finite eps the leading mode k* of sample mu ignites at
    # (1/r) [ln(1/eps) + ln(r/C_kk)] (Theorem 8), so the relative offset is |ln(r/C_kk)| / ln(1/eps).
    lam, r, C = structure["lam"].values, structure["r"].values, np.diag(structure["C"].values)
    for mu in range(y.size):
        k = int(np.argmax(lam[mu] * y[mu]))
        offset = abs(np.log(r[k] / C[k])) / np.log(1 / cfg["eps"])
        claims.append(Claim(f"sample {mu + 1} ignition time vs ln(1/eps)/zeta", float(t_asym[mu]),
                            float(t_meas[mu]), offset + tol["t_star_rel_error"],
                            note=f"Eq. 47 (eps -> 0); finite-eps offset |ln(r/C)|/ln(1/eps) = {offset:.3f}"))
    return xr.merge([ds, claims_dataset(claims)])


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Figure 4: per-sample losses (left) and the total loss with m plateaus (right)."""
    from nqf import plotting

    gd = run_ds["gd"].isel(seed=0)
    t, tt = gd["time"].values, theory_ds["time"].values
    colors = plotting.mode_colors(gd.sizes["sample"])
    with plotting.style(font_size, dpi):
        fig, (ax_s, ax_l) = plotting.plt.subplots(1, 2, figsize=(7.2, 2.9), constrained_layout=True)
        for mu, col in enumerate(colors):
            ax_s.plot(t[1:], gd["sample_loss"].values[1:, mu], color=col, label=f"sample {mu + 1}",
                      **plotting.EXPERIMENT)
            ax_s.plot(tt[1:], theory_ds["sample_loss"].values[1:, mu], color="k", **plotting.THEORY)
            for ax in (ax_s, ax_l):
                ax.axvline(fit_ds["t_star_asymptotic"].values[mu], color=col, **plotting.IGNITION)
        ax_l.plot(t[1:], gd["loss"].values[1:], color="k", label="GD", **plotting.EXPERIMENT)
        ax_l.plot(tt[1:], theory_ds["loss"].values[1:], color="tab:red", label="theory (Thm 5)",
                  **plotting.THEORY)
        for ax in (ax_s, ax_l):
            ax.set_yscale("log")
            ax.set_xlabel(r"gradient-flow time $t = \eta\cdot$step")
        ax_s.set_ylim(bottom=1e-8 * float(np.max(gd["sample_loss"].values[0])))
        ax_s.set_ylabel(r"per-sample loss $(f_\mu - y_\mu)^2$")
        ax_s.set_title("samples: GD solid, theory dashed")
        ax_s.legend(loc="lower left")
        ax_l.set_ylabel("training loss")
        ax_l.set_title(r"dashed verticals: $\ln(1/\epsilon)/\zeta_\mu$")
        ax_l.legend(loc="lower left")
        fig.suptitle(f"{cfg['description']} ($\\epsilon$ = {cfg['eps']:g}, lr = {fit_ds.attrs['lr']:g})",
                     fontsize=font_size + 1)
        plotting.save(fig, paths)
