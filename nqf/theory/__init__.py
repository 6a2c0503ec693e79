"""The theory of the paper, free of any workflow: structure matrices and their forms, the closed
M-flow, the Lotka-Volterra reduction and its exact solutions, ignition times and power laws.

Modules depend only on numpy, scipy (and torch where A(x) is differentiated) and nqf.errors-level
helpers; nothing here imports training, data, the experiments or the pipeline."""

from nqf import _lazy_names

__getattr__, __dir__ = _lazy_names(globals(), {}, [])  # nqf.theory.<module> without importing it first
