"""The neural quadratic form f_mu(W) = Tr[W W^T A_mu] as a trainable PyTorch module."""
from __future__ import annotations

import torch

from nqf import validate
from nqf.theory.forms import StructureForm, as_tensor


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """'auto' -> CUDA when present, else CPU; 'cpu', 'cuda', 'cuda:<n>' or a torch.device, refused
    when it names a CUDA device this machine does not have."""
    return validate.device("device", device)


class QuadraticModel(torch.nn.Module):
    """A batch of independent quadratic models sharing one dataset.

    ``W0`` has shape (R, p, d) for R replicas (seeds, init scales, ...) trained in one tensor
    program, or (p, d) for a single model. ``forward()`` returns f of shape (R, m).
    """

    def __init__(self, form: StructureForm, W0, device: str | torch.device = "auto",
                 dtype: torch.dtype = torch.float64):
        super().__init__()
        if not isinstance(form, StructureForm):
            raise TypeError(f"form must be a StructureForm (DenseForm, DiagonalForm, ...); got a {type(form).__name__}.")
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"dtype must be a floating torch dtype (torch.float64, torch.float32); got {dtype!r}.")
        dev = resolve_device(device)
        W0_np = validate.array("W0", W0, ndim=(2, 3))
        if W0_np.shape[-1] == 0:
            raise ValueError(f"W0 must have at least one column (d >= 1 units); got shape {W0_np.shape}.")
        validate.representable_weights("W0", W0_np, dtype)
        W0 = as_tensor(W0, dtype=dtype, device=dev)
        if W0.ndim == 2:
            W0 = W0[None]
        if W0.ndim != 3 or W0.shape[1] != form.p:
            raise ValueError(f"W0 must have shape (replicas, p={form.p}, d) or (p, d); "
                             f"got {tuple(W0.shape)}.")
        self.form = form.to(device=dev, dtype=dtype)
        self.W = torch.nn.Parameter(W0.clone())

    @property
    def replicas(self) -> int:
        return self.W.shape[0]

    def forward(self) -> torch.Tensor:
        return self.form.outputs(self.W)

    def loss_and_grad(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-replica loss (1/n) sum (f - y)^2 and its exact gradient H W, H = (4/n) sum Delta A.

        Closed form of the gradient (Eq. 27), cheaper than autograd by a factor of about 3
        for small p, where Python overhead dominates. ``y`` is (m,) or, for vector outputs,
        (samples, outputs) in the form's sample-major order; n = y.shape[0] is the number of
        samples (App. B.2: the loss sums over outputs), the convention of every entry point
        (nqf.theory.losses): ``nqf.training.loop.mse_per_replica``, ``nqf.predict``, ``nqf.mflow``.
        """
        n = y.shape[0]  # y is checked once by nqf.train (this runs at every step)
        with torch.no_grad():
            residual = self.form.outputs(self.W) - y.reshape(-1)
            loss = residual.pow(2).sum(-1) / n
            grad = self.form.apply_weighted(residual * (4.0 / n), self.W)
        return loss, grad

    def order_parameter(self) -> torch.Tensor:
        """M = W W^T for every replica, shape (R, p, p)."""
        return self.W @ self.W.transpose(-1, -2)
