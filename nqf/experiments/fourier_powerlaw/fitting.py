"""Fit stage of experiment kind ``fourier_powerlaw`` (paper Figure 5): the exponents fitted per
model and theta with their bootstrap intervals and window sensitivity, the raw MLP's power-law
test and the Fourier MLP's departure from its NQF, beside the predictions, with the claims.
nqf.experiments.fourier_powerlaw.fit calls :func:`fit`; this module imports no kind module.

What the fit finds at the default settings (nqf.experiments.fourier_powerlaw explains them):

The window itself (nqf.theory.scaling) is bounded by the finite number of modes, not by the horizon, for
theta = 0 and 0.5: it starts where consecutive drops merge (modes 6, 8, 11 for theta = 0, 0.5, 1)
and ends where the missing tail beyond k = P exceeds ``window_cutoff`` of the excess loss (mode 19
at 10 %). That is 0.6-0.7 decades in t at P = 64, and inside it the cut-off tail steepens the curve:
the exact NQF curve from the balanced mean init fits 1.47, 1.07, 0.85, i.e. 10 %, 7 %, 7 % above the
asymptotic values and 4-6 % above the finite-eps corrected ones; nqf.theory.scaling's ``staircase``
prediction, which keeps the finite size, is within 1 % of it. Gaussian draws scatter each t*_k by
about 11 % (chi^2_1), so the seed-averaged exact curve moves by a few per cent with the seed set
(seeds 0-5: 1.44, 1.03, 0.79). All three predictions are reported beside each fit. P = 104 is the
smallest P at which every theta's window spans a decade (1.03, 1.07, 1.15 decades): the default.

The tanh is far from linear at the saturated weights: with a_k = W_k the argument s_k a_k psi_k
reaches sqrt(2 s_k b_k sqrt P) sqrt2 = 4 k^-(theta + beta)/2 (4 for k = 1, 1 at k = 3 for theta = 1),
so the Fourier MLP departs from its NQF from the first mode on; the fit stage measures how far
(loss ratio, and each mode's learned coefficient against its NQF value s_k a_k W_k / sqrt P).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import xarray as xr

from nqf.experiments.claims import Claim, ErrorBudget, claims_dataset, run_too_short, steps_to_reach

KIND = __name__.split(".")[-2]  # the kind folder this fit stage sits in (it does not import the kind module)


def geo_mean(loss) -> np.ndarray:
    """Geometric mean over seeds (axis -2), the curve nqf.theory.scaling fits."""
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


# -- measuring -----------------------------------------------------------------------------------

MODELS = ("fourier_mlp", "nqf")
FIT_KEYS = ("exponent", "ci_low", "ci_high", "residual_rms", "slope_drift", "subwindow_spread")


def theory_windows(theory_ds: xr.Dataset) -> list[tuple[float, float]]:
    """Each theta's fitting window (t_lo, t_hi) as the theory stage found it."""
    return [(float(lo), float(hi)) for lo, hi in zip(theory_ds["t_lo"].values, theory_ds["t_hi"].values)]


@dataclass(frozen=True)
class Exponents:
    """The power-law fits of the Fourier MLP and its NQF (model, theta): ``out`` the fitted numbers
    of :data:`FIT_KEYS` and ``max_window_shift``, the power_law_test verdicts and reasons, the
    exponents with one window end shifted (``shifted``, model x theta x shift) and per seed."""

    out: dict
    is_power_law: np.ndarray
    reasons: np.ndarray
    shifted: np.ndarray
    per_seed: np.ndarray


def measure_exponents(run_ds: dict[str, xr.Dataset], windows: list) -> Exponents:
    """:class:`Exponents` of the runs of :data:`MODELS` over each theta's window."""
    from nqf.experiments.powerlaw import SHIFTS
    from nqf.theory.scaling import fit_power_law, window_sensitivity

    shape = (len(MODELS), len(windows))
    out = {name: np.full(shape, np.nan) for name in (*FIT_KEYS, "max_window_shift")}
    power_law = np.zeros(shape, bool)
    reasons = np.empty(shape, dtype=object)
    sens = np.full(shape + (len(SHIFTS),), np.nan)
    per_seed = np.full(shape + (run_ds["nqf"].sizes["seed"],), np.nan)
    for i, name in enumerate(MODELS):
        for j, win in enumerate(windows):
            t, loss = finite_record(run_ds[name], j)
            f = fit_power_law(t, loss, win)
            for key in FIT_KEYS:
                out[key][i, j] = getattr(f, key)
            power_law[i, j], reasons[i, j], per_seed[i, j] = f.is_power_law, f.reason, f.per_seed
            shifted = window_sensitivity(t, loss, win)
            sens[i, j] = [shifted[k] for k in SHIFTS]
            out["max_window_shift"][i, j] = np.nanmax(np.abs(sens[i, j] - f.exponent)) if np.any(np.isfinite(sens[i, j])) else np.nan
    return Exponents(out, power_law, reasons, sens, per_seed)


def measure_raw(raw: xr.Dataset, windows: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The raw MLP's power_law_test over each theta's window that its record covers: the verdict
    (1, 0; NaN not covered), its log-log slope and the reasons, per theta."""
    from nqf.theory.scaling import power_law_test

    t_raw = raw["time"].values
    raw_ok = np.full(len(windows), np.nan)
    raw_exp = np.full(len(windows), np.nan)
    raw_reason = np.empty(len(windows), dtype=object)
    for j, (lo, hi) in enumerate(windows):
        if hi > t_raw[-1]:
            raw_reason[j] = f"not covered: the raw MLP's record ends at t = {t_raw[-1]:g}"
            continue
        ok, st = power_law_test(t_raw, raw["loss"].values, (lo, hi))
        raw_ok[j], raw_exp[j], raw_reason[j] = float(ok), st["exponent"], st["reason"]
    return raw_ok, raw_exp, raw_reason


def measure_departure(mlp: xr.Dataset, nqf: xr.Dataset, windows: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Fourier MLP's departure from its NQF (same seeds, same times) per theta: max |ln(L_MLP /
    L_NQF)| up to the window's end, and at the end of each theta's record the learned coefficients
    over their NQF values and the tanh arguments (theta, mode), medians over seeds."""
    departure = np.full(len(windows), np.nan)
    coef_ratio = np.full((len(windows), mlp.sizes["mode"]), np.nan)
    arg_final = np.full((len(windows), mlp.sizes["mode"]), np.nan)
    for j, (_, hi) in enumerate(windows):
        t, lm = finite_record(mlp, j)
        _, ln = finite_record(nqf, j)
        sel = (t > 0) & (t <= hi)
        departure[j] = np.max(np.abs(np.log(geo_mean(lm)[sel] / geo_mean(ln)[sel])))
        last = int(np.nonzero(np.isfinite(mlp["loss"].values[j]).all(0))[0][-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            coef_ratio[j] = np.median(mlp["coef"].values[j, :, last] / mlp["u"].values[j, :, last], axis=0)
        arg_final[j] = np.median(mlp["tanh_argument"].values[j, :, last], axis=0)
    return departure, coef_ratio, arg_final


def exact_exponents(theory_ds: xr.Dataset, windows: list) -> np.ndarray:
    """The exponent of the exact Theorem 6 curve of the runs' seeds per theta (NQF GD against it
    checks the O(lr) claim)."""
    from nqf.theory.scaling import fit_power_law

    return np.array([fit_power_law(theory_ds["time"].values, theory_ds["loss_seeds"].values[j], w).exponent
                     for j, w in enumerate(windows)])


@dataclass(frozen=True)
class Measurement:
    """Everything the fit measures (the functions above), beside the window's length in decades."""

    exponents: Exponents
    raw: tuple
    departure: tuple
    exact: np.ndarray
    decades: np.ndarray
    t_raw: np.ndarray


def measure(theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset]) -> Measurement:
    """:class:`Measurement` of the runs over the theory's windows."""
    windows = theory_windows(theory_ds)
    return Measurement(measure_exponents(run_ds, windows), measure_raw(run_ds["raw_mlp"], windows),
                       measure_departure(run_ds["fourier_mlp"], run_ds["nqf"], windows),
                       exact_exponents(theory_ds, windows),
                       np.log10(np.array([hi / lo for lo, hi in windows])), run_ds["raw_mlp"]["time"].values)


def fit_dataset(m: Measurement, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset]) -> xr.Dataset:
    """The fit's variables beside the claims: the measurements and the theory's predictions."""
    from nqf.experiments.powerlaw import SHIFTS

    out, power_law, reasons, sens, per_seed = (m.exponents.out, m.exponents.is_power_law, m.exponents.reasons,
                                               m.exponents.shifted, m.exponents.per_seed)
    (raw_ok, raw_exp, raw_reason), (departure, coef_ratio, arg_final) = m.raw, m.departure
    exact, decades, thetas = m.exact, m.decades, theory_ds["theta"].values
    nqf, raw = run_ds["nqf"], run_ds["raw_mlp"]
    models = MODELS
    dims = ("model", "theta")
    unit = {"units": "1"}
    flow = float(theory_ds.attrs.get("flow_lr", nqf.attrs.get("flow_lr", math.nan)))
    return xr.Dataset(
        {
            "exponent": (dims, out["exponent"], {**unit, "long_name": "fitted exponent b of loss ~ t^-b (geometric mean over seeds)"}),
            "exponent_ci_low": (dims, out["ci_low"], {**unit, "long_name": "95% percentile-bootstrap interval over seeds, low"}),
            "exponent_ci_high": (dims, out["ci_high"], {**unit, "long_name": "95% percentile-bootstrap interval over seeds, high"}),
            "exponent_per_seed": (dims + ("seed",), per_seed, {**unit, "long_name": "fitted exponent of each seed"}),
            "is_power_law": (dims, power_law, {"long_name": "nqf.theory.scaling.power_law_test verdict"}),
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


# -- judging -------------------------------------------------------------------------------------


def judge(m: Measurement, structure: xr.Dataset, theory_ds: xr.Dataset, cfg: dict, attrs: dict) -> list[Claim]:
    """The claims per theta (window, horizon, exponents against the asymptotic, corrected and
    finite-staircase predictions, window stability, power-law verdicts, NQF GD against the exact
    flow, the Fourier MLP against its NQF, the raw MLP's verdict) and of the structure; ``attrs``
    the fit's attributes (the learning rates the notes name)."""
    from nqf.experiments.powerlaw import SHIFTS

    tol = cfg["tolerances"]
    factor = float(tol["safety_factor"])
    thetas, windows, models = theory_ds["theta"].values, theory_windows(theory_ds), MODELS
    out, power_law, reasons, sens = m.exponents.out, m.exponents.is_power_law, m.exponents.reasons, m.exponents.shifted
    (raw_ok, raw_exp, raw_reason), (departure, coef_ratio, arg_final) = m.raw, m.departure
    exact, decades, t_raw = m.exact, m.decades, m.t_raw
    seeds = m.exponents.per_seed.shape[-1]
    k_lo = theory_ds["k_lo"].values.astype(int)
    k_hi = theory_ds["k_hi"].values.astype(int)
    flow = attrs["flow_lr"]
    claims = []
    label = {"fourier_mlp": "Fourier MLP", "nqf": "NQF"}
    # steps: auto chose each run's length from its window, so the horizon row cannot fail then
    # (a theory file without the attribute keeps the row as "ours")
    auto = bool(int(theory_ds.attrs.get("steps_auto", 0)))
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
            comparison="at_least", checks="construction" if auto else "ours",
            source=(f"holds by construction (steps: auto runs each theta to auto_horizon x the end of its window, "
                    f"t = {t_full:.4g}): " if auto else "") + "the paper's window (its Fig. 5 fits) must lie inside the run",
            tolerance_source="bound: the window's end from Theorem 8 ignition times and the finite-P cutoff",
            note=(f"run reaches Eq. 26 time t = c lr steps = {horizon:.4g} (c lr = {flow:g})"
                  + (f": MISS under this reading, only modes up to {k_hi[j]} switch on before the run ends, so the "
                     f"paper's exponent rows below are not judged at this length" if short else ""))))
        if short:  # this reading cannot draw the paper's figure: one row per model says so, with its numbers
            for i, name in enumerate(models):
                b = out["exponent"][i, j]
                claims.append(Claim(  # not measurable here: not reached, neither a pass nor a miss
                    f"{label[name]}, theta = {theta:g}: exponent vs (2 beta - 1)/(theta + beta)", asym, math.nan,
                    tol["asymptotic_rel_error"], checks="paper", source=PAPER_RIGHT if name == "fourier_mlp" else PAPER_LEFT,
                    tolerance_source="the paper's comparison (tolerances.asymptotic_rel_error)",
                    note=(f"the theory's window is [{float(theory_ds['t_lo'][j]):.4g}, {t_full:.4g}] "
                          f"(modes {k_lo[j]}-{int(theory_ds['k_hi_full'][j])}); "
                          f"fitted over the truncated window t in [{windows[j][0]:.4g}, {windows[j][1]:.4g}] "
                          f"({decades[j]:.2f} decades, modes {k_lo[j]}-{k_hi[j]}, partly resolved drops) it gives {b:.4f}; "
                          f"power_law_test: {reasons[i, j]}")).not_judged(
                    run_too_short(horizon, t_full, steps_to_reach(t_full, flow) if flow > 0 else None,
                                  what="the theory's window ends at")))
            continue
        claims.append(Claim(
            f"theta = {theta:g}: the fitting window spans at least one decade of t", 1.0, float(decades[j]), math.nan,
            comparison="at_least", checks="ours", source="a power law is measured over at least one decade",
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
                                shift, math.nan, comparison="at_most", checks="ours",
                                source="the fitted exponent does not depend on the window's ends",
                                tolerance_source="bound: the seed CI half-width",
                                note=f"shifted windows {shifted} (ends outside the record or < 2x wide are skipped); "
                                     + ("stable" if shift <= half else "NOT stable: the curve's local slope still "
                                        "changes there (partly resolved drops below, finite-P steepening above)")))
            claims.append(Claim(f"{base}: power_law_test verdict (1 = power law)", 1.0, float(power_law[i, j]), 0.0,
                                relative=False, checks="paper" if name == "fourier_mlp" else "ours",
                                source=PAPER_LEFT if name == "fourier_mlp" else "the NQF's loss is a power law over the window",
                                tolerance_source="a verdict of nqf.theory.scaling.power_law_test (slope drift <= 0.3 b, "
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
                                tolerance_source="a verdict of nqf.theory.scaling.power_law_test",
                                note=f"{raw_reason[j]}; slope {raw_exp[j]:.3g}; raw MLP lr {attrs['raw_lr']:g}"))
    uncovered = [f"{th:g}" for th, ok in zip(thetas, raw_ok) if not np.isfinite(ok)]
    claims.append(Claim("structure: max |r_k (grid) - 4 b_k s_k / sqrt P| / max r", 0.0, float(structure["r_residual"]),
                        1e-12, relative=False, checks="theorem",
                        source="App. C Eq. 297: the Fourier MLP's NQF has orthogonal features (Theorem 6 applies)",
                        tolerance_source="float64 rounding of sums over M grid points (M eps_machine << 1e-12)",
                        note="and C_kj off-diagonal / max C_kk = "
                             f"{float(structure['off_diagonal_residual']):.1e} (orthogonal features)"
                             + (f"; raw MLP windows not covered by its record (t <= {t_raw[-1]:g}) for theta = "
                                f"{', '.join(uncovered)}: raise raw_steps" if uncovered else "")))
    return claims


# -- the fit -------------------------------------------------------------------------------------


def fit(structure: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """Fitted exponents with bootstrap intervals beside the predictions, window sensitivity, the
    raw MLP's power-law test, the Fourier MLP's departure from its NQF, and the claims."""
    m = measure(theory_ds, run_ds)
    ds = fit_dataset(m, theory_ds, run_ds)
    return xr.merge([ds, claims_dataset(judge(m, structure, theory_ds, cfg, ds.attrs))])
