"""An ordinary torch.nn.Module through nqf: units read from its parameters, the unit function
derived from its forward (nqf.architectures.module_units), structure -> prediction -> training.

Exactness: the derived unit runs the same floating-point operations as a hand-written one up to
the zero units' products (exact zeros), so A(x) agrees to float64 rounding: 1e-13 relative.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import nqf
from nqf.architectures import ARCHITECTURES
from nqf.architectures.module_units import ModuleUnits, OnData

D, K, WIDTH, M = 4, 3, 5, 6


class SinLayer(torch.nn.Module):
    """f(x) = V sin(U x), not from nqf.architectures."""

    def __init__(self, k=K, scale=1.0, squeeze=False):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.U = torch.nn.Parameter(scale * torch.randn(WIDTH, D, generator=gen, dtype=torch.float64))
        self.V = torch.nn.Parameter(scale * torch.randn(k, WIDTH, generator=gen, dtype=torch.float64))
        self.squeeze = squeeze

    def forward(self, x):
        out = torch.sin(x @ self.U.T) @ self.V.T
        return out[:, 0] if self.squeeze else out


UNITS = {"U": 0, "V": 1}


def _x(m=M, seed=1):
    return torch.randn(m, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_unit_weights_layout_and_forward_with():
    layer = ModuleUnits(SinLayer(), UNITS)
    W = layer.unit_weights()
    assert (layer.p, layer.width, layer.blocks()) == (D + K, WIDTH, [("U", D), ("V", K)])
    assert torch.equal(W, torch.cat([layer.module.U.T, layer.module.V]))
    x = _x()
    out = layer.module(x)  # the same products; V read through a transposed view may round differently
    assert torch.allclose(layer.forward_with(W, x), out, rtol=0, atol=1e-14 * float(out.abs().max()))
    W2 = 0.5 * W
    layer.set_unit_weights(W2)
    assert torch.equal(layer.unit_weights(), W2)
    batched = layer.forward_replicas(torch.stack([W, W2]), x)
    assert torch.allclose(batched[0], layer.forward_with(W, x), rtol=1e-14, atol=0)


@pytest.mark.parametrize("k, squeeze, shape", [(K, False, (M, K, D + K, D + K)), (1, False, (M, 1, D + 1, D + 1)),
                                               (1, True, (M, D + 1, D + 1))])
def test_structure_matrix_of_a_module_equals_the_hand_written_unit(k, squeeze, shape):
    """forward (m, k) -> A (m, k, p, p), k = 1 included; forward (m,) -> (m, p, p); equal to the
    A of the unit written by hand, v sin(u . x)."""
    x = _x()
    A = nqf.structure_matrix(SinLayer(k, squeeze=squeeze), x, units=UNITS)
    assert A.shape == shape and A.dtype == torch.float64

    def unit(w, xx):
        out = w[D:] * torch.sin(w[:D] @ xx)
        return out[0] if squeeze else out

    ref = nqf.structure_matrix(unit, x, D + k, batched=True)
    assert torch.allclose(A, ref, rtol=0, atol=1e-13 * float(ref.abs().max()))
    assert float(ref.abs().max()) > 0.1


def test_sequential_mlp_matches_prop1_analytic_structure():
    """nn.Sequential(Linear, Tanh, Linear) read as units gives Prop. 1's A(x) of nqf's own MLP, in
    float64 from a float32 module (the module is copied, not changed)."""
    seq = torch.nn.Sequential(torch.nn.Linear(D, WIDTH, bias=False), torch.nn.Tanh(),
                              torch.nn.Linear(WIDTH, K, bias=False))
    x = _x().float()
    units = {"0.weight": 0, "2.weight": 1}
    A = nqf.structure_matrix(seq, x, units=units)
    ref = ARCHITECTURES["mlp"].build(D=D, width=WIDTH, n_outputs=K).structure(x.double()).dense()
    assert torch.allclose(A.reshape(-1, D + K, D + K), ref, rtol=0, atol=1e-13)
    assert seq[0].weight.dtype == torch.float32
    info = nqf.expansion(seq, x[:2], units=units)
    assert info.zgz_holds and info.z2_symmetric
    form = ModuleUnits(seq.double(), units).structure(x.double())
    assert (form.m, form.p) == (M * K, D + K)


def test_structure_prediction_training_of_a_user_module():
    """The module, its A(x), nqf.predict's curve and nqf.train(module, y, x=, units=) from the same
    W0, with the shapes documented: A (n, k, p, p), the prediction's M (t, p, p), the run's loss
    (1, t) and M (1, t, p, p). Training through x= is the module's own GD: bit for bit the loop on
    a hand-made one-replica wrapper. How close the trained curve comes to the prediction, with its
    error budget, is asserted by tests/package/test_examples.py on examples/own_layer.py, which
    takes this same path."""
    eps, lr, steps = 1e-3, 0.02, 60
    x = _x(40, seed=2)
    y = (x @ torch.randn(D, K, generator=torch.Generator().manual_seed(3), dtype=torch.float64) / 2).numpy()
    layer = SinLayer(scale=np.sqrt(eps / (D + K)))
    A = nqf.structure_matrix(layer, x, units=UNITS)
    assert A.shape == (40, K, D + K, D + K)
    W0 = nqf.ModuleUnits(layer, UNITS).unit_weights().detach().numpy()
    grid = np.arange(0, steps + 1, 10)
    sol = nqf.predict(nqf.DenseForm(A.reshape(-1, D + K, D + K)), y, lr * grid, W0=W0)
    assert sol.M.shape == (len(grid), D + K, D + K)
    run = nqf.train(layer, y, x=x, units=UNITS, lr=lr, steps=steps, record_steps=grid)
    assert run["loss"].shape == (1, len(grid)) and run["M"].shape == (1, len(grid), D + K, D + K)
    W_end = nqf.ModuleUnits(layer, UNITS).unit_weights().detach().numpy()
    for got, W in ((run["M"].values[0, 0], W0), (run["M"].values[0, -1], W_end)):  # torch's product vs numpy's
        assert np.allclose(got, W @ W.T, rtol=0, atol=1e-14 * np.abs(W @ W.T).max())

    by_hand = SinLayer(scale=np.sqrt(eps / (D + K)))
    ref = nqf.train(OnData(by_hand, x), y, lr=lr, steps=steps, record_steps=grid, record=lambda m: {})
    assert np.array_equal(run["loss"].values, ref["loss"].values)
    assert run["loss"].values[0, -1] < run["loss"].values[0, 0]


def test_refusals_name_the_fix():
    layer = SinLayer()
    with pytest.raises(ValueError, match="not a parameter"):
        ModuleUnits(layer, {"W": 0})
    with pytest.raises(ValueError, match="must be an axis"):
        ModuleUnits(layer, {"U": 2})
    with pytest.raises(ValueError, match="one number of units"):
        ModuleUnits(layer, {"U": 1, "V": 1})
    with pytest.raises(TypeError, match="needs units"):
        nqf.structure_matrix(layer, _x())
    with pytest.raises(ValueError, match="leave p out"):
        nqf.structure_matrix(layer, _x(), 5, units=UNITS)
    with pytest.raises(TypeError, match="x="):
        nqf.train(layer, np.zeros((M, K)), lr=0.1, steps=1)
    with pytest.raises(TypeError, match="pass the inputs as x="):
        nqf.train(layer, np.zeros((M, K)), units=UNITS, lr=0.1, steps=1)
