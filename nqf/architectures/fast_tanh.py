"""tanh for CPU tensors computed by NumPy, with the autograd, forward-mode and vmap rules of torch.tanh.

On CPUs with AVX-512, torch.tanh is the largest single cost of the tanh networks' training steps:
measured by ``benchmarks/tanh_speed.py`` (torch 2.13, NumPy 2.4, one thread), NumPy's SIMD tanh
is about 7x faster there in float32 and 3x in float64, with errors of at most one unit in the last
place against a float64 reference (torch's the same; the two may differ in the last bit). NumPy has
no SIMD float64 tanh below AVX-512, and its AVX2 float32 tanh gains nothing once the Function's
own cost is paid: on an AVX2 machine (same versions) NumPy's float64 tanh was 1.6-2.2x *slower*
than torch's and whole float64 steps 0.53-0.71x as fast; float32 calls 1.1-1.3x faster but float32
steps 0.88-1.36x (median 0.94). So NumPy computes the values only for the dtypes in
:data:`NUMPY_DTYPES`, chosen once at import from the SIMD extensions NumPy itself dispatches to on
this CPU (:func:`numpy_dtypes`): float32 and float64 with AVX-512, nothing below it or on other
architectures. A fixed rule rather than a timing, so that one machine always computes the same
bits. ``tanh(x)`` uses NumPy where ``x`` is
a plain CPU tensor of one of those dtypes and torch.tanh everywhere else (GPUs, other dtypes,
tensors wrapped by torch.func's transforms outside this function's own rules).

Under plain autograd (the training loops) the NumPy values come with torch.tanh's own derivative
kernel of the output y = tanh(x) (aten.tanh_backward, g (1 - y^2)): backward, itself
differentiable (double backward), and the forward-mode tangent. Inside torch.func's transforms (vmap, grad,
jacrev, jacfwd, hessian: the structure matrices of nqf.theory.taylor, the default
``forward_replicas``) the input is a wrapped tensor and ``tanh`` is torch.tanh itself: nested
forward mode (jvp of jvp) through an autograd.Function's jvp rule loses the outer tangent (tried:
jacfwd(jacfwd(f)) came out wrong), so the transforms never see this function.
Set ``NQF_NUMPY_TANH=0`` to use torch.tanh everywhere, ``=1`` to use NumPy for float32 and
float64 whatever the CPU (read once, at import; unset or ``auto``: the rule above).
"""
from __future__ import annotations

import os

import numpy as np
import torch


def _cpu_features() -> dict:
    """NumPy's runtime table of the SIMD extensions this CPU has ({} where NumPy has none)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # NumPy 1.x
        try:
            from numpy.core._multiarray_umath import __cpu_features__
        except ImportError:
            return {}
    return dict(__cpu_features__)


def numpy_dtypes(features: dict, setting: str = "auto") -> tuple:
    """The dtypes whose tanh NumPy computes faster than torch on a CPU with ``features`` (NumPy's
    ``__cpu_features__``; its names for x86-64 levels changed in NumPy 2.4, both are read):
    float32 and float64 with AVX-512 (x86-64-v4: AVX512_SKX), where both of NumPy's tanh loops
    are vectorised at full width; none below it (module docstring). ``setting`` is
    NQF_NUMPY_TANH: ``0`` none, ``1`` both."""
    setting = setting.strip().lower()
    if setting == "0":
        return ()
    if setting == "1":
        return (torch.float32, torch.float64)
    if setting not in ("", "auto"):
        raise ValueError(f"NQF_NUMPY_TANH must be 0, 1 or auto; got {setting!r}")
    avx512 = any(features.get(name) for name in ("X86_V4", "AVX512_SKX"))
    return (torch.float32, torch.float64) if avx512 else ()


NUMPY_DTYPES = numpy_dtypes(_cpu_features(), os.environ.get("NQF_NUMPY_TANH", "auto"))
ENABLED = True  # switch for benchmarks: False uses torch.tanh for every dtype
_TANH_BACKWARD = torch.ops.aten.tanh_backward  # torch.tanh's own derivative kernel: g (1 - y^2)


def tanh_values(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) without autograd: NumPy's for plain CPU tensors of :data:`NUMPY_DTYPES`, else torch's."""
    if ENABLED and x.device.type == "cpu" and x.dtype in NUMPY_DTYPES:
        try:
            arr = x.detach().numpy()
        except (RuntimeError, TypeError):  # a tensor without storage (functorch wrapper, fake/meta tensor)
            return torch.tanh(x)
        out = torch.empty(x.shape, dtype=x.dtype)  # torch's allocator, as torch.tanh's output would use
        np.tanh(arr, out=out.numpy())
        return out
    return torch.tanh(x)


class _Tanh(torch.autograd.Function):
    """y = tanh(x): values from :func:`tanh_values`, derivatives as torch expressions of y."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return tanh_values(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return _TANH_BACKWARD(grad, y)  # grad (1 - y^2) in one kernel, differentiable again

    @staticmethod
    def jvp(ctx, tangent: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return _TANH_BACKWARD(tangent, y)

    @staticmethod
    def vmap(info, in_dims, x):
        # elementwise: the batched tensor's own layout, batch dimension where it was
        return _Tanh.apply(x), in_dims[0]


def _wrapped(x: torch.Tensor) -> bool:
    """Whether ``x`` is a torch.func transform's wrapper (BatchedTensor, GradTrackingTensor, ...)."""
    check = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
    return True if check is None else bool(check(x))


# Below this many elements torch.tanh is kept: the autograd.Function's own cost (~15 us a call,
# forward and backward) exceeds what NumPy saves (~2 ns an element in float32, ~3 in float64);
# measured by benchmarks/tanh_speed.py. (The deep trio, float64 on (replicas, 200, width) tensors,
# ran 0.77-0.95x with NumPy in four runs of it: nqf.training.deep keeps torch.tanh.)
MIN_ELEMENTS = 8192


def tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh(x), differentiable (module docstring): a drop-in for torch.tanh."""
    if not ENABLED or x.dtype not in NUMPY_DTYPES or x.numel() < MIN_ELEMENTS or _wrapped(x):
        return torch.tanh(x)
    return _Tanh.apply(x)
