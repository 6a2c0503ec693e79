"""Every architecture of the paper as a real module with its structure matrix A(x).

``ARCHITECTURES[name].build()`` returns a float64 ``UnitModule``: the nonlinear PyTorch module
(vector outputs), its one-unit function ``unit(w, x)``, the analytic A(x) in factored form
(``structure(x)``) and the reader ``unit_weights()`` of its weights as W (p x d). ``MODULES``
lists the nonlinear modules (Props. 1-6, Eq. 50), ``QUADRATIC_MODELS`` the exact quadratic
models of Table 3.

What experiments need of an architecture, by name (nqf.architectures.registry): ``build(name,
size, image=..., **overrides)`` from a config's size mapping, ``unit_input_dim``, ``title``,
``higher_order``, ``input_variables`` / ``read_inputs`` (inputs <-> data-file variables); of any
module (nqf.architectures.base): ``initial_weights`` (Gaussian W0 per seed and scale) and
``gaussian_teacher`` (teacher unit weights W*); ``selection(name)``: the architectures a kind may
choose from (those with an effective matrix, a mode design, ...).

The names are resolved on first use (PEP 562), like the package's own: the registry's facts
(titles, notes) load without torch, the modules with it.
"""
from __future__ import annotations

from nqf import _lazy_names

# public name -> the submodule that defines it
_SOURCES = {
    **dict.fromkeys(("ACTIVATIONS", "Activation", "activation"), "nqf.architectures.activations"),
    "MultiHeadAttention": "nqf.architectures.attention",
    **dict.fromkeys(("UnitModule", "gaussian_teacher", "initial_weights", "input_degree", "scale_inputs", "unvec", "vec"),
                    "nqf.architectures.base"),
    "OneLayerCNN": "nqf.architectures.cnn",
    "FourierMLP": "nqf.architectures.fourier",
    "TwoLayerMLP": "nqf.architectures.mlp",
    "MixtureOfExperts": "nqf.architectures.moe",
    **dict.fromkeys(("QueryKeyAttention", "SelfAttentionReadout", "SingleHeadLogits"), "nqf.architectures.query_key"),
    **dict.fromkeys(("ARCHITECTURES", "Architecture", "MODULES", "QUADRATIC_MODELS", "SELECTIONS", "build",
                     "higher_order", "input_variables", "read_inputs", "selection", "title", "unit_input_dim"),
                    "nqf.architectures.registry"),
    **dict.fromkeys(("BilinearSequence", "DiagonalNet", "DiagonalNetTwoFactor", "LinearSSL", "MatrixCompletion",
                     "MatrixSensing", "PhaseRetrieval", "QuadraticUnitModel", "RectangularSensing", "TiedQueryKey"),
                    "nqf.architectures.table3"),
}


__all__ = sorted(_SOURCES)


__getattr__, __dir__ = _lazy_names(globals(), _SOURCES, __all__)
