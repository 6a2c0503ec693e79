"""Workflow jobs are fresh processes: those that need no torch (theory, fit, figure, summary,
reproduction) must not pay for importing it (about 1.3 s a job); nor does planning a run pay for
SciPy."""
import importlib
import subprocess
import sys
import textwrap
import types

from helpers import time_limit

import nqf
from nqf.experiments import KINDS

# Every kind's module imports without torch. Its fit and figure stages run without it too, and so
# does its theory, except teacher_student's (it builds the modules to read their width) and
# fourier_powerlaw's (it draws the seeds' initial weights with torch's generator, as training does).


def _modules_after(code: str) -> set[str]:
    """The top-level packages a fresh interpreter has imported after running ``code``."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code) + "\nimport sys\n"
                          "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"],
                         capture_output=True, text=True, check=True, timeout=time_limit(300))
    return set(out.stdout.split())


def test_light_jobs_import_no_torch():
    loaded = _modules_after(f"""
        import nqf, nqf.experiments, nqf.experiments.claims, nqf.experiments.structure_files, nqf.experiments.divergence, nqf.pipeline.jobs
        import nqf.pipeline.reproduction, nqf.io.netcdf
        from nqf.experiments import KINDS, figure_of, kind_of
        for kind in {sorted(KINDS)!r}:
            assert KINDS[kind].KIND == kind_of({{"kind": kind}}).KIND == kind
            assert callable(figure_of({{"kind": kind}}))
        """)
    assert "torch" not in loaded


def test_kind_and_figure_modules_import_no_matplotlib():
    """matplotlib loads inside a figure stage (nqf.plotting), not when its module is imported: the
    other jobs of a kind never pay for it."""
    loaded = _modules_after(f"""
        from nqf.experiments import KINDS
        from nqf.experiments.contract import figure_module
        for kind in {sorted(KINDS)!r}:
            KINDS[kind], figure_module(kind)
        """)
    assert "matplotlib" not in loaded


def test_planning_a_run_imports_no_scipy():
    """Every snakemake call (dry runs, each cluster job's own snakemake) loads every kind to check
    the config; SciPy is imported by the theory and fit functions that use it, not by the kinds'
    modules (about 0.9 s of CPU less in every call)."""
    loaded = _modules_after(f"""
        from nqf.experiments import KINDS
        for kind in {sorted(KINDS)!r}:
            KINDS[kind]
        """)
    assert "scipy" not in loaded


def test_every_kind_is_listed():
    assert all(isinstance(KINDS[k], types.ModuleType) and KINDS[k].KIND == k for k in KINDS)


def test_package_names_resolve_lazily():
    assert set(nqf.__all__) <= set(dir(nqf))
    for name in nqf.__all__:
        assert getattr(nqf, name) is not None
    importlib.import_module("nqf.theory.mflow")  # importing the submodule leaves the function its name
    importlib.import_module("nqf.theory.staircase")
    assert callable(nqf.mflow) and callable(nqf.staircase)
    assert nqf.train.__module__ == "nqf.training.loop"
