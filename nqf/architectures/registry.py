"""ARCHITECTURES: every module of the paper by name, with what the theory claims about it and
what the experiment kinds need to know about it.

One entry per architecture holds its facts (titles, the first term its NQF drops, whether a unit
adds a rank-one term to the effective matrix) and names its module class; the class, in the
architecture's own file, holds the rest (default sizes, how it reads an image, how its inputs
are laid out, its unit input dimension, its fixed readout). Importing this registry loads no
torch: the classes are imported on the first build, so the fit and figure jobs can read titles
and notes without paying for torch.

A new architecture is its module file (a ``UnitModule``) and one ``Architecture`` entry below
(docs/extending.md, "Adding an architecture").
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from nqf.architectures.base import UnitModule


@dataclass(frozen=True)
class Architecture:
    """Registry entry: how to build a module, and what the theory says about it.

    ``build(**overrides)`` returns a float64 UnitModule with small default sizes (fast to
    differentiate, readable when plotted); the module carries p, the unit function, the
    analytic factored A(x) and the weights -> W reader. ``implementation`` names the class as
    "file.Class" in nqf.architectures, built with ``options`` (e.g. another activation) under
    any overrides. ``z2`` is the theory's claim about the per-unit sign symmetry (rate 1/phi vs
    phi^-1/2); ``exact`` marks the models that are quadratic already (Table 3, the linear network), so their NQF has
    no error at all. ``title`` describes the module; ``figure_titles`` are the labels a paper
    figure gives it instead ("Fig. 2" -> "MLP"). ``higher_order`` is the first term Theorem 1
    drops (where the module leaves its NQF). ``rank_one_units``: each unit adds one rank-one term
    to the effective matrix E (a perceptron, a CNN kernel, a linear MoE expert), so a rank-r
    teacher needs r units (an attention head can add up to d_k). ``effective_matrix``: the NQF
    is linear in a small matrix E(W) that the class's ``effective_matrix``, ``effective_outputs``
    and ``teacher_units`` give (nqf.architectures.effective; the nqf_approximation kind).
    ``mode_design``: the class's ``mode_design`` builds data with K decoupled modes for this entry
    (nqf.architectures.mode_designs; the init_scaling kind). Both are flags here, not looked up on
    the class, so that the config schema's choices load without torch.
    """

    name: str
    title: str
    reference: str
    implementation: str
    z2: bool
    exact: bool = False
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    figure_titles: Mapping[str, str] = field(default_factory=dict, hash=False)
    higher_order: str = ""
    rank_one_units: bool = False
    effective_matrix: bool = False
    mode_design: bool = False

    @property
    def module_class(self) -> type[UnitModule]:
        """The UnitModule class (imported here, on first use: it loads torch)."""
        file, cls = self.implementation.split(".")
        return getattr(importlib.import_module(f"nqf.architectures.{file}"), cls)

    def build(self, **overrides) -> UnitModule:
        return self.module_class(**{**self.options, **overrides})


_ENTRIES = [
    Architecture("mlp", "2-layer MLP (tanh)", "Prop. 1, Eq. 6", "mlp.TwoLayerMLP", z2=True,
                 figure_titles={"Fig. 2": "MLP", "Fig. 6": "MLP 20-100-1 (tanh)"},
                 higher_order="tanh cubic term, error O(|W|^4)", rank_one_units=True,
                 effective_matrix=True, mode_design=True),
    Architecture("mlp_gelu", "2-layer MLP (GELU, no Z2)", "Prop. 1, Eq. 6", "mlp.TwoLayerMLP", z2=False,
                 options={"activation_name": "gelu"},
                 higher_order="GELU quadratic term, the unit is cubic in w, error O(|W|^3)", rank_one_units=True),
    Architecture("mlp_linear", "2-layer linear network (Saxe)", "Prop. 1 with phi(z) = z; App. B.7 Cor. 4",
                 "mlp.TwoLayerMLP", z2=True, exact=True, options={"activation_name": "linear"},
                 higher_order="none: a linear unit v (u . x) is quadratic in w, the NQF is exact",
                 rank_one_units=True),
    Architecture("cnn", "1-layer CNN, sum pool", "Prop. 6, Eq. 16", "cnn.OneLayerCNN", z2=True,
                 figure_titles={"Fig. 2": "CNN", "Fig. 7": "1-layer CNN"},
                 higher_order="tanh cubic term per patch, error O(|W|^4)", rank_one_units=True,
                 effective_matrix=True, mode_design=True),
    Architecture("mha", "multi-head attention", "Prop. 2, Eq. 8", "attention.MultiHeadAttention", z2=True,
                 figure_titles={"Fig. 2": "MHA"}, higher_order="Q and K enter at quartic order through the softmax",
                 effective_matrix=True, mode_design=True),
    Architecture("qk_head", "query-key-only heads", "Prop. 3, Eq. 10", "query_key.QueryKeyAttention", z2=True,
                 figure_titles={"Fig. 2": "QK-only head", "Fig. 6": "QK-only attention (4 heads)"},
                 higher_order="softmax second order in the logits W^K^T W^Q, error O(|W|^4)",
                 effective_matrix=True, mode_design=True),
    Architecture("qk_self_attention", "query-key self-attention, mean-pooled queries", "Prop. 3, Eq. 10",
                 "query_key.SelfAttentionReadout", z2=True,
                 figure_titles={"Fig. 7": "self-attention, fixed readout"},
                 higher_order="softmax second order in the logits, error O(|W|^4)"),
    Architecture("single_head_logits", "single head, rows as units", "Prop. 4, Eq. 12", "query_key.SingleHeadLogits",
                 z2=True, higher_order="softmax second order in the logits, error O(|W|^4)", mode_design=True),
    Architecture("moe", "MoE, tanh gate, linear experts", "Prop. 5, Eq. 14", "moe.MixtureOfExperts", z2=True,
                 figure_titles={"Fig. 2": "MoE"}, higher_order="gate tanh cubic term, error O(|W|^4)",
                 rank_one_units=True, effective_matrix=True, mode_design=True),
    Architecture("moe_tanh_expert", "MoE, tanh experts (A = 0)", "Prop. 5, Eq. 14", "moe.MixtureOfExperts", z2=False,
                 options={"expert": "tanh"},
                 higher_order="A = 0: the unit starts at its cubic term (tanh gate times tanh expert)"),
    Architecture("fourier_mlp", "Fourier MLP", "Eq. 50, Eq. 296", "fourier.FourierMLP", z2=True,
                 higher_order="tanh cubic term, error O(|w|^4)", mode_design=True),
    Architecture("phase_retrieval", "quadratic net / phase retrieval", "Table 3", "table3.PhaseRetrieval",
                 z2=True, exact=True, mode_design=True),
    Architecture("diagonal_net", "diagonal linear net (u^2)", "Table 3", "table3.DiagonalNet", z2=True, exact=True,
                 mode_design=True),
    Architecture("diagonal_net_two_factor", "diagonal linear net (u, v)", "Table 3", "table3.DiagonalNetTwoFactor",
                 z2=True, exact=True),
    Architecture("matrix_sensing", "PSD matrix sensing", "Table 3", "table3.MatrixSensing", z2=True, exact=True,
                 mode_design=True),
    Architecture("rectangular_sensing", "rectangular matrix sensing", "Table 3", "table3.RectangularSensing",
                 z2=True, exact=True, mode_design=True),
    Architecture("matrix_completion", "matrix completion", "Table 3", "table3.MatrixCompletion", z2=True, exact=True),
    Architecture("word_context", "word-context score", "Table 3", "table3.MatrixCompletion",
                 options={"n_rows": 5, "n_cols": 4}, z2=True, exact=True),
    Architecture("tied_qk", "tied query-key", "Table 3", "table3.TiedQueryKey", z2=True, exact=True),
    Architecture("bilinear_sequence", "bilinear sequence regression", "Table 3", "table3.BilinearSequence",
                 z2=True, exact=True),
    Architecture("linear_ssl", "linear SSL", "Table 3", "table3.LinearSSL", z2=True, exact=True),
]

ARCHITECTURES: dict[str, Architecture] = {entry.name: entry for entry in _ENTRIES}
MODULES = tuple(name for name, entry in ARCHITECTURES.items() if not entry.exact)
QUADRATIC_MODELS = tuple(name for name, entry in ARCHITECTURES.items() if entry.exact)

# Named selections of the registry, for the config's choices of architectures (nqf.pipeline.config
# fills the schema's lists from them, so an entry's flag is all a kind needs to accept it).
SELECTIONS: dict[str, Callable[[Architecture], bool]] = {
    "effective_matrix": lambda entry: entry.effective_matrix,
    "mode_design": lambda entry: entry.mode_design,
    "mode_design_module": lambda entry: entry.mode_design and not entry.exact,
}


def selection(name: str) -> tuple[str, ...]:
    """The architectures of the selection ``name`` (a key of SELECTIONS), in registry order."""
    if name not in SELECTIONS:
        raise ValueError(f"Unknown selection of architectures {name!r}; choose from {', '.join(SELECTIONS)}.")
    return tuple(entry.name for entry in _ENTRIES if SELECTIONS[name](entry))


def _entry(name: str) -> Architecture:
    if name not in ARCHITECTURES:
        raise ValueError(f"Unknown architecture {name!r}; choose from {', '.join(ARCHITECTURES)}.")
    return ARCHITECTURES[name]


def build(name: str, size: Mapping[str, Any] | None = None, *, image=None, **overrides) -> UnitModule:
    """The module ``name`` at the sizes of a config's size mapping (lists, as YAML and JSON give
    them, become tuples), sized for (H, W) images with ``image`` (the class's ``image_size``),
    with keyword ``overrides`` (n_outputs, seed, ...); a key given twice is a TypeError."""
    entry = _entry(name)
    if size is not None and not isinstance(size, Mapping):
        raise TypeError(f"size must be a mapping of the module's size arguments (e.g. {{'D': 5}}); got "
                        f"a {type(size).__name__}.")
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in (size or {}).items()}
    if image is not None:
        if isinstance(image, (str, bytes)) or not hasattr(image, "__len__") or len(image) != 2 or \
                not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in image):
            raise ValueError(f"image must be a pair (H, W) of integers >= 1; got {image!r:.60}.")
        try:
            sized = entry.module_class.image_size(tuple(image))
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        if sized.keys() & kwargs.keys():
            raise ValueError(f"{name}: the image sets {', '.join(sorted(sized.keys() & kwargs.keys()))}; "
                             f"leave it out of the size.")
        kwargs.update(sized)
    return entry.build(**kwargs, **overrides)


def unit_input_dim(arch: str | UnitModule, size: Mapping[str, Any] | None = None) -> int:
    """Length of the vector one unit reads (x, a token, a CNN patch) of a built module, or of
    the architecture ``arch`` at ``size``."""
    module = build(arch, size) if isinstance(arch, str) else arch
    return module.unit_input_dim


def title(name: str, figure: str | None = None) -> str:
    """The architecture's display title: its label in the paper's ``figure`` ("Fig. 2") where
    that figure gives it one, else its registry title."""
    entry = _entry(name)
    return entry.figure_titles.get(figure, entry.title)


def higher_order(name: str) -> str:
    """Where the module leaves its NQF: the first term Theorem 1 drops (for summary notes)."""
    entry = _entry(name)
    return "none: the model is quadratic, its NQF is exact" if entry.exact else entry.higher_order


def input_variables(name: str, x, *, prefix: str, sample_dim: str) -> dict:
    """Inputs x of ``name`` (as its module takes them) as Dataset variables
    {prefix + part: ((sample_dim, name_axis, ...), array)}, one per part of the class's
    ``input_layout`` (e.g. query and context)."""
    parts = x if isinstance(x, tuple) else (x,)
    layout = _entry(name).module_class.input_layout
    if len(parts) != len(layout):
        raise ValueError(f"{name} takes {len(layout)} input part(s) ({', '.join(p for p, _ in layout)}); "
                         f"got {len(parts)}.")
    return {f"{prefix}{part}": ((sample_dim, *(f"{name}_{axis}" for axis in axes)), t.numpy())
            for (part, axes), t in zip(layout, parts)}


def read_inputs(name: str, data, *, prefix: str):
    """Inverse of :func:`input_variables`: the inputs of ``name`` stored in ``data`` under
    ``prefix``, as the module takes them (a tensor, or a tuple of them)."""
    import torch

    parts = tuple(torch.as_tensor(data[f"{prefix}{part}"].values) for part, _ in _entry(name).module_class.input_layout)
    return parts[0] if len(parts) == 1 else parts
