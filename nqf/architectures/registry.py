"""ARCHITECTURES: every module of the paper by name, with what the theory claims about it."""
from __future__ import annotations

from functools import partial

from nqf.architectures.attention import MultiHeadAttention
from nqf.architectures.base import Architecture
from nqf.architectures.cnn import OneLayerCNN
from nqf.architectures.fourier import FourierMLP
from nqf.architectures.mlp import TwoLayerMLP
from nqf.architectures.moe import MixtureOfExperts
from nqf.architectures.query_key import QueryKeyAttention, SelfAttentionReadout, SingleHeadLogits
from nqf.architectures import table3 as t3

_ENTRIES = [
    Architecture("mlp", "2-layer MLP (tanh)", "Prop. 1, Eq. 6", TwoLayerMLP, z2=True),
    Architecture("mlp_gelu", "2-layer MLP (GELU, no Z2)", "Prop. 1, Eq. 6",
                 partial(TwoLayerMLP, activation_name="gelu"), z2=False),
    Architecture("cnn", "1-layer CNN, sum pool", "Prop. 6, Eq. 16", OneLayerCNN, z2=True),
    Architecture("mha", "multi-head attention", "Prop. 2, Eq. 8", MultiHeadAttention, z2=True),
    Architecture("qk_head", "query-key-only heads", "Prop. 3, Eq. 10", QueryKeyAttention, z2=True),
    Architecture("qk_self_attention", "query-key self-attention, mean-pooled queries", "Prop. 3, Eq. 10",
                 SelfAttentionReadout, z2=True),
    Architecture("single_head_logits", "single head, rows as units", "Prop. 4, Eq. 12", SingleHeadLogits, z2=True),
    Architecture("moe", "MoE, tanh gate, linear experts", "Prop. 5, Eq. 14", MixtureOfExperts, z2=True),
    Architecture("moe_tanh_expert", "MoE, tanh experts (A = 0)", "Prop. 5, Eq. 14",
                 partial(MixtureOfExperts, expert="tanh"), z2=False),
    Architecture("fourier_mlp", "Fourier MLP", "Eq. 50, Eq. 296", FourierMLP, z2=True),
    Architecture("phase_retrieval", "quadratic net / phase retrieval", "Table 3", t3.PhaseRetrieval,
                 z2=True, exact=True),
    Architecture("diagonal_net", "diagonal linear net (u^2)", "Table 3", t3.DiagonalNet, z2=True, exact=True),
    Architecture("diagonal_net_two_factor", "diagonal linear net (u, v)", "Table 3", t3.DiagonalNetTwoFactor,
                 z2=True, exact=True),
    Architecture("matrix_sensing", "PSD matrix sensing", "Table 3", t3.MatrixSensing, z2=True, exact=True),
    Architecture("rectangular_sensing", "rectangular matrix sensing", "Table 3", t3.RectangularSensing,
                 z2=True, exact=True),
    Architecture("matrix_completion", "matrix completion", "Table 3", t3.MatrixCompletion, z2=True, exact=True),
    Architecture("word_context", "word-context score", "Table 3",
                 partial(t3.MatrixCompletion, n_rows=5, n_cols=4), z2=True, exact=True),
    Architecture("tied_qk", "tied query-key", "Table 3", t3.TiedQueryKey, z2=True, exact=True),
    Architecture("bilinear_sequence", "bilinear sequence regression", "Table 3", t3.BilinearSequence,
                 z2=True, exact=True),
    Architecture("linear_ssl", "linear SSL", "Table 3", t3.LinearSSL, z2=True, exact=True),
]

ARCHITECTURES: dict[str, Architecture] = {entry.name: entry for entry in _ENTRIES}
MODULES = tuple(name for name, entry in ARCHITECTURES.items() if not entry.exact)
QUADRATIC_MODELS = tuple(name for name, entry in ARCHITECTURES.items() if entry.exact)
