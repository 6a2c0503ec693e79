"""Fit stage of experiment kind ``init_scaling``: the ignition times measured per architecture,
eps and seed, their slope against ln(1/eps) and their seed scatter beside Theorem 8, with the
claims and their error budgets (nqf.experiments.init_scaling describes them).
nqf.experiments.init_scaling.fit calls :func:`fit`; this module imports no kind module.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from nqf.experiments.claims import (
    LAG_MARGIN,
    Claim,
    ErrorBudget,
    claims_dataset,
    run_too_short,
    steps_to_reach,
)
from nqf.theory.ignition import ignition_times, predicted_ignition_times
from nqf.theory.losses import flow_lr
from nqf.theory.mode_theory import coupled_faster, effective_amplitudes, slope_fit, std_relative_error

KIND = __name__.split(".")[-2]  # the kind folder this fit stage sits in (it does not import the kind module)
SOURCE_THM8 = "Theorem 8 (ignition time)"
SOURCE_SCATTER = "seed scatter of Theorem 8's ignition time over Gaussian inits (SCIENCE.md 3; beyond the paper)"


def measured_ignition(run: xr.Dataset, which: str, saturation=None) -> np.ndarray:
    """t*_k of every replica ((eps|seed), mode): half of each replica's own final z_k, or of
    ``saturation`` (the teacher's z*_k: the fixed point of the flow and of GD alike, and the
    level the real module is judged at, whose z_k keeps drifting once tanh saturates)."""
    z = run[f"z_{which}"].values  # (replica, step, mode)
    return np.array([ignition_times(run["time"].values, zr, saturation=saturation)
                     for zr in z]).reshape(z.shape[0], z.shape[2])


def _flow_steps(structure: xr.Dataset, cfg: dict) -> np.ndarray:
    """eta = c lr per architecture: the Eq. 26 flow step of one GD step (n = its m pairs)."""
    return np.array([flow_lr(cfg["lr"], cfg["loss"], int(m)) for m in structure["m"].values])


# -- measuring -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ignitions:
    """The ignition times the fit measures, per architecture: ``t_aligned`` and ``t_module`` (arch,
    eps, mode) of the aligned inits (GD, and the real module: NaN where not trained) and their
    slopes against ln(1/eps) (arch, mode); over the Gaussian seeds (where there are two or more)
    the std of t*_k (``scatter``), the std of Theorem 8 from each seed's own projected amplitude
    (``scatter_own``), the latest of those Theorem 8 times (``latest_own``) and the number of
    seeds that ignited (``ignited``), all (arch, mode); the run's end ``t_end`` (arch) and the
    number of seeds."""

    t_aligned: np.ndarray
    t_module: np.ndarray
    slope: np.ndarray
    slope_module: np.ndarray
    scatter: np.ndarray
    scatter_own: np.ndarray
    latest_own: np.ndarray
    ignited: np.ndarray
    t_end: np.ndarray
    n_seeds: int


def measure_ignitions(structure: xr.Dataset, run_ds: dict[str, xr.Dataset], archs: list, eps: np.ndarray,
                      K: int) -> Ignitions:
    """:class:`Ignitions` of the runs of ``archs`` at the init scales ``eps`` (``K`` modes)."""
    A = len(archs)
    t_eps, t_mod = np.full((A, eps.size, K), np.nan), np.full((A, eps.size, K), np.nan)
    std, std_own, n_ok = np.full((A, K), np.nan), np.full((A, K), np.nan), np.zeros((A, K), int)
    # per architecture: the run's end, and (mode) the latest of the seeds' own Theorem 8 times
    t_end, latest_own = np.full(A, np.nan), np.full((A, K), np.nan)
    for i, arch in enumerate(archs):
        t_end[i] = float(run_ds[arch]["time"].values[-1])
        run = run_ds[arch].sel(eps=eps)
        t_eps[i] = measured_ignition(run, "aligned", saturation=run["z_star"].values)
        if "z_module" in run:
            t_mod[i] = measured_ignition(run, "module", saturation=run["z_star"].values)
        if run.sizes["seed"] > 1:
            t_seed = measured_ignition(run, "gaussian")
            n_ok[i] = np.isfinite(t_seed).sum(0)
            # a seed that never ignited would bias the std low: then there is no measurement
            std[i] = np.where(n_ok[i] == run.sizes["seed"], np.std(t_seed, axis=0, ddof=1), np.nan)
            # Theorem 8 seed by seed, from the amplitude each mode effectively ignites from
            mask = coupled_faster(structure["r"].values[i], structure["coupling"].values[i])
            z_eff = effective_amplitudes(run["g0_gaussian"].values, mask)
            t_own = predicted_ignition_times(structure["r"].values[i], np.diagonal(structure["C"].values[i]), 1.0, c=z_eff)
            std_own[i] = np.std(t_own, axis=0, ddof=1)
            # each seed's t*_k is measured at half its own final z_k: a seed whose Theorem 8 time lies
            # beyond the run's end has not saturated, so its measurement is no ignition time
            latest_own[i] = np.nanmax(t_own, axis=0)
    slope = slope_fit(eps, np.moveaxis(t_eps, 1, 0))
    slope_module = slope_fit(eps, np.moveaxis(t_mod, 1, 0))
    n_seeds = next(iter(run_ds.values())).sizes["seed"]
    return Ignitions(t_eps, t_mod, slope, slope_module, std, std_own, latest_own, n_ok, t_end, n_seeds)


# -- judging -------------------------------------------------------------------------------------


def short_of(t_end: float, eta: float, factor: float, times, lag_rel) -> str | None:
    """Why an architecture's rows that need ``times`` (Theorem 8's, flow time) are not judged: the
    latest one not measured lies beyond the run's end ``t_end``, even with the tolerance (factor
    times GD's relative lag ``lag_rel``) on top; None when every one is within the run. The steps
    named (of flow step ``eta``) reach it delayed by LAG_MARGIN lags, as init_scaling.needed_times asks."""
    times, lag_rel = np.asarray(times, float), np.broadcast_to(np.asarray(lag_rel, float), np.shape(times))
    latest = times * (1 + max(LAG_MARGIN, factor) * np.nan_to_num(lag_rel))
    beyond = np.isfinite(latest) & (times * (1 + factor * np.nan_to_num(lag_rel)) > t_end)
    if not beyond.any():
        return None
    j = np.unravel_index(int(np.argmax(np.where(beyond, latest, -np.inf))), latest.shape)
    return run_too_short(t_end, float(times[j]), steps_to_reach(float(latest[j]), eta))


def judge_architecture(i: int, arch: str, m: Ignitions, structure: xr.Dataset, theory_ds: xr.Dataset, eta: float,
                       se: np.ndarray, tol: dict) -> list[Claim]:
    """Architecture i's rows: per mode the slope of t* against ln(1/eps) (Theorem 8), the max
    error of t* over eps and modes, the reduction's residual (Theorem 16) and, with two seeds or
    more, the seed scatter (its mechanism, and per mode against the ordered-statistics prediction),
    each within its error budget; ``eta`` its Eq. 26 flow step, ``se`` the seed scatter's
    relative sampling error (arch, mode)."""
    claims = []
    factor = float(tol["safety_factor"])
    eps, K = theory_ds["eps"].values, theory_ds.sizes["mode"]
    t_eps, std, std_own = m.t_aligned, m.scatter, m.scatter_own
    t_thm8 = np.moveaxis(theory_ds["t_star"].values, -1, 1)  # (arch, eps, mode)

    def short(times, lag_rel) -> str | None:
        return short_of(m.t_end[i], eta, factor, times, lag_rel)

    delay = eta * np.log(1 / (2 * eps))[:, None] / (4 * t_thm8[i])  # (eps, mode); z0 = eps z*, z_half = z*/2
    # aligned replicas whose ignition was not measured and whose Theorem 8 time lies beyond the run
    missing = ~np.isfinite(t_eps[i])
    aligned_short = [short(np.where(missing[:, k], t_thm8[i, :, k], np.nan), delay[:, k]) for k in range(K)]
    regime, a = str(theory_ds["regime"].values[i]), float(theory_ds["a"].values[i])
    module_slope = m.slope_module[i]
    r_i = theory_ds["r"].values[i]
    gd_rate = eta * r_i / (2 * np.log1p(eta * r_i / 2)) - 1  # GD's exact per-step growth, on the slope
    finite_eps = np.abs(theory_ds["slope_theorem8"].values[i] / theory_ds["slope"].values[i] - 1)
    for k in range(K):
        budget = ErrorBudget({"GD rate: eta r/(2 ln(1 + eta r/2)) - 1": gd_rate[k]}, factor,
                             systematic={"finite eps: Theorem 8's slope over these eps": finite_eps[k]})
        claims.append(_unless(aligned_short[k], budget.claim(
            f"{arch} mode {k + 1}: slope of t* vs ln(1/eps)", float(theory_ds["slope"].values[i, k]),
            float(m.slope[i, k]), checks="theorem", source=f"{SOURCE_THM8}: slope 1/(a zeta_k) of t*_k against ln(1/eps)",
            note=f"1/(a zeta), {regime}: a = {a:g}, zeta = {float(theory_ds['zeta'].values[i, k]):.4g}; "
                 f"Thm 8 over these eps {float(theory_ds['slope_theorem8'].values[i, k]):.4g}; eta = c lr = {eta:g}"
                 + (f"; real module {module_slope[k]:.4g} (not checked)" if np.isfinite(module_slope[k]) else ""))))
    err = np.abs(t_eps[i] - t_thm8[i]) / t_thm8[i]
    budget = ErrorBudget({"GD O(lr): max eta ln(1/(2 eps))/(4 t*)": float(np.nanmax(delay))}, factor)
    claims.append(_unless(short(np.where(missing, t_thm8[i], np.nan), delay), budget.claim(
        f"{arch}: max over eps and modes |t*_GD - t*_Thm8| / t*_Thm8", 0.0, float(np.max(err)), relative=False,
        checks="theorem", source=SOURCE_THM8,
        note="aligned inits z_k(0) = eps z*_k, t* at z*_k / 2; NaN if a mode never reached half saturation")))
    res = max(float(structure[v].values[i]) for v in ("eigen_residual", "decoupling_residual"))
    claims.append(Claim(f"{arch}: Theorem 16 residual (Y q_k = gamma q_k, K(q_b q_b^T) q_a = kappa delta_ab q_a)",
                        0.0, res, tol["reduction_residual"], relative=False, checks="theorem",
                        source="Theorem 16 (decoupled modes), the conditions of the reduction",
                        tolerance_source="rounding: the designed data satisfy the conditions exactly; "
                                         "tolerances.reduction_residual allows float64 rounding",
                        note=f"the modes decouple on this data; regime {regime}"))
    n_seeds = m.n_seeds
    if n_seeds < 2:
        return claims
    own = np.abs(std[i] / std_own[i] - 1)
    coupled = structure["predecessors"].values[i] > 0
    terms = {"GD O(lr): max_k eta r_k/4": float(np.max(eta * r_i / 4))}
    if np.any(coupled):
        terms["projection model (coupled modes)"] = float(tol["projection_model_error"])
    budget = ErrorBudget(terms, factor)
    # a seed whose own Theorem 8 time lies beyond the run (GD's relative lag is about eta r_k / 4)
    # has not ignited there: its mode's std is not measured at this length
    seeds_short = [short([m.latest_own[i, k]], eta * r_i[k] / 4) for k in range(K)]
    claims.append(_unless(next((w for w in seeds_short if w), None), budget.claim(
        f"{arch}: max over modes |std t* / std of Theorem 8 from each seed's own init - 1|", 0.0,
        float(np.max(own)), relative=False, checks="ours", source=SOURCE_SCATTER,
        note=f"the same seeds on both sides: tests the mechanism free of sampling error (amplitudes projected "
             f"off the coupled faster modes' directions); per mode {', '.join(f'{v:.2g}' for v in own)}")))
    for k in range(K):
        contract = float(theory_ds["scatter_contract"].values[i, k])
        terms = {"seed s.e. of the std": float(se[i, k]), "GD O(lr): eta r_k/4": float(eta * r_i[k] / 4)}
        if coupled[k]:
            terms["projection model (coupled modes)"] = float(tol["projection_model_error"])
        budget = ErrorBudget(terms, factor)  # the same terms as the fit's scatter_tolerance
        claims.append(_unless(seeds_short[k], budget.claim(
            f"{arch} mode {k + 1}: std of t* over {n_seeds} seeds", float(theory_ds["scatter_ordered"].values[i, k]),
            float(std[i, k]), checks="ours", source=SOURCE_SCATTER,
            note=f"chi^2 dof d - j_k = {int(theory_ds['dof'].values[i, k])}; SCIENCE.md sqrt(psi'(d/2))/(a zeta) = "
                 f"{contract:.4g} ({std[i, k] / contract - 1:+.1%}); "
                 f"{m.ignited[i, k]} of {n_seeds} seeds ignited within c lr steps")))
    return claims


def ignition_dataset(m: Ignitions, structure: xr.Dataset, theory_ds: xr.Dataset, cfg: dict,
                     se: np.ndarray) -> xr.Dataset:
    """The fit's variables beside the claims: the measured ignition times, slopes and seed
    scatter beside Theorem 8's, and the scatter's tolerance."""
    tol = cfg["tolerances"]
    dims = ("architecture", "mode")
    t_thm8 = np.moveaxis(theory_ds["t_star"].values, -1, 1)  # (arch, eps, mode)
    return xr.Dataset(
        {"t_star_measured": (("architecture", "eps", "mode"), m.t_aligned, {"units": "1", "long_name": "GD ignition time, aligned init"}),
         "t_star_theorem8": (("architecture", "eps", "mode"), t_thm8, {"units": "1", "long_name": "Theorem 8 ignition time"}),
         "slope_measured": (dims, m.slope, {"units": "1", "long_name": "least-squares slope of GD t*_k against ln(1/eps)"}),
         "t_star_module": (("architecture", "eps", "mode"), m.t_module, {
             "units": "1", "long_name": "real module: time z_k reaches z*_k / 2, aligned init (NaN: not trained)"}),
         "slope_module": (dims, m.slope_module, {
             "units": "1", "long_name": "least-squares slope of the real module's t*_k (reported, not a claim)"}),
         "slope_predicted": theory_ds["slope"], "slope_theorem8": theory_ds["slope_theorem8"],
         "scatter_measured": (dims, m.scatter, {"units": "1", "long_name": "std of GD t*_k over Gaussian seeds"}),
         "scatter_predicted": theory_ds["scatter_ordered"], "scatter_contract": theory_ds["scatter_contract"],
         "scatter_sampling_error": (dims, se, {"units": "1", "long_name": "relative standard error of the std over the seeds"}),
         "scatter_tolerance": (dims, float(tol["safety_factor"]) * (
             se + _flow_steps(structure, cfg)[:, None] * theory_ds["r"].values / 4
             + float(tol["projection_model_error"]) * (structure["predecessors"].values > 0)), {
             "units": "1", "long_name": "tolerance of the seed-scatter rows: safety factor x (sampling error + "
                                        "eta r_k / 4 + projection model error for coupled modes)"}),
         "scatter_own_init": (dims, m.scatter_own, {"units": "1", "long_name": "std over the seeds of Theorem 8 with each seed's "
                                                                         "projected initial amplitude (no sampling error)"}),
         "seeds_ignited": (dims, m.ignited, {"units": "1", "long_name": "seeds whose t*_k was measured"})},
        coords={"architecture": list(theory_ds["architecture"].values), "eps": theory_ds["eps"].values,
                "mode": theory_ds["mode"].values},
        attrs={"experiment_kind": KIND, "seeds": m.n_seeds},
    )


# -- the fit -------------------------------------------------------------------------------------


def fit(structure: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """Fitted slopes and seed scatter per architecture and mode beside the predictions, with claims."""
    archs = list(theory_ds["architecture"].values)
    m = measure_ignitions(structure, run_ds, archs, theory_ds["eps"].values, theory_ds.sizes["mode"])
    se = std_relative_error(theory_ds["dof"].values, max(m.n_seeds, 2))
    etas = _flow_steps(structure, cfg)
    claims = [c for i, arch in enumerate(archs)
              for c in judge_architecture(i, arch, m, structure, theory_ds, float(etas[i]), se, cfg["tolerances"])]
    return xr.merge([ignition_dataset(m, structure, theory_ds, cfg, se), claims_dataset(claims)])


def _unless(reason: str | None, claim: Claim) -> Claim:
    """The claim, not judged for ``reason`` where there is one and it did not pass anyway."""
    return claim if reason is None or claim.passed else claim.not_judged(reason)
