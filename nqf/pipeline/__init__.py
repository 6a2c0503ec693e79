"""What the workflow adds around the science: config validation, checks of result files before
and after each stage, the results record, job messages, machine checks and the reproduction
report. Nothing in the library below imports this package."""

from nqf import _lazy_names

__getattr__, __dir__ = _lazy_names(globals(), {}, [])  # nqf.pipeline.<module> without importing it first
