"""Experiment kinds. Each kind is a module with the stage functions the workflow calls:

    STAGE_KEYS   which config keys each stage reads (they become the rule's params)
    runs(cfg)    the run ids of an experiment (one training job and file each)
    make_data(cfg) -> Dataset, train_run(data, cfg, run, device) -> Dataset,
    theory(structure, cfg) -> Dataset, fit(structure, theory, runs, cfg) -> Dataset with claims,
    figure(theory, fit, runs, cfg, paths, font_size=, dpi=)

A kind whose data matrices are too large to densify defines ``structure(data) -> Dataset`` (with
``r`` and ``C``), which the structure stage then calls instead of the generic reduction.

Adding an experiment of a known kind is a config change only; adding a kind is a new module
here plus its entry in KINDS and its schema under $defs in workflow/schemas/config.schema.yaml.
"""
from __future__ import annotations

from types import ModuleType

from nqf.experiments import (collapse, competition, featurewise, featurewise_powerlaw, init_scaling,
                             fourier_powerlaw, nqf_approximation, samplewise, samplewise_powerlaw,
                             teacher_student, deep, real_data)

KINDS: dict[str, ModuleType] = {mod.KIND: mod for mod in (featurewise, samplewise, competition, collapse,
                                                         nqf_approximation, init_scaling,
                                                         featurewise_powerlaw, samplewise_powerlaw, fourier_powerlaw,
                                                         teacher_student, deep, real_data)}
STAGES = ("data", "train", "theory", "fit", "figure")


def kind_of(exp_cfg: dict) -> ModuleType:
    """The module implementing an experiment's kind."""
    try:
        return KINDS[exp_cfg["kind"]]
    except KeyError:
        raise ValueError(f"Unknown experiment kind {exp_cfg.get('kind')!r}; known kinds: "
                         f"{', '.join(sorted(KINDS))}.") from None


def stage_config(exp_cfg: dict, stage: str) -> dict:
    """The part of an experiment's config that ``stage`` reads (its kind included)."""
    if stage not in STAGES:
        raise ValueError(f"Unknown stage {stage!r}; stages: {', '.join(STAGES)}.")
    keys = kind_of(exp_cfg).STAGE_KEYS.get(stage, ())
    return {"kind": exp_cfg["kind"], **{k: exp_cfg[k] for k in keys}}


def run_config(exp_cfg: dict, run: str) -> dict:
    """The config one training run reads: a kind may narrow it to that run (``run_config``), so
    adding a seed or an eps value leaves the existing runs' params, and files, untouched."""
    kind = kind_of(exp_cfg)
    if hasattr(kind, "run_config"):
        return {"kind": exp_cfg["kind"], **kind.run_config(exp_cfg, run)}
    return stage_config(exp_cfg, "train")


def check_config(cfg: dict) -> None:
    """Cross-key checks a JSON schema cannot express (sizes that must fit together), run on a
    validated config before any job starts. A kind lists its problems with ``check(exp_cfg)``
    as (key path inside the experiment, sentence) pairs; the first becomes a ConfigError."""
    from nqf.config import ConfigError

    for exp_id, exp in cfg["experiments"].items():
        kind = kind_of(exp)
        for key, problem in (kind.check(exp) if hasattr(kind, "check") else []):
            raise ConfigError(f"Config key 'experiments.{exp_id}.{key}': {problem}")


def run_ids(exp_cfg: dict) -> list[str]:
    """The run ids of an experiment."""
    return list(kind_of(exp_cfg).runs(exp_cfg))
