"""Every architecture: analytic factored A(x) vs autograd, the phi-limit of the real module,
the weights -> W reader, and the paper's own block formulas.

Tolerances:
* analytic vs autograd A(x): 1e-10 absolute in float64 (entries are O(1); both sides are exact
  formulas evaluated with rounding ~1e-15, so a wrong index or factor fails by O(1));
* factored-form methods vs their dense definition: 1e-12 relative to the output scale;
* phi-limit (Eq. 3): the log-log slope of the error over phi in [1e2, 1e6] must be within 0.15
  of -1 (Z2 units, error O(|W|^4)) or -1/2 (error O(|W|^3)), and the error must fall by the
  corresponding factor (at least 10^(4 * |slope| - 0.6)); exact (Table 3) models must match to
  1e-12 at every phi.
"""
import math

import numpy as np
import pytest
import torch
from torch.func import vmap

import nqf
from nqf.architectures import ARCHITECTURES, MODULES, QUADRATIC_MODELS, unvec, vec
from nqf.taylor import convergence_errors

F64 = torch.float64
ALL = list(ARCHITECTURES)


def rng(seed=0):
    return torch.Generator().manual_seed(seed)


def built(name, **overrides):
    module = ARCHITECTURES[name].build(**overrides)
    return module, module.sample_inputs(4, rng(11))


@pytest.mark.parametrize("name", ALL)
def test_analytic_structure_equals_autograd(name):
    module, x = built(name)
    auto = nqf.structure_matrix(module.unit, x, module.p, batched=True)
    analytic = module.structure(x).dense().reshape(auto.shape)
    assert auto.shape == (4, module.n_outputs, module.p, module.p)
    assert float((analytic - auto).abs().max()) <= 1e-10
    if name == "moe_tanh_expert":
        assert float(auto.abs().max()) == 0.0  # the expert's own ZGZ: G = grad E(x; 0) = 0
    else:
        assert float(auto.abs().max()) > 0.05  # guards against both sides being trivially zero


@pytest.mark.parametrize("strategy", ["auto", "project", "gram"])
@pytest.mark.parametrize("name", ALL)
def test_factored_form_matches_its_dense_matrices(name, strategy):
    module, x = built(name)
    form = module.structure(x)
    if hasattr(form, "with_strategy"):
        form = form.with_strategy(strategy)
    elif strategy != "auto":
        pytest.skip("not a BlockBilinearForm")
    A = form.dense()
    assert torch.equal(A, A.transpose(1, 2))
    g = rng(12)
    W = torch.randn(2, form.p, 3, generator=g, dtype=F64)
    M = W @ W.transpose(1, 2)
    c = torch.randn(2, form.m, generator=g, dtype=F64)
    f = torch.einsum("mpq,rpq->rm", A, M)
    H = torch.einsum("rm,mpq->rpq", c, A)
    scale = float(f.abs().max()) + float(H.abs().max()) + 1.0
    for got, want in [(form.outputs(W), f), (form.outputs_from_M(M), f), (form.weighted_sum(c), H),
                      (form.apply_weighted(c, W), H @ W), (form.apply_weighted(c[0], W[0]), H[0] @ W[0])]:
        assert got.shape == want.shape
        assert float((got - want).abs().max()) <= 1e-12 * scale


def phi_errors(module, x, phis, seed=13):
    W = torch.randn(module.p, module.width, generator=rng(seed), dtype=F64) / math.sqrt(module.p)
    nqf_value = module.structure(x).outputs(W).reshape(x[0].shape[0] if isinstance(x, tuple) else x.shape[0], -1)
    return convergence_errors(lambda V: module.forward_with(V, x), W, nqf_value, phis)


@pytest.mark.parametrize("name", MODULES)
def test_module_converges_to_its_nqf_at_the_predicted_rate(name):
    module, x = built(name)
    phis = np.logspace(2, 6, 9)
    errors = np.array(phi_errors(module, x, phis))
    slope = np.polyfit(np.log(phis), np.log(errors), 1)[0]
    expected = -1.0 if ARCHITECTURES[name].z2 else -0.5
    assert abs(slope - expected) < 0.15, (name, slope, errors)
    assert errors[-1] / errors[0] < 10 ** (4 * expected + 0.6)
    # the theory's Z2 claim agrees with the numerical symmetry test of the unit
    assert nqf.expansion(module.unit, x, module.p, batched=True).z2_symmetric == ARCHITECTURES[name].z2


@pytest.mark.parametrize("name", QUADRATIC_MODELS)
def test_quadratic_models_are_exact_nqfs(name):
    module, x = built(name)
    errors = phi_errors(module, x, [1.0, 1e3, 1e6])
    scale = float(module(x).abs().max())
    assert max(errors) <= 1e-12 * max(scale, 1.0)
    W = torch.randn(module.p, module.width, generator=rng(23), dtype=F64)
    assert torch.allclose(module.nqf_outputs(W, x), module.forward_with(W, x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ALL)
def test_weights_reader_round_trip_and_forward_with(name):
    module, x = built(name)
    W = torch.randn(module.p, module.width, generator=rng(14), dtype=F64)
    before = module.forward_with(W, x)
    module.set_unit_weights(W)
    assert torch.equal(module.unit_weights(), W)
    assert torch.allclose(module(x), before, rtol=1e-13, atol=1e-13)
    # M = W W^T is what a training loop records
    assert torch.allclose(module.unit_weights() @ module.unit_weights().T, W @ W.T)


@pytest.mark.parametrize("name", ALL)
def test_one_unit_module_equals_unit_function(name):
    module, x = built(name, width=1)
    w = torch.randn(module.p, generator=rng(15), dtype=F64)
    module.set_unit_weights(w[:, None])
    assert torch.allclose(module(x), vmap(module.unit, in_dims=(None, 0))(w, x), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", ["mlp", "cnn", "mha", "qk_head", "qk_self_attention", "moe"])
def test_additive_layers_sum_their_units(name):
    module, x = built(name)
    W = torch.randn(module.p, module.width, generator=rng(16), dtype=F64)
    per_unit = vmap(vmap(module.unit, in_dims=(None, 0)), in_dims=(0, None))(W.T, x)
    assert torch.allclose(module.forward_with(W, x), per_unit.sum(0), rtol=1e-12, atol=1e-13)


def test_cnn_patch_sum_equals_sum_of_patches():
    cnn = ARCHITECTURES["cnn"].build(image=(6, 7), kernel=(3, 2))
    x = cnn.sample_inputs(3, rng(22))
    assert torch.allclose(cnn.patch_sum(x), cnn.patches(x).sum(-2), atol=1e-13)


def test_vec_is_column_major():
    m = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert vec(m).tolist() == [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    assert torch.equal(unvec(vec(m), 2, 3), m)


def _single(module, x, i=0):
    return tuple(t[i:i + 1] for t in x) if isinstance(x, tuple) else x[i:i + 1]


def test_paper_formulas_mlp_mha_qk_with_kronecker_convention():
    """Eq. 6, 8 and 10 typed in literally (torch.kron), k = 1, against the factored forms."""
    mlp = ARCHITECTURES["mlp"].build(n_outputs=1)
    x = mlp.sample_inputs(1, rng(17))
    A = torch.zeros(mlp.p, mlp.p, dtype=F64)
    A[:5, 5] = A[5, :5] = x[0] / 2  # phi'(0) = 1 for tanh
    assert torch.allclose(mlp.structure(x).dense()[0], A, atol=1e-14)

    mha = ARCHITECTURES["mha"].build(n_outputs=1)
    (q, X) = mha.sample_inputs(1, rng(18))
    D, dk, dv = mha.D, mha.d_k, mha.d_v
    x_avg = X[0].mean(1)
    A = torch.zeros(mha.p, mha.p, dtype=F64)
    v0 = 2 * dk * D
    block = torch.kron(x_avg[:, None], torch.eye(dv, dtype=F64))  # x_avg (x) I_dv, (D dv) x dv
    A[v0:v0 + D * dv, v0 + D * dv:] = block / 2
    A[v0 + D * dv:, v0:v0 + D * dv] = block.T / 2
    assert torch.allclose(mha.structure((q, X)).dense()[0], A, atol=1e-14)

    qk = ARCHITECTURES["qk_head"].build(n_outputs=1)
    (q, X) = qk.sample_inputs(1, rng(19))
    D, dk = qk.D, qk.d_k
    Xc = X[0] - X[0].mean(1, keepdim=True)
    u = (Xc @ Xc.T / X.shape[-1]) @ qk.readout[:, 0]
    block = torch.kron(torch.outer(q[0], u), torch.eye(dk, dtype=F64)) / (2 * math.sqrt(dk))
    A = torch.zeros(qk.p, qk.p, dtype=F64)
    A[:dk * D, dk * D:] = block
    A[dk * D:, :dk * D] = block.T
    assert torch.allclose(qk.structure((q, X)).dense()[0], A, atol=1e-14)


def test_fourier_mlp_is_eq_296_after_interleaving():
    four = ARCHITECTURES["fourier_mlp"].build(P=5, theta=0.5)
    x = torch.tensor([0.3], dtype=F64)
    A = four.structure(x).dense()[0]
    order = torch.stack([torch.arange(5), torch.arange(5) + 5], 1).reshape(-1)  # (a_1, W_1, a_2, ...)
    interleaved = A[order][:, order]
    for k in range(1, 6):
        value = k ** -0.5 * math.sqrt(2) * math.cos(2 * math.pi * k * 0.3) / (2 * math.sqrt(5))
        blk = interleaved[2 * (k - 1):2 * k, 2 * (k - 1):2 * k]
        assert torch.allclose(blk, torch.tensor([[0.0, value], [value, 0.0]], dtype=F64), atol=1e-15)
    off = interleaved.clone()
    for k in range(5):
        off[2 * k:2 * k + 2, 2 * k:2 * k + 2] = 0
    assert float(off.abs().max()) == 0.0


def test_analytic_structure_refuses_modules_outside_theorem_1():
    x = torch.randn(2, 5, dtype=F64)
    with pytest.raises(ValueError, match="not C\\^3"):
        nqf.architectures.TwoLayerMLP(activation_name="relu").structure(x)
    with pytest.raises(ValueError, match="ZGZ fails"):
        nqf.architectures.MixtureOfExperts(D=5, gate="sigmoid").structure(x)


def test_quadratic_model_trains_on_a_factored_form_like_on_dense():
    module, x = built("mha")
    form = module.structure(x)
    y = torch.randn(form.m, generator=rng(20), dtype=F64)
    W0 = 0.1 * torch.randn(3, module.p, module.width, generator=rng(21), dtype=F64)
    fact = nqf.QuadraticModel(form, W0, device="cpu")
    dense = nqf.QuadraticModel(nqf.DenseForm(form.dense()), W0, device="cpu")
    (l1, g1), (l2, g2) = fact.loss_and_grad(y), dense.loss_and_grad(y)
    assert torch.allclose(l1, l2, rtol=1e-12) and torch.allclose(g1, g2, rtol=1e-10, atol=1e-14)


def test_plot_structure_matrices_writes_files(tmp_path):
    paths = [tmp_path / "A.png", tmp_path / "A.pdf"]
    nqf.architectures.plot_structure_matrices(paths, font_size=8, dpi=100)
    assert all(p.stat().st_size > 10_000 for p in paths)
    with pytest.raises(ValueError, match="unknown architectures"):
        nqf.architectures.plot_structure_matrices([tmp_path / "x.png"], names=["transformer"])


def test_self_attention_readout_is_the_qk_head_at_the_mean_query():
    """Eq. 10 with x -> x_avg: the logit is linear in the query, so mean-pooling the queries
    averages A; same weights and readout give the same A to rounding (1e-13)."""
    sa = ARCHITECTURES["qk_self_attention"].build(D=4, d_k=3, width=2, n_outputs=2, seq_len=5)
    qk = ARCHITECTURES["qk_head"].build(D=4, d_k=3, width=2, n_outputs=2, seq_len=5)
    qk.readout.copy_(sa.readout)
    X = sa.sample_inputs(3, rng(21))
    A_sa = sa.structure(X).dense()
    A_qk = qk.structure((X.mean(-1), X)).dense()
    assert float((A_sa - A_qk).abs().max()) <= 1e-13
    assert float(A_sa.abs().max()) > 0.05


@pytest.mark.parametrize("name", ALL)
def test_forward_replicas_equals_forward_with_per_replica(name):
    """forward_replicas (one conv2d for the CNN, one batched contraction for the self-attention,
    a vmap elsewhere) gives each replica's forward_with outputs to float64 rounding (1e-12 of the
    output scale), at weights large enough that every nonlinearity is far from linear."""
    module = ARCHITECTURES[name].build()
    x = module.sample_inputs(7, torch.Generator().manual_seed(3))
    W = 0.7 * torch.randn(3, module.p, module.width, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    batched = module.forward_replicas(W, x)
    single = torch.stack([module.forward_with(W[r], x) for r in range(3)])
    assert batched.shape == single.shape
    assert torch.allclose(batched, single, rtol=0, atol=1e-12 * float(single.abs().max()))
