"""Every architecture of the paper as a real module with its structure matrix A(x).

``ARCHITECTURES[name].build()`` returns a float64 ``UnitModule``: the nonlinear PyTorch module
(vector outputs), its one-unit function ``unit(w, x)``, the analytic A(x) in factored form
(``structure(x)``) and the reader ``unit_weights()`` of its weights as W (p x d). ``MODULES``
lists the nonlinear modules (Props. 1-6, Eq. 50), ``QUADRATIC_MODELS`` the exact quadratic
models of Table 3.
"""
from nqf.architectures.activations import ACTIVATIONS, Activation, activation
from nqf.architectures.attention import MultiHeadAttention
from nqf.architectures.base import Architecture, UnitModule, unvec, vec
from nqf.architectures.cnn import OneLayerCNN
from nqf.architectures.fourier import FourierMLP
from nqf.architectures.mlp import TwoLayerMLP
from nqf.architectures.moe import MixtureOfExperts
from nqf.architectures.query_key import QueryKeyAttention, SelfAttentionReadout, SingleHeadLogits
from nqf.architectures.registry import ARCHITECTURES, MODULES, QUADRATIC_MODELS
from nqf.architectures.table3 import (BilinearSequence, DiagonalNet, DiagonalNetTwoFactor, LinearSSL,
                                      MatrixCompletion, MatrixSensing, PhaseRetrieval, QuadraticUnitModel,
                                      RectangularSensing, TiedQueryKey)



def plot_structure_matrices(paths, x_seed: int = 0, names=None, font_size: float = 9, dpi: int = 150) -> None:
    """Block pattern of A(x) for each architecture, side by side; see nqf.architectures.plot.

    Imported lazily because it loads matplotlib.
    """
    from nqf.architectures.plot import plot_structure_matrices as plot

    plot(paths, x_seed=x_seed, names=names, font_size=font_size, dpi=dpi)


__all__ = [
    "ACTIVATIONS", "ARCHITECTURES", "Activation", "Architecture", "BilinearSequence", "DiagonalNet",
    "DiagonalNetTwoFactor", "FourierMLP", "LinearSSL", "MODULES", "MatrixCompletion", "MatrixSensing",
    "MixtureOfExperts", "MultiHeadAttention", "OneLayerCNN", "PhaseRetrieval", "QUADRATIC_MODELS",
    "QuadraticUnitModel", "QueryKeyAttention", "RectangularSensing", "SelfAttentionReadout", "SingleHeadLogits", "TiedQueryKey",
    "TwoLayerMLP", "UnitModule", "activation", "plot_structure_matrices", "unvec", "vec",
]
