"""Experiment kind ``competition``: coupled Lotka-Volterra modes (beyond the paper).

Commuting (diagonal) data matrices whose interaction matrix C = (8/m) Lambda^T Lambda is not
diagonal, so modes compete: with the default data, mode 1 ignites first and is pushed back to
zero when mode 3 ignites. Three descriptions are compared at several eps: gradient descent on
the quadratic model, numerical integration of the GLV, and the eps -> 0 staircase of SCIENCE.md
section 5 (rescaled time tau = t / ln(1/eps)). Each run is one eps, so adding an eps value trains
only that run.

Loss convention (``loss``, nqf.theory.losses): one GD step of lr advances the Eq. 26 flow by eta = c lr;
each run takes ceil(tau_max ln(1/eps) / eta) steps, records time in that clock, and the theory
uses the same clock.

Claims and their tolerances (``tolerances.safety_factor`` times the run's error budget,
nqf.experiments.claims.ErrorBudget):

* GD ignition times against the coupled GLV (Eq. 32), per eps and mode. GD multiplies z_k by
  (1 + eta g_k / 2)^2 per step, g_k = r_k - (C z)_k, where the flow multiplies it by exp(eta g_k):
  GD follows the modified flow d ln z_k / dt = (2 / eta) ln(1 + eta g_k / 2) up to O(eta^2). With
  coupled modes the first-order shift is not one number per mode (a mode delayed by GD holds
  back its competitors for longer, which then ignite early), so the theory integrates that
  modified flow too, and the budget term is its ignition shift |t*_mod - t*_GLV| / t*_GLV.
* staircase plateau losses against the GLV loss at the smallest eps (this project's section 5):
  at the flattest point of a plateau the modes outside the ignited set S sit at
  z_k ~ eps^|x_k(tau)| and move the loss by |g_k(S)| z_k / 4 (the loss is quadratic, with
  gradient -g / 4 at the equilibrium); the budget is that sum with the staircase's x_k, plus
  float64 rounding of the loss.
* bounds without a budget: the staircase gap shrinks as eps falls (it is O(1/ln(1/eps))), and a
  suppressed mode ends below ``suppressed_fraction`` of its peak.

A run too short for a row is not a miss: an ignition the GLV does not reach within the run (its
time on the run's grid is NaN), a staircase gap of such a mode, a plateau the run stops before,
and a suppression the run ends too soon after say "not reached: run too short" with the tau_max
that would reach them (:func:`needed_taus`) and are not judged. ``check`` refuses a tau_max below
that before any job starts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from nqf.experiments.claims import Claim, ErrorBudget, claims_dataset, reach_problems, reached, run_too_short
from nqf.experiments.diagonal_gd import INIT, identity_init_model
from nqf.experiments.ids import exact_number
from nqf.experiments.structure_files import lv_from_structure
from nqf.experiments.verify_runs import check_runs
from nqf.theory.ignition import ignition_times
from nqf.theory.losses import flow_lr
from nqf.theory.lotka_volterra import glv
from nqf.theory.staircase import staircase
from nqf.training.loop import log_step_grid, train

KIND = "competition"
# facts the generic checks and reports read (nqf.experiments.contract.OPTIONAL)
FINITE_THEORY = ("z", "tau", "loss", "r", "C")
RUN_DIMS_OF_STRUCTURE = ("mode",)  # one z per mode of the structure's shared eigenbasis
FIT_VARIABLES = ("t_star_measured", "t_star_predicted", "t_star_gd_shift", "tau_star_staircase", "staircase_gap")


def config_sizes(cfg: dict) -> dict[str, int]:
    """One sample per row of ``lam``, one parameter and mode per column, in every file."""
    lam = cfg.get("lam")
    if not (isinstance(lam, list) and lam and isinstance(lam[0], list)):
        return {}
    return {"sample": len(lam), **dict.fromkeys(("param", "param_j", "mode", "mode_j"), len(lam[0]))}


SOURCE_GLV = "Eq. 32 (GLV under Assumption 1, Prop. 7)"
SOURCE_STAIRCASE = "the eps -> 0 staircase of the GLV (SCIENCE.md section 5; this project's)"
STAGE_KEYS = {
    "data": ("lam", "y"),
    "structure": (),
    "train": ("eps", "tau_max", "loss", "lr", "n_record", "dtype"),
    "theory": ("eps", "tau_max", "loss", "lr", "n_record"),
    "fit": ("eps", "tolerances"),
    "figure": ("description", "eps"),
}


RUN_ID_KEYS = ("eps",)


def run_id(eps: float) -> str:
    """'eps1e-04': eps in its shortest exact form (nqf.experiments.ids), one id per value."""
    return f"eps{exact_number(eps)}"


def runs(cfg: dict) -> list[str]:
    return [run_id(e) for e in cfg["eps"]]


def _eps_of(cfg: dict, run: str) -> float:
    for eps in cfg["eps"]:
        if run_id(eps) == run:
            return float(eps)
    raise ValueError(f"Run {run!r} is not one of this experiment's runs ({', '.join(runs(cfg))}).")


def run_config(cfg: dict, run: str) -> dict:
    """One eps per run: its own params, so other eps values can be added or removed freely."""
    return {"eps": _eps_of(cfg, run), **{k: cfg[k] for k in ("tau_max", "loss", "lr", "n_record", "dtype")}}


def steps_for(eps: float, tau_max: float, eta: float) -> int:
    """GD steps covering rescaled time tau_max at this eps; ``eta`` is the flow step c lr of the
    loss convention (nqf.theory.losses.flow_lr)."""
    # the 1e-9 absorbs rounding in eta = c lr, so lr / c under convention c takes the same steps
    return int(np.ceil(tau_max * np.log(1.0 / eps) / eta - 1e-9))


def check(cfg: dict) -> list[tuple[str, str]]:
    """Cross-key problems found before any job starts: lam must be a rectangle with one row per
    target of y."""
    lam, y = cfg["lam"], cfg["y"]
    widths = sorted({len(row) for row in lam})
    if len(widths) > 1:
        short = next(i for i, row in enumerate(lam) if len(row) != len(lam[0]))
        return [("lam", f"rows must all have the same length (one eigenvalue per mode); row 0 has "
                        f"{len(lam[0])} entries, row {short} has {len(lam[short])}.")]
    if len(lam) != len(y):
        return [("lam", f"has {len(lam)} rows but y has {len(y)} targets; give one row of lam per "
                        f"target (sample).")]
    from scipy.optimize import nnls

    from nqf.experiments.divergence import unstable_lr

    lam_arr, y_arr = np.asarray(lam, float), np.asarray(y, float)
    z_star, _ = nnls(lam_arr, y_arr)  # the end point the modes settle at (nqf.experiments.structure_files.min_loss)
    problems = unstable_lr(cfg["lr"], cfg["loss"], y_arr.size, 8.0 / y_arr.size * lam_arr.T @ lam_arr, z_star)
    if problems:
        return problems
    m = y_arr.size
    sc = staircase(8.0 / m * lam_arr.T @ y_arr, 8.0 / m * lam_arr.T @ lam_arr, -1.0, loss0=float(np.mean(y_arr ** 2)))
    names, predicted, needed = needed_taus(sc, [float(e) for e in cfg["eps"]],
                                           float(cfg["tolerances"]["suppressed_fraction"]))
    return reach_problems("tau_max", float(cfg["tau_max"]), needed, predicted, None, names,
                          to_key=tau_max_to_reach, clock="tau = tau_max", unit="tau", event="the last event",
                          margin="the staircase's event plus its O(1/ln(1/eps)) finite-eps shift")


def tau_max_to_reach(tau: float) -> float:
    """The tau_max that reaches ``tau``, rounded up to two decimals."""
    return float(np.ceil(float(tau) * 100 - 1e-9) / 100)


def needed_taus(sc, eps_list: list[float], fraction: float) -> tuple[list[str], np.ndarray, np.ndarray]:
    """What the rows need the run to reach, in tau = t / ln(1/eps) (one value per event): each
    ignition of the eps -> 0 staircase, widened by the O(1/ln(1/eps)) finite-eps shift at the
    largest eps (a relative margin 1/ln(1/eps_max)), and each suppression followed by the time the
    suppressed mode takes at the smallest eps to fall to ``fraction`` of its peak, ln(1/fraction) /
    (|g_k| ln(1/eps_min)), g_k its rate after suppression. Returns (names, the staircase's event
    taus, the needed taus)."""
    widen = 1.0 + 1.0 / np.log(1.0 / max(eps_list))
    names, predicted, needed = [], [], []
    for k in np.flatnonzero(np.isfinite(sc.ignition_tau)):
        names.append(f"the ignition of mode {k + 1}")
        predicted.append(sc.ignition_tau[k])
        needed.append(sc.ignition_tau[k] * widen)
    for k in sc.suppressed:
        tau_s = float(sc.suppression_tau[k])
        x = sc.x(np.array([tau_s + 1e-6, tau_s + 1e-3]))[:, k]
        rate = abs(float(x[1] - x[0])) / (1e-3 - 1e-6)
        fall = np.log(1.0 / fraction) / (rate * np.log(1.0 / min(eps_list))) if rate > 0 else np.inf
        names.append(f"the suppression of mode {k + 1} (to {fraction:g} of its peak at eps {min(eps_list):.0e})")
        predicted.append(tau_s)
        needed.append(tau_s * widen + fall)
    return names, np.array(predicted, float), np.array(needed, float)


def estimate(cfg: dict) -> dict:
    """The largest run (nqf.experiments.machine): the recorded M history (n_record x p^2, stacked
    once more at the end) and its steps tau_max ln(1/eps) / (c lr) at the smallest eps."""
    p = max((len(row) for row in cfg["lam"]), default=1)
    m, n = len(cfg["y"]), int(cfg["n_record"])
    eta = flow_lr(cfg["lr"], cfg.get("loss", "mean"), m)
    eps = min(float(e) for e in cfg["eps"])
    return {"bytes": 8 * (2 * n * p * p + 4 * p * p + m * p), "key": "n_record",
            "what": f"{p} modes: M of {p}x{p} at {n} recorded steps",
            "steps": steps_for(eps, cfg["tau_max"], eta), "steps_key": "lr",
            "steps_what": f"tau_max ln(1/eps) / (c lr) at eps {eps:g}, lr {cfg['lr']:g}"}


def gd_modified_glv(r, C, z0, t, eta: float, *, rtol: float = 1e-10, atol: float = 1e-12) -> np.ndarray:
    """GD's modified flow: d ln z_k / dt = (2 / eta) ln(1 + eta g_k / 2), g = r - C z, whose one
    step of length eta multiplies z_k by (1 + eta g_k / 2)^2 as one GD step does (exact for
    constant g; O(eta^2) otherwise). Returns z at the times ``t``, shape (len(t), K)."""
    r, C = np.asarray(r, float), np.asarray(C, float)
    u0 = np.log(np.broadcast_to(np.asarray(z0, float), r.shape))

    # Trial stages of the implicit solver can overshoot (as in nqf.glv); they are rejected by the
    # error control, and the accepted solution is checked to be finite below.
    def rhs(_, u):
        g = r - C @ np.exp(np.minimum(u, 700.0))
        return 2.0 / eta * np.log1p(eta * g / 2.0)

    def jac(_, u):
        z = np.exp(np.minimum(u, 700.0))
        g = r - C @ z
        return -(C * z[None, :]) / (1.0 + eta * g / 2.0)[:, None]

    from scipy.integrate import solve_ivp  # here: planning a run imports the kinds, not SciPy

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        sol = solve_ivp(rhs, (0.0, float(t[-1])), u0, method="Radau", t_eval=t, jac=jac, rtol=rtol, atol=atol)
    if not sol.success or not np.all(np.isfinite(sol.y)):
        raise RuntimeError(f"Integration of GD's modified GLV failed: {sol.message} (is lr beyond GD's stability?)")
    return np.exp(sol.y.T)


def make_data(cfg: dict) -> xr.Dataset:
    lam = np.asarray(cfg["lam"], float)
    y = np.asarray(cfg["y"], float)
    if lam.ndim != 2 or lam.shape[0] != y.size:
        raise ValueError(f"'lam' must be a list of {y.size} rows (one per sample, like 'y'); "
                         f"got shape {lam.shape}.")
    return xr.Dataset(
        {"A_diag": (("sample", "param"), lam, {"units": "1", "long_name": "diagonal of A(x_mu)"}),
         "y": ("sample", y, {"units": "1", "long_name": "target y_mu"})},
        coords={"sample": np.arange(y.size), "param": np.arange(lam.shape[1])},
        attrs={"structure_form": "diagonal", "experiment_kind": KIND},
    )


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    eps = cfg["eps"] if np.isscalar(cfg["eps"]) else _eps_of(cfg, run)
    loss = cfg.get("loss", "mean")
    model = identity_init_model(data, eps, cfg["dtype"], device)
    eta = flow_lr(cfg["lr"], loss, data.sizes["sample"])
    ds = train(model, data["y"].values, lr=cfg["lr"], steps=steps_for(eps, cfg["tau_max"], eta),
               loss=loss, n_record=cfg["n_record"])
    ds["z"] = (("seed", "step", "mode"), np.einsum("sikk->sik", ds["M"].values),
               {"units": "1", "long_name": "mode amplitude z_k = M_kk"})
    ds = ds.assign_coords(tau=("step", ds["time"].values / np.log(1 / eps), {
        "units": "1", "long_name": "rescaled time t / ln(1/eps)"}))
    ds.attrs.update(run=run, experiment_kind=KIND, eps=eps, init=INIT)
    return ds


def theory(structure: xr.Dataset, cfg: dict) -> xr.Dataset:
    """GLV trajectories per eps on each run's time grid (in the Eq. 26 flow clock), the ignition
    times of GD's modified flow (its first-order error, see gd_modified_glv), and the eps -> 0
    staircase."""
    lv = lv_from_structure(structure)
    loss0 = float(np.mean(lv.y ** 2))
    sc = staircase(lv.r, lv.C, -1.0, loss0=loss0)
    eta = flow_lr(cfg["lr"], cfg["loss"], lv.y.size)
    n = cfg["n_record"]
    ignition_level = sc.ignition_level
    z_all, tau_all, t_gd = [], [], []
    for eps in cfg["eps"]:
        steps = log_step_grid(steps_for(eps, cfg["tau_max"], eta), n)
        t = eta * steps
        z0 = np.full(lv.modes, eps)
        z = glv(lv.r, lv.C, z0, t, method="Radau")
        t_gd.append(ignition_times(t, gd_modified_glv(lv.r, lv.C, z0, t, eta), saturation=ignition_level))
        z_all.append(np.pad(z, ((0, n - len(t)), (0, 0)), constant_values=np.nan))
        tau_all.append(np.pad(t / np.log(1 / eps), (0, n - len(t)), constant_values=np.nan))
    z_all = np.array(z_all)
    t_star = np.array([ignition_times(tau * np.log(1 / eps), z, saturation=ignition_level)
                       for eps, tau, z in zip(cfg["eps"], tau_all, z_all)])
    plateau_tau = np.append(sc.tau_start, np.inf)
    return xr.Dataset(
        {
            "z": (("eps", "point", "mode"), z_all, {"units": "1", "long_name": "z_k from GLV integration"}),
            "tau": (("eps", "point"), np.array(tau_all), {"units": "1", "long_name": "rescaled time t / ln(1/eps)"}),
            "loss": (("eps", "point"), np.array([lv.loss(z) for z in z_all]), {"units": "1", "long_name": "GLV loss"}),
            "t_star": (("eps", "mode"), t_star, {"units": "1", "long_name": "GLV time z_k reaches half its ignition level"}),
            "t_star_gd_flow": (("eps", "mode"), np.array(t_gd), {
                "units": "1", "long_name": "the same for GD's modified flow d ln z / dt = (2/eta) ln(1 + eta g / 2)"}),
            "tau_star": ("mode", sc.ignition_tau, {"units": "1", "long_name": "staircase ignition time (eps -> 0)"}),
            "tau_suppressed": ("mode", sc.suppression_tau, {"units": "1", "long_name": "staircase suppression time (inf: never)"}),
            "ignition_level": ("mode", ignition_level, {"units": "1", "long_name": "z*_k on the plateau its ignition opens"}),
            "plateau_tau_start": ("plateau", sc.tau_start, {"units": "1", "long_name": "rescaled time a plateau begins"}),
            "plateau_loss": ("plateau", sc.loss, {"units": "1", "long_name": "staircase loss on each plateau"}),
            "plateau_z": (("plateau", "mode"), sc.z_at(sc.tau_start), {"units": "1", "long_name": "equilibrium z* on each plateau"}),
            "plateau_tau_end": ("plateau", plateau_tau[1:], {"units": "1", "long_name": "rescaled time a plateau ends"}),
            "r": ("mode", lv.r, {"units": "1", "long_name": "Lotka-Volterra growth rates"}),
            "C": (("mode", "mode_j"), lv.C, {"units": "1", "long_name": "Lotka-Volterra interaction matrix"}),
        },
        coords={"eps": np.asarray(cfg["eps"], float), "mode": np.arange(lv.modes), "mode_j": np.arange(lv.modes),
                "plateau": np.arange(sc.tau_start.size)},
        attrs={"experiment_kind": KIND, "loss0": loss0, "flow_lr": eta},
    )


def _plateau_flattest(tau: np.ndarray, loss: np.ndarray, start: float, end: float) -> tuple[float, float]:
    """(tau, loss) where the loss varies least inside a plateau's tau window (its finite-eps best
    estimate); NaNs if the window holds fewer than 3 recorded points."""
    inside = np.flatnonzero((tau > start) & (tau < min(end, np.nanmax(tau))))
    if inside.size < 3:
        return np.nan, np.nan
    slope = np.abs(np.gradient(loss[inside], tau[inside]))
    i = inside[np.argmin(slope)]
    return float(tau[i]), float(loss[i])


def plateau_offset(sc, r: np.ndarray, C: np.ndarray, tau: float, eps: float) -> float:
    """Finite-eps offset of the loss from its plateau at rescaled time tau: the modes outside the
    ignited set sit at z_k = eps^|x_k(tau)| and move the loss by |g_k| z_k / 4 each (the loss's
    gradient in z at the plateau's equilibrium is -g / 4)."""
    if not np.isfinite(tau):
        return np.nan
    x = sc.x(np.array([tau]))[0]
    g = r - C @ sc.z_at(np.array([tau]))[0]
    out = x < 0
    return float(np.sum(np.abs(g[out]) * eps ** np.abs(x[out])) / 4)


@dataclass(frozen=True)
class Ignitions:
    """Per eps (``eps_list``, the config's order) and mode: GD's ignition time (on each run) and
    the GLV's, GD's modified-flow shift, and the staircase gap |t*_GLV / ln(1/eps) - tau*_k|."""

    eps_list: list
    tau_star: np.ndarray  # the staircase's ignition taus
    t_gd: np.ndarray
    t_glv: np.ndarray
    gd_shift: np.ndarray
    gap: np.ndarray


def measure_ignitions(theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> Ignitions:
    """GD's ignition times (z_k reaches half its ignition level) beside the GLV's and the staircase's."""
    eps_list = [float(e) for e in cfg["eps"]]
    level = theory_ds["ignition_level"].values
    tau_star = theory_ds["tau_star"].values
    t_gd = np.array([ignition_times(run_ds[run_id(e)]["time"].values, run_ds[run_id(e)]["z"].values[0],
                                    saturation=level) for e in eps_list])
    t_glv = theory_ds["t_star"].values
    with np.errstate(invalid="ignore"):
        gd_shift = np.abs(theory_ds["t_star_gd_flow"].values - t_glv) / t_glv
    logs = np.log(1 / np.array(eps_list))
    gap = np.abs(t_glv / logs[:, None] - tau_star[None, :])
    return Ignitions(eps_list, tau_star, t_gd, t_glv, gd_shift, gap)


@dataclass(frozen=True)
class Reach:
    """What the runs reach, in tau = t / ln(1/eps): the end of the shortest (each run ends at its
    own tau, ceil(tau_max ln(1/eps) / eta) steps), and the tau the last event needs (needed_taus)."""

    tau_end: float
    tau_needed: float

    def too_short(self, tau_pred: float, what: str = "the staircase puts it at") -> str:
        return run_too_short(self.tau_end, tau_pred, tau_max_to_reach(max(self.tau_needed, tau_pred)), what=what,
                             key="tau_max", clock="tau")


def measure_reach(sc, run_ds: dict[str, xr.Dataset], eps_list: list[float], fraction: float) -> Reach:
    """:class:`Reach` of the runs, for the staircase ``sc`` and ``tolerances.suppressed_fraction``."""
    tau_end = min(float(run_ds[run_id(e)]["tau"].values[-1]) for e in eps_list)
    _, _, needed = needed_taus(sc, eps_list, fraction)
    return Reach(tau_end, float(np.max(needed)) if needed.size else tau_end)


def fit_dataset(ign: Ignitions, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset]) -> xr.Dataset:
    """The measured and predicted ignitions of the fit file (FIT_VARIABLES)."""
    return xr.Dataset(
        {"t_star_measured": (("eps", "mode"), ign.t_gd, {"units": "1", "long_name": "GD ignition time"}),
         "t_star_predicted": (("eps", "mode"), ign.t_glv, {"units": "1", "long_name": "GLV ignition time"}),
         "t_star_gd_shift": (("eps", "mode"), ign.gd_shift, {"units": "1", "long_name": "GD's first-order shift: |t*_modified - t*_GLV| / t*_GLV"}),
         "tau_star_staircase": ("mode", ign.tau_star, {"units": "1", "long_name": "staircase ignition time"}),
         "staircase_gap": (("eps", "mode"), ign.gap, {"units": "1", "long_name": "|t*_GLV / ln(1/eps) - tau*_staircase|"})},
        coords={"eps": ign.eps_list, "mode": theory_ds["mode"].values},
        attrs={"experiment_kind": KIND, "lr": float(run_ds[run_id(ign.eps_list[0])].attrs["lr"]),
               "flow_lr": float(theory_ds.attrs.get("flow_lr", np.nan))},
    )


def judge_ignitions(ign: Ignitions, reach: Reach, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset],
                    factor: float) -> list[Claim]:
    """Per eps and igniting mode, GD's ignition time against the GLV's within the modified-flow shift."""
    claims = []
    for i, eps in enumerate(ign.eps_list):
        run_end = float(run_ds[run_id(eps)]["time"].values[-1])
        for k in np.flatnonzero(np.isfinite(ign.tau_star)):
            budget = ErrorBudget({"GD O(lr): modified-flow shift": ign.gd_shift[i, k]}, factor)
            claim = budget.claim(
                f"eps {eps:.0e}: GD ignition time of mode {k + 1}", float(ign.t_glv[i, k]), float(ign.t_gd[i, k]),
                checks="theorem", source=SOURCE_GLV,
                note=f"GD vs coupled GLV integration; GD's modified flow ignites at {theory_ds['t_star_gd_flow'].values[i, k]:.6g}")
            # the GLV's crossing is on the run's own grid: NaN when the run stops before it
            latest = ign.t_glv[i, k] * (1 + claim.tolerance) if np.isfinite(claim.tolerance) else ign.t_glv[i, k]
            if not reached(run_end, latest, claim.measured):
                claim = claim.not_judged(reach.too_short(float(ign.tau_star[k])))
            claims.append(claim)
    return claims


def judge_gaps(ign: Ignitions, reach: Reach) -> list[Claim]:
    """Per igniting mode, the bound: the staircase gap shrinks as eps falls."""
    claims = []
    order = np.argsort(ign.eps_list)[::-1]  # from large to small eps
    for k in np.flatnonzero(np.isfinite(ign.tau_star)):
        g = ign.gap[order, k]
        ratio = float(np.max(g[1:] / g[:-1])) if g.size > 1 else np.nan
        claim = Claim(f"mode {k + 1}: staircase gap shrinks as eps falls (max ratio of consecutive gaps)",
                      1.0, ratio, np.nan, comparison="at_most", checks="ours", source=SOURCE_STAIRCASE,
                      tolerance_source="bound: the staircase is the eps -> 0 limit, so |t*_GLV / ln(1/eps) - "
                                       "tau*| must fall with eps (it is O(1/ln(1/eps))); no tolerance",
                      note=f"gap {g[0]:.3g} at eps {ign.eps_list[order[0]]:.0e} -> {g[-1]:.3g} at "
                           f"{ign.eps_list[order[-1]]:.0e}; O(1/ln(1/eps))")
        if g.size > 1 and not np.all(np.isfinite(g)):  # the GLV did not ignite within some run
            claim = claim.not_judged(reach.too_short(float(ign.tau_star[k])))
        claims.append(claim)
    return claims


def judge_plateaus(sc, reach: Reach, structure: xr.Dataset, theory_ds: xr.Dataset, eps_min: float,
                   smallest: int, factor: float) -> list[Claim]:
    """Per plateau, the staircase's loss against the GLV loss at its flattest point at the
    smallest eps (theory row ``smallest``), within the finite-eps offset and float64 rounding."""
    r, C, loss0 = theory_ds["r"].values, theory_ds["C"].values, float(theory_ds.attrs["loss0"])
    tau_run = theory_ds["tau"].values[smallest]
    loss_run = theory_ds["loss"].values[smallest]
    starts, ends = theory_ds["plateau_tau_start"].values, theory_ds["plateau_tau_end"].values
    rounding = np.finfo(float).eps * structure.sizes["sample"] * loss0
    claims = []
    for j, value in enumerate(theory_ds["plateau_loss"].values):
        tau_f, flat = _plateau_flattest(tau_run, loss_run, starts[j], ends[j])
        budget = ErrorBudget({"finite eps: sum_k |g_k| eps^|x_k| / 4": plateau_offset(sc, r, C, tau_f, eps_min),
                              "float64 rounding": rounding}, factor)
        claim = budget.claim(
            f"plateau {j} loss (staircase vs GLV at eps {eps_min:.0e})", float(value), flat, relative=False,
            checks="ours", source=SOURCE_STAIRCASE,
            note=f"GLV loss at the flattest point of the plateau, tau = {tau_f:.3g}")
        if not np.isfinite(flat) and ends[j] > np.nanmax(tau_run):  # the run stops before the plateau shows
            claim = claim.not_judged(reach.too_short(float(starts[j]), what="the plateau begins at"))
        claims.append(claim)
    return claims


def judge_suppressions(ign: Ignitions, reach: Reach, theory_ds: xr.Dataset, run: xr.Dataset, eps_min: float,
                       fraction: float) -> list[Claim]:
    """Per mode the staircase suppresses, the bound: GD's final z at the smallest eps (``run``)
    is below ``fraction`` of its peak."""
    claims = []
    for k in np.flatnonzero(np.isfinite(theory_ds["tau_suppressed"].values)):
        z = run["z"].values[0, :, k]
        tau_s = float(theory_ds["tau_suppressed"].values[k])
        claim = Claim(f"mode {k + 1} suppressed: final z / peak z in GD at eps {eps_min:.0e}",
                      fraction, float(z[-1] / np.max(z)), np.nan,
                      comparison="at_most", checks="ours", source=SOURCE_STAIRCASE,
                      tolerance_source="bound: the staircase sends a suppressed mode to z = 0 (x_k falls at "
                                       "rate g_k < 0); tolerances.suppressed_fraction is the threshold",
                      note=f"staircase: ignites at tau {ign.tau_star[k]:.3f}, suppressed at tau {tau_s:.3f}")
        if not claim.passed and reach.tau_end < reach.tau_needed:  # the run ends before the mode has had time to fall
            claim = claim.not_judged(reach.too_short(tau_s, what="the suppression begins at"))
        claims.append(claim)
    return claims


def fit(structure: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """GD's ignitions beside the GLV's and the staircase's, with the claims (see the module
    docstring): measured by :func:`measure_ignitions` and :func:`measure_reach`, judged by the
    judge_* functions."""
    check_runs(run_ds, {run_id(e): {"experiment_kind": KIND, "eps": float(e)} for e in cfg["eps"]})
    factor, fraction = float(cfg["tolerances"]["safety_factor"]), float(cfg["tolerances"]["suppressed_fraction"])
    ign = measure_ignitions(theory_ds, run_ds, cfg)
    sc = staircase(theory_ds["r"].values, theory_ds["C"].values, -1.0, loss0=float(theory_ds.attrs["loss0"]))
    reach = measure_reach(sc, run_ds, ign.eps_list, fraction)
    smallest = int(np.argsort(ign.eps_list)[::-1][-1])
    eps_min = ign.eps_list[smallest]
    claims = (judge_ignitions(ign, reach, theory_ds, run_ds, factor) + judge_gaps(ign, reach)
              + judge_plateaus(sc, reach, structure, theory_ds, eps_min, smallest, factor)
              + judge_suppressions(ign, reach, theory_ds, run_ds[run_id(eps_min)], eps_min, fraction))
    return xr.merge([fit_dataset(ign, theory_ds, run_ds), claims_dataset(claims)])
