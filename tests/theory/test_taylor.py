"""nqf.structure_matrix / nqf.expansion: autograd A(x) for any unit, and Theorem 1's hypotheses.

Tolerances: Hessians of polynomials and of tanh/sigmoid units are computed by exact AD in
float64, so they match closed forms to rounding (1e-12 leaves a factor of ~1e3 over the
observed 1e-15). Taylor-order checks fit the exponent of the remainder over one decade of
|w| and allow 0.15 around the integer order.
"""
import math
import warnings

import pytest
import torch

import nqf
from nqf.architectures import TwoLayerMLP
from nqf.errors import NotSmoothError, ZGZWarning
from nqf.theory.taylor import check_smooth

F64 = torch.float64


def rng(seed=0):
    return torch.Generator().manual_seed(seed)


def test_quadratic_unit_gives_symmetrised_matrix_in_every_shape():
    g = rng()
    S = torch.randn(3, 5, 5, generator=g, dtype=F64)  # three outputs, not symmetric
    x = torch.randn(4, 5, generator=g, dtype=F64)

    def unit(w, xx):  # f_c = w^T S_c w * (1 + |x|^2): A_c = Sym(S_c) (1 + |x|^2)
        return torch.einsum("p,cpq,q->c", w, S, w) * (1 + xx @ xx)

    sym = 0.5 * (S + S.transpose(1, 2))
    A = nqf.structure_matrix(unit, x[0], 5)
    assert A.shape == (3, 5, 5)
    assert torch.allclose(A, sym * (1 + x[0] @ x[0]), rtol=0, atol=1e-12)
    A_b = nqf.structure_matrix(unit, x, 5, batched=True)
    assert A_b.shape == (4, 3, 5, 5)
    assert torch.allclose(A_b, sym[None] * (1 + (x * x).sum(1))[:, None, None, None], atol=1e-12)
    scalar = nqf.structure_matrix(lambda w, xx: unit(w, xx)[0], x[1], 5)
    assert scalar.shape == (5, 5) and torch.allclose(scalar, A_b[1, 0], atol=1e-12)


def test_tuple_inputs_and_float32_request_are_handled():
    g = rng(1)
    q, X = torch.randn(3, generator=g), torch.randn(3, 4, generator=g)  # float32 on purpose

    def unit(w, inputs):
        query, context = inputs
        return (w[:3] @ query) * (w[3:] @ context.mean(1))

    A = nqf.structure_matrix(unit, (q, X), 6)
    assert A.dtype == F64
    expect = torch.zeros(6, 6, dtype=F64)
    expect[:3, 3:] = 0.5 * torch.outer(q.double(), X.double().mean(1))
    expect[3:, :3] = expect[:3, 3:].T
    assert torch.allclose(A, expect, atol=1e-12)


@pytest.mark.parametrize("name, order", [("relu", 2), ("leaky_relu", 2), ("abs_cubed", 3), ("abs", 1)])
def test_units_with_a_kink_are_refused_with_the_reason(name, order):
    x = torch.randn(5, generator=rng(2), dtype=F64)
    if name == "relu":
        unit = TwoLayerMLP(D=5, activation_name="relu").unit
        p = 7
    elif name == "leaky_relu":
        unit, p = (lambda w, xx: w[5:] * torch.nn.functional.leaky_relu(w[:5] @ xx, 0.1)), 7
    elif name == "abs_cubed":  # C^2 but not C^3: the third derivative jumps
        unit, p = (lambda w, xx: torch.abs(w @ xx)[None] ** 3), 5
    else:
        unit, p = (lambda w, xx: torch.abs(w @ xx)[None]), 5
    with pytest.raises(NotSmoothError, match=f"not C\\^3 at w = 0.*order {order}"):
        nqf.structure_matrix(unit, x, p)
    with pytest.raises(NotSmoothError):
        nqf.expansion(unit, x, p)


@pytest.mark.parametrize("act", ["tanh", "gelu", "sigmoid", "softplus0", "sin_cubed"])
def test_smooth_units_pass_the_smoothness_probe(act):
    x = torch.randn(5, generator=rng(3), dtype=F64)
    fns = {"softplus0": lambda z: torch.nn.functional.softplus(z) - math.log(2.0),
           "sin_cubed": lambda z: torch.sin(z) ** 3}
    if act in fns:
        unit = (lambda w, xx: w[5:] * fns[act](w[:5] @ xx))
    else:
        unit = TwoLayerMLP(D=5, activation_name=act).unit
    check_smooth(unit, x, 7)  # raises if refused


def test_sigmoid_breaks_zgz_is_warned_and_g_is_returned():
    x = torch.randn(5, generator=rng(4), dtype=F64)
    mlp = TwoLayerMLP(D=5, n_outputs=2, activation_name="sigmoid")
    with pytest.warns(ZGZWarning, match="g\\(x\\).*pure NQF"):
        nqf.structure_matrix(mlp.unit, x, mlp.p)
    with pytest.warns(ZGZWarning):
        exp = nqf.expansion(mlp.unit, x, mlp.p)
    assert not exp.zgz_holds and any("ZGZ fails" in n for n in exp.notes)
    # grad_v of v * sigmoid(u.x) at 0 is sigmoid(0) e_c = e_c / 2; grad_u vanishes
    expect = torch.zeros(2, 7, dtype=F64)
    expect[0, 5] = expect[1, 6] = 0.5
    assert torch.allclose(exp.g, expect, atol=1e-15)
    # A = sigmoid'(0)/2 [[0, x e_c^T], [e_c x^T, 0]] with sigmoid'(0) = 1/4
    assert torch.allclose(exp.A[0, :5, 5], x / 8, atol=1e-14)
    with pytest.raises(ValueError, match="ZGZ fails"):
        mlp.structure(x[None])


def test_no_warning_when_zgz_holds():
    x = torch.randn(5, generator=rng(5), dtype=F64)
    mlp = TwoLayerMLP(D=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exp = nqf.expansion(mlp.unit, x, mlp.p)
    assert exp.zgz_holds and float(exp.g.abs().max()) == 0.0


@pytest.mark.parametrize("act, even, order", [("tanh", True, 4), ("gelu", False, 3), ("sigmoid", True, 4)])
def test_second_order_model_error_has_the_predicted_order(act, even, order):
    """|f(w) - (f0 + g.w + w^T A w)| ~ |w|^order: checks g and A together, ZGZ or not.

    sigmoid - 1/2 is odd, so v sigmoid(u.x) - g.w is even and its cubic term vanishes too.
    """
    x = torch.randn(5, generator=rng(6), dtype=F64)
    mlp = TwoLayerMLP(D=5, n_outputs=1, activation_name=act)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZGZWarning)
        exp = nqf.expansion(mlp.unit, x, mlp.p)
    assert exp.z2_symmetric is even and exp.error_order == order
    w = torch.randn(mlp.p, generator=rng(7), dtype=F64)
    scales = [1e-1, 1e-2]
    errors = [float((mlp.unit(s * w, x) - exp.quadratic(s * w)).abs().max()) for s in scales]
    fitted = math.log(errors[0] / errors[1]) / math.log(scales[0] / scales[1])
    assert abs(fitted - order) < 0.15, (errors, fitted)


def test_z2_detection_even_odd_and_neither():
    x = torch.randn(4, generator=rng(8), dtype=F64)
    even, odd = nqf.theory.taylor.z2_symmetry(lambda w, xx: torch.cos(w @ xx)[None], x, 4)
    assert even and not odd
    even, odd = nqf.theory.taylor.z2_symmetry(lambda w, xx: torch.sin(w @ xx)[None] + 2.0, x, 4)
    assert odd and not even
    even, odd = nqf.theory.taylor.z2_symmetry(lambda w, xx: torch.exp(w @ xx)[None], x, 4)
    assert not even and not odd


def test_batched_equals_per_sample():
    mlp = TwoLayerMLP(D=5, n_outputs=3, activation_name="gelu")
    x = mlp.sample_inputs(6, rng(9))
    batched = nqf.structure_matrix(mlp.unit, x, mlp.p, batched=True)
    loop = torch.stack([nqf.structure_matrix(mlp.unit, xx, mlp.p) for xx in x])
    assert torch.equal(batched, loop)
    exp = nqf.expansion(mlp.unit, x, mlp.p, batched=True)
    assert exp.f0.shape == (6, 3) and exp.g.shape == (6, 3, mlp.p) and exp.A.shape == (6, 3, mlp.p, mlp.p)
    assert torch.equal(exp.A, batched)


def test_a_unit_with_an_infinite_third_derivative_is_refused_not_expanded():
    """|w.x|^2.5 is C^2 but its third derivative at 0 is infinite (autograd: NaN); a NaN passes
    every comparison as False, so it used to come out as A = 0 with error order 4."""
    x = torch.randn(5, generator=rng(3), dtype=F64)
    for call in (nqf.expansion, nqf.structure_matrix):
        with pytest.raises(NotSmoothError, match=r"not smooth at w = 0: its derivative of order 3 .* NaN or inf"):
            call(lambda w, xx: (w @ xx).abs() ** 2.5, x, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        info = nqf.expansion(lambda w, xx: (w @ xx).abs() ** 4, x, 5)  # C^3 (and more): still expanded
    assert info.error_order == 4 and float(info.A.abs().max()) == 0.0


@pytest.mark.parametrize("edit", ["autograd", "no_grad"])
def test_a_unit_that_edits_w_in_place_is_named_not_p(edit):
    x = torch.randn(4, generator=rng(4), dtype=F64)

    def unit(w, xx):
        if edit == "autograd":
            w.mul_(2.0)
        else:
            with torch.no_grad():
                w.add_(1.0)
        return (w @ xx) ** 2

    with pytest.raises(ValueError, match="must not modify w in place") as info:
        nqf.expansion(unit, x, 4)
    assert "p must be" not in str(info.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        A = nqf.structure_matrix(lambda w, xx: (w.clone().mul_(2.0) @ xx) ** 2, x, 4)  # a copy may be edited
    assert torch.allclose(A, 4 * torch.outer(x, x), atol=1e-12)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_taylor_entries_refuse_cuda_without_cuda_before_any_work():
    unit, x = (lambda w, xx: (w @ xx) ** 2), torch.randn(3, dtype=F64)
    for call in (nqf.expansion, nqf.structure_matrix, check_smooth):
        with pytest.raises(ValueError, match="device is 'cuda' but CUDA is not available.*use 'cpu' or 'auto'"):
            call(unit, x, 3, device="cuda")
    assert nqf.structure_matrix(unit, x, 3, device="cpu").shape == (3, 3)


def test_batched_hessians_beyond_memory_are_refused_naming_the_size(monkeypatch):
    x = torch.randn(50, 6, generator=rng(5), dtype=F64)
    unit = TwoLayerMLP(D=6, width=2, n_outputs=1).unit
    monkeypatch.setenv("NQF_MAX_MEMORY_GB", "1e-5")  # 10 kB: the 50 x 7 x 7 Hessians need 39 kB
    with pytest.raises(MemoryError, match=r"A\(x\) of 50 samples x 1 outputs with p = 7: about 39.2 kB .* fewer samples"):
        nqf.structure_matrix(unit, x, 7, batched=True)
    monkeypatch.setenv("NQF_MAX_MEMORY_GB", "1")
    assert nqf.structure_matrix(unit, x, 7, batched=True).shape == (50, 1, 7, 7)
