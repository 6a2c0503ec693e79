"""nqf.architectures.fast_tanh: NumPy's tanh values with torch.tanh's derivatives.

Tolerances: both tanh implementations are correctly rounded to within one unit in the last place
(ulp), so they differ by at most 2 ulp of the result: rtol = 2 eps of the dtype. Derivatives are
checked by torch.autograd's own finite-difference checks in float64 (their default eps 1e-6 and
tolerances), and against torch.tanh's derivatives to a few ulp of the derivative's scale.
"""
from __future__ import annotations

import pytest
import torch
from torch.func import hessian, jacfwd, jacrev, jvp, vmap

import nqf.architectures.fast_tanh as fast_tanh
from nqf.architectures.fast_tanh import tanh, tanh_values

DTYPES = (torch.float32, torch.float64)


@pytest.fixture(autouse=True)
def numpy_for_both_dtypes(monkeypatch):
    """The NumPy path is tested on every CPU, whichever dtypes this one's rule hands to NumPy."""
    monkeypatch.setattr(fast_tanh, "NUMPY_DTYPES", DTYPES)


def _inputs(dtype, *shape, scale=3.0, seed=0):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_values_agree_with_torch_tanh_to_rounding(dtype):
    """Large, small (1e-6: tanh x ~ x, where a formula through exp would lose every digit) and
    saturated arguments, 0-d and strided tensors: within 2 ulp of torch.tanh, same dtype and shape."""
    eps = torch.finfo(dtype).eps
    special = torch.tensor([0.0, 25.0, -25.0], dtype=dtype)
    x = torch.cat([_inputs(dtype, 500), _inputs(dtype, 500, scale=1e-6), special])
    for arg in (x, x.reshape(-1, 1)[::2, 0], x[7], x[:1001].reshape(7, -1).T):
        ref = torch.tanh(arg)
        for got in (tanh_values(arg), fast_tanh._Tanh.apply(arg)):  # NumPy's values, whatever the size
            assert got.dtype == dtype and got.shape == arg.shape
            assert torch.allclose(got, ref, rtol=2 * eps, atol=0.0)


def test_first_second_and_forward_mode_derivatives():
    """gradcheck (reverse and forward mode, batched gradients) and gradgradcheck in float64."""
    x = _inputs(torch.float64, 4, 3, scale=1.0).requires_grad_()
    ours = fast_tanh._Tanh.apply  # the Function itself: tanh() leaves tensors this small to torch.tanh
    assert torch.autograd.gradcheck(ours, (x,), check_forward_ad=True, check_batched_grad=True)
    assert torch.autograd.gradgradcheck(ours, (x,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_training_gradients_equal_torch_tanh(dtype):
    """A loss of a small tanh layer: its gradient and a gradient of that gradient (double
    backward) agree with torch.tanh's to a few ulp of their scale."""
    eps = torch.finfo(dtype).eps
    x, W0 = _inputs(dtype, 3000, 5, scale=1.0), _inputs(dtype, 5, 4, scale=1.0, seed=1)  # 12000 >= MIN_ELEMENTS

    def grads(fn):
        W = W0.clone().requires_grad_()
        (g,) = torch.autograd.grad(fn(x @ W).pow(2).sum(), W, create_graph=True)
        (gg,) = torch.autograd.grad(g.pow(2).sum(), W)
        return g.detach(), gg

    for got, ref in zip(grads(tanh), grads(torch.tanh)):  # sums of 3000 terms: rounding grows as sqrt(3000)
        assert torch.allclose(got, ref, rtol=0, atol=64 * eps * float(ref.abs().max()))


def test_inside_torch_func_transforms_it_is_torch_tanh():
    """Inside vmap, jacrev, jacfwd, hessian and nested jvp (the structure matrices' tools) the
    input is wrapped and tanh is torch.tanh: results bit-identical, including forward over
    forward mode, which an autograd.Function's jvp rule gets wrong."""
    w = _inputs(torch.float64, 7, scale=1.0)
    W = _inputs(torch.float64, 3, 7, scale=1.0, seed=2)

    def f(fn):
        return lambda v: fn(2.0 * v).pow(3).sum()

    for transform in (jacrev, jacfwd, hessian, lambda g: jacfwd(jacfwd(g))):
        assert torch.equal(transform(f(tanh))(w), transform(f(torch.tanh))(w))
    assert torch.equal(vmap(hessian(f(tanh)))(W), vmap(hessian(f(torch.tanh)))(W))

    def second(fn):
        inner = lambda s: jvp(lambda u: f(fn)(u * w), (s,), (torch.ones((), dtype=w.dtype),))[1]  # noqa: E731
        return jvp(inner, (torch.tensor(0.7, dtype=w.dtype),), (torch.tensor(1.0, dtype=w.dtype),))[1]

    assert torch.equal(second(tanh), second(torch.tanh))


def test_small_tensors_use_torch_tanh_and_large_ones_the_function():
    """Below MIN_ELEMENTS, torch.tanh itself (its grad_fn); from it on, the Function."""
    small = _inputs(torch.float64, fast_tanh.MIN_ELEMENTS - 1).requires_grad_()
    large = _inputs(torch.float64, fast_tanh.MIN_ELEMENTS).requires_grad_()
    assert type(tanh(small).grad_fn).__name__ == "TanhBackward0"
    assert type(tanh(large).grad_fn).__name__ == "_TanhBackward"


def test_other_dtypes_and_the_switch_use_torch_tanh(monkeypatch):
    """float16/bfloat16 (NumPy has no bfloat16) go to torch.tanh bit for bit, and so does every
    dtype with NQF_NUMPY_TANH=0 (here: the module's switch)."""
    for dtype in (torch.float16, torch.bfloat16):
        x = _inputs(torch.float32, 50).to(dtype)
        assert torch.equal(tanh(x), torch.tanh(x)) and torch.equal(tanh_values(x), torch.tanh(x))
    monkeypatch.setattr(fast_tanh, "ENABLED", False)
    x = _inputs(torch.float64, 50).requires_grad_()
    assert torch.equal(tanh(x), torch.tanh(x))
    assert torch.equal(tanh_values(x), torch.tanh(x))


AVX512 = {"X86_V2": True, "X86_V3": True, "X86_V4": True}  # NumPy 2.4's names
AVX2 = {"X86_V2": True, "X86_V3": True, "X86_V4": False}
AVX2_OLD_NAMES = {"AVX": True, "AVX2": True, "FMA3": True, "AVX512F": False, "AVX512_SKX": False}  # NumPy < 2.4


def test_numpy_is_used_only_where_it_vectorises_tanh():
    """NumPy only with AVX-512 (measured on an AVX2 machine: NumPy's float64 tanh 1.6-2.2x slower
    than torch's, float32 steps no faster); nothing on a CPU NumPy reports no x86 extension for
    (other architectures); the setting overrides the rule."""
    both = (torch.float32, torch.float64)
    assert fast_tanh.numpy_dtypes(AVX512) == both
    assert fast_tanh.numpy_dtypes({"AVX512F": True, "AVX512_SKX": True}) == both
    assert fast_tanh.numpy_dtypes(AVX2) == ()
    assert fast_tanh.numpy_dtypes(AVX2_OLD_NAMES) == ()
    assert fast_tanh.numpy_dtypes({"ASIMD": True, "NEON": True}) == ()
    assert fast_tanh.numpy_dtypes({}) == ()
    assert fast_tanh.numpy_dtypes(AVX512, "0") == ()
    assert fast_tanh.numpy_dtypes({}, "1") == both
    assert fast_tanh.numpy_dtypes(AVX512, " Auto ") == both
    with pytest.raises(ValueError, match="NQF_NUMPY_TANH must be 0, 1 or auto"):
        fast_tanh.numpy_dtypes(AVX2, "yes")


def test_a_dtype_numpy_does_not_vectorise_is_torch_tanh(monkeypatch):
    """A dtype outside NUMPY_DTYPES is torch.tanh bit for bit, at any size; one inside it is the
    Function."""
    monkeypatch.setattr(fast_tanh, "NUMPY_DTYPES", (torch.float32,))
    x = _inputs(torch.float64, 2 * fast_tanh.MIN_ELEMENTS).requires_grad_()
    assert type(tanh(x).grad_fn).__name__ == "TanhBackward0"
    assert torch.equal(tanh_values(x), torch.tanh(x))
    assert type(tanh(x.detach().float().requires_grad_()).grad_fn).__name__ == "_TanhBackward"
