"""One real_data run's pieces: the module of an architecture (under an attention reading), its
inputs at the data's input scale, its targets, initial weights and f(0) on the run's device and
dtype (:class:`RunSetup`), and the scores it records."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from nqf.architectures import title
from nqf.experiments.real_data.runs import ATTENTION, FIGURE, KIND, attention_options, readout_vector

if TYPE_CHECKING:
    import xarray as xr

    from nqf.architectures import UnitModule


def build_module(arch: str, size: dict, image: tuple[int, int], seed: int = 0, reading: dict | None = None) -> UnitModule:
    """The float64 one-output module of ``arch`` sized for ``image`` (H, W) images; the attention
    under ``reading`` (its query, heads and f0 choices; the paper's literal model by default)."""
    # torch is imported where needed: the theory, fit and figure jobs run without it
    from nqf.architectures import build

    options = attention_options(reading) if arch == ATTENTION and reading is not None else {}
    return build(arch, size, image=image, n_outputs=1, seed=seed, **options)


def module_inputs(module: UnitModule, images, scale: float):
    """Standardised images (m, H, W) as ``module`` takes them (its ``image_inputs``: flattened for
    the MLP, as they are for the CNN, rows as tokens for the attention), times ``scale``."""
    import torch

    return module.image_inputs(torch.as_tensor(np.asarray(images)) * scale)


def input_scale(module: UnitModule, images: np.ndarray, input_norm: float) -> float:
    """The factor that gives one unit's input RMS norm ``input_norm`` over the training images."""
    sq = module.unit_input_norm2(module_inputs(module, images, 1.0))
    return float(input_norm / math.sqrt(float(sq)))


def accuracy(f, y) -> np.ndarray:
    """Fraction of sign(f) == y along the last axis, an output f = 0 (a tie, e.g. a reading whose
    NQF is zero on that image) counted as half right: the expected accuracy of breaking the tie by
    a fair coin, so that a classifier that always ties scores chance (1/2), not 0."""
    f = np.asarray(f)
    return np.mean(np.where(f == 0, 0.5, np.sign(f) == np.asarray(y)), axis=-1)


def _sign_accuracy(f, y, dtype):
    """:func:`accuracy` of torch tensors (outputs (..., m) against labels (m,)) in ``dtype``."""
    import torch

    hit = (torch.sign(f) == y).to(dtype)
    return torch.where(f == 0, torch.full_like(hit, 0.5), hit).mean(-1)


def prepared(data: xr.Dataset, arch: str, size: dict, n: int, reading: dict | None = None):
    """(module, train inputs, test inputs, train targets) of ``arch``, its first ``n`` training
    images; the input scale is a statistic of the data (computed by the data stage). The attention
    takes ``reading``'s options and its readout norm (the data file's readout if not given)."""
    module = build_module(arch, size, (data.sizes["row"], data.sizes["col"]), reading=reading)
    if reading is not None and "readout_norm" in reading:
        module.set_readout(readout_vector(data["readout_draw"].values, reading["readout_norm"]))
    else:
        module.set_readout(data["readout"].values)
    scale = float(data.attrs[f"{arch}_input_scale"])
    return (module, module_inputs(module, data["x_train"].values[:n], scale),
            module_inputs(module, data["x_test"].values, scale), data["y_train"].values[:n])


SCORES = {"loss": ("train loss (1/m) sum (f - y)^2", "1"), "train_accuracy": ("train accuracy", "1"),
          "test_accuracy": ("test accuracy", "1"), "test_loss": ("test loss (1/m_test) sum (f - y)^2", "1")}


class RunSetup:
    """One run's module (under an attention reading), inputs, targets, W0 and f(0), on its device
    and dtype, with the scores it records."""

    def __init__(self, data: xr.Dataset, rc: dict, device: str, reading: dict | None):
        import torch

        from nqf.architectures import initial_weights
        from nqf.training.quadratic import resolve_device

        self.rc, self.data = rc, data
        self.dev = resolve_device(device)
        self.dtype = torch.float64 if rc["dtype"] == "float64" else torch.float32
        module, x, x_test, y = prepared(data, rc["architecture"], rc["size"], int(rc["n_train"]), reading)
        self.module = module.to(device=self.dev, dtype=self.dtype)
        self.x, self.x_test = x.to(self.dev, self.dtype), x_test.to(self.dev, self.dtype)
        self.y = torch.as_tensor(y, device=self.dev, dtype=self.dtype)
        self.y_test = torch.as_tensor(data["y_test"].values, device=self.dev, dtype=self.dtype)
        self.W0 = initial_weights(self.module, rc["seeds"], [rc["eps"]]).to(self.dev, self.dtype)
        with torch.no_grad():
            zero = torch.zeros_like(self.W0[0])
            self.f0 = self.module.forward_with(zero, self.x)
            self.f0_test = self.module.forward_with(zero, self.x_test)[:, 0]
        self.form_test = self.module.structure(self.x_test)

    def scores(self, f_train, f_test) -> dict:
        return {"train_accuracy": _sign_accuracy(f_train, self.y, self.dtype),
                "test_accuracy": _sign_accuracy(f_test, self.y_test, self.dtype),
                "test_loss": (f_test - self.y_test).pow(2).mean(-1)}

    def nqf_test(self, W):
        """The NQF's test outputs f(0) + Tr[W W^T A(x)] per replica."""
        return self.f0_test + self.form_test.outputs(W)

    def train_kwargs(self, arch: str) -> dict:
        rc = self.rc
        return dict(lr=float(rc["lr"]), steps=int(rc["steps"]), optimizer=rc["optimizer"], n_record=rc["n_record"],
                    loss=rc["loss"], replica_dim="seed", replica_coords=list(rc["seeds"]),
                    divergence_hint=f" for the {title(arch, FIGURE)} with {rc['optimizer']}")

    def attrs(self, run: str, arch: str) -> dict:
        rc, data = self.rc, self.data
        return dict(run=run, experiment_kind=KIND, architecture=arch, p=self.module.p, width=self.module.width,
                    eps=float(rc["eps"]), optimizer=rc["optimizer"], lr=float(rc["lr"]), steps=int(rc["steps"]),
                    f0_rms=float(self.f0.pow(2).mean().sqrt()), device=str(self.dev), dtype=rc["dtype"],
                    n_test=int(self.y_test.numel()), n_train=int(self.y.numel()), loss_convention=rc["loss"],
                    dataset=data.attrs.get("source", ""), preprocessing=data.attrs.get("preprocessing", ""))
