"""Predict the whole training curve before training: pick the exact solution whose condition holds.

:func:`predict` checks, on the data and the initial state, the condition of every solved regime
of Section 5 and App. B.7 and uses the first that holds (to ``tol``, relative):

  theorem7    isotropic second moment (Assumption 2)          Riccati closed form, any M0
  theorem6    Assumption 1, orthogonal features (C diagonal)   logistic modes
  theorem5    Assumption 1, orthogonal samples                 one implicit integral per sample
  theorem4    Assumption 1, proportional samples               one implicit integral
  glv         Assumption 1, anything else                      numerical GLV (log-state Radau)
  corollary4  rectangular A, balanced aligned init (Thm 16)    Saxe logistic modes
  theorem16   projectors satisfying Eq. 253-254                logistic modes
  mflow       nothing applies                                   numerical M-flow

Under Assumption 1 the off-diagonal entries of P^T M P are slaved (Prop. 7):
P^T M(t) P = D(t) P^T M0 P D(t) with D = diag(sqrt(z(t) / z(0))), so every method returns the full
M(t). The returned :class:`Solution` says which method was used and the residual of its condition;
``conditions`` holds every residual that was computed, so a near miss is visible.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import xarray as xr

from nqf import validate
from nqf.theory.closed_forms import theorem4, theorem5, theorem7, theorem16
from nqf.theory.forms import DiagonalForm, StructureForm
from nqf.theory.losses import sample_count
from nqf.theory.lotka_volterra import (
    LotkaVolterra,
    glv,
    logistic_solution,
    lv_coefficients,
    mode_order,
    shared_eigenbasis,
)
from nqf.theory.mflow import SecondMoment, mflow

_DENSE_CHECK_ELEMENTS = 2 ** 26  # largest m * p^2 for which dense A_mu are formed for the checks


@dataclass
class Solution:
    """A predicted trajectory: M(t), the loss, and (when a mode basis exists) the amplitudes z.

    ``loss`` is (1/n) sum_mu sum_c (f_mu,c - y_mu,c)^2 with n = y.shape[0] samples and ``t`` the
    gradient-flow time of that loss, the clock of :func:`nqf.train` (t = c lr step; nqf.theory.losses).
    Modes: ``z[:, k]`` = basis[:, k]^T M basis[:, k], so ``basis[:, k]`` is mode k's direction in
    the user's parameter space (p entries). Under Assumption 1 (theorem6/5/4, glv) the modes are
    ordered by decreasing growth rate r_k = ``info['r']`` (the ignition order from a common
    initial scale), and diagonal data keep the coordinate order (basis = I); under
    theorem16/corollary4 the modes the flow moves (z0 > 0, ``info['support']``) come first, by
    decreasing rate gamma_a, and Corollary 4's ``tau``, ``rho``, ``c`` and its singular directions
    ``u`` (n_out, r), ``v`` (n_in, r) are given over that support only.
    """

    method: str
    residual: float
    conditions: dict
    t: np.ndarray
    M: np.ndarray
    loss: np.ndarray
    z: np.ndarray | None = None
    basis: np.ndarray | None = None
    info: dict = field(default_factory=dict)

    def to_dataset(self) -> xr.Dataset:
        """xarray form: M (time, row, col), loss (time), z (time, mode) when available."""
        ds = xr.Dataset(
            {"M": (("time", "row", "col"), self.M, {"units": "1", "long_name": "order parameter M"}),
             "loss": ("time", self.loss, {"units": "1", "long_name": "training loss"})},
            coords={"time": ("time", self.t, {"units": "1", "long_name": "gradient-flow time"})})
        if self.z is not None:
            ds["z"] = (("time", "mode"), self.z, {"units": "1", "long_name": "mode amplitude z_k"})
        ds.attrs.update(method=self.method, condition_residual=self.residual,
                        **{f"residual_{k}": float(v) for k, v in self.conditions.items()})
        return ds


def _rel_offdiag(X: np.ndarray) -> float:
    norm = np.linalg.norm(X)
    return float(np.linalg.norm(X - np.diag(np.diagonal(X))) / norm) if norm > 0 else 0.0


def sample_conditions(lam: np.ndarray) -> dict:
    """Residuals of Theorem 5 (orthogonal samples) and Theorem 4 (proportional samples).

    theorem5: largest second-largest |lambda_mu,k| over modes, relative to max |lambda|
    (A_mu A_nu = 0 for mu != nu exactly when every mode belongs to at most one sample).
    theorem4: sigma_2 / sigma_1 of Lambda (A_mu = c_mu A exactly when Lambda has rank one).
    """
    lam = np.asarray(lam, float)
    top = max(float(np.max(np.abs(lam), initial=0.0)), 1e-300)
    second = np.sort(np.abs(lam), axis=0)[-2] if lam.shape[0] > 1 else np.zeros(lam.shape[1])
    sv = np.linalg.svd(lam, compute_uv=False)
    return {"theorem5": float(np.max(second, initial=0.0) / top),
            "theorem4": float(sv[1] / sv[0]) if sv.size > 1 and sv[0] > 0 else 0.0}


def theorem16_conditions(stats: SecondMoment, M0: np.ndarray, seed: int = 0) -> dict:
    """Theorem 16 with rank-one projectors q_a q_a^T from a joint eigenbasis of Y and M0.

    Eq. 253 holds iff q_a is an eigenvector of Y (gamma_a = q_a^T Y q_a); Eq. 254 iff
    K(q_b q_b^T) q_a = kappa_a delta_ab q_a for a, b in the support of M0 (only there does it
    enter the flow). Ties are broken with K(M0), so Theorem 6 and the commuting case of
    Theorem 7 are found too. Returns the basis, gamma, kappa, z0, support and the residual.
    """
    Y = stats.Y
    parts = [X / np.linalg.norm(X) for X in (Y, M0, stats.apply_K(M0)) if np.linalg.norm(X) > 0]
    g = np.random.default_rng(seed).uniform(0.5, 1.5, len(parts))
    _, Q = np.linalg.eigh(sum(gi * X for gi, X in zip(g, parts)))
    Yt, Mt = Q.T @ Y @ Q, Q.T @ M0 @ Q
    z0 = np.diagonal(Mt).copy()
    support = np.flatnonzero(z0 > 1e-10 * max(float(np.max(z0, initial=0.0)), 1e-300))
    Pi = Q.T[support][:, :, None] * Q.T[support][:, None, :]
    Kt = np.einsum("pa,bpq,qc->bac", Q, stats.apply_K(Pi), Q)[:, :, support]  # (b, row, a)
    kappa = np.zeros(Q.shape[0])
    kappa[support] = Kt[np.arange(support.size), support, np.arange(support.size)]
    expected = np.zeros_like(Kt)
    expected[np.arange(support.size), support, np.arange(support.size)] = kappa[support]
    scale = max(float(np.max(np.abs(Kt), initial=0.0)), 1e-300)
    residual = max(_rel_offdiag(Yt), _rel_offdiag(Mt),
                   float(np.max(np.abs(Kt - expected), initial=0.0)) / scale)
    return {"residual": residual, "basis": Q, "gamma": np.diagonal(Yt).copy(), "kappa": kappa,
            "z0": np.where(np.isin(np.arange(z0.size), support), z0, 0.0), "support": support}


def feedforward_split(A: np.ndarray, tol: float = 1e-12) -> int | None:
    """n_out if every A_mu = 1/2 [[0, S_mu], [S_mu^T, 0]] with an n_out x n_in block S_mu."""
    scale = max(float(np.max(np.abs(A), initial=0.0)), 1e-300)
    for n in range(1, A.shape[1]):
        if (np.max(np.abs(A[:, :n, :n]), initial=0.0) <= tol * scale
                and np.max(np.abs(A[:, n:, n:]), initial=0.0) <= tol * scale):
            return n
    return None


def _slaved(P: np.ndarray, M0: np.ndarray, z0: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Prop. 7: P^T M(t) P = D M~0 D, D = sqrt(z / z0) (0 where z0 = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        D = np.where(z0 > 0, np.sqrt(z / np.where(z0 > 0, z0, 1.0)), 0.0)
    Mt = D[:, :, None] * (P.T @ M0 @ P)[None] * D[:, None, :]
    idx = np.arange(z0.size)
    Mt[:, idx, idx] = z
    return P @ Mt @ P.T


def predict(form: StructureForm, y, t, *, M0=None, W0=None, tol: float = 1e-9,
            method: str = "auto", seed: int = 0) -> Solution:
    """The gradient-flow trajectory of the quadratic model on (form, y) from M0 (or W0).

    ``method='auto'`` picks the first regime whose condition residual is <= ``tol`` (see the
    module docstring); naming a method forces it (its residual is still reported). The
    prediction is for gradient flow (GD as lr -> 0); for finite lr, momentum or weight decay use
    the exact recursions of :func:`nqf.discrete_flow`, or :func:`nqf.theory.mflow` with weight_decay.
    For ``mflow`` (no condition needed) the reported residual is 0.
    """
    n = sample_count(y)
    y = validate.targets(form, y)
    t = validate.time_grid("t", t)
    M0 = validate.initial_state(M0, W0, form.p)
    tol = validate.scalar("tol", tol, low=0.0)
    seed = validate.seed("seed", seed)
    stats = SecondMoment.from_form(form, y.reshape(n, -1))
    methods = ("auto", "theorem7", "theorem6", "theorem5", "theorem4", "glv", "corollary4",
               "theorem16", "mflow")
    if method not in methods:
        raise ValueError(f"method must be one of {', '.join(methods)}; got {method!r}.")
    cond: dict[str, float] = {}
    c_iso, cond["theorem7"] = stats.isotropy()
    if method == "theorem7" or (method == "auto" and cond["theorem7"] <= tol):
        M = theorem7(stats.Y, c_iso, t, M0=M0)
        return Solution("theorem7", cond["theorem7"], cond, t, M, stats.loss(M), info={"c": c_iso})

    dense_ok = (isinstance(form, DiagonalForm) or stats.diagonal
                or form.m * form.p ** 2 <= _DENSE_CHECK_ELEMENTS)
    if dense_ok:
        diag_form = DiagonalForm(torch.diagonal(form.dense(), dim1=1, dim2=2).detach().cpu().clone()) \
            if stats.diagonal and not isinstance(form, DiagonalForm) else form
        P, lam, res = shared_eigenbasis(diag_form, seed)
        cond["assumption1"] = max(res["commutator"], res["off_diagonal"])
    if dense_ok and (cond["assumption1"] <= tol or method in ("theorem6", "theorem5", "theorem4", "glv")):
        yn = y.reshape(n, -1)  # the loss's n samples (nqf.theory.losses)
        r, C = lv_coefficients(lam, yn)
        order, signs = mode_order(P, r, isinstance(diag_form, DiagonalForm))
        P, lam, r, C = P[:, order] * signs, lam[:, order], r[order], C[np.ix_(order, order)]
        lv = LotkaVolterra(r=r, C=C, lam=lam, y=y, basis=P, residuals=res, samples=n)
        z0 = np.diagonal(P.T @ M0 @ P).copy()
        cond["theorem6"] = _rel_offdiag(C)
        cond.update(sample_conditions(lam))
        choice = method if method != "auto" else next(
            (name for name in ("theorem6", "theorem5", "theorem4") if cond[name] <= tol), "glv")
        if choice == "theorem6":
            z = logistic_solution(r, np.diagonal(C), z0, t)
        elif choice == "theorem5":
            z = theorem5(lam, yn, z0, t)
        elif choice == "theorem4":
            u, s, vt = np.linalg.svd(lam, full_matrices=False)
            z = theorem4(s[0] * vt[0], u[:, 0], yn, z0, t)
        else:
            z = glv(r, C, z0, t)
        residual = cond["assumption1"] if choice == "glv" else max(cond["assumption1"], cond[choice])
        return Solution(choice, residual, cond, t, _slaved(P, M0, z0, z), lv.loss(z), z=z, basis=P,
                        info={"r": r, "C": C})

    if method in ("auto", "theorem16", "corollary4"):
        th = theorem16_conditions(stats, M0, seed)
        cond["theorem16"] = th["residual"]
        if th["residual"] <= tol or method != "auto":
            split = feedforward_split(form.dense().cpu().numpy()) if dense_ok else None
            name = "corollary4" if split is not None and method != "theorem16" else "theorem16"
            # modes the flow can move (z0 > 0) first, by decreasing rate gamma, then the rest
            live = np.isin(np.arange(th["gamma"].size), th["support"])
            order = np.lexsort((-th["gamma"], ~live))
            Q, gamma, kappa = th["basis"][:, order], th["gamma"][order], th["kappa"][order]
            z = theorem16(gamma, kappa, th["z0"][order], t)
            M = np.einsum("pa,ta,qa->tpq", Q, z, Q)
            ns = int(live.sum())
            info = {"gamma": gamma, "kappa": kappa, "support": np.arange(ns)}
            if name == "corollary4":  # over the support: rho_a = z_a / 2, tau_a = gamma_a / 2, c_a = kappa_a
                u, v = Q[:split, :ns], Q[split:, :ns]
                info.update(n_out=split, tau=gamma[:ns] / 2, rho=z[:, :ns] / 2, c=kappa[:ns],
                            u=u / np.maximum(np.linalg.norm(u, axis=0), 1e-300),
                            v=v / np.maximum(np.linalg.norm(v, axis=0), 1e-300))
            return Solution(name, th["residual"], cond, t, M, stats.loss(M), z=z, basis=Q, info=info)
    ds = mflow(stats, M0=M0, t=t)
    return Solution("mflow", 0.0, cond, t, ds["M"].values, ds["loss"].values,
                    info={"rhs_evaluations": ds.attrs["rhs_evaluations"]})


solve = predict
