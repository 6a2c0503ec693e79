"""Experiment kinds. Each kind is a package ``nqf.experiments.<kind>`` whose module holds the
stage functions the workflow calls and the facts the generic code reads (the contract, as code:
nqf.experiments.contract):

    KIND, STAGE_KEYS   its name; which config keys each stage reads (they become the rule's params)
    runs(cfg)          the run ids of an experiment (one training job and file each)
    make_data(cfg) -> Dataset, train_run(data, cfg, run, device) -> Dataset,
    theory(structure, cfg) -> Dataset, fit(structure, theory, runs, cfg) -> Dataset with claims
    optional hooks and facts (contract.OPTIONAL): check, estimate, run_config, structure, ...;
    NONFINITE, FINITE_THEORY, RUN_DIMS_OF_STRUCTURE, FIT_VARIABLES, config_sizes, PAPER_FIGURE

and its figure stage, ``figure(theory, fit, runs, cfg, paths, font_size=, dpi=)``, in its own module
``nqf.experiments.<kind>.figure`` (:func:`figure_of`): plotting code apart from fitting code. The
figure module imports the kind module, never the reverse.

A kind whose data matrices are too large to densify defines ``structure(data, cfg) -> Dataset``
(with ``r`` and ``C``), which the structure stage then calls instead of the generic reduction.
Every stage gets its config through ``cfg`` (a :class:`~nqf.experiments.contract.StageConfig`
holding its STAGE_KEYS); a data file's attributes are provenance, never config to parse back.

Seed blocks: a kind that sets ``SEED_BLOCKS = True`` trains a list of seeds as replicas whose
results depend on the seed alone (not on the other seeds in the batch) and records them along a
``seed`` dimension whose coordinate is the seed. Its experiments accept ``seeds_per_job``: with
an integer n, each run is split into jobs of n consecutive seeds of the config's list (run id
``<run>.seeds-<s1>-<s2>...``), so appending seeds trains only the new blocks; ``merge_seed_blocks``
joins the blocks again for the fit and the figure. The default, ``all``, keeps one job per run
(one tensor program over every seed: the fastest for a fixed sweep).

The folder of a kind ``<kind>``:

    nqf/experiments/<kind>/__init__.py  its facts, then its stages data, structure, train, theory
                                        (its public surface; ``fit`` imported from fitting.py)
    nqf/experiments/<kind>/fitting.py   its fit stage: measuring functions, and a judging function
                                        that turns the measurements into claims; imports no module
                                        of the kind's folder but the library's (the kind imports it)
    nqf/experiments/<kind>/figure.py    the figure stage and its plotting-only helpers
    nqf/experiments/<kind>/schema.yaml  its section of the config schema ($defs/<kind>)

Science that does not depend on a kind's config layout (closed forms, trainers, reductions)
belongs in the library (nqf.theory, nqf.training, ...); code two kinds share, in
nqf.experiments.claims (summary rows and their error budgets), nqf.experiments.structure_files
(the structure stage's files), nqf.experiments.sweeps (run grids), nqf.experiments.diagonal_gd
(the kinds training on diagonal data from W(0) = sqrt(eps) I) or nqf.experiments.powerlaw and powerlaw_figure (the power-law
kinds). No kind imports another kind.

Adding an experiment of a known kind is a config change only; adding a kind is its folder here
and its line in KINDS (docs/extending.md): the generic code reads everything else from the kind.
"""
from __future__ import annotations

import importlib
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType

import numpy as np

from nqf.experiments.contract import SCHEMA_FILE, STAGES, StageConfig, figure_module, hook


class Kinds(Mapping):
    """Kind name -> its module nqf.experiments.<kind>, imported on first look-up: a workflow job
    imports the one kind it runs (and no torch where that kind's stage needs none). The order of
    the names is the order of the config schema's kind list."""

    def __init__(self, names):
        self._names = tuple(names)

    def __getitem__(self, kind) -> ModuleType:
        if kind not in self._names:
            raise KeyError(kind)
        module = importlib.import_module(f"{__name__}.{kind}")
        assert module.KIND == kind, f"module {module.__name__} declares KIND {module.KIND!r}"
        return module

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, kind) -> bool:
        return kind in self._names

    def __repr__(self) -> str:
        return f"Kinds({', '.join(self._names)})"


KINDS: Mapping[str, ModuleType] = Kinds(("featurewise", "samplewise", "competition", "collapse",
                                         "nqf_approximation", "init_scaling",
                                         "featurewise_powerlaw", "samplewise_powerlaw", "fourier_powerlaw",
                                         "teacher_student", "deep", "real_data"))


def __getattr__(name: str):
    """nqf.experiments.<kind> as an attribute, as when the package imported every kind."""
    if name in KINDS:
        return KINDS[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def kind_of(exp_cfg: dict) -> ModuleType:
    """The module implementing an experiment's kind."""
    try:
        return KINDS[exp_cfg["kind"]]
    except KeyError:
        raise ValueError(f"Unknown experiment kind {exp_cfg.get('kind')!r}; known kinds: "
                         f"{', '.join(sorted(KINDS))}.") from None


def figure_of(exp_cfg: dict):
    """The figure stage of an experiment's kind: ``figure(theory, fit, runs, cfg, paths, *,
    font_size, dpi)`` of nqf.experiments.<kind>.figure (:func:`~nqf.experiments.contract.figure_module`)."""
    return figure_module(kind_of(exp_cfg).KIND).figure


def schema_path(kind: str) -> Path:
    """The file of a kind's section of the config schema, nqf/experiments/<kind>/schema.yaml (found
    without importing the kind's module)."""
    if kind not in KINDS:
        raise ValueError(f"Unknown experiment kind {kind!r}; known kinds: {', '.join(sorted(KINDS))}.")
    return Path(__file__).resolve().parent / kind / SCHEMA_FILE


def stage_config(exp_cfg: dict, stage: str) -> dict:
    """The part of an experiment's config that ``stage`` reads (its kind included). The fit
    stage also reads the experiment's reading keys (see :func:`reading_of`), which label its
    summary rows. The result refuses reads of any other key (:class:`StageConfig`)."""
    if stage not in STAGES:
        raise ValueError(f"Unknown stage {stage!r}; stages: {', '.join(STAGES)}.")
    keys = list(kind_of(exp_cfg).STAGE_KEYS[stage])
    if stage == "fit":
        keys += [k for k in reading_keys(exp_cfg) if k not in keys]
    return StageConfig({"kind": exp_cfg["kind"], **{k: exp_cfg[k] for k in keys}}, stage)


# Conventions the paper leaves open: an experiment runs under one reading of each, and its
# summary rows say which. Every trained kind has ``loss`` (nqf.theory.losses); a kind may add its own
# (READING_KEYS, e.g. real_data's preprocessing).
READING_KEYS = ("loss",)


def reading_keys(exp_cfg: dict) -> list[str]:
    """The reading keys an experiment's config holds (those of its kind that apply to it, where
    the kind says which: ``reading_keys(cfg)``)."""
    kind = kind_of(exp_cfg)
    applies = hook(kind, "reading_keys")
    own = applies(exp_cfg) if applies is not None else hook(kind, "READING_KEYS")
    keys = list(READING_KEYS) + list(own)
    return [k for k in keys if k in exp_cfg]


def reading_of(exp_cfg: dict) -> str:
    """'loss half_sum: (1/2) sum (f - y)^2; preprocessing raw': the reading an experiment ran under."""
    from nqf.theory.losses import FORMULAS

    parts = []
    for key in reading_keys(exp_cfg):
        value = exp_cfg[key]
        parts.append(f"loss {value}: {FORMULAS[value]}" if key == "loss" and value in FORMULAS else
                     f"{key} {'none' if value is None else reading_text(value)}")
    return "; ".join(parts)


def reading_text(value) -> str:
    """A reading's value as the pages write it ('standard', '1', 'half_sum')."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def reading_choices(exp_cfg: dict) -> dict:
    """What an experiment tried of the choices its kind says the paper leaves open
    (``READING_CHOICES``): ``open`` {key: the defensible values}, ``tried`` {key: the value its
    side-by-side runs use} and ``screened`` {key: the values a cheap screen covered} (the kind's
    ``screened_readings(cfg)``, where it has one), every value as text."""
    kind = kind_of(exp_cfg)
    choices = hook(kind, "READING_CHOICES")
    applies = set(reading_keys(exp_cfg))
    keys = [k for k in choices if k in applies]
    screened: dict[str, list[str]] = {k: [] for k in keys}
    screen = getattr(kind, "screened_readings", None)
    for reading in (screen(exp_cfg) if screen is not None else []):
        for k in keys:
            if k in reading and reading_text(reading[k]) not in screened[k]:
                screened[k].append(reading_text(reading[k]))
    return {"open": {k: [reading_text(v) for v in choices[k]] for k in keys},
            "tried": {k: reading_text(exp_cfg[k]) for k in keys},
            "screened": {k: v for k, v in screened.items() if v}}


def run_config(exp_cfg: dict, run: str) -> dict:
    """The config one training run reads: a kind may narrow it to that run (``run_config``), so
    adding a seed or an eps value leaves the existing runs' params, and files, untouched. A seed
    block's run reads its own seeds only."""
    kind = kind_of(exp_cfg)
    base, block = split_run_id(exp_cfg, run)
    narrow = hook(kind, "run_config")
    if narrow is not None:
        cfg = StageConfig({"kind": exp_cfg["kind"], **narrow(exp_cfg, base)}, "train")
    else:
        cfg = stage_config(exp_cfg, "train")
    if block is not None:
        cfg["seeds"] = list(block)
    return cfg


def has_own_structure(cfg: dict) -> bool:
    """Whether the experiment's kind computes its structure statistics itself."""
    return hook(kind_of(cfg), "structure") is not None


def structure_of(data, cfg: dict):
    """The structure stage on a data Dataset, given the stage's config (``stage_config(exp,
    'structure')``): the kind's own ``structure`` where it has one (factored data matrices that
    must not be densified), else the generic reduction of A(x)."""
    from nqf.experiments.structure_files import form_from_dataset, structure_dataset

    if has_own_structure(cfg):
        ds = kind_of(cfg).structure(data, cfg)
    else:
        ds, _ = structure_dataset(form_from_dataset(data), data["y"].values)
    ds.attrs["experiment_kind"] = cfg["kind"]
    return ds


def check_config(cfg: dict, *, jobs_run_here: bool = True) -> None:
    """Cross-key checks a JSON schema cannot express, run on a validated config before any job
    starts: each experiment's seed blocks, its eps values (:func:`eps_check`), run ids
    (:func:`run_id_check`), its largest run's memory and steps (nqf.experiments.machine), then
    its kind's ``check(exp_cfg)`` (sizes that must fit together; it may build modules): against
    this machine, and its device, where the jobs run here (``jobs_run_here``), else against the
    largest node a cluster has. Problems are (key path
    inside the experiment, sentence) pairs; the first becomes a ConfigError."""
    from nqf.errors import ConfigError
    from nqf.experiments import machine

    if jobs_run_here:
        problem = machine.device_problem(cfg.get("device", "auto"))
        if problem:
            raise ConfigError(problem)
    limit = None if jobs_run_here else machine.CLUSTER_MEMORY
    for exp_id, exp in cfg["experiments"].items():
        kind = kind_of(exp)
        problems = seed_block_check(exp) or eps_check(exp) or run_id_check(exp)
        # sizes before the kind's check, which may build its modules (an estimate builds none)
        problems = problems or machine.resource_problems(exp_id, exp, kind, limit) or _kind_check(kind, exp)
        for key, problem in problems:
            raise ConfigError(f"Config key 'experiments.{exp_id}{'.' + key if key else ''}': {problem}")


def _kind_check(kind, exp: dict) -> list[tuple[str, str]]:
    """The kind's ``check``. A value far out of range (an exponent of 1e100) can make the quantities
    it derives non-finite; the ValueError that raises becomes a sentence naming the most extreme
    number of the experiment (the likely cause), not a traceback."""
    import warnings

    import numpy as np

    from nqf.experiments.estimate_cache import cached

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)  # the overflow's ValueError follows
            # kept on disk for the next snakemake call (nqf.experiments.estimate_cache): a check
            # may build the kind's modules on torch's meta device
            problems = cached("check", [kind.__name__, exp],
                              lambda: [list(problem) for problem in hook(kind, "check")(exp)])
            return [tuple(problem) for problem in problems]
    except (ValueError, ArithmeticError) as exc:
        first = " ".join(str(exc).split())[:160]
        extreme = _extreme_number(exp)
        if extreme is None:  # no number stands out: say what failed, with the kind's own words
            return [("", f"the {exp['kind']} problem it describes cannot be computed "
                         f"({type(exc).__name__}: {first}).")]
        key, value = extreme
        return [(key, f"{value:.3g} makes the {exp['kind']} problem non-computable ({type(exc).__name__}: "
                      f"{first}); it is the experiment's most extreme number, probably far outside its "
                      "useful range.")]


def _extreme_number(tree, path: str = "", cut: float = 1e30) -> tuple[str, float] | None:
    """(key path, value) of the number in ``tree`` farthest from 1 on a log scale, where that is
    beyond ``cut`` or below 1/cut in magnitude; None if every number is moderate."""
    best: tuple[float, str, float] | None = None
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for k, v in items:
        where = f"{path}.{k}" if path else str(k)
        if isinstance(v, (dict, list)):
            found = _extreme_number(v, where, cut)
            cand = None if found is None else (abs(math.log10(abs(found[1]))), *found)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and v != 0 and math.isfinite(v):
            cand = (abs(math.log10(abs(v))), where, float(v))
        else:
            cand = None
        if cand and cand[0] > math.log10(cut) and (best is None or cand[0] > best[0]):
            best = cand
    return None if best is None else (best[1], best[2])


# Initial scales: every kind takes ln(1/eps), which overflows below the smallest normal float64
# (1/5e-324 is inf), and holds z(0) = eps, which loses its digits there.
EPS_KEYS = ("eps", "crossover_eps")


def eps_check(exp_cfg: dict) -> list[tuple[str, str]]:
    """(key path, sentence) for an initial scale below the smallest normal float64 number."""
    import sys

    tiny = sys.float_info.min
    for key in EPS_KEYS:
        values = exp_cfg.get(key)
        for i, v in enumerate(values if isinstance(values, list) else [values]):
            if isinstance(v, (int, float)) and 0 < v < tiny:
                where = f"{key}.{i}" if isinstance(values, list) else key
                return [(where, f"{v:.3g} is below {tiny:.4g}, the smallest normal float64 number, where "
                                f"ln(1/eps) overflows and z(0) = eps loses its digits; use eps >= {tiny:.4g}.")]
    return []


def run_id_check(exp_cfg: dict) -> list[tuple[str, str]]:
    """(key, sentence) pairs for run ids that do not name one run each (nqf.experiments.ids): a
    value listed twice in a list the ids are made of (the kind's RUN_ID_KEYS), two runs under
    one id, an id that is no safe file name."""
    from nqf.experiments.ids import run_id_problems

    keys = tuple(hook(kind_of(exp_cfg), "RUN_ID_KEYS"))
    if exp_cfg.get("seeds_per_job", "all") != "all":
        keys += ("seeds",)
    return run_id_problems(exp_cfg, keys, _run_ids(exp_cfg))


def seed_block_check(exp_cfg: dict) -> list[tuple[str, str]]:
    """seeds_per_job must be 'all' for a kind that trains its seeds as one job. (An n above the
    number of seeds is one block of every seed, as a last partial block is: accepted, so that a
    sweep meant to grow can start small.)"""
    n = exp_cfg.get("seeds_per_job", "all")
    if n != "all" and not hook(kind_of(exp_cfg), "SEED_BLOCKS"):
        return [("seeds_per_job", f"applies to kinds {', '.join(seed_block_kinds())} only; experiments "
                                  f"of kind {exp_cfg['kind']} train their seeds as one job (use all).")]
    return []


def run_ids(exp_cfg: dict) -> list[str]:
    """The run ids of an experiment (one training job and file each); a ConfigError where two
    runs would share an id (:func:`run_id_check`)."""
    from nqf.errors import ConfigError

    for key, problem in run_id_check(exp_cfg):
        raise ConfigError(f"Config key '{key}' {problem}")
    return _run_ids(exp_cfg)


def _run_ids(exp_cfg: dict) -> list[str]:
    blocks = seed_blocks(exp_cfg)
    if blocks is None:
        return list(kind_of(exp_cfg).runs(exp_cfg))
    return [block_run_id(base, b) for base in kind_of(exp_cfg).runs(exp_cfg) for b in blocks]


SEED_BLOCK_TAG = ".seeds-"


def seed_blocks(exp_cfg: dict) -> list[tuple[int, ...]] | None:
    """Consecutive blocks of ``seeds_per_job`` seeds of the config's list, or None (one job per run)."""
    n = exp_cfg.get("seeds_per_job", "all")
    if n == "all":
        return None
    if not hook(kind_of(exp_cfg), "SEED_BLOCKS"):  # refused before any job by seed_block_check
        raise ValueError(f"Experiments of kind {exp_cfg['kind']!r} train their seeds as one job; "
                         f"seeds_per_job applies to kinds {', '.join(seed_block_kinds())} only.")
    seeds = [int(s) for s in exp_cfg["seeds"]]
    return [tuple(seeds[i:i + n]) for i in range(0, len(seeds), n)]


def seed_block_kinds() -> list[str]:
    """The kinds whose runs can be split into seed blocks."""
    return sorted(k for k, mod in KINDS.items() if hook(mod, "SEED_BLOCKS"))


def block_run_id(base: str, block) -> str:
    """The run id of one seed block of run ``base``."""
    return base + SEED_BLOCK_TAG + "-".join(str(int(s)) for s in block)


def split_run_id(exp_cfg: dict, run: str) -> tuple[str, tuple[int, ...] | None]:
    """(base run id, seeds of the block) of a run id; the block is None for an unsplit run."""
    blocks = seed_blocks(exp_cfg)
    if blocks is None:
        return run, None
    base, tag, seeds = run.rpartition(SEED_BLOCK_TAG)
    for block in blocks:
        if tag and base in kind_of(exp_cfg).runs(exp_cfg) and block_run_id(base, block) == run:
            return base, block
    raise ValueError(f"Run {run!r} is not one of this experiment's runs ({', '.join(run_ids(exp_cfg))}).")


def merge_seed_blocks(runs: dict) -> dict:
    """Join the seed blocks of each run along ``seed`` (increasing seed order), keyed by the base
    run id their files name (attribute ``seed_block_of``); whole runs pass through. A diverged
    block stands for its run, so the fit and the figure report it."""
    import xarray as xr

    merged, grouped = {}, {}
    for run, ds in runs.items():
        base = ds.attrs.get("seed_block_of")
        if base is None:
            merged[run] = ds
        else:
            grouped.setdefault(str(base), []).append((run, ds))
    for base, parts in grouped.items():
        diverged = [(run, ds) for run, ds in parts if int(ds.attrs.get("diverged", 0))]
        if diverged:
            merged.update(diverged)
            continue
        parts.sort(key=lambda part: int(part[1]["seed"].values.min()))
        ds = xr.concat([ds for _, ds in parts], dim="seed", data_vars="minimal", coords="minimal",
                       compat="override", join="exact", combine_attrs="drop_conflicts")
        seeds = ds["seed"].values
        if np.unique(seeds).size != seeds.size:
            raise ValueError(f"Seed blocks of run {base!r} overlap (seeds {seeds.tolist()}): "
                             f"{', '.join(run for run, _ in parts)}.")
        ds.attrs.update(run=base, seed_blocks=", ".join(run for run, _ in parts))
        ds.attrs.pop("seed_block_of", None)
        merged[base] = ds
    return merged
