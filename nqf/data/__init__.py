"""Data the experiments train on: designed matrices (``orthogonal``) and real digit images
(``datasets``)."""

from nqf import _lazy_names

__getattr__, __dir__ = _lazy_names(globals(), {}, [])  # nqf.data.<module> without importing it first
