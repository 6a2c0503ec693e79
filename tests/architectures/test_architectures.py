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
from helpers import time_limit
from torch.func import vmap

import nqf
from nqf.architectures import ARCHITECTURES, MODULES, QUADRATIC_MODELS, unvec, vec
from nqf.theory.taylor import convergence_errors

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
    scale = float(module(x).detach().abs().max())
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
    from nqf.plotting.structure_matrices import plot_structure_matrices

    paths = [tmp_path / "A.png", tmp_path / "A.pdf"]
    plot_structure_matrices(paths, font_size=8, dpi=100)
    assert all(p.stat().st_size > 10_000 for p in paths)
    with pytest.raises(ValueError, match="unknown architectures"):
        plot_structure_matrices([tmp_path / "x.png"], names=["transformer"])


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
    """forward_replicas (one conv2d for the CNN, two batched products for the MLP, one batched
    contraction for the self-attention, a vmap elsewhere) gives each replica's forward_with outputs to float64 rounding (1e-12 of the
    output scale), at weights large enough that every nonlinearity is far from linear."""
    module = ARCHITECTURES[name].build()
    x = module.sample_inputs(7, torch.Generator().manual_seed(3))
    W = 0.7 * torch.randn(3, module.p, module.width, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    batched = module.forward_replicas(W, x)
    single = torch.stack([module.forward_with(W[r], x) for r in range(3)])
    assert batched.shape == single.shape
    assert torch.allclose(batched, single, rtol=0, atol=1e-12 * float(single.abs().max()))


# -- the registry functions the experiment kinds build on ------------------------------------
from nqf.architectures import (  # noqa: E402
    build,
    gaussian_teacher,
    higher_order,
    initial_weights,
    input_variables,
    read_inputs,
    title,
    unit_input_dim,
)


def _input_axes(module, x) -> dict[str, int]:
    """Axis name -> length over the parts of inputs x, read through the module's input layout."""
    parts = x if isinstance(x, tuple) else (x,)
    return {axis: part.shape[1 + i] for (_, axes), part in zip(module.input_layout, parts)
            for i, axis in enumerate(axes)}


@pytest.mark.parametrize("name", ALL)
def test_registry_builds_every_architecture_from_a_size_mapping(name):
    entry = ARCHITECTURES[name]
    module = build(name, {})
    assert isinstance(module, entry.module_class) and module.p > 0 and module.width > 0
    assert torch.equal(module.unit_weights(), entry.build().unit_weights())  # the same defaults and seed
    x = module.sample_inputs(3, rng(1))
    assert module(x).shape[0] == 3
    assert title(name) == entry.title and title(name, "no such figure") == entry.title
    assert len(higher_order(name)) > 10


def test_build_reads_config_sizes_and_refuses_a_key_twice():
    cnn = build("cnn", {"image": [5, 6], "kernel": [3, 2], "width": 4}, n_outputs=1, seed=2)
    assert (cnn.image, cnn.kernel, cnn.width, cnn.n_outputs) == ((5, 6), (3, 2), 4, 1)
    assert build("mlp_gelu", {"D": 3}).act.name == "gelu" and build("word_context").n_rows == 5
    with pytest.raises(TypeError):
        build("mlp", {"n_outputs": 2}, n_outputs=1)
    with pytest.raises(ValueError, match="Unknown architecture 'rnn'"):
        build("rnn", {})


@pytest.mark.parametrize("name", ALL)
def test_unit_input_dim_is_the_length_of_what_one_unit_reads(name):
    """A CNN unit reads a patch; otherwise the inputs' feature axis (x, a query or a token), a
    scalar x for the Fourier MLP, and for the matrix-valued Table 3 inputs the p entries w pairs with."""
    module = build(name)
    x = module.sample_inputs(3, rng(2))
    axes = _input_axes(module, x)
    if name == "cnn":
        expected = module.patches(x).shape[-1]
    elif "feature" in axes:
        expected = axes["feature"]
    else:
        expected = 1 if all(not a for _, a in module.input_layout) else module.p
    assert unit_input_dim(name) == unit_input_dim(module) == module.unit_input_dim == expected


def test_unit_input_dim_follows_the_size():
    assert unit_input_dim("cnn", {"kernel": [3, 2]}) == 6
    assert unit_input_dim("mlp", {"D": 7}) == 7 and unit_input_dim("qk_head", {"D": 9}) == 9


@pytest.mark.parametrize("name", ALL)
def test_inputs_round_trip_through_dataset_variables(name):
    import xarray as xr

    module = build(name)
    x = module.sample_inputs(5, rng(3))
    variables = input_variables(name, x, prefix=f"{name}_probe_", sample_dim="probe")
    assert len(variables) == len(module.input_layout)
    ds = xr.Dataset(variables)
    assert all(ds[v].dims[0] == "probe" and all(d.startswith(f"{name}_") for d in ds[v].dims[1:]) for v in ds)
    back = read_inputs(name, ds, prefix=f"{name}_probe_")
    pairs = zip(back, x) if isinstance(x, tuple) else [(back, x)]
    assert all(torch.equal(a, b) for a, b in pairs)
    assert torch.equal(module(back), module(x))


def test_stored_input_variables_keep_their_names():
    """The data files' variable and dimension names (teacher_student, nqf_approximation)."""
    mlp, qk, cnn = build("mlp"), build("qk_head"), build("cnn")
    gen = rng(4)
    assert {k: v[0] for k, v in input_variables("mlp", mlp.sample_inputs(2, gen), prefix="mlp_probe_",
                                                sample_dim="probe").items()} == {"mlp_probe_x": ("probe", "mlp_feature")}
    assert {k: v[0] for k, v in input_variables("qk_head", qk.sample_inputs(2, gen), prefix="qk_head_",
                                                sample_dim="sample").items()} == {
        "qk_head_query": ("sample", "qk_head_feature"), "qk_head_context": ("sample", "qk_head_feature", "qk_head_token")}
    assert {k: v[0] for k, v in input_variables("cnn", cnn.sample_inputs(2, gen), prefix="cnn_",
                                                sample_dim="sample").items()} == {"cnn_x": ("sample", "cnn_row", "cnn_col")}
    with pytest.raises(ValueError, match="query, context"):
        input_variables("qk_head", torch.zeros(2, 4), prefix="", sample_dim="sample")


def test_titles_of_the_papers_figures():
    assert [title(a, "Fig. 2") for a in ("mlp", "cnn", "qk_head", "mha", "moe")] == [
        "MLP", "CNN", "QK-only head", "MHA", "MoE"]
    assert title("qk_head", "Fig. 6") == "QK-only attention (4 heads)"
    assert title("mlp", "Fig. 7") == "2-layer MLP (tanh)" and title("cnn", "Fig. 7") == "1-layer CNN"
    assert "exact" in higher_order("phase_retrieval") and "O(|W|^3)" in higher_order("mlp_gelu")


@pytest.mark.parametrize("name", MODULES)
def test_teacher_is_deterministic_for_a_seed(name):
    module = build(name)
    W = gaussian_teacher(module, rng(7))
    assert W.shape == (module.p, module.width) and W.dtype == F64
    assert torch.equal(W, gaussian_teacher(module, rng(7)))
    assert not torch.equal(W, gaussian_teacher(module, rng(8)))
    fan = gaussian_teacher(module, rng(7), std=2.0, fan_in=True)
    start = 0
    for block, n in module.blocks():  # the same draws, each block over its fan-in
        reads = module.width if block == "v" else module.unit_input_dim
        assert torch.allclose(fan[start:start + n] * math.sqrt(reads), 2.0 * W[start:start + n], rtol=1e-14, atol=0)
        start += n


def test_teacher_stream_is_offset_from_the_init_seeds():
    from nqf.experiments.sweeps import teacher_generator

    module = build("mlp")
    assert torch.equal(gaussian_teacher(module, teacher_generator(3)), gaussian_teacher(module, teacher_generator(3)))
    assert not torch.equal(gaussian_teacher(module, teacher_generator(0)), initial_weights(module, [0])[0])


def test_initial_weights_one_gaussian_per_seed_scaled_by_each_scale():
    module = build("mlp")
    W0 = initial_weights(module, [3, 5], [0.1, 2.0])
    assert W0.shape == (4, module.p, module.width) and W0.dtype == F64
    G3, G5 = (torch.randn(module.p, module.width, generator=rng(s), dtype=F64) for s in (3, 5))
    assert torch.equal(W0[0], 0.1 * G3) and torch.equal(W0[1], 0.1 * G5)  # scale-major
    assert torch.equal(W0[2], 2.0 * G3) and torch.equal(W0[3], 2.0 * G5)
    assert torch.equal(initial_weights(module, [3])[0], G3)


@pytest.mark.parametrize("name", ["mlp", "cnn", "qk_self_attention"])
def test_image_reading_modules(name):
    """Sized for (H, W) images, a module takes them through ``image_inputs``; on Gaussian images
    the mean squared norm of what one unit reads is its unit input dimension (to 5 %)."""
    images = torch.randn(400, 5, 6, generator=rng(5), dtype=F64)
    size = {"cnn": {"kernel": [2, 3]}, "qk_self_attention": {"d_k": 2}}.get(name, {})
    module = build(name, size, image=(5, 6), n_outputs=1)
    x = module.image_inputs(images)
    assert module(x).shape == (400, 1)
    assert float(module.unit_input_norm2(x)) == pytest.approx(module.unit_input_dim, rel=0.05)
    assert float(module.unit_input_norm2(2 * x)) == pytest.approx(4 * float(module.unit_input_norm2(x)), rel=1e-12)


def test_cnn_input_norm_without_patches_equals_the_patch_definition():
    """The CNN's mean |x_p|^2 from box sums of x^2 (no (m, P, kh*kw) patches) equals the mean over
    the explicit patches: both sum the same positive squares, the box sums through cumulative sums
    of at most H W terms, so they agree to H W eps relative (30 x 2.2e-16 here; asserted 1e-13)."""
    images = 3.0 * torch.randn(50, 5, 6, generator=rng(7), dtype=F64)
    module = build("cnn", {"kernel": [2, 3]}, image=(5, 6), n_outputs=1)
    direct = module.patches(images).pow(2).sum(-1).mean()
    assert float(module.unit_input_norm2(images)) == pytest.approx(float(direct), rel=1e-13)


def test_modules_that_do_not_read_images_say_so():
    with pytest.raises(ValueError, match="does not read images"):
        build("mha", image=(4, 4))
    with pytest.raises(ValueError, match="leave it out of the size"):
        build("mlp", {"D": 3}, image=(4, 4))


def test_set_readout_copies_into_a_fixed_readout_only():
    qk, mlp = build("qk_head", n_outputs=1), build("mlp")
    c = np.arange(qk.D, dtype=float)
    qk.set_readout(c)
    assert torch.equal(qk.readout[:, 0], torch.as_tensor(c))
    before = mlp.unit_weights().clone()
    mlp.set_readout(c)  # no fixed readout: nothing changes
    assert torch.equal(mlp.unit_weights(), before)


def test_registry_facts_load_without_torch():
    import subprocess
    import sys

    code = ("import sys\nfrom nqf.architectures import ARCHITECTURES, MODULES, higher_order, selection, title\n"
            "from nqf.pipeline.config import load_schema\n"
            "assert title('mlp', 'Fig. 6') and higher_order('cnn') and len(MODULES) > 5\n"
            "assert selection('effective_matrix') and load_schema()\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=time_limit(300))
    assert out.stdout.strip() == "False"


def test_registry_flags_are_what_the_classes_define():
    """An entry marked effective_matrix / mode_design has a class that defines those methods."""
    from nqf.architectures import UnitModule, selection

    for name in selection("effective_matrix"):
        cls = ARCHITECTURES[name].module_class
        for method in ("effective_matrix", "effective_outputs", "teacher_units"):
            assert getattr(cls, method) is not getattr(UnitModule, method), (name, method)
    for name in selection("mode_design"):
        assert ARCHITECTURES[name].module_class.mode_design.__func__ is not UnitModule.mode_design.__func__, name
    assert set(selection("mode_design_module")) == set(selection("mode_design")) - set(QUADRATIC_MODELS)
    with pytest.raises(ValueError, match="Unknown selection"):
        selection("attention")


def test_config_choices_of_architectures_are_the_registry_selections():
    """The config schema's lists of architectures (nqf.pipeline.config.ARCHITECTURE_CHOICES) name
    only architectures of their registry selection, and a filled list all of them."""
    from nqf.architectures import selection
    from nqf.pipeline.config import ARCHITECTURE_CHOICES, _fill_architecture_choices, load_schema

    schema = load_schema()
    for (kind, key), (name, filled) in ARCHITECTURE_CHOICES.items():
        enum = schema["$defs"][kind]["properties"][key]["items"]["enum"]
        assert set(enum) <= set(selection(name)), (kind, key)
        assert not filled or sorted(enum) == sorted(selection(name)), (kind, key)
    stray = load_schema()
    stray["$defs"]["init_scaling"]["properties"]["modules"]["items"]["enum"].append("diagonal_net")
    with pytest.raises(ValueError, match="does not mark mode_design_module"):
        _fill_architecture_choices(stray)


@pytest.mark.parametrize("name", ["qk_self_attention", "mlp_gelu", "phase_retrieval_x"])
def test_architectures_without_a_mode_design_are_refused(name):
    from nqf.architectures.mode_designs import design

    with pytest.raises(ValueError, match="No init_scaling design"):
        design(name, 2, 3, 0)


def test_linear_network_is_buildable_and_exact():
    """ARCHITECTURES['mlp_linear'] (activation 'linear') is the Saxe network f(x) = V U x: its
    module equals its NQF at any W, and A_c(x) = 1/2 [[0, x e_c^T], [e_c x^T, 0]]."""
    net = ARCHITECTURES["mlp_linear"].build(D=3, width=4, n_outputs=2)
    x = torch.randn(5, 3, dtype=F64, generator=rng(1))
    with torch.no_grad():
        assert torch.allclose(net(x), x @ net.U.T @ net.V.T, rtol=1e-13)
    W = 3 * torch.randn(net.p, 4, dtype=F64, generator=rng(2))
    assert torch.allclose(net.nqf_outputs(W, x), net.forward_with(W, x), rtol=1e-12)
    A = net.structure(x).dense().reshape(5, 2, net.p, net.p)
    assert torch.allclose(A[1, 0, :3, 3], x[1] / 2) and torch.all(A[:, :, :3, :3] == 0)
    assert nqf.expansion(net.unit, x[0], net.p).z2_symmetric


def test_tied_qk_scale_follows_d_k_not_the_width_when_given():
    """tied_qk's 1/sqrt(d_k): d_k = width by default (the paper's W_t has d_k rows = units), so A(x)
    changes with the width; an explicit d_k keeps A(x) fixed across widths."""
    small, wide = (ARCHITECTURES["tied_qk"].build(D=3, width=w, seed=0) for w in (2, 8))
    x = small.sample_inputs(4, rng(3))
    a_small, a_wide = small.structure(x).dense(), wide.structure(x).dense()
    assert torch.allclose(a_small, 2 * a_wide)  # sqrt(8 / 2)
    fixed = [ARCHITECTURES["tied_qk"].build(D=3, width=w, seed=0, d_k=2).structure(x).dense() for w in (2, 8)]
    assert torch.allclose(fixed[0], fixed[1]) and torch.allclose(fixed[0], a_small)
    assert torch.allclose(nqf.structure_matrix(wide.unit, (x[0][0], x[1][0]), wide.p), a_wide[0], atol=1e-12)


# -- the self-attention's readings (query tokens, head pooling, f(0) kept or removed) -----------
SA_OPTIONS = [dict(query=q, heads=h, center=c) for q in ("all", "first", "last") for h in ("sum", "mean")
              for c in (False, True)]


@pytest.mark.parametrize("options", SA_OPTIONS, ids=lambda o: f"{o['query']}-{o['heads']}-{'centred' if o['center'] else 'f0'}")
def test_self_attention_options_analytic_structure_and_batched_forward(options):
    """Each reading of the Fig. 7 attention keeps Theorem 1: the analytic A(x) equals autograd's
    Hessian of its unit (1e-10, float64), forward_replicas equals forward_with per replica (1e-12 of
    the output scale, at weights where the softmax is far from uniform), and a one-head module is
    its unit function."""
    module = ARCHITECTURES["qk_self_attention"].build(D=4, d_k=3, width=2, n_outputs=2, seq_len=5, **options)
    X = module.sample_inputs(4, rng(31))
    auto = nqf.structure_matrix(module.unit, X, module.p, batched=True)
    analytic = module.structure(X).dense().reshape(auto.shape)
    assert float((analytic - auto).abs().max()) <= 1e-10 and float(auto.abs().max()) > 0.01
    W = 0.7 * torch.randn(3, module.p, module.width, generator=rng(32), dtype=F64)
    batched = module.forward_replicas(W, X)
    single = torch.stack([module.forward_with(W[r], X) for r in range(3)])
    assert torch.allclose(batched, single, rtol=0, atol=1e-12 * float(single.abs().max()))
    f0 = module.forward_with(torch.zeros(module.p, module.width, dtype=F64), X)
    if options["center"]:
        assert float(f0.abs().max()) <= 1e-14  # f(0) removed: uniform attention reads out 0
    else:
        scale = module.width * (1.0 if options["heads"] == "sum" else 1.0 / module.width)
        assert torch.allclose(f0, scale * torch.einsum("dc,md->mc", module.readout, X.mean(-1)), atol=1e-13)


def test_self_attention_averaged_heads_equal_summed_heads_with_readout_over_d():
    """f is linear in the readout: heads averaged = heads summed with Cr / d (forward and A)."""
    mean = ARCHITECTURES["qk_self_attention"].build(D=4, d_k=3, width=3, n_outputs=1, seq_len=5, heads="mean")
    total = ARCHITECTURES["qk_self_attention"].build(D=4, d_k=3, width=3, n_outputs=1, seq_len=5)
    total.set_readout(mean.readout / 3)
    X = mean.sample_inputs(6, rng(33))
    W = 0.5 * torch.randn(mean.p, mean.width, generator=rng(34), dtype=F64)
    assert torch.allclose(mean.forward_with(W, X), total.forward_with(W, X), rtol=1e-13, atol=1e-15)
    assert torch.allclose(mean.structure(X).dense(), total.structure(X).dense(), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("block", [None, 128, 7], ids=["own-blocks", "128-blocks", "7-blocks"])
@pytest.mark.parametrize("scale", [1.0, 60.0], ids=["block-shift", "row-shift"])
def test_pooled_attention_gradient_equals_autograd(scale, block, monkeypatch):
    """The blocked softmax (nqf.architectures.query_key.PooledAttention) against autograd through
    the plain einsum forward, value and gradient, float64 (1e-12 relative): at small weights one
    shift serves a whole block; at large ones (logits spanning > 700) the row maxima are used.
    With the library's own block size (2 MiB of logits: all 300 samples in one block here) and
    with blocks of 128 and of 7 samples (the last block shorter than the others)."""
    from nqf.architectures.query_key import PooledAttention

    per_sample = 6 * 4 * 6 * 8  # logits bytes of a sample: 6 queries, 2 x 2 heads, 6 keys, float64
    if block is not None:
        monkeypatch.setattr(PooledAttention, "BLOCK_BYTES", block * per_sample)
        assert PooledAttention.block_size(6, 4, 6, 8) == block
    module = ARCHITECTURES["qk_self_attention"].build(D=5, d_k=3, width=2, n_outputs=2, seq_len=6)
    X = module.sample_inputs(300, rng(35))
    W = (scale * torch.randn(2, module.p, module.width, generator=rng(36), dtype=F64)).requires_grad_()
    weights = torch.randn(2, 300, 2, generator=rng(37), dtype=F64)
    out = module.forward_replicas(W, X)
    (grad,) = torch.autograd.grad((out * weights).sum(), W)
    ref = torch.stack([torch.func.functional_call(module, module.params_from_unit_weights(W[r]), (X,)) for r in range(2)])
    (ref_grad,) = torch.autograd.grad((ref * weights).sum(), W)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-12 * float(ref.abs().max()))
    assert torch.allclose(grad, ref_grad, rtol=1e-10, atol=1e-12 * float(ref_grad.abs().max()))
    assert float(ref_grad.abs().max()) > 1e-3  # not a trivially zero gradient


def test_pooled_attention_blocks_hold_about_block_bytes_of_logits_on_the_cpu():
    """PooledAttention.block_size: on the CPU the samples whose logits (queries x heads x keys x
    itemsize bytes each) fit in BLOCK_BYTES (2 MiB), at least one; elsewhere DEVICE_BLOCK."""
    from nqf.architectures.query_key import PooledAttention as PA

    per = 28 * 20 * 28 * 4  # real_data's attention: 28 queries and keys, 2 x 10 heads, float32
    assert PA.block_size(28, 20, 28, 4) == (2 << 20) // per == 33
    assert PA.block_size(28, 20, 28, 8) == 16  # float64: half as many
    assert PA.block_size(1, 1, 2, 4) == (2 << 20) // 8
    assert PA.block_size(4000, 100, 100, 8) == 1  # one sample over the budget: still a block
    assert PA.block_size(28, 20, 28, 4, "cuda") == PA.DEVICE_BLOCK == 128


def test_self_attention_refuses_unknown_readings():
    with pytest.raises(ValueError, match="query must be one of"):
        ARCHITECTURES["qk_self_attention"].build(query="middle")
    with pytest.raises(ValueError, match="heads must be one of"):
        ARCHITECTURES["qk_self_attention"].build(heads="max")
    with pytest.raises(TypeError, match="center must be True or False"):
        ARCHITECTURES["qk_self_attention"].build(center="yes")


def test_structure_reads_integer_inputs_as_float64_and_refuses_half_precision_and_empty_batches():
    import warnings

    from nqf.theory.factored import BlockBilinearForm

    module = ARCHITECTURES["mlp"].build(D=5, width=4, n_outputs=2)
    x = torch.randint(-3, 4, (6, 5), generator=rng(7))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        form = module.structure(x)
    assert form.left.dtype == F64  # float32 before: int64 * a float scalar
    assert torch.equal(form.dense(), module.structure(x.to(F64)).dense())
    for dtype, digits in ((torch.float16, 3), (torch.bfloat16, 2)):
        with pytest.raises(ValueError, match=rf"input x is {dtype}, whose {digits} significant digits are too few "
                                             r"for A\(x\); give float32 or float64"):
            module.structure(x.to(dtype))
    assert module.structure(x.to(torch.float32)).left.dtype == torch.float32  # float32 is kept
    with pytest.raises(ValueError, match=r"input x holds no samples \(shape \(0, 5\)\)"):
        module.structure(torch.zeros(0, 5, dtype=F64))
    with pytest.raises(ValueError, match=r"needs at least one entry on the factors' samples axis.*empty batch"):
        BlockBilinearForm(3, (0, 2), (2, 3), torch.zeros(0, 1, 1, 2, dtype=F64), torch.ones(1, 1, 1, 1, dtype=F64))


def test_dense_matrices_beyond_memory_are_refused_before_allocating(monkeypatch):
    module = ARCHITECTURES["mlp"].build(D=20, width=4, n_outputs=1)
    form = module.structure(module.sample_inputs(1500, rng(8)))
    full = form.weighted_sum(torch.eye(form.m, dtype=F64))
    assert torch.equal(form.dense(), full)  # built in blocks of samples, never an m x m identity
    monkeypatch.setenv("NQF_MAX_MEMORY_GB", "0.005")  # 5 MB: the 1500 x 21 x 21 matrices take 5.3 MB
    with pytest.raises(MemoryError, match=r"dense structure matrices of this form \(m = 1500 data matrices of p x p = "
                                          r"21 x 21\): about .* MB would be allocated, but 5 MB is available; pass "
                                          r"fewer samples"):
        form.dense()
    with pytest.raises(MemoryError, match="dense structure matrices"):
        nqf.predict(form, np.zeros(1500), np.linspace(0.0, 1.0, 3), W0=np.eye(21))
