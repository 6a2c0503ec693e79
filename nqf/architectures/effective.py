"""The effective matrix that an architecture's NQF identifies, and low-rank NQF teachers.

Every feedforward-type structure matrix (Eq. 17-19) makes the NQF output a linear or bilinear
function of one small matrix E(W) built from the unit weights, f_NQF(x) - f(0) = <E(W), C(x)>.
Each architecture that has one says how in its own class (``effective_matrix``,
``effective_outputs``, ``teacher_units``; the formula and shape in their docstrings: the MLP,
the CNN, multi-head attention, query-key heads, the MoE with linear experts) and marks its
registry entry ``effective_matrix=True``; the functions here check and dispatch.

Its singular values s_k(E(W)) are the recovered spectrum that Figure 2 plots for the module
(E of the module's weights) and for its NQF alike. A teacher is a width-r W* (``teacher_weights``)
whose E has prescribed singular values with random orthonormal singular vectors, one rank-one
unit per singular value; its NQF outputs are the targets.

Since the NQF is linear in E, its lowest reachable loss on a data set is a least-squares problem
(the floor of paper Fig. 7): ``effective_features`` gives the map Phi(x) with f_NQF - f(0) =
<Phi(x), E(W)> from a factored structure form, and ``least_squares_nqf`` solves it.
"""
from __future__ import annotations

import numpy as np
import torch

from nqf.architectures.base import UnitModule, orthonormal, vec
from nqf.architectures.registry import selection
from nqf.theory.factored import BlockBilinearForm

Tensor = torch.Tensor


def _check(module: UnitModule) -> None:
    if type(module).effective_matrix is UnitModule.effective_matrix:
        raise TypeError(f"No effective matrix for {type(module).__name__}; the architectures with one: "
                        f"{', '.join(selection('effective_matrix'))}.")
    refusal = module.effective_refusal()
    if refusal is not None:
        raise refusal


def effective_matrix(module: UnitModule, W: Tensor) -> Tensor:
    """E(W) for unit weights W of shape (..., p, d); its shape is in the class's effective_matrix."""
    _check(module)
    module.check_unit_weights(W, width=False)
    return module.effective_matrix(W)


def effective_outputs(module: UnitModule, E: Tensor, x) -> Tensor:
    """The NQF output f - f(0) as the linear/bilinear form of E: (..., samples, k)."""
    _check(module)
    return module.effective_outputs(E, x)


def singular_values(module: UnitModule, W: Tensor, n: int) -> Tensor:
    """The n largest singular values of E(W), shape (..., n)."""
    from nqf import validate

    n = validate.integer("n", n, minimum=1)
    return torch.linalg.svdvals(effective_matrix(module, W))[..., :n]


def singular_vectors(n: int, r: int, gen: torch.Generator) -> Tensor:
    """A teacher's r singular vectors in dimension n: n x r, Haar-random orthonormal columns."""
    if r > n:
        raise ValueError(f"The teacher's singular vectors live in dimension {n}, so it takes at most "
                         f"{n} singular values; got {r}. Shorten singular_values or enlarge the module.")
    return orthonormal(n, r, gen)


def two_block_matrix(W: Tensor, n_in: int, slope: float) -> Tensor:
    """E = slope * Z_out Z_in^T for W = [Z_in (n_in rows); Z_out]: (..., k, n_in), the effective
    matrix of a feedforward unit (a perceptron, a CNN kernel) with activation slope phi'(0)."""
    return slope * W[..., n_in:, :] @ W[..., :n_in, :].transpose(-1, -2)


def two_block_teacher(p: int, n_in: int, slope: float, root: Tensor, gen: torch.Generator) -> Tensor:
    """W* (p x r) with two_block_matrix(W*) = U diag(root^2) V^T: unit a is [V_a; U_a / slope] root_a."""
    U = singular_vectors(p - n_in, root.numel(), gen)
    V = singular_vectors(n_in, root.numel(), gen)
    W = torch.zeros(p, root.numel(), dtype=torch.float64)
    W[:n_in] = V * root
    W[n_in:] = U * root / slope
    return W


def first_row_units(blocks: Tensor, rows: int) -> Tensor:
    """Unit blocks (r, cols) placed in the first row of a (rows x cols) matrix per unit, vec'd:
    (rows * cols, r) (the teacher heads of attention use one row of each weight matrix)."""
    e0 = torch.zeros(rows, 1, dtype=blocks.dtype)
    e0[0] = 1.0
    return vec(e0[None] * blocks[:, None, :]).T


def teacher_weights(module: UnitModule, s, gen: torch.Generator) -> Tensor:
    """W* (p x r), one balanced rank-one unit per singular value, E(W*) = U diag(s) V^T.

    U and V have random orthonormal columns drawn from ``gen``; the class's ``teacher_units``
    says how its units carry them.
    """
    _check(module)
    from nqf import validate

    s_np = validate.array("s", s, ndim=1, nonempty=True)
    validate.nonnegative("s", s_np, what=" (singular values of the teacher's effective matrix)")
    s = torch.as_tensor(s_np, dtype=torch.float64)
    return module.teacher_units(s.sqrt(), gen)


def effective_features(form: BlockBilinearForm) -> torch.Tensor:
    """Phi(x_mu) with f_NQF - f(0) = <Phi, E(W)>, flattened to (m, n1 * n2).

    For a form without a Kronecker scale, A = 1/2 [[0, C (x) I_q], [.., 0]], C = sum_r a_r b_r^T,
    and Tr[W W^T A] = <C, E> with E[j, l] = sum over units and alpha of Z1[(j, alpha)] Z2[(l, alpha)].
    """
    if not isinstance(form, BlockBilinearForm) or form.scale is not None:
        raise ValueError("effective_features needs a BlockBilinearForm without a Kronecker scale.")
    left = form.left.expand(form.n_samples, form.n_outputs, form.rank, -1)
    right = form.right.expand(form.n_samples, form.n_outputs, form.rank, -1)
    return torch.einsum("skrj,skrl->skjl", left, right).reshape(form.m, -1)


VANISHING_REL = 1e-12  # a feature row this far below the largest is zero up to float64 rounding
VANISHING_LONG_NAME = ("share of training images on which the NQF's features vanish (its output there is f(0) "
                       "whatever its weights)")


def vanishing_share(phi, rel: float = VANISHING_REL) -> float:
    """Share of the samples (rows of ``phi``, Phi(x_mu) of :func:`effective_features`) on which the
    NQF's features vanish, so that its output is f(0) whatever its weights: a row whose norm is at
    most ``rel`` times the largest row's (every row when all vanish). Such a sample carries no
    quadratic signal, e.g. an attention whose query token is zero in that image. ``rel`` = 1e-12
    lies far above float64's rounding of a row that is exactly zero in exact arithmetic (a few
    units of 2.2e-16 relative) and far below any feature a sample carries."""
    norms = np.linalg.norm(np.asarray(phi, float).reshape(len(phi), -1), axis=1)
    if norms.size == 0:
        return float("nan")
    top = norms.max()
    return 1.0 if top == 0 else float(np.mean(norms <= rel * top))


def least_squares_nqf(phi_train, target_train, phi_test, f0_test):
    """The NQF's lowest reachable train loss and its minimiser's test predictions.

    min_E (1/m) |Phi vec(E) - (y - f0)|^2 over unconstrained E (a lower bound when the rank of E
    is capped below min(n1, n2); nqf.experiments.real_data checks that it is not). Returns
    (floor, vec E*, test outputs f0 + Phi_test vec E*).
    """
    phi, t = np.asarray(phi_train, float), np.asarray(target_train, float)
    e, *_ = np.linalg.lstsq(phi, t, rcond=None)
    floor = float(np.mean((phi @ e - t) ** 2))
    return floor, e, np.asarray(f0_test, float) + np.asarray(phi_test, float) @ e
