"""Plain helpers shared by test files, where a fixture does not fit (they take arguments and are
called inside tests and module fixtures). Importable as ``helpers``: pyproject's pytest
``pythonpath`` puts tests/ on sys.path."""
import contextlib
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent  # the repository


def read_test_config() -> dict:
    """config/test.yaml (the tiny config of the workflow tests), a fresh dict on every call."""
    return yaml.safe_load((ROOT / "config" / "test.yaml").read_text())


# -- experiments ---------------------------------------------------------------------------------

# The unit tests' small experiments, one place for every kind whose tests share sizes: what
# experiment_config starts from (base="small"). The tests' runtimes and tolerances are set for these
# sizes; a test that needs other values passes them as keys. A kind not listed starts from its
# schema defaults.
SMALL = {
    "deep": {"architectures": ["mlp"], "optimizers": ["gd"], "seeds": [0], "n_test": 100, "n_record": 60},
    "init_scaling": {"modules": []},
    "nqf_approximation": {
        "architectures": ["mlp"], "n_samples": 100, "n_outputs": 4, "singular_values": [1.0, 0.5, 0.25],
        "seeds": [0, 1], "sizes": {"mlp": {"D": 10, "width": 64}}, "steps": {"mlp": 200},
        "lr": {"mlp": {"adam": 0.002}}, "n_record": 51, "input_norm": 1.0},
    "real_data": {
        "dataset": "digits8x8", "n_train": 120, "n_test": 60, "seeds": [0, 1], "n_record": 6,
        "steps": {"mlp": 30, "cnn": 30, "qk_self_attention": 30},
        "sizes": {"cnn": {"width": 8, "kernel": [4, 4]}, "qk_self_attention": {"d_k": 8, "width": 3}},
        "input_norm": 1.0},
    "teacher_student": {
        "description": "test", "architectures": ["mlp", "qk_head"],
        "sizes": {"mlp": {"D": 6, "width": 12}, "qk_head": {"D": 4, "d_k": 2, "width": 2, "seq_len": 5}},
        "teacher_std": 1.0, "teacher_fan_in": False, "n_probe": 64, "data_seed": 0,
        "lr": {"mlp": 0.05, "qk_head": 0.02}, "steps": {"mlp": 40, "qk_head": 40}, "batch_size": 16,
        "eps": 1e-3, "seeds": [0, 1], "threshold": 0.05, "loss": "mean", "sustain_steps": 3,
        "tolerances": {"min_agree_steps": 10, "parting_cv": 0.25}},
}
BASES = ("small", "schema", "test")


def experiment_config(kind: str, *, base: str = "small", m=None, **keys) -> dict:
    """One experiment of ``kind``, validated (the schema fills what is not given): ``keys`` over
    ``base``, which is "small" (the kind's entry of SMALL, none for a kind not listed), "schema"
    (nothing: the schema's defaults) or "test" (the first experiment of the kind in
    config/test.yaml, the workflow tests' tiny config). ``m`` is set after validation and may go
    below the schema's minimum of 20, for unit tests of the data and dynamics (the schema keeps
    workflow runs at sizes a power law needs)."""
    import copy

    from nqf.pipeline.config import validate_config

    if base == "small":
        start = SMALL.get(kind, {})
    elif base == "schema":
        start = {}
    elif base == "test":
        start = next((e for e in read_test_config()["experiments"].values() if e["kind"] == kind), None)
        if start is None:
            raise ValueError(f"config/test.yaml has no experiment of kind {kind!r}")
    else:
        raise ValueError(f"base must be one of {BASES}, not {base!r}")
    exp = {**copy.deepcopy(start), "kind": kind, **keys}
    cfg = validate_config({"experiments": {"e": exp}})["experiments"]["e"]
    if m is not None:
        cfg["m"] = m
    return cfg


def stage_chain(kind, cfg: dict, structure_edit=None):
    """make_data -> structure -> train -> theory -> fit of the kind module ``kind``, every stage on
    the whole ``cfg``: one run per id of ``kind.runs(cfg)``, each on ``kind.run_config(cfg, run)``
    where the kind narrows its config, else on ``cfg``; the structure is the kind's own where it
    has one, else the generic reduction. ``structure_edit`` tampers with the structure the theory
    and fit see (the runs still train on the true data). Returns (structure, theory, runs, fit)."""
    from nqf.experiments.contract import hook
    from nqf.experiments.structure_files import form_from_dataset, structure_dataset

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


# -- time limits ---------------------------------------------------------------------------------

def _positive_env(name: str, default: str) -> float:
    import os

    value = os.environ.get(name, default)
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name} must be a number, not {value!r}") from None
    if not number > 0:
        raise ValueError(f"{name} must be positive, not {value!r}")
    return number


def timeout_scale() -> float:
    """NQF_TEST_TIMEOUT_SCALE, default 1: the factor on every time limit of the tests (a
    subprocess's timeout, a time budget a test asserts). The limits are set for 2 free cores; a
    loaded or slower machine raises the factor (3 lets every limit take three times as long)."""
    return _positive_env("NQF_TEST_TIMEOUT_SCALE", "1")


def time_limit(seconds: float) -> float:
    """A time limit of ``seconds`` on 2 free cores, scaled by NQF_TEST_TIMEOUT_SCALE."""
    return seconds * timeout_scale()


# -- workflow ------------------------------------------------------------------------------------

def snakemake_timeout() -> float:
    """Seconds one snakemake call of a workflow test may take: NQF_TEST_TIMEOUT_S where set,
    else time_limit(1800) (the test config's whole run takes ~4 min on 2 free cores)."""
    import os

    if "NQF_TEST_TIMEOUT_S" in os.environ:
        return _positive_env("NQF_TEST_TIMEOUT_S", "")
    return time_limit(1800)


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

# -- logging -------------------------------------------------------------------------------------

@contextlib.contextmanager
def restored_root_logging():
    """Put the root logger's handlers and level back after the block (nqf.pipeline.jobs.job sets
    the root logger up with force=True), closing the handlers the block added."""
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        for h in root.handlers:
            if h not in handlers:
                try:
                    h.close()
                except OSError:  # a stream a test made fail
                    pass
        root.handlers[:], root.level = handlers, level


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
