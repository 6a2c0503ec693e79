"""real_data's runs and readings: the runs an experiment has and the keys each reads, and the
choices the paper leaves open (preprocessing, input norm, and the attention's readout readings:
readout norm, head pooling, f(0), query tokens), with the readings a ``screen`` run tries."""
from __future__ import annotations

import itertools

import numpy as np

from nqf.experiments.contract import PaperFigure

KIND = "real_data"
PAPER_FIGURE = PaperFigure("Fig. 7", "odd vs even MNIST digits, module vs NQF", order=7)
FIGURE = PAPER_FIGURE.label  # the architectures' titles are this figure's (nqf.architectures.title)
ATTENTION = "qk_self_attention"
SCREEN = "screen"  # the run id of the screened attention readings
# What the paper leaves open (each an experiment's reading, labelled in its rows); the attention's
# readout readings apply to experiments that train the attention only.
ATTENTION_READINGS = ("readout_norm", "heads", "f0", "query")
READING_KEYS = ("preprocessing", "input_norm") + ATTENTION_READINGS
# The defensible values of each open choice: the reproduction page lists those no experiment tried.
READING_CHOICES = {"preprocessing": ("standardise", "raw"), "readout_norm": ("standard", 1.0),
                   "heads": ("sum", "mean"), "f0": ("keep", "remove"), "query": ("all", "first", "last")}


def reading_keys(cfg: dict) -> tuple[str, ...]:
    """The reading keys that apply: the attention's readout readings only with the attention."""
    return READING_KEYS if ATTENTION in cfg["architectures"] else ("preprocessing", "input_norm")


def runs(cfg: dict) -> list[str]:
    """One run per architecture (it holds every seed), and ``screen`` when readings are screened."""
    return list(cfg["architectures"]) + ([SCREEN] if screened_readings(cfg) else [])


def run_config(cfg: dict, run: str) -> dict:
    """The keys one run reads: its architecture's size, step count and (the attention's) readings;
    the screen run, the attention's and the readings it screens."""
    if run not in runs(cfg):
        raise ValueError(f"Run {run!r} is not one of this experiment's runs ({', '.join(runs(cfg))}).")
    arch = ATTENTION if run == SCREEN else run
    out = {"architecture": arch, "size": cfg["sizes"][arch], "n_train": n_train_of(cfg, arch),
           "steps": cfg["steps"][arch], **{k: cfg[k] for k in ("eps", "seeds", "loss", "lr", "optimizer", "n_record",
                                                               "dtype")}}
    if arch == ATTENTION:
        out.update({k: cfg[k] for k in ATTENTION_READINGS})
    if run == SCREEN:
        out["screen"] = screened_readings(cfg)
        if cfg["screen_steps"] is not None:
            out["steps"] = cfg["screen_steps"]
    return out


def n_train_of(cfg: dict, arch: str) -> int:
    """Training images of ``arch``: ``n_train`` itself, or its entry for ``arch`` when it is a mapping."""
    n = cfg["n_train"]
    return int(n[arch]) if isinstance(n, dict) else int(n)


def screened_readings(cfg: dict) -> list[dict]:
    """The attention readings of ``screen`` (a list of grids, each a mapping reading key -> values;
    a grid is every combination of its values, the other keys at the experiment's own values), in
    order, each once, the experiment's own reading first if a grid holds it."""
    out: list[dict] = []
    for grid in cfg["screen"]:
        keys = [k for k in ATTENTION_READINGS if k in grid]
        for values in itertools.product(*(grid[k] for k in keys)):
            reading = {k: cfg[k] for k in ATTENTION_READINGS}
            reading.update(zip(keys, values))
            if reading not in out:
                out.append(reading)
    return out


def reading_label(reading: dict) -> str:
    """'readout_norm standard, heads sum, f0 remove, query all'."""
    return ", ".join(f"{k} {reading[k]}" for k in ATTENTION_READINGS)


def attention_options(reading: dict) -> dict:
    """The SelfAttentionReadout options of an attention reading."""
    return {"query": reading["query"], "heads": reading["heads"], "center": reading["f0"] == "remove"}


def readout_vector(draw: np.ndarray, readout_norm) -> np.ndarray:
    """The fixed readout c from its standard Gaussian draw: the draw itself ('standard', the
    paper's 'fixed Gaussian readout vector', norm ~sqrt(D)), or the draw scaled to that norm."""
    draw = np.asarray(draw, float)
    return draw.copy() if readout_norm == "standard" else draw * (float(readout_norm) / np.linalg.norm(draw))
