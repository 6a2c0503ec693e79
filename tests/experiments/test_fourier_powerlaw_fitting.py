"""Fig. 5's exponent rows (nqf.experiments.fourier_powerlaw.fitting through
nqf.experiments.fourier_powerlaw.fit) pass on runs that follow the predicted power law and fail on
runs that do not.

The inputs are built with the library's own stages: make_data, structure and theory of a
fourier_powerlaw config (beta = 1.5, P = 104, the half_sum reading, steps: auto as in
config/config.yaml, fewer records), and run files whose losses are the theory's exact Theorem 6
staircase of each seed (``loss_seeds``: the NQF's gradient flow from the seeds' own init draws,
t^-(2 beta - 1)/(theta + beta) over the window up to its finite-eps and finite-P steepening). A
"wrong beta" run is the same staircase computed by the theory stage at beta' = 2.0 on the same
clock (same steps, same record grid) while the config says 1.5: its loss falls as
t^-(2 beta' - 1)/(theta + beta') = t^-1.5, -1.2, -1.0 instead of t^-4/3, -1, -0.8.

The paper rows' tolerances are the config's fixed relative errors (tolerances.asymptotic_rel_error
0.1, corrected_rel_error 0.05); the theorem rows' tolerances are ErrorBudgets (safety_factor 3 x:
the seeds' bootstrap CI half-width / b, GD's O(lr) ignition delay across the window
(lr r_klo - lr r_khi) / (4 ln(t_hi/t_lo)), and the exact mean-init curve's distance to the
staircase prediction). Training itself is tested in test_fourier_powerlaw.py; here only the fit.
"""
import math

import numpy as np
import pytest
import xarray as xr
from helpers import experiment_config

from nqf.experiments import fourier_powerlaw as fp
from nqf.experiments.claims import CHECKS

THETAS = (0.0, 0.5, 1.0)


@pytest.fixture(scope="module")
def setting():
    cfg = experiment_config("fourier_powerlaw", P=104, loss="half_sum", steps="auto", auto_horizon=1.1,
                      seeds=[0, 1, 2, 3, 4, 5], n_record=200)
    data = fp.make_data(cfg)
    st = fp.structure(data, cfg)
    th = fp.theory(st, cfg)
    steps = fp.theta_steps(cfg)
    # the same staircase at beta' = 2, on the same clock: the same steps per theta give the same grid
    cfg_b2 = {**cfg, "beta": 2.0, "steps": steps}
    th_b2 = fp.theory(fp.structure(fp.make_data(cfg_b2), cfg_b2), cfg_b2)
    assert np.array_equal(th_b2["time"].values, th["time"].values)
    return {"cfg": cfg, "structure": st, "theory": th, "theory_b2": th_b2, "steps": steps}


def fourier_run(s, name, loss):
    """A run file of a Fourier model (fourier_mlp or nqf) as train_run writes it: the loss
    (theta, seed, step) on the theory's record grid, NaN beyond each theta's own steps, and the
    provenance the fit's check_runs compares. coef, u and tanh_argument (only in the fit's notes
    and data variables) are 1."""
    th, steps = s["theory"], np.asarray(s["steps"])
    step = th["step"].values
    loss = np.where(step[None, None, :] <= steps[:, None, None], loss, np.nan)
    per_mode = np.ones(loss.shape + (th.sizes["mode"],))
    pm = ("theta", "seed", "step", "mode")
    return xr.Dataset(
        {"loss": (("theta", "seed", "step"), loss), "coef": (pm, per_mode), "u": (pm, per_mode),
         "tanh_argument": (pm, per_mode)},
        coords={"theta": th["theta"].values, "seed": th["seed"].values, "step": step,
                "time": ("step", th["time"].values), "mode": th["mode"].values},
        attrs={"experiment_kind": fp.KIND, "run": name, "eps": float(s["cfg"]["eps"]), "lr": float(s["cfg"]["lr"]),
               "flow_lr": float(th.attrs["flow_lr"]), "loss_convention": s["cfg"]["loss"]})


def raw_run(s, loss=None):
    """The raw-input MLP's run file: by default a plateau, then one sudden drop (a logistic in ln t
    at t = 2000 of width 0.2 in ln t), which is no power law over any theta's window."""
    th = s["theory"]
    t = th["time"].values
    if loss is None:
        with np.errstate(divide="ignore", over="ignore"):
            loss = 1.0 / (1.0 + np.exp((np.log(t) - math.log(2000.0)) / 0.2)) + 1e-3
    return xr.Dataset({"loss": (("seed", "step"), np.atleast_2d(loss))},
                      coords={"seed": [0], "step": th["step"].values, "time": ("step", t)},
                      attrs={"experiment_kind": fp.KIND, "eps": float(s["cfg"]["eps"]), "flow_lr": 0.1})


def run_fit(s, mlp_loss, nqf_loss, raw=None):
    runs = {"fourier_mlp": fourier_run(s, "fourier_mlp", mlp_loss), "nqf": fourier_run(s, "nqf", nqf_loss),
            "raw_mlp": raw_run(s, raw)}
    return fp.fit(s["structure"], s["theory"], runs, s["cfg"])


def rows(fit) -> dict[str, tuple[bool, float, str]]:
    """quantity -> (passed, measured, checks)."""
    return {str(q): (bool(ok), float(m), str(c)) for q, ok, m, c in
            zip(fit["claim_quantity"].values, fit["claim_passed"].values, fit["claim_measured"].values,
                fit["claim_checks"].values)}


def model_rows(model, theta):
    base = f"{model}, theta = {theta:g}"
    names = [f"{base}: exponent vs (2 beta - 1)/(theta + beta)",
             f"{base}: exponent vs finite-eps corrected (App. C Eq. 292)"]
    if model == "NQF":
        names += [f"{base}: exponent vs the finite staircase (Theorems 6, 8, 9 at finite P, eps)",
                  f"NQF, theta = {theta:g}: GD exponent vs the exact flow curve of the same seeds"]
    return names


def verdict_rows(theta):
    return [f"Fourier MLP, theta = {theta:g}: power_law_test verdict (1 = power law)",
            f"NQF, theta = {theta:g}: power_law_test verdict (1 = power law)"]


@pytest.fixture(scope="module")
def exact_fit(setting):
    L = setting["theory"]["loss_seeds"].values
    return run_fit(setting, L, L)


def test_runs_on_the_predicted_power_law_pass_every_exponent_row(setting, exact_fit):
    """Both Fourier runs carry the exact Theorem 6 staircase of their seeds: every exponent row,
    both power-law verdicts, the MLP-vs-NQF row and the raw MLP's 'not a power law' rows pass.

    Why the tolerances are met (numbers of this setting, asserted below so that a change of the
    setting that eats the margin shows here first): the fitted exponent is that of the exact
    curve of the same seeds (the fit's own theory variable exponent_seeds, identical to 1e-12:
    the same curves, window and fit_power_law). That curve is steeper than (2 beta - 1)/(theta + beta)
    by the finite-eps correction (Eq. 292, exponent_corrected: +6.1, +2.8, +1.0 %) and the
    finite-P cutoff, less the seed draws' scatter: 7.1, 4.5, 3.1 % off the asymptotic value
    (tolerance 10 %) and 1.0, 1.7, 2.0 % off the corrected one (tolerance 5 %). Against the finite
    staircase the error is about 2 %, inside 3 x (CI half-width ~1.4 % + GD delay ~0.7 % +
    mean-init vs staircase ~0.2 %) ~ 7 %. The GD-vs-exact-flow and MLP-vs-NQF rows compare
    identical curves (error 0)."""
    th = setting["theory"]
    r = rows(exact_fit)
    tol = setting["cfg"]["tolerances"]
    for j, theta in enumerate(THETAS):
        for name in model_rows("Fourier MLP", theta) + model_rows("NQF", theta) + verdict_rows(theta):
            assert r[name][0], (name, r[name])
        assert r[f"theta = {theta:g}: Fourier MLP exponent vs its NQF's"][0]
        assert r[f"raw-input MLP, theta = {theta:g} window: power_law_test verdict (0 = not a power law)"][0]
        b = float(exact_fit["exponent"].sel(model="nqf").values[j])
        assert b == pytest.approx(float(th["exponent_seeds"][j]), rel=1e-12)
        asym, corr = float(th["exponent_asymptotic"][j]), float(th["exponent_corrected"][j])
        assert asym == pytest.approx(2.0 / (theta + 1.5), rel=1e-12)  # (2 beta - 1)/(theta + beta)
        # the margins stated in the docstring: at least 2 points of relative error left on each row
        assert abs(b / asym - 1) <= tol["asymptotic_rel_error"] - 0.02
        assert abs(b / corr - 1) <= tol["corrected_rel_error"] - 0.02
    assert set(exact_fit["claim_checks"].values) <= set(CHECKS)


def test_runs_from_a_wrong_beta_fail_the_exponent_rows(setting):
    """Runs whose loss is the staircase of beta' = 2 (config: beta = 1.5) fall as a power law with
    beta''s exponent: the fitted exponents lie within 10 % of (2 beta' - 1)/(theta + beta') =
    1.5, 1.2, 1.0, i.e. 21-29 % above 4/3, 1, 0.8. Every exponent row of both models fails, while
    the power-law verdicts (it is a power law, only the wrong one), the MLP-vs-NQF row (both runs
    alike) and the structure row (no run in it) still pass: the misses come from the exponents."""
    L2 = setting["theory_b2"]["loss_seeds"].values
    fit = run_fit(setting, L2, L2)
    r = rows(fit)
    for j, theta in enumerate(THETAS):
        for name in model_rows("Fourier MLP", theta) + model_rows("NQF", theta):
            assert not r[name][0], (name, r[name])
        for name in verdict_rows(theta) + [f"theta = {theta:g}: Fourier MLP exponent vs its NQF's"]:
            assert r[name][0], (name, r[name])
        b = float(fit["exponent"].sel(model="nqf").values[j])
        assert abs(b / ((2 * 2.0 - 1) / (theta + 2.0)) - 1) < 0.1, b
    assert r["structure: max |r_k (grid) - 4 b_k s_k / sqrt P| / max r"][0]


def test_a_fourier_mlp_off_its_nqf_fails_the_mlp_rows(setting):
    """The Fourier MLP from beta' = 2, its NQF on the predicted law: the MLP's exponent rows and
    'Fourier MLP exponent vs its NQF's' fail (12.9, 20.1, 24.8 % apart against budgets of 3 x the
    two CI half-widths / b, 12.1, 15.4, 14.3 %: theta = 0 misses by the smallest margin, with the
    bootstrap's fixed seed it is deterministic), the NQF's rows pass."""
    L, L2 = setting["theory"]["loss_seeds"].values, setting["theory_b2"]["loss_seeds"].values
    r = rows(run_fit(setting, L2, L))
    for theta in THETAS:
        for name in model_rows("Fourier MLP", theta) + [f"theta = {theta:g}: Fourier MLP exponent vs its NQF's"]:
            assert not r[name][0], (name, r[name])
        for name in model_rows("NQF", theta):
            assert r[name][0], (name, r[name])


@pytest.mark.parametrize("side", [1.0, -1.0])
def test_the_asymptotic_rows_flip_at_their_tolerance(setting, exact_fit, side):
    """L -> L^q multiplies every per-seed log-log slope by q exactly (the fit interpolates ln L
    linearly in ln t and fits a line: both linear in ln L), so the fitted exponent is q b. With q
    putting q b at (1 + side x 0.999 tol) x the asymptotic value the rows vs (2 beta - 1)/(theta + beta)
    pass, at (1 + side x 1.001 tol) they fail: the row's tolerance is the configured 10 %, no
    more (rounding moves q b by ~1e-15 relative, the margin is 1e-4)."""
    L = setting["theory"]["loss_seeds"].values
    tol = setting["cfg"]["tolerances"]["asymptotic_rel_error"]
    for j, theta in enumerate(THETAS):
        b = float(exact_fit["exponent"].sel(model="nqf").values[j])
        asym = float(setting["theory"]["exponent_asymptotic"][j])
        for within, passes in ((0.999, True), (1.001, False)):
            q = (1 + side * within * tol) * asym / b
            powered = L.copy()
            powered[j] = L[j] ** q
            r = rows(run_fit(setting, powered, powered))
            for model in ("Fourier MLP", "NQF"):
                name = f"{model}, theta = {theta:g}: exponent vs (2 beta - 1)/(theta + beta)"
                assert r[name][0] is passes, (name, q, r[name])
                assert r[name][1] == pytest.approx(q * b, rel=1e-12)


def test_a_constant_factor_on_the_nqf_loss_moves_no_exponent_row(setting, exact_fit):
    """An NQF loss 1.1 x the exact curve: every exponent is a log-log slope, which a constant
    factor leaves unchanged (the same verdicts and measured values to 1e-12); the factor shows
    where the level matters, the MLP-vs-NQF loss gap max |ln(L_MLP / L_NQF)| = ln 1.1. No claim
    row checks that gap (it is a data variable and part of a note): the paper's 'tracked by its
    NQF approximation' is checked through the exponents only."""
    L = setting["theory"]["loss_seeds"].values
    fit = run_fit(setting, L, 1.1 * L)
    assert np.array_equal(fit["claim_passed"].values, exact_fit["claim_passed"].values)
    assert np.allclose(fit["claim_measured"].values, exact_fit["claim_measured"].values, rtol=1e-12, atol=1e-15,
                       equal_nan=True)
    assert np.allclose(fit["mlp_nqf_log_loss_gap"].values, math.log(1.1), rtol=1e-12)
    assert np.allclose(exact_fit["mlp_nqf_log_loss_gap"].values, 0.0, atol=1e-12)


def test_a_raw_mlp_on_a_power_law_fails_its_row(setting):
    """The raw MLP's row checks that it is NOT a power law (Fig. 5 left): a raw run that carries
    seed 0's exact staircase of theta = 1, which is a power law over theta = 1's window, fails the
    theta = 1 row (the plateau-then-drop default passes it, test above)."""
    L = setting["theory"]["loss_seeds"].values
    r = rows(run_fit(setting, L, L, raw=L[2, 0]))
    assert not r["raw-input MLP, theta = 1 window: power_law_test verdict (0 = not a power law)"][0]


def test_the_horizon_row_holds_by_construction_under_steps_auto(setting, exact_fit):
    """steps: auto runs each theta to 1.1 x its window's end, so the 'run reaches the window' row
    cannot fail: it is labelled construction (and stays in the summary); with the steps given it
    is a check of this project, which the mean-loss reading misses (test_fourier_powerlaw)."""
    r = rows(exact_fit)
    for j, theta in enumerate(THETAS):
        ok, measured, checks = r[f"theta = {theta:g}: the run reaches the end of the theory's fitting window"]
        assert ok and checks == "construction"
        assert measured >= 1.1 * float(setting["theory"]["t_hi_full"][j]) * (1 - 1e-12)
    src = [str(s) for q, s in zip(exact_fit["claim_quantity"].values, exact_fit["claim_source"].values)
           if "reaches the end" in str(q)]
    assert src and all(s.startswith("holds by construction (") for s in src)
    # a theory of given steps (not auto): the same row is "ours"
    given = setting["theory"].assign_attrs(steps_auto=0)
    L = setting["theory"]["loss_seeds"].values
    runs = {"fourier_mlp": fourier_run(setting, "fourier_mlp", L), "nqf": fourier_run(setting, "nqf", L),
            "raw_mlp": raw_run(setting)}
    fit = fp.fit(setting["structure"], given, runs, setting["cfg"])
    assert {c for q, c in zip(fit["claim_quantity"].values, fit["claim_checks"].values)
            if "reaches the end" in str(q)} == {"ours"}
