"""Argument checks for the library's public entry points.

A call with a wrong shape, a NaN or a value outside a formula's domain must fail at the call,
in one sentence that names the argument and says what is allowed, instead of broadcasting,
integrating garbage or surfacing as a numpy/torch error (or as "training diverged") far from
the cause. Every check here is O(size of the argument) (the PSD test is one Cholesky), so it is
done once per public call and never inside an integrator's or optimiser's loop.

Errors are ``ValueError`` (wrong value or shape), ``TypeError`` (not a number at all) or
``MemoryError`` (arrays estimated from the shapes that do not fit, refused before allocating);
values in messages are summarised (shape, count of bad entries, range), never printed whole.
Results that are usable but degraded are warned about with ``NQFWarning``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

# Relative tolerance of the PSD test (the one nqf.theory.staircase already used): an eigenvalue of a Gram
# matrix C = (8/m) Lambda^T Lambda computed in float64 can come out negative by about
# (machine eps) * K * max|C|, 2e-13 max|C| for K = 10^3 modes; -1e-10 * max|C| leaves a margin of
# 500 over that and still refuses any genuinely indefinite C (smallest eigenvalue O(max|C|)).
PSD_RTOL = 1e-10
SYMMETRY_RTOL = 1e-10


def describe(x) -> str:
    """A short description of a value for an error message (never the whole of a large array)."""
    try:
        a = np.asarray(x)
    except Exception:  # noqa: BLE001 - anything that is not array-like
        return f"a {type(x).__name__}"
    if a.dtype == object or a.dtype.kind not in "biuf":
        text = repr(x)
        return text if len(text) <= 60 else f"a {type(x).__name__} ({text[:40]}...)"
    if a.ndim == 0:
        return f"{a.item()!r}"
    if a.size <= 6:
        return np.array2string(a.astype(float).ravel() if a.ndim > 1 else a, precision=4,
                               separator=", ") + ("" if a.ndim == 1 else f" (shape {a.shape})")
    a = a.astype(float)
    nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
    fin = a[np.isfinite(a)]
    span = f", finite entries in [{fin.min():.3g}, {fin.max():.3g}]" if fin.size else ""
    bad = ", ".join(s for s in (f"{nan} NaN" if nan else "", f"{inf} inf" if inf else "") if s)
    return f"an array of shape {a.shape}" + (f" with {bad}" if bad else "") + span


def _numeric(name: str, x) -> np.ndarray:
    """``x`` as a float array: real numbers only (complex, text, a tensor without data refused,
    instead of numpy's cast dropping an imaginary part or reading "2" as 2.0)."""
    if hasattr(x, "detach"):  # a torch tensor (possibly on a GPU)
        tensor_data(name, x)
        x = x.detach().cpu()
        x = (x.float() if str(x.dtype) == "torch.bfloat16" else x).resolve_conj().numpy()
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be an array of real numbers; got the text {describe(x)}.")
    try:
        raw = np.asarray(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of real numbers; got {describe(x)}.") from None
    if raw.dtype.kind == "c" or (raw.dtype == object and any(isinstance(v, complex) for v in raw.ravel())):
        raise TypeError(f"{name} must be real, not complex; got a complex array of shape {raw.shape}.")
    if raw.dtype.kind == "b" or (raw.dtype == object and any(isinstance(v, (bool, np.bool_)) for v in raw.ravel())):
        raise TypeError(f"{name} must be an array of real numbers, not booleans (True/False would be read as "
                        f"1/0); got a boolean array of shape {raw.shape}.")
    if raw.dtype.kind in "USV" or (raw.dtype == object and any(isinstance(v, (str, bytes)) for v in raw.ravel())):
        raise TypeError(f"{name} must be an array of real numbers; got text ({describe(x)}).")
    try:
        a = raw.astype(float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of real numbers; got {describe(x)}.") from None
    return a


def tensor_data(name: str, x) -> None:
    """Refuse a torch tensor without data (the meta device) before anything reads it."""
    if getattr(getattr(x, "device", None), "type", None) == "meta":
        raise ValueError(f"{name} is a tensor on the meta device (a shape without data); "
                         "give one on 'cpu' or 'cuda'.")


def array(name: str, x, *, ndim: int | tuple[int, ...] | None = None, shape: tuple | None = None,
          finite: bool | None = True, nonempty: bool = False) -> np.ndarray:
    """``x`` as a float array, checked: ``ndim`` (one or several allowed), ``shape`` (None entries
    are free), all entries finite (``finite=False``: +-inf allowed, NaN refused; ``None``: not
    checked, for arrays where the function itself handles NaN entries), non-empty."""
    a = _numeric(name, x)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if a.ndim not in allowed:
            words = " or ".join(f"{n}-D" for n in allowed)
            raise ValueError(f"{name} must be {words}; got {a.ndim}-D with shape {a.shape}.")
    if shape is not None and (a.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, a.shape))):
        want = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"{name} must have shape {want}; got {a.shape}.")
    if nonempty and a.size == 0:
        raise ValueError(f"{name} must not be empty; got shape {a.shape}.")
    if finite:
        finite_values(name, a)
    elif finite is not None and np.isnan(a).any():
        raise ValueError(f"{name} must not contain NaN; got {describe(a)}.")
    return a


def finite_values(name: str, a: np.ndarray) -> None:
    """Refuse NaN and +-inf in ``a``."""
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite (no NaN or inf); got {describe(a)}.")


def positive(name: str, x, *, what: str = "") -> np.ndarray:
    """A finite scalar or array whose every entry is > 0."""
    a = array(name, x)
    if a.size and not a.min() > 0:
        raise ValueError(f"{name} must be > 0{what}; got {describe(x)}.")
    return a


def nonnegative(name: str, a: np.ndarray, *, what: str = "") -> None:
    """Refuse negative entries of ``a`` (finite already)."""
    if a.size and a.min() < 0:
        neg = np.flatnonzero(a.ravel() < 0)
        raise ValueError(f"{name} must be non-negative{what}; got {neg.size} negative entr"
                         f"{'y' if neg.size == 1 else 'ies'} (smallest {a.min():.3g}).")


def scalar(name: str, x, *, low: float | None = None, high: float | None = None, low_open: bool = False,
           high_open: bool = False, allow_inf: bool = False) -> float:
    """A real number in the interval given by ``low``/``high`` (closed unless ``*_open``)."""
    if hasattr(x, "detach") and getattr(x, "ndim", None) == 0 and not x.dtype.is_complex \
            and str(x.dtype) != "torch.bool":  # a 0-d torch tensor holding a real number
        tensor_data(name, x)
        x = x.item()
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (numbers.Real, np.ndarray)) or np.ndim(x) != 0 \
            or (isinstance(x, np.ndarray) and x.dtype.kind not in "iuf"):
        raise TypeError(f"{name} must be a real number; got {describe(x)}.")
    v = float(x)
    lo = "" if low is None else f"{'>' if low_open else '>='} {low:g}"
    hi = "" if high is None else f"{'<' if high_open else '<='} {high:g}"
    allowed = " and ".join(s for s in (lo, hi) if s) or "finite"
    if math.isnan(v) or (math.isinf(v) and not allow_inf) \
            or (low is not None and (v < low or (low_open and v == low))) \
            or (high is not None and (v > high or (high_open and v == high))):
        kind = "a number (inf allowed)" if allow_inf else "a finite number"
        raise ValueError(f"{name} must be {kind} {allowed}; got {v!r}." if allowed != "finite"
                         else f"{name} must be {kind}; got {v!r}.")
    return v


def integer(name: str, x, *, minimum: int | None = None) -> int:
    """An integer (bool refused; a float with an integral value accepted) of at least ``minimum``."""
    if hasattr(x, "detach") and getattr(x, "ndim", None) == 0 and not x.dtype.is_complex:  # a 0-d tensor
        tensor_data(name, x)
        x = x.item()
    elif isinstance(x, np.ndarray) and x.ndim == 0:
        x = x[()]
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer; got {x!r}.")
    if isinstance(x, numbers.Integral):
        v = int(x)
    elif isinstance(x, numbers.Real) and math.isfinite(float(x)) and float(x).is_integer():
        v = int(x)
    else:
        raise TypeError(f"{name} must be an integer; got {describe(x)}.")
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {v}.")
    return v


def seed(name: str, x) -> int:
    """A random seed: an integer >= 0 (numpy's generators refuse negative seeds, torch's
    manual_seed floats; a float seed such as 1.5 is refused, never truncated)."""
    try:
        return integer(name, x, minimum=0)
    except ValueError:
        raise ValueError(f"{name} must be an integer >= 0 (a random seed); got {describe(x)}.") from None
    except TypeError:
        raise TypeError(f"{name} must be an integer >= 0 (a random seed); got {describe(x)}.") from None


def floating_dtype(name: str, dtype):
    """A floating torch dtype (torch.float64, float32, float16, bfloat16); integer, bool and
    complex dtypes refused (torch's random and linear-algebra kernels would fail deep inside)."""
    import torch

    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"{name} must be a floating torch dtype (torch.float64, torch.float32, ...); "
                        f"got {describe(dtype)}.")
    return dtype


def torch_module(name: str, x):
    """A torch.nn.Module (the object nqf trains or differentiates)."""
    import torch

    if not isinstance(x, torch.nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module (e.g. nqf.QuadraticModel or a module of "
                        f"nqf.architectures); got a {type(x).__name__}.")
    return x


def choice(name: str, x, allowed) -> str:
    """One of the strings ``allowed``."""
    if not isinstance(x, str) or x not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}; got {describe(x)}.")
    return x


def time_grid(name: str, t, *, increasing: bool = True, nonempty: bool = True) -> np.ndarray:
    """A 1-D grid of finite times >= 0 (non-decreasing when ``increasing``)."""
    if t is None:
        raise ValueError(f"{name} (the times to evaluate at, a 1-D array) is needed; got None.")
    a = array(name, t, ndim=1, nonempty=nonempty)
    if a.size and a.min() < 0:
        raise ValueError(f"{name} must hold times >= 0; got a smallest time of {a.min():.3g}.")
    if increasing and a.size > 1 and np.any(np.diff(a) < 0):
        i = int(np.flatnonzero(np.diff(a) < 0)[0])
        raise ValueError(f"{name} must be increasing (non-decreasing); t[{i + 1}] = {a[i + 1]:.6g} "
                         f"comes after t[{i}] = {a[i]:.6g}.")
    return a


def square(name: str, C, n: int | None = None) -> np.ndarray:
    """A finite (n, n) matrix (any n when ``n`` is None)."""
    a = array(name, C, ndim=2)
    if a.shape[0] != a.shape[1] or (n is not None and a.shape[0] != n):
        size = f"{n} x {n}" if n is not None else "square"
        raise ValueError(f"{name} must be {size}; got shape {a.shape}.")
    return a


def matrices(name: str, M, p: int) -> np.ndarray:
    """M as a float array of shape (..., p, p) (one or a stack of p x p matrices); NaN passes
    (the callers map it through), a wrong size is refused instead of numpy's broadcast error."""
    M = array(name, M, finite=None)
    if M.ndim < 2 or M.shape[-2:] != (p, p):
        raise ValueError(f"{name} must have shape (..., {p}, {p}) (p = {p}); got {M.shape}.")
    return M


def symmetric(name: str, C: np.ndarray, *, context: str = "") -> None:
    """Refuse a square matrix that is not symmetric to rounding (|C - C^T| <= 1e-10 max|C|),
    instead of silently using its symmetric part."""
    scale = float(np.max(np.abs(C), initial=0.0))
    asym = float(np.max(np.abs(C - C.T), initial=0.0))
    if asym > SYMMETRY_RTOL * scale:
        raise ValueError(f"{name} must be symmetric{context}; max |{name} - {name}^T| = {asym:.3g} "
                         f"(relative {asym / scale:.2g}, allowed {SYMMETRY_RTOL:g}).")


def symmetric_psd(name: str, C: np.ndarray, *, context: str = "") -> None:
    """Refuse a square matrix that is not symmetric positive semi-definite (to rounding).

    Symmetric: |C - C^T| <= 1e-10 max|C|. PSD: the smallest eigenvalue >= -1e-10 max|C|
    (``PSD_RTOL``), tested by one Cholesky factorisation of C + 1e-10 max|C| I; the eigenvalue is
    computed only for the message.
    """
    scale = float(np.max(np.abs(C), initial=0.0))
    if scale == 0.0:
        return
    symmetric(name, C, context=context)
    if np.all(C - np.diag(np.diagonal(C)) == 0):
        low = float(np.min(np.diagonal(C)))
    else:
        try:
            np.linalg.cholesky((C + C.T) / 2 + PSD_RTOL * scale * np.eye(C.shape[0]))
            return
        except np.linalg.LinAlgError:
            low = float(np.linalg.eigvalsh((C + C.T) / 2)[0])
    if low < -PSD_RTOL * scale:
        raise ValueError(f"{name} must be positive semi-definite{context}; its smallest eigenvalue is "
                         f"{low:.3g} (allowed down to -{PSD_RTOL:g} * max|{name}| = {-PSD_RTOL * scale:.3g}).")


def device(name: str, value):
    """A torch.device from 'auto', 'cpu', 'cuda' or 'cuda:<n>' (or a torch.device), refusing a
    CUDA device that this machine does not have (instead of torch's assertion at first use)."""
    import torch

    if isinstance(value, torch.device):
        dev = value
    elif value == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    elif not isinstance(value, str) or not (value in ("cpu", "cuda") or (
            value.startswith("cuda:") and value[5:].isdigit())):
        raise ValueError(f"{name} must be 'auto', 'cpu', 'cuda' or 'cuda:<n>'; got {describe(value)}.")
    else:
        dev = torch.device(value)
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"{name} is {str(dev)!r} but CUDA is not available on this machine; "
                             "use 'cpu' or 'auto'.")
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"{name} is {str(dev)!r} but this machine has {count} CUDA device(s) "
                             f"(cuda:0..cuda:{count - 1}).")
    return dev


def representable_weights(name: str, W0: np.ndarray, dtype) -> None:
    """Refuse initial weights that ``dtype`` cannot hold as normal numbers.

    A non-zero entry below finfo(dtype).tiny (float32: 1.18e-38) becomes subnormal or 0: a
    gradient step on it loses its relative precision (the ignition time shifts) and, near the
    smallest subnormal, rounds to no change at all, so the model never learns. Entries above
    finfo(dtype).max become inf. Zero entries are exact and allowed.
    """
    import torch

    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point) or dtype == torch.float64:
        return
    info = torch.finfo(dtype)
    mag = np.abs(W0)
    small = (mag > 0) & (mag < info.tiny)
    short = str(dtype).replace("torch.", "")
    if small.any():
        raise ValueError(
            f"{name} has {int(small.sum())} non-zero entr{'y' if small.sum() == 1 else 'ies'} below "
            f"{short}'s smallest normal number {info.tiny:.3g} (smallest |entry| "
            f"{float(mag[mag > 0].min()):.3g}): {short} holds them as subnormals or 0, so the model learns "
            f"late or never; use dtype=torch.float64 or entries >= {info.tiny:.3g} (an init "
            f"W0 = sqrt(eps) I needs eps >= {info.tiny ** 2:.3g} in {short}).")
    if (mag > info.max).any():
        raise ValueError(f"{name} has entries above {short}'s largest number {info.max:.3g} "
                         f"(largest |entry| {float(mag.max()):.3g}); use dtype=torch.float64.")


def targets(form, y) -> np.ndarray:
    """y as a finite float vector with one entry per data matrix of ``form`` (never broadcast:
    a length-1 y for m samples is refused). ``form`` is any structure form (duck-typed on ``m``
    and ``outputs_from_M``, so this module imports no torch)."""
    if not (hasattr(form, "m") and hasattr(form, "outputs_from_M")):
        raise TypeError(f"form must be a StructureForm (DenseForm, DiagonalForm, ...); got a {type(form).__name__}.")
    if y is None:
        raise ValueError("y (the targets, one per data matrix) is needed with a structure form.")
    y = array("y", y, ndim=(1, 2)).reshape(-1)
    if y.shape[0] != form.m:
        raise ValueError(f"y must have one entry per data matrix ({form.m}); got {y.shape[0]}.")
    return y


def initial_state(M0, W0, p: int) -> np.ndarray:
    """M0 from exactly one of M0 (p x p, symmetric PSD) or W0 (p x d, M0 = W0 W0^T), checked:
    finite, the right size, and for M0 symmetric positive semi-definite (a clipped negative
    eigenvalue would silently start the flow elsewhere)."""
    if (M0 is None) == (W0 is None):
        raise ValueError("Give exactly one of M0 (p x p) or W0 (p x d) as the initial state.")
    if W0 is not None:
        W0 = array("W0", W0, ndim=2)
        if W0.shape[0] != p:
            raise ValueError(f"W0 must have p = {p} rows (shape ({p}, d)); got shape {W0.shape}.")
        return W0 @ W0.T
    M0 = square("M0", M0, p)
    symmetric_psd("M0", M0, context=" (M = W W^T)")
    return M0


def interaction_matrix(C, K: int, *, context: str = " (a Gram matrix (8/m) Lambda^T Lambda)") -> np.ndarray:
    """The mode interaction matrix C of ``K`` modes, (K, K) symmetric PSD or its (K,) diagonal of
    non-negative C_kk (glv, staircase): the array, or one sentence on what is wrong."""
    C = array("C", C, ndim=(1, 2))
    if C.ndim == 1:
        if C.shape[0] != K:
            raise ValueError(f"C must be ({K}, {K}) or its diagonal ({K},) for {K} modes; got shape {C.shape}.")
        nonnegative("C", C, what=" (its diagonal C_kk of a Gram matrix)")
        return C
    C = square("C", C, K)
    symmetric_psd("C", C, context=context)
    return C


# An environment variable that sets the memory a call may allocate, in GB (as for the workflow's jobs).
MEMORY_ENV = "NQF_MAX_MEMORY_GB"


def available_memory(device=None) -> int | None:
    """Bytes that an allocation on ``device`` can take now: NQF_MAX_MEMORY_GB where set (it lowers
    or raises the limit, as for the workflow's jobs), else the free memory of a CUDA device or this
    machine's MemAvailable (/proc/meminfo; free pages by os.sysconf elsewhere); None when unknown."""
    import os

    if os.environ.get(MEMORY_ENV):
        return int(float(os.environ[MEMORY_ENV]) * 1e9)
    free = None
    if getattr(device, "type", device) == "cuda":
        import torch

        free = torch.cuda.mem_get_info(device)[0]
    else:
        try:
            with open("/proc/meminfo") as fh:
                free = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError, IndexError):
            try:
                free = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_AVPHYS_PAGES"))
            except (ValueError, OSError, AttributeError):
                free = None
    return free


def memory(what: str, nbytes: float, knob: str, device=None) -> None:
    """Refuse, before allocating, a call whose arrays (``nbytes``, estimated from the shapes) do not
    fit in the memory available now, naming the size and the ``knob`` that reduces it (instead of
    the allocator's error, or swapping, deep inside)."""
    free = available_memory(device)
    if free is not None and nbytes > free:
        raise MemoryError(f"{what}: about {_bytes(nbytes)} would be allocated, but {_bytes(free)} is available"
                          f"{' on ' + str(device) if getattr(device, 'type', device) == 'cuda' else ''}; {knob}.")


def _bytes(n: float) -> str:
    """3.2e10 -> '32 GB' (decimal units)."""
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def half_precision(dtype) -> bool:
    """True for torch.float16 and torch.bfloat16 (3 and 2 significant digits)."""
    return str(dtype) in ("torch.float16", "torch.bfloat16")
