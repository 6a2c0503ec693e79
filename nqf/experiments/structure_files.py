"""Data files <-> structure forms, and the generic structure stage: the second moments and the
Lotka-Volterra reduction of a data file, stored so the theory and fit stages need no torch."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from nqf.theory.lotka_volterra import LotkaVolterra

if TYPE_CHECKING:

    from nqf.theory.forms import StructureForm


def form_to_dataset(form: StructureForm) -> xr.Dataset:
    """Store a batch of structure matrices in its compact form."""
    # torch and nqf.theory.forms are imported where needed: the fit, figure and summary jobs run without them
    from nqf.theory.forms import DiagonalForm

    if isinstance(form, DiagonalForm):
        ds = xr.Dataset({"A_diag": (("sample", "param"), form.diag.cpu().numpy(), {
            "units": "1", "long_name": "diagonal of the structure matrix A(x_mu)"})})
        ds.attrs["structure_form"] = "diagonal"
        return ds
    A = form.dense().cpu().numpy()
    ds = xr.Dataset({"A": (("sample", "param", "param_j"), A, {
        "units": "1", "long_name": "structure matrix A(x_mu)"})})
    ds.attrs["structure_form"] = "dense"
    return ds


def form_from_dataset(ds: xr.Dataset) -> StructureForm:
    """Inverse of :func:`form_to_dataset`."""
    import torch

    from nqf.theory.forms import DenseForm, DiagonalForm

    kind = ds.attrs.get("structure_form")
    if kind == "diagonal":
        return DiagonalForm(torch.as_tensor(ds["A_diag"].values, dtype=torch.float64))
    if kind == "dense":
        return DenseForm(torch.as_tensor(ds["A"].values, dtype=torch.float64))
    raise ValueError(f"Unknown structure_form {kind!r} in the data file.")


def min_loss(lv: LotkaVolterra) -> tuple[float, np.ndarray]:
    """Smallest loss reachable with z >= 0 (non-negative least squares) and its minimiser."""
    from scipy.optimize import nnls

    z, _ = nnls(lv.lam, lv.y)
    return float(lv.loss(z)), z


def data_rank(form: StructureForm, rtol: float = 1e-10) -> int:
    """Theorem 3's k_V: the dimension of the span of all columns of all A_mu.

    The column space of sum_mu A_mu^2 (a sum of PSD matrices) is the union of the column
    spaces of the A_mu, so k_V is its numerical rank.
    """
    import torch

    from nqf.theory.forms import DiagonalForm

    if isinstance(form, DiagonalForm):
        scale = form.diag.abs().max().item() or 1.0
        return int((form.diag.abs().amax(0) > rtol * scale).sum())
    A = form.dense()
    S = torch.einsum("mpq,mqr->pr", A, A)
    eig = torch.linalg.eigvalsh(S)
    return int((eig > rtol * max(eig.abs().max().item(), 1e-300)).sum())


def second_moment_dataset(form: StructureForm, y) -> xr.Dataset:
    """The second-moment operator K(X) = (4/m) sum <A_mu, X> A_mu in its compact form.

    Diagonal data: K acts on diag(X) as the (p, p) matrix ``K_diag``. Otherwise K acts on
    symmetric matrices in orthonormal svec coordinates (upper triangle, row-major, off-diagonal
    entries times sqrt 2) as ``K_svec`` or, when its rank is small, as ``K_factor`` F with K = F F^T.
    Data too large for one pass in memory get an explanatory attribute instead.
    """
    from nqf.theory.mflow import SecondMoment

    try:
        sm = SecondMoment.from_form(form, y)
    except ValueError as exc:
        return xr.Dataset(attrs={"second_moment": f"not stored: {exc}"})
    if sm.diagonal:
        return xr.Dataset({"K_diag": (("param", "param_j"), sm.kmat, {
            "units": "1", "long_name": "second-moment operator on diagonals: diag K(X) = K_diag @ diag(X)"})})
    convention = "svec: upper triangle of X, row-major, off-diagonal entries times sqrt(2)"
    if sm.factor is not None:
        return xr.Dataset({"K_factor": (("svec", "rank"), sm.factor, {
            "units": "1", "long_name": "factor F of the second-moment operator, K = F F^T",
            "coordinates_convention": convention})})
    return xr.Dataset({"K_svec": (("svec", "svec_j"), sm.kmat, {
        "units": "1", "long_name": "second-moment operator K in svec coordinates",
        "coordinates_convention": convention})})


def structure_dataset(form: StructureForm, y) -> tuple[xr.Dataset, LotkaVolterra]:
    """The statistics the theory needs: Y, Lotka-Volterra r and C, the shared-basis residuals."""
    import torch

    lv = LotkaVolterra.from_data(form, y)
    m = form.m
    Y = form.weighted_sum(torch.as_tensor(4.0 / lv.samples * lv.y, dtype=torch.float64)).cpu().numpy()
    loss_min, z_inf = min_loss(lv)
    ds = xr.Dataset(
        {
            "r": ("mode", lv.r, {"units": "1", "long_name": "Lotka-Volterra growth rate r_k = (8/m) sum lambda_mu,k y_mu"}),
            "C": (("mode", "mode_j"), lv.C, {"units": "1", "long_name": "Lotka-Volterra interaction C_kj = (8/m) sum lambda_mu,k lambda_mu,j"}),
            "lam": (("sample", "mode"), lv.lam, {"units": "1", "long_name": "eigenvalue lambda_mu,k of A(x_mu) in the shared basis"}),
            "basis": (("param", "mode"), lv.basis, {"units": "1", "long_name": "shared eigenbasis P (columns)"}),
            "Y_matrix": (("param", "param_j"), Y, {"units": "1", "long_name": "Y = (4/m) sum_mu y_mu A(x_mu)"}),
            "y": ("sample", lv.y, {"units": "1", "long_name": "target y_mu"}),
            "z_final": ("mode", z_inf, {"units": "1", "long_name": "non-negative least-squares end point of z_k"}),
        },
        coords={"mode": np.arange(lv.modes), "mode_j": np.arange(lv.modes), "sample": np.arange(m)},
    )
    ds["commutator_residual"] = ((), lv.residuals["commutator"], {
        "units": "1", "long_name": "max_mu |[A_mu, S]|_F / (|A_mu| |S|) for a random combination S (0 under Assumption 1)"})
    ds["off_diagonal_residual"] = ((), lv.residuals["off_diagonal"], {
        "units": "1", "long_name": "max_mu |offdiag(P^T A_mu P)|_F / |A_mu|_F"})
    ds["min_loss"] = ((), loss_min, {"units": "1", "long_name": "smallest loss reachable with z >= 0"})
    ds["C_is_diagonal"] = ((), lv.is_diagonal, {"long_name": "C is diagonal (Theorem 6 applies)"})
    ds = ds.merge(second_moment_dataset(form, lv.y))
    ds["k_V"] = ((), data_rank(form), {
        "long_name": "Theorem 3 rank: dim span of all columns of all A_mu (width k_V + 1 suffices)"})
    return ds, lv


def lv_from_structure(ds: xr.Dataset) -> LotkaVolterra:
    """Rebuild the reduction stored by :func:`structure_dataset`."""
    return LotkaVolterra(r=ds["r"].values, C=ds["C"].values, lam=ds["lam"].values,
                         y=ds["y"].values,
                         basis=ds["basis"].values,
                         residuals={"commutator": float(ds["commutator_residual"]),
                                    "off_diagonal": float(ds["off_diagonal_residual"])})
