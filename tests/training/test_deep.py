"""Deep NQFs (nqf.training.deep, App. B.4): the 2-layer NQF is the blockwise expansion of the network."""
import numpy as np
import pytest
import torch

from nqf.architectures import ARCHITECTURES
from nqf.training.deep import DeepAttention, DeepMLP, train_deep_trio, truncation


def _setup(model, m=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return model.init(1, 1.0, g, fan_in=True), model.sample_inputs(m, g)


@pytest.mark.parametrize("model", [DeepMLP(), DeepAttention()], ids=["mlp", "attention"])
def test_block_limit_rate(model):
    """Eq. 3 per block (inner weights x s, readout / s): the block NQFs are invariant and the
    network converges to the 2-layer NQF with error C s^2 (1 + O(s^2)); halving s divides the
    error by 4. At s = 0.02 the O(s^2) relative correction is ~1e-3 times O(1) constants; 2%."""
    W, x = _setup(model)
    err = [(model.forward(model.block_rescale(W, s), x) - model.nqf(model.block_rescale(W, s), x)).abs().max().item()
           for s in (0.02, 0.01)]
    assert err[0] / err[1] == pytest.approx(4.0, rel=0.02)
    assert (model.nqf(model.block_rescale(W, 0.01), x) - model.nqf(W, x)).abs().max() < 1e-12


def test_one_layer_nqf_is_not_the_block_limit():
    """The 1-layer NQF drops the tanh between the blocks: at O(1) block outputs its error stays O(1)."""
    model = DeepMLP()
    W, x = _setup(model)
    err = [(model.forward(model.block_rescale(W, s), x) - model.nqf_one(model.collapse(model.block_rescale(W, s)), x)).abs().max().item()
           for s in (0.02, 0.01)]
    assert err[1] > 0.9 * err[0] > 0.01


def test_isotropic_scaling_coefficient():
    """All weights x s: f = O(s^4) and f - f_2 = -(s^6/3) W4 W3 W2 (W1 x)^3 + O(s^8) (the tanh
    cubic term of block 1 carried through block 2's NQF); at s = 0.01 the O(s^2) relative
    correction is ~1e-4 times O(1) constants; 1%."""
    model = DeepMLP()
    W, x = _setup(model)
    s = 0.01
    Ws = [w * s for w in W]
    err = (model.forward(Ws, x) - model.nqf(Ws, x))[0, :, 0] / s**6
    coef = -(1.0 / 3.0) * ((x @ W[0][0].T) ** 3 @ W[1][0].T @ W[2][0].T @ W[3][0].T)[:, 0]
    assert torch.allclose(err, coef, rtol=1e-2, atol=1e-2 * coef.abs().max().item())


def test_block_nqf_is_the_library_structure_matrix():
    """Block 1 of the MLP is a 2-layer MLP with n1 units and n2 outputs: its NQF W2 W1 x equals
    Tr[M A_c(x)] from nqf.architectures (Prop. 1), to rounding."""
    model = DeepMLP()
    W, x = _setup(model)
    mlp = ARCHITECTURES["mlp"].build(D=8, width=16, n_outputs=16)
    Wunit = torch.cat([W[0][0].T, W[1][0]], dim=0)  # unit i = [W1[i, :]; W2[:, i]]
    lib = mlp.structure(x).outputs(Wunit).reshape(x.shape[0], 16)
    ours = x @ (W[1][0] @ W[0][0]).T
    assert torch.allclose(lib, ours, atol=1e-12)


def test_collapse_matches_at_step_zero():
    """Attention: the 1-layer NQF with the collapsed init equals the 2-layer NQF exactly; MLP: the
    two differ by the tanh cubic of h = O(s^4), i.e. O(s^8) against f = O(s^4) (ratio 2^8 on halving)."""
    att = DeepAttention()
    W, X = _setup(att)
    assert torch.allclose(att.nqf_one(att.collapse(W), X), att.nqf(W, X), atol=1e-12)
    model = DeepMLP()
    W, x = _setup(model)
    d = [(model.nqf([w * s for w in W], x) - model.nqf_one(model.collapse([w * s for w in W]), x)).abs().max().item()
         for s in (0.1, 0.05)]
    assert d[0] / d[1] == pytest.approx(256.0, rel=0.05)


def test_train_trio_shares_init_and_decreases():
    """All three start from the same function (equal losses at step 0 up to O(s^2) at small init)
    and GD lowers every loss."""
    model = DeepMLP()
    g = torch.Generator().manual_seed(1)
    Wt = model.init(1, 1.0, g, fan_in=True)
    x, xt = model.sample_inputs(50, g), model.sample_inputs(50, g)
    y, yt = model.forward(Wt, x)[0].detach(), model.forward(Wt, xt)[0].detach()
    W0 = model.init(2, 0.01, torch.Generator().manual_seed(2), fan_in=True)
    res = train_deep_trio(model, W0, x, y, xt, yt, lr=0.05, steps=20, optimizer="gd", record_steps=[0, 20])
    for n in ("deep", "nqf2", "nqf1"):
        assert res[f"train_{n}"].shape == (2, 2)
        assert np.all(res[f"train_{n}"][:, 1] <= res[f"train_{n}"][:, 0])
    assert np.allclose(res["train_nqf2"][:, 0], res["train_deep"][:, 0], rtol=1e-6)


@pytest.mark.parametrize("model", [DeepMLP(), DeepAttention()], ids=["mlp", "attention"])
def test_truncation_estimate_is_the_distance_to_the_block_nqf(model):
    """nqf.training.deep.truncation estimates RMS(f - f_2NQF) / RMS(f_2NQF) from the network alone
    (Richardson over the block rescaling s = 1, 1/2). At block scale s the true distance is
    s^2 R + O(s^4) and the estimate's error is O(s^4): at s = 0.1 they agree to O(s^2) = 1 %
    of each other (a few per cent allowed for O(1) constants), and both scale as s^2."""
    W, x = _setup(model)
    out = []
    for s in (0.1, 0.05):
        Ws = model.block_rescale(W, s)
        f, f2 = model.forward(Ws, x), model.nqf(Ws, x)
        direct = ((f - f2).pow(2).mean().sqrt() / f2.pow(2).mean().sqrt()).item()
        est = truncation(model, Ws, x).item()
        assert est == pytest.approx(direct, rel=0.05)
        out.append(est)
    assert out[0] / out[1] == pytest.approx(4.0, rel=0.05)
