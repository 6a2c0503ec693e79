"""Batches of structure matrices A_mu = A(x_mu), stored in the cheapest exact form.

A quadratic model only ever needs three things from its data matrices: the outputs
f_mu = Tr[W W^T A_mu], the weighted sum H = sum_mu c_mu A_mu applied to W (the gradient), and,
for the theory, the matrices themselves. Each form below provides them without materialising
p x p matrices per sample unless it is the dense form.

Vector outputs (App. B.2) are handled by flattening (sample, output) pairs into the rows of the
form, sample-major (row mu * n_out + c is output c of sample mu), so ``m`` counts data matrices,
n * n_outputs. The loss still averages over the n samples only and sums over outputs: give the
targets as (n, n_outputs) and every entry point uses 1/n (nqf.theory.losses); flattened targets (m,) make
each pair a sample of its own (1/m).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch

Tensor = torch.Tensor


def _check_matrices(name: str, A: Tensor, what: str) -> None:
    """Refuse an empty batch and non-finite entries (a NaN would otherwise pass as 'not symmetric'
    or reach training as 'diverged')."""
    if A.shape[0] == 0 or A.shape[-1] == 0:
        raise ValueError(f"{name} must hold at least one sample and one weight ({what}); got shape {tuple(A.shape)}.")
    if A.is_floating_point() and not bool(torch.isfinite(A).all()):
        bad = int((~torch.isfinite(A)).sum())
        raise ValueError(f"{name} must be finite (no NaN or inf); {bad} of its {A.numel()} entries are not.")


def _real_tensor(name: str, x) -> Tensor:
    """A structure form's matrices as a real floating tensor: a tensor without data (meta) or a
    complex and bool ones refused, integer tensors cast to float64 (as numpy inputs are)."""
    from nqf import validate

    if not isinstance(x, Tensor):
        return as_tensor(validate.array(name, x, finite=None))
    validate.tensor_data(name, x)
    if x.is_complex():
        raise TypeError(f"{name} must be real, not complex; got a {x.dtype} tensor of shape {tuple(x.shape)}.")
    if x.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers, not booleans (True/False would be read as 1/0); "
                        f"got a bool tensor of shape {tuple(x.shape)}.")
    return x if x.is_floating_point() else x.to(torch.float64)


def check_dense_memory(form: "StructureForm", like: Tensor, extra: int = 0) -> None:
    """Refuse ``form.dense()`` (m matrices of p x p, plus ``extra`` entries of work space) where it
    does not fit in the memory available on ``like``'s device, before allocating."""
    from nqf import validate

    validate.memory(f"the dense structure matrices of this form (m = {form.m} data matrices of p x p = {form.p} x {form.p})",
                   (form.m * form.p * form.p + extra) * like.element_size(),
                   "pass fewer samples (an architecture's form.subset(slice(0, n))) or a layer with fewer weights "
                   "per unit; the form's outputs and apply_weighted never build them", like.device)


def as_tensor(x, dtype=torch.float64, device=None) -> Tensor:
    """A float tensor (float64 by default) from an array-like."""
    if isinstance(x, Tensor):
        return x.to(dtype=dtype, device=device if device is not None else x.device)
    a = np.asarray(x)
    if not a.flags.writeable:  # a read-only view (np.diagonal, broadcast_to): torch would warn
        a = a.copy()
    return torch.as_tensor(a, dtype=dtype, device=device)


class StructureForm(ABC):
    """Interface of a batch of m symmetric p x p structure matrices."""

    m: int
    p: int

    @abstractmethod
    def outputs(self, W: Tensor) -> Tensor:
        """f_mu = Tr[W W^T A_mu] for W of shape (..., p, d); returns (..., m)."""

    @abstractmethod
    def outputs_from_M(self, M: Tensor) -> Tensor:
        """f_mu = Tr[M A_mu] for M of shape (..., p, p); returns (..., m)."""

    @abstractmethod
    def weighted_sum(self, c: Tensor) -> Tensor:
        """sum_mu c_mu A_mu as a dense (..., p, p) matrix, c of shape (..., m)."""

    @abstractmethod
    def apply_weighted(self, c: Tensor, W: Tensor) -> Tensor:
        """(sum_mu c_mu A_mu) W for c (..., m) and W (..., p, d), without forming p x p matrices."""

    @abstractmethod
    def dense(self) -> Tensor:
        """All matrices as a dense (m, p, p) tensor (for verification and small p)."""

    @abstractmethod
    def to(self, device=None, dtype=None) -> "StructureForm":
        """The same form on another device or dtype."""


@dataclass
class DenseForm(StructureForm):
    """Arbitrary symmetric matrices, stored densely as (m, p, p)."""

    A: Tensor

    def __post_init__(self):
        self.A = _real_tensor("DenseForm's A", self.A)
        if self.A.ndim != 3 or self.A.shape[1] != self.A.shape[2]:
            raise ValueError(f"DenseForm needs A of shape (m, p, p); got {tuple(self.A.shape)}.")
        _check_matrices("DenseForm's A", self.A, "shape (m, p, p)")
        if not torch.allclose(self.A, self.A.transpose(1, 2), atol=1e-12, rtol=1e-10):
            raise ValueError("DenseForm needs symmetric matrices A_mu; symmetrise with (A + A^T)/2.")
        self.m, self.p = self.A.shape[0], self.A.shape[1]

    # Contractions are written as matrix products over flattened (p*p) indices: one GEMM each,
    # whatever the batch of replicas, instead of an einsum whose path can be poor.
    def outputs(self, W: Tensor) -> Tensor:
        return self.outputs_from_M(W @ W.transpose(-1, -2))

    def outputs_from_M(self, M: Tensor) -> Tensor:
        return M.flatten(-2) @ self.A.flatten(1).T

    def weighted_sum(self, c: Tensor) -> Tensor:
        return (c @ self.A.flatten(1)).unflatten(-1, (self.p, self.p))

    def apply_weighted(self, c: Tensor, W: Tensor) -> Tensor:
        return self.weighted_sum(c) @ W

    def dense(self) -> Tensor:
        return self.A

    def to(self, device=None, dtype=None) -> "DenseForm":
        return DenseForm(self.A.to(device=device, dtype=dtype or self.A.dtype))


@dataclass
class DiagonalForm(StructureForm):
    """Diagonal matrices A_mu = Diag(a_mu), stored as the (m, p) array of diagonals."""

    diag: Tensor

    def __post_init__(self):
        self.diag = _real_tensor("DiagonalForm's diag", self.diag)
        if self.diag.ndim != 2:
            raise ValueError(f"DiagonalForm needs diagonals of shape (m, p); got {tuple(self.diag.shape)}.")
        _check_matrices("DiagonalForm's diag", self.diag, "shape (m, p)")
        self.m, self.p = self.diag.shape

    def outputs(self, W: Tensor) -> Tensor:
        return (W * W).sum(-1) @ self.diag.T

    def outputs_from_M(self, M: Tensor) -> Tensor:
        return torch.diagonal(M, dim1=-2, dim2=-1) @ self.diag.T

    def weighted_sum(self, c: Tensor) -> Tensor:
        return torch.diag_embed(c @ self.diag)

    def apply_weighted(self, c: Tensor, W: Tensor) -> Tensor:
        return (c @ self.diag)[..., :, None] * W

    def dense(self) -> Tensor:
        check_dense_memory(self, self.diag)
        return torch.diag_embed(self.diag)

    def to(self, device=None, dtype=None) -> "DiagonalForm":
        return DiagonalForm(self.diag.to(device=device, dtype=dtype or self.diag.dtype))
