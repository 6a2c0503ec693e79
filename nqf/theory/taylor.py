"""A(x) of any unit function by automatic differentiation, with the checks Theorem 1 needs.

``structure_matrix(unit, x, p)`` returns A(x) = (1/2) Hessian at w = 0 of ``unit(w, x)``, the
output of a layer with one unit switched on (weights w, length p) and the others at zero.
``expansion(unit, x, p)`` returns the whole second-order picture: f(0), the gradient g(x), A(x)
and the per-unit Z2 symmetry that decides the size of the error.

Theorem 1 has three hypotheses; each is checked instead of assumed:
* smoothness (C^3 at 0): a kink such as ReLU's makes the autograd Hessian at exactly 0 a
  convention (ReLU'(0) := 0), not a derivative; such units are refused (``NotSmoothError``);
* ZGZ (zero gradient at zero): a non-zero g(x) (sigmoid, phi(0) = 1/2) adds g^T mu and
  mu^T B mu to the form (Eq. 20) and the pure NQF does not apply; this is warned about
  (``ZGZWarning``) and g is returned, never dropped;
* permutation symmetry is structural (the caller passes one unit's function) and is not tested.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from torch.func import hessian, jacrev, jvp, vmap
from torch.utils._pytree import tree_flatten, tree_map

from nqf import validate
from nqf.errors import NotSmoothError, ZGZWarning

Tensor = torch.Tensor
UnitFunction = Callable[[Tensor, Any], Tensor]


def _cast(x: Any, dtype: torch.dtype, device) -> Any:
    """Floating tensors of an input (tensor or nested tuple/list/dict) to dtype/device."""
    def one(t):
        if isinstance(t, np.ndarray) and t.dtype.kind in "biuf":  # numpy inputs become tensors
            t = torch.as_tensor(t)
        if isinstance(t, Tensor):
            return t.to(dtype=dtype if t.is_floating_point() else t.dtype, device=device or t.device)
        return t
    return tree_map(one, x)


def _check_call(unit: UnitFunction, x: Any, p, batched: bool, dtype, device) -> int:
    """Validate (unit, x, p) once at a public entry: p a positive integer, every floating tensor of
    x finite, and unit(w, x) evaluable for w of length p (a mismatch would otherwise surface as
    torch's size error deep inside the Hessian)."""
    p = validate.integer("p", p, minimum=1)
    if not callable(unit):
        raise TypeError(f"unit must be a function unit(w, x); got a {type(unit).__name__}.")
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"x must be a tensor (or a tuple/dict of tensors) of inputs; got {validate.describe(x)}.")
    for leaf in tree_flatten(x)[0]:
        if isinstance(leaf, Tensor):
            validate.tensor_data("x", leaf)
            if leaf.is_complex():
                raise TypeError(f"x must be real, not complex; got a complex tensor of shape {tuple(leaf.shape)}.")
        if isinstance(leaf, Tensor) and leaf.is_floating_point() and not bool(torch.isfinite(leaf).all()):
            bad = int((~torch.isfinite(leaf)).sum())
            raise ValueError(f"x must be finite (no NaN or inf): {bad} of the {leaf.numel()} entries of "
                             f"an input tensor of shape {tuple(leaf.shape)} are not.")
    if batched and _batch_size(x) == 0:
        raise ValueError("x must hold at least one sample along its leading axis when batched=True.")
    probe = _sample(x, 0) if batched else x
    w = torch.zeros(p, dtype=dtype, device=device, requires_grad=True)
    try:
        with torch.enable_grad():
            out = unit(w, probe)
    except (RuntimeError, IndexError, ValueError) as err:
        if "in-place" in str(err) and "leaf Variable" in str(err):
            raise ValueError(IN_PLACE) from err
        ints = sorted({str(t.dtype) for t in tree_flatten(x)[0] if isinstance(t, Tensor) and not t.is_floating_point()})
        if ints:  # the likelier cause: an integer input mixed with the floating w
            raise ValueError(f"unit(w, x) fails at w = 0 and x holds {', '.join(ints)} tensors: give x as floating "
                             f"tensors (torch: {str(err).splitlines()[0][:120]}).") from err
        raise ValueError(f"unit(w, x) fails for w of length p = {p}: p must be the number of weights of "
                         f"one unit ({str(err).splitlines()[0][:120]}).") from err
    if w._version != 0 or bool(w.detach().ne(0).any()):  # an edit under torch.no_grad() passes autograd's check
        raise ValueError(IN_PLACE)
    if not isinstance(out, Tensor) or not out.is_floating_point():
        what = f"a {type(out).__name__}" if not isinstance(out, Tensor) else f"a {out.dtype} tensor"
        raise TypeError(f"unit(w, x) must return a floating torch tensor (a scalar or a vector of outputs) "
                        f"computed from w with torch operations; got {what}.")
    if not out.requires_grad:
        raise ValueError("unit(w, x) does not depend on w through torch operations (its output carries no "
                         "gradient: .item(), float(), numpy or torch.tensor(...) inside the unit cut autograd, "
                         "and the Hessian would come out 0); build the unit from torch operations on w.")
    if isinstance(out, Tensor) and out.is_floating_point() and not bool(torch.isfinite(out).all()):
        raise ValueError(f"unit(w, x) is not finite at w = 0 for p = {p}; the expansion needs a finite unit output.")
    return p


IN_PLACE = ("unit(w, x) modifies its weights w in place (w.mul_, w[i] = ..., w.clamp_ ...); the unit function must "
            "not modify w in place: use out-of-place operations (w * 2) or work on w.clone().")


def _device(device):
    """None (the inputs' own device) or a device this machine has (validate.device: 'cuda' without
    CUDA is refused in one sentence, not by torch's assertion at first use)."""
    return None if device is None else validate.device("device", device)


def _finite_result(A: Tensor, p: int) -> None:
    """A NaN Hessian (a unit with log or division by zero near w = 0 at these inputs) is refused,
    not returned."""
    if A.is_floating_point() and not bool(torch.isfinite(A).all()):
        raise ValueError(f"unit's Hessian at w = 0 (p = {p}) is not finite for these inputs x: "
                         f"{int((~torch.isfinite(A)).sum())} of its {A.numel()} entries are NaN or inf; "
                         "the unit must be twice differentiable with finite derivatives at w = 0.")


def _sample(x: Any, index: int) -> Any:
    return tree_map(lambda t: t[index] if isinstance(t, Tensor) else t, x)


def _batch_size(x: Any) -> int:
    leaves = [t for t in tree_flatten(x)[0] if isinstance(t, Tensor)]
    if not leaves:
        raise ValueError("batched=True needs x to contain tensors with a leading sample axis.")
    if any(t.ndim == 0 for t in leaves):
        raise ValueError("x must have a leading sample axis in every tensor when batched=True; got a 0-d tensor.")
    sizes = sorted({t.shape[0] for t in leaves})
    if len(sizes) > 1:
        raise ValueError(f"x must have one leading sample size in all its tensors when batched=True; "
                         f"got sizes {sizes}.")
    return leaves[0].shape[0]


def _prepare(unit: UnitFunction, x: Any, p, batched: bool, dtype, device, max_check_samples) -> tuple[Any, int, int]:
    """The public entries' checks: dtype floating, max_check_samples >= 1, then (unit, x, p)."""
    validate.floating_dtype("dtype", dtype)
    max_check_samples = validate.integer("max_check_samples", max_check_samples, minimum=1)
    x = _cast(x, dtype, device)
    p = _check_call(unit, x, p, batched, dtype, device)
    if batched:  # the Hessians (m, k, p, p), and vmap's forward-over-reverse buffers of about as much again
        k = _output_size(unit, x, p, dtype, device)
        validate.memory(f"A(x) of {_batch_size(x)} samples x {k} outputs with p = {p}", 2.0 * _batch_size(x) * k * p * p
                       * torch.finfo(dtype).bits / 8, "pass fewer samples per call (a slice of x), or use an "
                       "architecture's factored structure(x), which never forms p x p matrices", device)
    return x, p, max_check_samples


def _output_size(unit: UnitFunction, x: Any, p: int, dtype, device) -> int:
    with torch.no_grad():
        return unit(torch.zeros(p, dtype=dtype, device=device), _sample(x, 0)).numel()


def _derivatives(unit: UnitFunction, x: Any, direction: Tensor, t: float) -> list[Tensor]:
    """d^j/dt^j unit(t r, x) for j = 1, 2, 3 at one t: three nested forward-mode passes (8 evaluations)."""
    one = torch.ones((), dtype=direction.dtype, device=direction.device)

    def order1(s):
        return jvp(lambda u: unit(u * direction, x), (s,), (one,))

    def order2(s):
        (g, g1), (_, g2) = jvp(order1, (s,), (one,))
        return g1, g2

    (g1, g2), (_, g3) = jvp(order2, (one * t,), (one,))
    return [g1, g2, g3]


def check_smooth(unit: UnitFunction, x: Any, p: int, *, n_directions: int = 3, delta: float = 1e-3,
                 shrink: float = 1e-3, seed: int = 0, dtype: torch.dtype = torch.float64,
                 device=None) -> None:
    """Raise NotSmoothError unless unit(., x) looks C^3 at w = 0.

    Principle: along a line w = t r, a C^3 function has derivatives of order 1-3 that are
    continuous at t = 0, so |g^(j)(+-t) - g^(j)(0)| -> 0 as t -> 0 (linearly for analytic units).
    A kink leaves a gap that does not shrink: for ReLU the second derivative jumps from 0 (the
    autograd convention at 0) to 2 v relu(u.x) on either side. The gap is measured at t = delta
    and t = delta * shrink along ``n_directions`` random unit directions; the unit is refused when
    the small-t gap is not below 10% of the large-t gap (a C^3 unit gives about ``shrink`` times it)
    and above rounding (1e-8 of the derivative's size). The probe sees kinks at scales above
    delta * shrink in parameter space; a unit whose curvature changes faster than that
    (e.g. tanh(1e9 z)) is out of its reach.
    """
    device = _device(device)
    x = _cast(x, dtype, device)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n_directions):
        r = torch.randn(p, generator=gen, dtype=dtype)
        r = (r / r.norm()).to(device=device)
        at0 = _derivatives(unit, x, r, 0.0)
        _finite_derivatives(at0, 0.0)
        far, near = (_continuity_gaps(unit, x, r, t, at0) for t in (delta, delta * shrink))
        for order, ((big, size_far), (small, size_near)) in enumerate(zip(far, near), start=1):
            if small > 0.1 * big and small > 1e-8 * max(size_far, size_near):
                raise NotSmoothError(
                    f"unit function is not C^3 at w = 0 (Theorem 1 needs three continuous "
                    f"derivatives): its derivative of order {order} along a random direction jumps by "
                    f"{small:.3g} at t = +-{delta * shrink:g}, no less than {big:.3g} at +-{delta:g}. A kink "
                    f"at 0 (ReLU, abs) makes the Hessian there a convention; use a smooth activation "
                    f"(tanh, GELU, SiLU) or expand where the unit is smooth.")


def _finite_derivatives(derivatives: list[Tensor], t: float) -> None:
    """A NaN or inf derivative (|w.x|^2.5 has an infinite third derivative at 0, computed as NaN)
    is refused: a NaN passes every comparison of the continuity test as False."""
    for order, d in enumerate(derivatives, start=1):
        if not bool(torch.isfinite(d).all()):
            raise NotSmoothError(
                f"unit function is not smooth at w = 0: its derivative of order {order} along a random direction "
                f"is NaN or inf at t = {t:g} (Theorem 1 needs three continuous, finite derivatives; a "
                f"non-integer power |w.x|^a with a < 3, a log or a square root near 0 has none); use a unit that is C^3 at w = 0.")


def _continuity_gaps(unit: UnitFunction, x: Any, r: Tensor, t: float, at0: list[Tensor]) -> list[tuple[float, float]]:
    """Per order j = 1..3: (max |g^(j)(+-t) - g^(j)(0)|, largest |g^(j)| seen) along w = t r."""
    plus, minus = _derivatives(unit, x, r, t), _derivatives(unit, x, r, -t)
    _finite_derivatives(plus, t)
    _finite_derivatives(minus, -t)
    out = []
    for zero, a, b in zip(at0, plus, minus):
        gap = max(float((a - zero).abs().max()), float((b - zero).abs().max()))
        size = max(float(zero.abs().max()), float(a.abs().max()), float(b.abs().max()))
        out.append((gap, size))
    return out


def _gradient_and_hessian(unit: UnitFunction, x: Any, p: int, batched: bool, dtype, device):
    w0 = torch.zeros(p, dtype=dtype, device=device)
    f0 = lambda xx: unit(w0, xx)  # noqa: E731
    g = lambda xx: jacrev(unit)(w0, xx)  # noqa: E731
    H = lambda xx: hessian(unit)(w0, xx)  # noqa: E731
    if batched:
        f0, g, H = vmap(f0), vmap(g), vmap(H)
    return f0(x), g(x), H(x)


def _zgz_warning(g: Tensor, scale: float) -> str | None:
    gmax = float(g.abs().max()) if g.numel() else 0.0
    if gmax <= 1e-12 * max(1.0, scale):
        return None
    return (f"ZGZ fails: the gradient g(x) of the unit at w = 0 is not zero (max |g| = {gmax:.3g}), "
            f"e.g. an activation with phi(0) != 0 such as the sigmoid. The pure NQF "
            f"f = f(0) + Tr[W W^T A(x)] does not apply; the general form (Eq. 20) adds g(x)^T mu + "
            f"mu^T B(x) mu with mu = sum_i w_i. Use nqf.expansion(...) to get g(x).")


def _smoothness_samples(x: Any, batched: bool, max_samples: int):
    if not batched:
        return [x]
    return [_sample(x, i) for i in range(min(_batch_size(x), max_samples))]


def structure_matrix(unit: UnitFunction | torch.nn.Module, x: Any, p: int | None = None, *, units=None,
                     batched: bool = False, dtype: torch.dtype = torch.float64, device=None, check: bool = True,
                     max_check_samples: int = 2) -> Tensor:
    """A(x) = (1/2) Hessian of ``unit(w, x)`` in w at w = 0, by torch.func.

    Or of an ordinary ``torch.nn.Module`` whose ``forward(x)`` takes a batch: pass the module,
    the data x (leading sample axis) and ``units``, which parameters hold the units and along
    which axis (nqf.architectures.module_units: ``{"0.weight": 0, "2.weight": 1}`` for
    nn.Sequential(nn.Linear(D, d), nn.Tanh(), nn.Linear(d, k))). The unit function is derived
    from the module's forward, p is the length of one unit's weights (given p must equal it), x is
    always a batch, and A has shape (m, p, p) for a forward that returns (m,) and (m, k, p, p) for
    one that returns (m, k) (k = 1 included). The module is copied to ``dtype`` for this; its own
    parameters are not touched.

    ``unit(w, x)`` is the layer's output with one unit of weights w (a flat vector of length p)
    and every other unit at zero, for one input x (a tensor or a tuple of tensors, e.g. a query
    token and its context). It returns a scalar or a vector of k outputs; A then has shape (p, p)
    or (k, p, p). With ``batched=True`` every tensor in x carries a leading sample axis and A
    gains it in front: (m, p, p) or (m, k, p, p).

    With ``check`` (default) the unit is first probed for smoothness at 0 (NotSmoothError if it
    has a kink, see check_smooth) on up to ``max_check_samples`` inputs (at least 1). A
    ZGZWarning is issued when the gradient at 0 does not vanish, with or without ``check`` (the
    gradient is computed anyway; A alone is then not the unit's quadratic form). The Hessian costs about p reverse passes: this
    is the verification path and the path for user-supplied units; the architectures in
    nqf.architectures provide A in factored form for use at scale.
    """
    if isinstance(unit, torch.nn.Module):
        unit, p, batched = _module_unit(unit, units, p, dtype)
    elif units is not None:
        raise TypeError("units applies to a torch.nn.Module (which parameters hold the units); got a unit function, "
                        "which already is one unit.")
    device = _device(device)
    x, p, max_check_samples = _prepare(unit, x, p, batched, dtype, device, max_check_samples)
    if check:
        for xx in _smoothness_samples(x, batched, max_check_samples):
            check_smooth(unit, xx, p, dtype=dtype, device=device)
    f0, g, H = _gradient_and_hessian(unit, x, p, batched, dtype, device)
    A = 0.5 * H
    A = 0.5 * (A + A.transpose(-1, -2))
    _finite_result(A, p)
    message = _zgz_warning(g, float(A.abs().max()) if A.numel() else 0.0)  # g is computed anyway
    if message:
        warnings.warn(message, ZGZWarning, stacklevel=2)
    return A


def _module_unit(module: torch.nn.Module, units, p, dtype) -> tuple[UnitFunction, int, bool]:
    """(unit function, p, batched=True) of an ordinary module read through ``units``, on a copy of
    the module in ``dtype``."""
    import copy

    from nqf.theory.module_unit import UnitReading

    if units is None:
        raise TypeError(f"structure_matrix of a {type(module).__name__} needs units={{parameter name: unit axis}}: "
                        f"which parameters hold the units (nqf.theory.module_unit).")
    module = copy.deepcopy(module).to(dtype=dtype)
    reading = UnitReading(module, units)
    if p is not None and validate.integer("p", p, minimum=1) != reading.p:
        raise ValueError(f"p = {p} does not match the units, whose weights have length {reading.p} "
                         f"({' + '.join(f'{n} {s}' for n, s in reading.sizes.items())}); leave p out.")
    return reading.unit_function(module), reading.p, True


@dataclass(frozen=True)
class Expansion:
    """f(w) = f0 + g^T w + w^T A w + O(|w|^3), or O(|w|^4) when ``z2_symmetric``, for one unit.

    ``z2_symmetric``: f(w) - g^T w is even in w (the per-unit sign symmetry when ZGZ holds);
    ``odd``: f(w) - f0 is odd in w, so A = 0 and the unit starts at cubic order.

    For a layer of d such units the quadratic part sums to Tr[W W^T A] when ZGZ holds (Theorem 1);
    when it fails the layer also has g^T mu and mu^T B mu (Eq. 20), where B comes from cross-unit
    second derivatives that one unit's function cannot reveal (B = 0 for layers that are a plain
    sum over units, such as the MLP).
    """

    f0: Tensor
    g: Tensor
    A: Tensor
    zgz_holds: bool
    z2_symmetric: bool
    odd: bool
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def error_order(self) -> int:
        """Order of the first neglected term in |W|: 4 with the Z2 symmetry, else 3."""
        return 4 if self.z2_symmetric else 3

    def quadratic(self, w: Tensor) -> Tensor:
        """The second-order model f0 + g.w + w^T A w of one unit (single input)."""
        return self.f0 + self.g @ w + torch.einsum("...pq,p,q->...", self.A, w, w)


def z2_symmetry(unit: UnitFunction, x: Any, p: int, *, trials: int = 3, seed: int = 1,
                dtype: torch.dtype = torch.float64, device=None) -> tuple[bool, bool]:
    """(even, odd) at random w: is h(w) = unit(w) - g.w even, h(-w) = h(w)? is unit - f0 odd?

    Even is the per-unit Z2 symmetry unit(-w) = unit(w) whenever ZGZ holds (g = 0); with g != 0
    (sigmoid) it still says that every odd order from the cubic on vanishes. Either way the
    error of the second-order model is O(|w|^4) instead of O(|w|^3). Odd means every even order
    vanishes, A included. The test points have |w| = 1, where a unit without the symmetry
    differs from its reflection by O(1), far above the 1e-9 relative tolerance.
    """
    device = _device(device)
    x = _cast(x, dtype, device)
    gen = torch.Generator().manual_seed(seed)
    w0 = torch.zeros(p, dtype=dtype, device=device)
    f0, g = unit(w0, x), jacrev(unit)(w0, x)
    even = odd = True
    for _ in range(trials):
        w = torch.randn(p, generator=gen, dtype=dtype)
        w = (w / w.norm()).to(device=device)
        plus, minus, linear = unit(w, x), unit(-w, x), g @ w
        size = torch.stack([plus.abs().max(), minus.abs().max(), f0.abs().max(), linear.abs().max()]).max()
        tol = 1e-9 * float(size) + 1e-300
        even &= float((plus - minus - 2 * linear).abs().max()) <= tol
        odd &= float((plus + minus - 2 * f0).abs().max()) <= tol
    return bool(even), bool(odd)


def expansion(unit: UnitFunction | torch.nn.Module, x: Any, p: int | None = None, *, units=None,
              batched: bool = False, dtype: torch.dtype = torch.float64, device=None,
              max_check_samples: int = 2) -> Expansion:
    """f(0), g(x), A(x) and the symmetry checks for ``unit(w, x)`` (see structure_matrix), or for an
    ordinary module with ``units`` (as structure_matrix takes it: x a batch, shapes with the sample axis).

    Shapes: f0 (k,) or (), g (k, p) or (p,), A (k, p, p) or (p, p), with a leading sample axis when
    ``batched``. Raises NotSmoothError for units with a kink at 0; warns (ZGZWarning) and records
    a note when g does not vanish. The Z2 test is run on up to ``max_check_samples`` inputs and
    holds only if it holds on all of them.
    """
    if isinstance(unit, torch.nn.Module):
        unit, p, batched = _module_unit(unit, units, p, dtype)
    elif units is not None:
        raise TypeError("units applies to a torch.nn.Module; got a unit function, which already is one unit.")
    device = _device(device)
    x, p, max_check_samples = _prepare(unit, x, p, batched, dtype, device, max_check_samples)
    samples = _smoothness_samples(x, batched, max_check_samples)
    for xx in samples:
        check_smooth(unit, xx, p, dtype=dtype, device=device)
    f0, g, H = _gradient_and_hessian(unit, x, p, batched, dtype, device)
    A = 0.25 * (H + H.transpose(-1, -2))
    _finite_result(A, p)
    notes = []
    message = _zgz_warning(g, float(A.abs().max()) if A.numel() else 0.0)
    if message:
        warnings.warn(message, ZGZWarning, stacklevel=2)
        notes.append(message)
    sym = [z2_symmetry(unit, xx, p, dtype=dtype, device=device) for xx in samples]
    even, odd = all(s[0] for s in sym), all(s[1] for s in sym)
    if even:
        notes.append("Z2: unit(w) - g.w is even in w (unit(-w) = unit(w) when ZGZ holds), so the odd "
                     "orders from the cubic on vanish and the error is O(|W|^4); with ZGZ, "
                     "phi * (f(phi^-1/2 W) - f(0)) reaches Tr[W W^T A] at rate 1/phi.")
    else:
        notes.append("no Z2 symmetry: the NQF error is O(|W|^3); phi * (f(phi^-1/2 W) - f(0)) "
                     "reaches Tr[W W^T A] at rate phi^-1/2.")
    if odd:
        notes.append("unit is odd in w: every even order vanishes, A(x) = 0 included; the leading "
                     "term is cubic and the NQF of this unit is trivial.")
    return Expansion(f0=f0, g=g, A=A, zgz_holds=message is None, z2_symmetric=even, odd=odd,
                     notes=tuple(notes))


def convergence_errors(module_fn: Callable[[Tensor], Tensor], W: Tensor, nqf_value: Tensor,
                       phis) -> list[float]:
    """max |phi (f(phi^-1/2 W) - f(0)) - Tr[W W^T A]| for each phi (Eq. 3), f evaluated by module_fn."""
    f0 = module_fn(torch.zeros_like(W))
    return [float((phi * (module_fn(W / math.sqrt(phi)) - f0) - nqf_value).abs().max()) for phi in phis]
