"""Paper Figure 3 (right), Theorem 9: the feature-wise power law and the resolved-to-merged crossover."""
import functools
import math

import numpy as np
import pytest
import torch
from helpers import experiment_config

import nqf
from nqf.experiments import featurewise_powerlaw as F
from nqf.theory.losses import loss_factor
from nqf.theory.lotka_volterra import LotkaVolterra
from nqf.theory.scaling import count_drops, count_resolved
from nqf.training.loop import log_step_grid

config = functools.partial(experiment_config, F.KIND)


@pytest.mark.parametrize("m, alpha1, alpha2", [(40, 2.0, 0.8), (25, 1.5, 1.3)])
def test_data_give_exactly_the_designed_r_C_V(m, alpha1, alpha2):
    cfg = config(m=m, alpha1=alpha1, alpha2=alpha2)
    data = F.make_data(cfg)
    st = F.structure(data, cfg)
    k = np.arange(1, m + 1.0)
    r, V = k ** -alpha2, k ** -alpha1
    assert np.allclose(st["r"].values, r, rtol=1e-12, atol=0)
    assert np.allclose(st["V"].values, V, rtol=1e-12, atol=0)
    assert np.allclose(st["C_diag"].values, r ** 2 / (8 * V), rtol=1e-12, atol=0)
    # The generic reduction (shared eigenbasis of the dense diagonal form) agrees with the compact one.
    form = F.form_of(data)
    lv = LotkaVolterra.from_data(form, data["y"].values)
    assert np.allclose(lv.r, r, rtol=1e-12, atol=0)
    assert np.allclose(lv.C, np.diag(r ** 2 / (8 * V)), rtol=1e-12, atol=1e-15)
    # The loss is sum_k V_k (1 - z_k / z*_k)^2 for any z (so its minimum 0 is the excess-loss floor).
    z = np.random.default_rng(0).uniform(0, 2, m) * st["z_star"].values
    f = form.outputs(torch.as_tensor(np.sqrt(z))[None, :, None]).numpy()[0]
    loss = np.mean((f - data["y"].values) ** 2)
    assert loss == pytest.approx(float(np.sum(V * (1 - z / st["z_star"].values) ** 2)), rel=1e-12)


def test_seeded_init_has_the_profile_in_mean_and_chi2_scatter():
    z0 = 1e-6 * np.arange(1, 201.0) ** -1.2
    W0 = F.seeded_init(z0, seeds=range(400), width=16, seed=3)
    ratio = (W0 ** 2).sum(-1) / z0  # chi^2_16 / 16: mean 1, variance 2/16
    n = ratio.size
    # chi^2_d / d (d = 16) has mean 1, variance 2/d and central fourth moment mu4 = 12 (d + 4) / d^3:
    # the sample mean lies within 4 standard errors sqrt(2/d/n), the sample variance within 4 of
    # its standard error sqrt((mu4 - (2/d)^2) / n).
    d = 16
    assert abs(ratio.mean() - 1) < 4 * math.sqrt(2 / d / n)
    var_se = math.sqrt((12 * (d + 4) / d ** 3 - (2 / d) ** 2) / n)
    assert abs(ratio.var() - 2 / d) < 4 * var_se


@pytest.mark.parametrize("lr", [0.1, 0.05])
def test_gd_follows_theorem6_within_the_first_order_bound(lr):
    """Per GD step z picks up (1 + lr g/2)^2 instead of exp(lr g), g = r - C z, so ln z drifts by
    -lr r^2 t / 4 while growing: at most lr r ln(r / (C z0)) / 4 by the ignition time and bounded
    by its saturation afterwards. The per-mode maximum error stays within that bound (5% slack
    for the O(lr^2) remainder)."""
    m, eps = 20, 1e-6
    cfg = config(m=m, eps=eps, lr=lr)
    data = F.make_data(cfg)
    st = F.structure(data, cfg)
    r, C = st["r"].values, st["C_diag"].values
    z0 = F.init_profile(m, eps, cfg["beta0"])
    model = nqf.QuadraticModel(F.form_of(data), F.deterministic_init(z0), device="cpu")
    t_end = 2.0 * float(np.max(np.log(r / (C * z0)) / r))
    ds = nqf.train(model, data["y"].values, lr=lr, steps=int(t_end / lr), n_record=300,
                   record=lambda mod: {"z": (mod.W ** 2).sum(-1)})
    t, z = ds["time"].values, ds["z"].values[0]
    z_thm = nqf.logistic_solution(r, C, z0, t)
    err = np.max(np.abs(z - z_thm) / z_thm, axis=0)
    bound = lr * r * np.log(r / (C * z0)) / 4
    assert np.all(err <= 1.05 * bound), (err / bound).max()
    # ... and the loss is the Theorem 6 excess loss: until the first half saturation every
    # u_k = z_k / z*_k <= 1/2, and a relative error b_k of u_k moves (1 - u_k)^2 by at most
    # 2 u_k b_k / (1 - u_k) <= 2 b_k of itself.
    E = F.excess_loss_curves(st["V"].values, r, C, [z0], t)[0]
    early = t <= np.min(nqf.predicted_ignition_times(r, C, z0))
    assert np.max(np.abs(ds["loss"].values[0] - E)[early] / E[early]) <= 2 * 1.05 * bound.max()


@pytest.mark.parametrize("loss", ["half_mean", "sum", "half_sum"])
def test_loss_convention_changes_only_the_clock(loss):
    """GD on c L_Eq.26 with lr / c is GD on L_Eq.26 with lr: the same iterates up to rounding
    (c lr / c differs from lr by one ulp; the logistic growth does not amplify relative errors),
    so the recorded Eq. 26 loss agrees to 1e-10 relative in float64 and the time coordinate
    c (lr / c) step to 1e-12; the theory stage puts its clock on the same times."""
    m, lr = 40, 0.1
    c = loss_factor(loss, m)
    ref_cfg = config(m=m, steps=600, n_record=60, seeds=[0, 1], width=4)
    cfg = dict(ref_cfg, loss=loss, lr=lr / c)
    data = F.make_data(ref_cfg)
    ref = F.train_run(data, F.run_config(ref_cfg, "seeds"), "seeds", device="cpu")
    got = F.train_run(data, F.run_config(cfg, "seeds"), "seeds", device="cpu")
    np.testing.assert_allclose(got["time"].values, ref["time"].values, rtol=1e-12, atol=0)
    np.testing.assert_allclose(got["loss"].values, ref["loss"].values, rtol=1e-10, atol=0)
    assert got.attrs["loss_convention"] == loss and got.attrs["loss_factor"] == c
    assert F.flow_step(got) == pytest.approx(lr, rel=1e-12)
    for name, value in (("steps", 600), ("n_record", 60), ("crossover_eps", [1e-2, 1e-4, 1e-6]), ("n_boot", 0)):
        cfg[name] = ref_cfg[name] = value
    th = F.theory(F.structure(data, cfg), cfg)
    np.testing.assert_allclose(th["time"].values, ref["time"].values, rtol=1e-12, atol=0)


@pytest.fixture(scope="module")
def small_experiment():
    """m = 300, 6 seeds of width 16: the window (modes 3..29) spans a factor 6 in t. Trained under
    the half_sum convention with lr 0.1 / (m/2): the Eq. 26 flow step is 0.1, as at the default."""
    cfg = config(m=300, steps=4800, n_record=300, seeds=list(range(6)), width=16, n_boot=400, loss="half_sum",
                 lr=0.1 / 150, crossover_eps=[1e-2, 1e-5, 1e-9, 1e-14, 1e-20])
    data = F.make_data(cfg)
    st = F.structure(data, cfg)
    th = F.theory(st, cfg)
    runs = {run: F.train_run(data, F.run_config(cfg, run), run, device="cpu") for run in F.runs(cfg)}
    return cfg, st, th, runs, F.fit(st, th, runs, cfg)


def test_end_to_end_fit_recovers_the_exponent(small_experiment):
    """Bounds on the fitted exponent, derived.

    * beta0 = alpha1 - alpha2 makes ln(r_k / (C_kk z_k0)) = ln(8 / eps) for every k, so t*_k is
      exactly proportional to k^alpha2 and the corrected prediction equals the asymptotic one.
    * Over the window the missing tail beyond mode m is at most ``cutoff`` = 10 % of the excess
      loss; for E(k) = (k^(1-a1) - m^(1-a1)) / (a1 - 1) the local exponent is
      asym / (1 - (k/m)^(a1-1)), i.e. between asym and asym / (1 - cutoff).
    * GD's rate r (1 - lr r / 4) biases the exponent by at most lr r_klo / 4 (relative), and the
      seeds add their bootstrap CI.
    """
    cfg, st, th, runs, fit = small_experiment
    asym = float(th["exponent_asymptotic"])
    assert asym == pytest.approx((cfg["alpha1"] - 1) / cfg["alpha2"], rel=1e-9)
    assert float(th["exponent_corrected"]) == pytest.approx(asym, rel=1e-9)
    b, lo, hi = (float(fit[k]) for k in ("exponent", "exponent_ci_low", "exponent_ci_high"))
    assert lo <= b <= hi
    assert float(fit["flow_lr"]) == pytest.approx(0.1, rel=1e-12)  # c lr with c = m/2
    bias = float(fit["flow_lr"]) * float(th["r"].values[int(th["window_k_lo"]) - 1]) / 4
    half = (hi - lo) / 2
    assert asym * (1 - bias) - half <= b <= asym / (1 - 0.1) * (1 + bias) + half
    # The exact theory curve obeys the same finite-size bounds, and GD tracks it.
    th_b = float(th["theory_exponent"])
    assert asym <= th_b <= asym / (1 - 0.1)
    assert abs(b - th_b) <= bias * th_b + half
    assert bool(fit["is_power_law"])


def claims(fit):
    """{quantity: (passed, tolerance, checks, source, tolerance_source)} of a fit file."""
    return {str(q): (bool(ok), float(tol), str(chk), str(src), str(ts)) for q, ok, tol, chk, src, ts in zip(
        *(fit[f"claim_{k}"].values for k in ("quantity", "passed", "tolerance", "checks", "source", "tolerance_source")))}


def test_fit_claims_pass_and_window_shifts_follow_the_theory(small_experiment):
    """(a) A valid non-default config (half_sum loss, m = 300) passes every row, each labelled, each
    closeness row with a tolerance from its error budget: 3 x (GD's O(lr) steepening 0.5 % + the
    seeds' CI 0.8 % + the exact curve's ripple 0.6 %), so the exact-curve row is held to ~6 %;
    against the asymptotic exponent the exact curve's own finite-size deviation (3.9 % at m = 300,
    computed, counted once) is added: ~10 %."""
    *_, fit = small_experiment
    rows = claims(fit)
    failed = [q for q, row in rows.items() if not row[0]]
    assert not failed, failed
    assert np.all(np.isfinite(fit["shifted_exponent"].values))
    assert rows["GD excess loss exponent vs asymptotic (alpha1-1)/alpha2"][2:4] == ("paper", F.PAPER_SOURCE)
    assert {row[2] for row in rows.values()} == {"paper", "theorem", "ours"}
    assert all(row[3] and row[4] for row in rows.values())  # every row says where it and its tolerance come from
    exact = rows["GD excess loss exponent vs exact theory curve (same window)"]
    assert exact[4].startswith("3 x (GD O(lr)") and 0.01 < exact[1] < 0.1
    asym = rows["GD excess loss exponent vs asymptotic (alpha1-1)/alpha2"]
    assert "counted once" in asym[4] and exact[1] < asym[1] < 0.15


def test_a_wrong_theory_fails_its_budget(small_experiment):
    """(b) The same GD runs judged against the theory of data with alpha2 = 0.65 instead of 0.8
    (a theory that misreads the rates' decay: exact curve 1.61, corrected 1.56 and asymptotic
    1.54 against GD's 1.29, i.e. 20 %, 17 % and 16 % off) fail all three exponent rows: the
    exact-curve budget is ~9 %, and the other two add the wrong theory's own finite-size
    deviation (~3.5 %) for ~12-13 %. (At alpha2 = 0.75, 7 % off, the exact-curve row alone
    fails: the asymptotic rows cannot be sharper than the finite-size deviation.)"""
    cfg, st, _, runs, _ = small_experiment
    wrong_cfg = dict(cfg, alpha2=0.65)
    wrong_th = F.theory(F.structure(F.make_data(wrong_cfg), wrong_cfg), wrong_cfg)
    rows = claims(F.fit(st, wrong_th, runs, cfg))
    for name in ("exact theory curve (same window)", "finite-eps corrected", "asymptotic (alpha1-1)/alpha2"):
        assert not rows[f"GD excess loss exponent vs {name}"][0], name


def test_crossover_count_grows_linearly_with_ln_inv_eps():
    """Exact Theorem 6 curves: the number of distinct drops increases with ln(1/eps); the modes
    resolved by the gap > width criterion follow k < alpha2 ln(8/eps) / ln 81 within one mode
    (the gap between consecutive ignitions is alpha2 ln(8/eps) k^(alpha2-1) to first order in
    1/k, their mean width ln 81 k^alpha2)."""
    cfg = config(m=300)
    st = F.structure(F.make_data(cfg), cfg)
    r, C, V = st["r"].values, st["C_diag"].values, st["V"].values
    t = 0.1 * log_step_grid(8000, 400)
    eps_list = [1e-2, 1e-6, 1e-12, 1e-20, 1e-30]
    counts, resolved = [], []
    for eps in eps_list:
        z0 = F.init_profile(r.size, eps, cfg["beta0"])
        counts.append(count_drops(t, F.excess_loss_curves(V, r, C, [z0], t)[0]))
        resolved.append(count_resolved(nqf.predicted_ignition_times(r, C, z0), r))
        law = cfg["alpha2"] * math.log(8 / eps) / math.log(81)
        assert abs(resolved[-1] - law) <= 1.0, (eps, resolved[-1], law)
    assert np.all(np.diff(counts) > 0), counts
    assert counts[-1] >= counts[0] + 8


def test_gd_counts_the_theory_drops(small_experiment):
    *_, fit = small_experiment
    assert np.array_equal(fit["drops_measured"].values, fit["drops_predicted"].values)
    assert np.all(np.diff(fit["drops_measured"].values) >= 0)


def test_a_run_that_stops_before_the_shifted_window_is_refused_and_not_judged(small_experiment):
    """The exponent rows refit the window with its end doubled (hi*2: t = 2 x 235.1 = 470.1 at
    m = 300): 3000 steps of flow step 0.1 (t = 300) are refused naming steps >= 4702; a run that
    stops at t = 300 anyway (the small experiment's record cut there) leaves the hi*2 row not judged
    ('not reached: run too short'), while every other row is judged and passes as at 4800 steps."""
    from nqf.experiments.claims import summary_rows

    cfg, st, th, runs, _ = small_experiment
    (key, sentence), = F.check({**cfg, "steps": 3000})
    assert key == "steps" and "the fitting window's end (mode 29, window t in [38.28, 235.1])" in sentence
    assert "steps >= 4702 would reach it" in sentence
    assert F.check({**cfg, "steps": 4702}) == [] and F.check({**cfg, "steps": 4701})
    seeds = runs["seeds"]
    cut = {**runs, "seeds": seeds.isel(step=np.flatnonzero(seeds["time"].values <= 300.0))}
    rows = summary_rows("fp", F.fit(st, th, cut, cfg))
    open_ = [r for r in rows if not r["judged"]]
    assert [r["quantity"] for r in open_] == ["GD excess loss exponent, window end hi*2: GD vs exact theory"]
    assert open_[0]["note"].startswith("not reached: run too short (the run ends at t = ") and \
        "the shifted window ends at t = 470.1; steps >= 4702 would reach it)" in open_[0]["note"]
    assert all(r["passed"] for r in rows if r["judged"]), [r["quantity"] for r in rows if r["judged"] and not r["passed"]]
