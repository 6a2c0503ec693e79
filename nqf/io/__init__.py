"""Reading and writing results: NetCDF with the project's contract (``netcdf``), CF names,
run collections (``runs``), provenance and the one-sentence reasons a write failed."""

from nqf import _lazy_names

__getattr__, __dir__ = _lazy_names(globals(), {}, [])  # nqf.io.<module> without importing it first
