"""Training of quadratic models and real modules: the batched full-batch loop (``loop``), the
quadratic form as a PyTorch module (``quadratic``), the Fourier trainers and the module-vs-NQF
comparison (``approximation``)."""

from nqf import _lazy_names

__getattr__, __dir__ = _lazy_names(globals(), {}, [])  # nqf.training.<module> without importing it first
