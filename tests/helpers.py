"""Plain helpers shared by test files, where a fixture does not fit (they take arguments and are
called inside tests and module fixtures). Importable as ``helpers``: pyproject's pytest
``pythonpath`` puts tests/ on sys.path."""
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent  # the repository


def read_test_config() -> dict:
    """config/test.yaml (the tiny config of the workflow tests), a fresh dict on every call."""
    return yaml.safe_load((ROOT / "config" / "test.yaml").read_text())


# -- experiments ---------------------------------------------------------------------------------

def kind_config(kind: str, **keys) -> dict:
    """One experiment of ``kind`` with ``keys``, validated (the schema fills the defaults)."""
    from nqf.pipeline.config import validate_config

    return validate_config({"experiments": {"e": {"kind": kind, **keys}}})["experiments"]["e"]


def small_m_config(kind: str, m=None, **keys) -> dict:
    """:func:`kind_config`; ``m`` may go below the schema's minimum of 20 for unit tests of the
    data and dynamics (the schema keeps workflow runs at sizes a power law needs)."""
    cfg = kind_config(kind, **keys)
    if m is not None:
        cfg["m"] = m
    return cfg


def stage_chain(kind, cfg: dict, structure_edit=None):
    """make_data -> structure -> train -> theory -> fit of the kind module ``kind``, every stage on
    the whole ``cfg``: one run per id of ``kind.runs(cfg)``, each on ``kind.run_config(cfg, run)``
    where the kind narrows its config, else on ``cfg``; the structure is the kind's own where it
    has one, else the generic reduction. ``structure_edit`` tampers with the structure the theory
    and fit see (the runs still train on the true data). Returns (structure, theory, runs, fit)."""
    from nqf.experiments.common import form_from_dataset, structure_dataset
    from nqf.experiments.contract import hook

    data = kind.make_data(cfg)
    own_structure, narrow = hook(kind, "structure"), hook(kind, "run_config")
    if own_structure is not None:
        structure = own_structure(data, cfg)
    else:
        structure, _ = structure_dataset(form_from_dataset(data), data["y"].values)
    runs = {run: kind.train_run(data, narrow(cfg, run) if narrow is not None else cfg, run, device="cpu")
            for run in kind.runs(cfg)}
    if structure_edit is not None:
        structure = structure_edit(structure)
    theory = kind.theory(structure, cfg)
    return structure, theory, runs, kind.fit(structure, theory, runs, cfg)


def claim_rows(fit, part: str = "", *, at_start: bool = False) -> list[tuple[str, bool]]:
    """(quantity, passed) of the fit's claims whose quantity contains ``part`` (starts with it
    where ``at_start``)."""
    return [(str(q), bool(ok)) for q, ok in zip(fit["claim_quantity"].values, fit["claim_passed"].values)
            if (str(q).startswith(part) if at_start else part in str(q))]


# -- workflow ------------------------------------------------------------------------------------

def snakemake_timeout() -> float:
    """Seconds one snakemake call of a workflow test may take: NQF_TEST_TIMEOUT_S, default 1800
    (the test config's whole run takes ~4 min on 2 free cores; a loaded machine needs more)."""
    import os

    value = os.environ.get("NQF_TEST_TIMEOUT_S", "1800")
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"NQF_TEST_TIMEOUT_S must be a number of seconds, not {value!r}") from None
    if not seconds > 0:
        raise ValueError(f"NQF_TEST_TIMEOUT_S must be positive, not {value!r}")
    return seconds


def snakemake(workdir, *args, check=True) -> subprocess.CompletedProcess:
    """The snakemake CLI on the repository's Snakefile in ``workdir`` with 2 cores; with ``check``
    a failure raises with the end of its output."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
           str(workdir), "--cores", "2", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=snakemake_timeout())
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


# -- figures -------------------------------------------------------------------------------------

def capture_figures(monkeypatch) -> list:
    """Make nqf.plotting.save record each figure it saves (main page first, then any PDF pages)
    in the returned list, after saving it as before."""
    from nqf import plotting

    saved, real = [], plotting.save

    def recording(fig, paths, *, pdf_pages=()):
        real(fig, paths, pdf_pages=pdf_pages)
        saved.extend([fig, *pdf_pages])

    monkeypatch.setattr(plotting, "save", recording)
    return saved


def figure_problems(fig) -> list[str]:
    """A referee's checks of a saved figure: no legend (of an axes, or of the figure) covers data
    of any axes (nqf.plotting.layout.legend_overlaps), no legend repeats a label."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from nqf.plotting.layout import legend_overlaps

    found = []
    FigureCanvasAgg(fig)  # a closed figure keeps no drawing canvas
    fig.draw_without_rendering()
    legends = [(ax.get_legend(), [ax]) for ax in fig.get_axes() if ax.get_legend() is not None]
    legends += [(legend, fig.get_axes()) for legend in fig.legends]
    for legend, axes in legends:
        labels = [t.get_text() for t in legend.get_texts()]
        if len(set(labels)) != len(labels):
            found.append(f"legend repeats a label: {labels}")
        for ax in axes:
            covered = legend_overlaps(ax, legend)
            if covered:
                found.append(f"legend {labels[:2]}... covers {covered} in axes '{ax.get_title()}'")
    return found
