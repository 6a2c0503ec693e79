"""What every architecture provides, and the vec convention they share.

A layer here is a sum (or, for attention logits, a symmetric function) over d interchangeable
units, unit i carrying a flat parameter vector w_i of length p. Each architecture is a real
``torch.nn.Module`` (``UnitModule``) that also exposes, for the same parameters:

* ``unit(w, x)``: the layer's output on one input x with one unit set to w and all others at 0;
  this is what ``nqf.structure_matrix`` differentiates;
* ``structure(x)``: the analytic A(x) for a batch of inputs, as a factored StructureForm
  (never p x p per sample), over the flattened (sample, output) pairs;
* ``unit_weights()`` / ``set_unit_weights(W)`` / ``forward_with(W, x)``: the module's weights
  read as W = [w_1 ... w_d] (p x d), so M = W W^T can be tracked while the module trains, the
  module and its NQF can start from the same W, and the module can be evaluated at any W;
* what experiments need to read and store its inputs: ``input_layout``, ``unit_input_dim``
  (the length of the vector one unit reads), ``image_size`` / ``image_inputs`` (modules that
  read images), ``set_readout`` (modules with a fixed readout);
* where the theory allows it: ``effective_matrix`` / ``effective_outputs`` / ``teacher_units``
  (the small matrix E(W) the NQF is linear in; nqf.architectures.effective) and the class method
  ``mode_design`` (data with K decoupled modes; nqf.architectures.mode_designs).

Vec convention: a matrix inside w is stored column-major (Fortran order, columns stacked), the
convention of the Kronecker identities in the paper's proofs (vec(A X B) = (B^T (x) A) vec X).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np
import torch
from torch.func import functional_call, vmap

from nqf.theory.forms import StructureForm

Tensor = torch.Tensor


def vec(matrix: Tensor) -> Tensor:
    """Column-major vec of the last two axes: (..., r, c) -> (..., r * c)."""
    return matrix.transpose(-1, -2).reshape(*matrix.shape[:-2], -1)


def unvec(flat: Tensor, rows: int, cols: int) -> Tensor:
    """Inverse of vec: (..., rows * cols) -> (..., rows, cols)."""
    return flat.reshape(*flat.shape[:-1], cols, rows).transpose(-1, -2)


def generator(seed: int | None) -> torch.Generator:
    return torch.Generator().manual_seed(0 if seed is None else seed)


def gaussian(gen: torch.Generator, *shape: int, std: float = 1.0, dtype=torch.float64) -> Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype) * std


def orthonormal(n: int, k: int, gen: torch.Generator) -> Tensor:
    """n x k float64 matrix with Haar-random orthonormal columns (QR of a Gaussian matrix, signs
    fixed so that R has a positive diagonal)."""
    q, r = torch.linalg.qr(torch.randn(n, k, generator=gen, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


# How a module's inputs are laid out: one (part, axes) per part of what forward() takes (a tensor,
# or a tuple of them), the axes after the sample axis. Data files store part p of architecture a
# as a variable over (sample, a_axis, ...) (nqf.architectures.input_variables).
VECTOR = (("x", ("feature",)),)
MATRIX = (("x", ("row", "col")),)  # an image, a sensing matrix
QUERY_CONTEXT = (("query", ("feature",)), ("context", ("feature", "token")))


# Constructor arguments every architecture checks by name before building (see UnitModule):
# sizes are integers >= 1, shapes pairs of them, stds and exponents finite, seeds integers >= 0.
SIZE_ARGUMENTS = ("D", "width", "n_outputs", "d_k", "d_v", "seq_len", "P", "expert_hidden",
                  "n_rows", "n_cols", "n", "n_out", "n_in", "p")
PAIR_ARGUMENTS = ("image", "kernel")
OPTIONAL_SIZES = ("d_k",)  # sizes that may be None where a class documents what None means


def _checked_arguments(cls_name: str, bound: dict) -> dict:
    """The constructor's arguments, checked and normalised (np.int64 -> int, lists -> tuples);
    a wrong one refused naming it, instead of a ZeroDivisionError, a negative-dimension
    RuntimeError or a module full of NaN weights."""
    from nqf import validate
    from nqf.architectures.activations import ACTIVATIONS

    out = dict(bound)
    for name, value in bound.items():
        where = f"{cls_name}: {name}"
        if name in SIZE_ARGUMENTS:
            if value is None and name in OPTIONAL_SIZES:
                continue  # None = the class's documented default (e.g. tied_qk's d_k = width)
            out[name] = validate.integer(where, value, minimum=1)
        elif name in PAIR_ARGUMENTS:
            if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
                raise ValueError(f"{where} must be a pair of integers >= 1 (height, width); got "
                                 f"{validate.describe(value)}.")
            out[name] = tuple(validate.integer(where, v, minimum=1) for v in value)
        elif name in ("init_std", "theta"):
            out[name] = validate.scalar(where, value, low=0.0 if name == "init_std" else None)
        elif name == "seed" and value is not None:
            out[name] = validate.seed(where, value)
        elif name == "dtype":
            validate.floating_dtype(where, value)
        elif name in ("activation_name", "gate"):
            validate.choice(where, value, sorted(ACTIVATIONS))
    return out


def _checking_inputs(method):
    """``method(self, x)`` that first checks x with ``self.check_inputs`` (cheap when the shapes
    are those of the last checked call: one tuple comparison)."""
    import functools

    @functools.wraps(method)
    def checked(self, x, *args, **kwargs):
        self.check_inputs(x)
        return method(self, x, *args, **kwargs)

    return checked


def _structure_inputs(method):
    """``structure(self, x)`` on inputs made fit for A(x) first: integer tensors become float64 (as
    numpy inputs do everywhere; float32 would lose digits), half precision and an empty batch are
    refused in one sentence (instead of a float16 form or "factor samples axes must be 1 or 1")."""
    import functools

    @functools.wraps(method)
    def checked(self, x, *args, **kwargs):
        parts = x if isinstance(x, tuple) else (x,)
        fixed = []
        for (part, _), t in zip(self.input_layout, parts):
            if isinstance(t, Tensor):
                if t.dtype == torch.bool:
                    raise TypeError(f"{type(self).__name__}.structure: input {part} must hold real numbers, not "
                                    "booleans (True/False would be read as 1/0).")
                if str(t.dtype) in ("torch.float16", "torch.bfloat16"):
                    digits = 3 if t.dtype == torch.float16 else 2
                    raise ValueError(f"{type(self).__name__}.structure: input {part} is {t.dtype}, whose {digits} "
                                     "significant digits are too few for A(x); give float32 or float64 inputs (x.double()).")
                if not t.is_floating_point() and not t.is_complex():
                    t = t.to(torch.float64)
                if t.ndim and t.shape[0] == 0:
                    raise ValueError(f"{type(self).__name__}.structure: input {part} holds no samples (shape "
                                     f"{tuple(t.shape)}); A(x) needs at least one.")
            fixed.append(t)
        fixed.extend(parts[len(fixed):])
        return method(self, tuple(fixed) if isinstance(x, tuple) else fixed[0], *args, **kwargs)

    return checked


class UnitModule(torch.nn.Module, ABC):
    """A layer of interchangeable units with its structure matrix; see the module docstring.

    Every subclass's constructor checks its arguments by name first (``_checked_arguments``:
    sizes, image/kernel pairs, init_std, theta, seed, dtype, activation_name, gate)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        import functools
        import inspect

        for method in ("forward", "structure"):  # their inputs are checked against sample_inputs' shapes
            if method in cls.__dict__:
                checked = _checking_inputs(cls.__dict__[method])
                setattr(cls, method, _structure_inputs(checked) if method == "structure" else checked)
        if "__init__" not in cls.__dict__:
            return
        init = cls.__dict__["__init__"]
        signature = inspect.signature(init)

        @functools.wraps(init)
        def checked_init(self, *args, **kw):
            try:
                bound = signature.bind(self, *args, **kw)
            except TypeError as exc:
                raise TypeError(f"{cls.__name__}: {exc}.") from None
            bound.apply_defaults()
            values = _checked_arguments(cls.__name__, {k: v for k, v in bound.arguments.items() if k != "self"})
            depth = self.__dict__.get("_init_depth", 0)
            self.__dict__["_init_depth"] = depth + 1
            try:
                init(self, **values)
            finally:
                self.__dict__["_init_depth"] = depth
            if depth == 0:  # the outermost constructor: the shapes forward() takes, for check_inputs
                try:
                    ref = self.sample_inputs(1, torch.Generator().manual_seed(0))
                except NotImplementedError:  # a user module without sample inputs: its inputs go unchecked
                    ref = None
                if ref is not None:
                    parts = ref if isinstance(ref, tuple) else (ref,)
                    self.__dict__["_input_reference"] = tuple(t.shape for t in parts)

        cls.__init__ = checked_init

    n_outputs: int
    z2: bool = True  # theory: unit(-w) = unit(w), so the NQF error is O(|W|^4)
    additive: bool = True  # the layer is a plain sum of its units' outputs
    input_layout: tuple[tuple[str, tuple[str, ...]], ...] = VECTOR  # see VECTOR above

    @property
    @abstractmethod
    def p(self) -> int:
        """Parameters per unit."""

    @property
    @abstractmethod
    def width(self) -> int:
        """Number of units d."""

    @abstractmethod
    def blocks(self) -> list[tuple[str, int]]:
        """Named consecutive blocks of a unit's parameter vector, e.g. [("u", D), ("v", k)]."""

    @abstractmethod
    def unit(self, w: Tensor, x: Any) -> Tensor:
        """Output (n_outputs,) on one input x with one unit at w and every other unit at 0."""

    @abstractmethod
    def structure(self, x: Any) -> StructureForm:
        """Analytic A(x) for a batch of inputs, factored, over m = samples * n_outputs pairs."""

    @abstractmethod
    def params_from_unit_weights(self, W: Tensor) -> dict[str, Tensor]:
        """The module's parameters (name -> tensor) that correspond to W (p x d)."""

    @abstractmethod
    def unit_weights(self) -> Tensor:
        """The module's current weights as W (p x d); differentiable w.r.t. the parameters."""

    @abstractmethod
    def sample_inputs(self, m: int, gen: torch.Generator) -> Any:
        """m random inputs of the shape forward() takes (standard Gaussian unless stated)."""

    @property
    def unit_input_dim(self) -> int:
        """Length of the vector one unit reads: x or a token (D) unless the module says otherwise."""
        return self.D

    def unit_input_norm2(self, x: Any) -> Tensor:
        """Mean over samples (and positions) of |v|^2, v the vectors the units read in inputs x
        (here vector inputs (m, D); modules that read patches or tokens say how)."""
        return x.pow(2).sum(-1).mean()

    @staticmethod
    def image_size(image: tuple[int, int]) -> dict:
        """The constructor's keyword arguments that size the module for (H, W) images."""
        raise ValueError("this architecture does not read images.")

    def image_inputs(self, images: Tensor) -> Any:
        """Images (m, H, W) as forward() takes them (for a module sized by ``image_size``)."""
        raise ValueError(f"{type(self).__name__} does not read images.")

    def set_readout(self, values) -> None:
        """Overwrite the module's fixed readout (its buffer ``readout``, as in the query-key
        heads) with ``values`` of its size, so that teacher, module and NQF share one; nothing
        to do for a module without one."""
        readout = getattr(self, "readout", None)
        if readout is not None:
            with torch.no_grad():
                readout.copy_(torch.as_tensor(np.asarray(values)).reshape(readout.shape))

    def check_inputs(self, x: Any) -> None:
        """Refuse inputs that are not what forward() takes: the parts of ``input_layout`` (a tensor,
        or a tuple of them), each real, with a leading sample axis and the sizes of
        ``sample_inputs`` on every other axis except a sequence's ``token`` axis (any length);
        torch would otherwise fail deep in an einsum or, for a 1-D x, broadcast it silently."""
        from nqf import validate

        parts = x if isinstance(x, tuple) else (x,)
        shapes = tuple(tuple(p.shape) if isinstance(p, Tensor) else None for p in parts)
        if shapes == self.__dict__.get("_checked_input_shapes"):
            return
        name = type(self).__name__
        layout = self.input_layout
        if len(parts) != len(layout):
            raise ValueError(f"{name}'s inputs must be {len(layout)} part(s) ({', '.join(p for p, _ in layout)}); "
                             f"got {len(parts)}.")
        ref = self.__dict__.get("_input_reference")
        if ref is None:  # a module built without its checked constructor (e.g. copied): nothing to compare
            return
        for (part, axes), got, want in zip(layout, parts, ref):
            if not isinstance(got, Tensor):
                raise TypeError(f"{name}'s input {part} must be a torch tensor; got a {type(got).__name__}.")
            validate.tensor_data(part, got)
            if got.is_complex():
                raise TypeError(f"{name}'s input {part} must be real, not complex; got {got.dtype}.")
            free = [a == "token" for a in axes]
            if got.ndim != len(want) or any(g != w and not f for g, w, f in zip(got.shape[1:], want[1:], free)):
                axes_text = ", ".join("any" if f else str(w) for w, f in zip(want[1:], free))
                raise ValueError(f"{name}'s input {part} must have shape (samples{', ' if axes_text else ''}{axes_text}) "
                                 f"(axes {', '.join(axes) or 'none'} after the sample axis); got {tuple(got.shape)}.")
        self.__dict__["_checked_input_shapes"] = shapes

    def check_unit_weights(self, W: Tensor, *, name: str = "W", width: bool = True) -> None:
        """Refuse unit weights W that are not (..., p, d) with this module's p (and d = width)."""
        p, d = self.p, self.width
        if not isinstance(W, Tensor) or W.ndim < 2 or W.shape[-2] != p or (width and W.shape[-1] != d):
            shape = tuple(W.shape) if isinstance(W, Tensor) else type(W).__name__
            want = f"(..., {p}, {d})" if width else f"(..., {p}, any)"
            raise ValueError(f"{name} must be a tensor of unit weights of shape {want} for {type(self).__name__} "
                             f"(p = {p} weights per unit{f', d = {d} units' if width else ''}); got {shape}.")

    def set_unit_weights(self, W: Tensor) -> None:
        """Overwrite the module's parameters with those of W (p x d)."""
        self.check_unit_weights(W)
        params = dict(self.named_parameters())
        with torch.no_grad():
            for name, value in self.params_from_unit_weights(W).items():
                params[name].copy_(value)

    def forward_with(self, W: Tensor, x: Any) -> Tensor:
        """forward(x) evaluated at unit weights W (p x d), without touching the parameters."""
        self.check_unit_weights(W, width=False)  # any number of units (a teacher's r, say)
        return functional_call(self, self.params_from_unit_weights(W), (x,))

    def forward_replicas(self, W: Tensor, x: Any) -> Tensor:
        """forward(x) at each of R unit-weight matrices W (R, p, d): (R, samples, n_outputs).

        The default maps :meth:`forward_with` over the replicas (torch.func.vmap); modules whose
        forward is one large contraction (CNN, self-attention) override it with a single kernel
        call over all replicas, which is several times faster on the CPU."""
        return vmap(self.forward_with, in_dims=(0, None))(W, x)

    def nqf_outputs(self, W: Tensor, x: Any) -> Tensor:
        """The NQF prediction f(0) + Tr[W W^T A(x)], shape (samples, n_outputs)."""
        f0 = self.forward_with(torch.zeros_like(W), x)
        return f0 + self.structure(x).outputs(W).reshape(f0.shape)

    # The effective matrix (nqf.architectures.effective calls these): a module whose NQF output is
    # a linear or bilinear form of one small matrix E(W) defines the first three methods below;
    # its registry entry says so with effective_matrix=True.

    def effective_matrix(self, W: Tensor) -> Tensor:
        """E(W) for checked unit weights W of shape (..., p, d)."""
        raise TypeError(f"No effective matrix for {type(self).__name__}.")

    def effective_outputs(self, E: Tensor, x: Any) -> Tensor:
        """The NQF output f - f(0) as the form of E on inputs x: (..., samples, n_outputs)."""
        raise TypeError(f"No effective matrix for {type(self).__name__}.")

    def teacher_units(self, root: Tensor, gen: torch.Generator) -> Tensor:
        """W* (p x r), one rank-one unit per entry of ``root`` (float64), with E(W*) = U diag(root^2) V^T
        for orthonormal U, V drawn from ``gen`` (nqf.architectures.effective.singular_vectors)."""
        raise TypeError(f"No effective matrix for {type(self).__name__}.")

    def effective_refusal(self) -> Exception | None:
        """Why this instance has no effective matrix although its class defines one (the
        exception to raise; a MoE with tanh experts), else None."""
        return None

    # Data with K decoupled modes (nqf.architectures.mode_designs calls this): defined by a class
    # whose registry entries say mode_design=True.

    @classmethod
    def mode_design(cls, n_modes: int, width: int, gen: torch.Generator, seed: int) -> tuple[dict, tuple, Tensor, str]:
        """(build, inputs, modes, note): the constructor's keyword arguments, the inputs (a tuple of
        tensors, as forward() takes them), the mode directions q_k (p x n_modes, orthonormal
        columns) and a one-line note on how the data make the modes decouple. Draws from ``gen``
        only; ``seed`` seeds the module."""
        raise TypeError(f"{cls.__name__} has no mode design.")


def initial_weights(module: UnitModule, seeds: Sequence[int], scales: Sequence[float] = (1.0,)) -> Tensor:
    """W0 of shape (scales x seeds, p, d), scale-major: seed s gives one standard Gaussian G_s
    (torch generator seeded by s, float64), scaled by each sigma in ``scales``."""
    from nqf import validate

    listed = seeds.tolist() if hasattr(seeds, "tolist") else seeds
    if isinstance(listed, (str, bytes)) or not hasattr(listed, "__iter__") or len(list(listed)) == 0:
        raise ValueError(f"seeds must be a non-empty sequence of integers >= 0; got {validate.describe(seeds)}.")
    seeds = [validate.seed("seeds", s) for s in listed]
    scales = validate.array("scales", scales, ndim=1, nonempty=True)
    G = torch.stack([torch.randn(module.p, module.width, generator=torch.Generator().manual_seed(s),
                                 dtype=torch.float64) for s in seeds])
    return torch.cat([float(sigma) * G for sigma in scales])


def gaussian_teacher(module: UnitModule, gen: torch.Generator, *, std: float = 1.0, fan_in: bool = False) -> Tensor:
    """Teacher unit weights W* (p x d) drawn from ``gen``: N(0, std^2) per entry, or with
    ``fan_in`` N(0, std^2 / fan-in) per block: a block named "v" (an MLP unit's readout) reads
    the d hidden units, every other block reads one unit input (``unit_input_dim``)."""
    W = torch.randn(module.p, module.width, generator=gen, dtype=torch.float64) * std
    if fan_in:
        start = 0
        for name, n in module.blocks():
            W[start:start + n] /= math.sqrt(module.width if name == "v" else module.unit_input_dim)
            start += n
    return W


def scale_inputs(x: Any, factor: float) -> Any:
    """Inputs x (a tensor, or a tuple of them) times ``factor``."""
    return tuple(t * factor for t in x) if isinstance(x, tuple) else x * factor


def input_degree(module: UnitModule, x: Any = None) -> int:
    """q such that A(c x) = c^q A(x): the degree of the structure matrix in the input scale.

    Measured, not declared: the NQF's outputs at one random W for inputs x and 2x (the module's
    own sample inputs by default) give log2 of their ratio, which must be an integer for an A that
    is homogeneous in x (every architecture here: 1 for an MLP, a CNN and MHA's x_avg; 2 for a
    MoE with linear experts, x G^T; 3 for a query-key head, x (Sigma_X c)^T). Used to keep a
    learning problem the same at another input scale (nqf.experiments.nqf_approximation)."""
    gen = torch.Generator().manual_seed(0)
    if x is None:
        x = module.sample_inputs(8, gen)
    W = torch.randn(module.p, 2, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        a = module.structure(x).outputs(W).norm()
        b = module.structure(scale_inputs(x, 2.0)).outputs(W).norm()
    if not float(a) > 0:
        raise ValueError(f"{type(module).__name__}: A(x) = 0 on these inputs, so it has no degree in their scale.")
    q = math.log2(float(b / a))
    if abs(q - round(q)) > 1e-6:
        raise ValueError(f"{type(module).__name__}: A(x) is not homogeneous in the input scale (A(2x) / A(x) = "
                         f"2^{q:.4f}); no single input degree.")
    return int(round(q))
