"""The contract every experiment kind (a package ``nqf.experiments.<kind>`` and its figure module
``nqf.experiments.<kind>.figure``) fulfils, as code.

The workflow calls a kind's stages positionally, each with the config keys its ``STAGE_KEYS``
entry names (the rule's ``params``) and nothing else:

    data     make_data(cfg) -> Dataset
    structure  structure(data, cfg) -> Dataset with r and C   (optional: else the generic reduction)
    train    train_run(data, cfg, run, device="auto") -> Dataset      (one per run id of runs(cfg))
    theory   theory(structure, cfg) -> Dataset
    fit      fit(structure, theory, runs, cfg) -> Dataset with the claims
    figure   figure(theory, fit, runs, cfg, paths, *, font_size, dpi)   (in the figure module)

Optional members (``OPTIONAL``) change what the generic code does when a kind defines them:
hooks (functions) and facts (constants the checks and reports of nqf.pipeline read: what its
files may hold non-finite, its fit variables, the sizes its config fixes, its paper figure).
Beside its module, a kind's folder holds its config section ``schema.yaml`` (its ``$defs`` entry
of the config schema, which nqf.pipeline.config assembles from the registry).
:func:`breaches` checks a kind against all of this; the conformance test runs it over every
registered kind, so a kind that lacks a stage or a figure module, takes the wrong arguments,
lists a stage key its schema does not define or declares a fact of the wrong shape fails there,
not in a workflow job.
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

from nqf.errors import StageKeyError

STAGES = ("data", "structure", "train", "theory", "fit", "figure")

# stage function of the kind module -> (positional parameters it must accept, keyword-only
# parameters it must accept)
SIGNATURES = {
    "runs": (1, ()),
    "make_data": (1, ()),
    "train_run": (4, ()),
    "theory": (2, ()),
    "fit": (4, ()),
}
# the figure module's stage function, likewise
FIGURE_SIGNATURE = ("figure", 5, ("font_size", "dpi"))
KINDS_PACKAGE = "nqf.experiments"



@dataclass(frozen=True)
class PaperFigure:
    """The figure (or theorem) of the paper a kind reproduces, as the reproduction page lists it:
    its ``label`` ('Fig. 3 (right)'), ``title`` and ``order`` (its place on the page, lowest
    first)."""

    label: str
    title: str
    order: int


# optional member -> what it does (and, for functions, its positional arity)
OPTIONAL = {
    "structure": "structure(data, cfg) -> Dataset with r and C, instead of the generic reduction (data too large to densify)",
    "run_config": "run_config(cfg, run) -> the config of one run (default: cfg)",
    "check": "check(cfg) -> [(key, problem)]: cross-key rules the schema cannot express, refused before any job",
    "READING_KEYS": "config keys (beyond loss) that define a reading of the paper (summary column `reading`)",
    "reading_keys": "reading_keys(cfg) -> the READING_KEYS that apply to this experiment (e.g. only with an "
                    "architecture they configure; default: all of READING_KEYS)",
    "READING_CHOICES": "reading key -> the values that read what the paper leaves open defensibly; the "
                       "reproduction page lists those no experiment tried",
    "SEED_BLOCKS": "True when seeds may be trained in blocks (seeds_per_job)",
    "RUN_ID_KEYS": "the config lists the run ids are made of (a value listed twice is refused)",
    "estimate": "estimate(cfg) -> {'bytes': .., 'steps': .., 'what': ..}: the largest run's memory and steps, "
                "checked against the machine before any job (default: nqf.experiments.machine.generic_estimate)",
    "work": "work(cfg, run) -> {'steps': .., 'flops': .., 'ops': ..}: what training run `run` computes (its steps "
            "in all, FLOPs and torch operations per step), for the cluster runtime it asks for "
            "(default: nqf.experiments.work.generic_work of its estimate)",
    "stage_bytes": "stage_bytes(cfg, stage) -> bytes (in float64) that a stage's job holds beyond the estimate "
                   "(e.g. a structure stage's forms of every image), for the cluster memory it asks for (default: 0)",
    # facts read by the result checks (nqf.pipeline.verify_stage) and the reproduction page
    "NONFINITE": "stage -> {variable name pattern: why}: variables of its data, structure or run files that hold "
                 "NaN/inf by design (padding of ragged records, losses after a divergence it tolerates)",
    "FINITE_THEORY": "theory variables that must be finite (its predicted trajectories and the numbers every valid "
                     "config makes finite; the others may hold NaN/inf as markers)",
    "RUN_DIMS_OF_STRUCTURE": "dimensions of its run files that are the structure file's (checked in the fit job)",
    "FIT_VARIABLES": "the variables its fit always writes beside the claims (a fit file lacking one is refused)",
    "config_sizes": "config_sizes(cfg) -> {dimension: size} that the config fixes for every file of the experiment",
    "PAPER_FIGURE": "PaperFigure(label, title, order): the paper figure it reproduces, on the reproduction page "
                    "(None: this project's own experiment)",
}
OPTIONAL_ARITY = {"structure": 2, "run_config": 2, "check": 1, "estimate": 1, "work": 2, "reading_keys": 1, "config_sizes": 1,
                "stage_bytes": 2}
# what the generic code does where a kind leaves an optional member out (None: the generic stage)
DEFAULTS = {"structure": None, "run_config": None, "check": lambda cfg: [], "READING_KEYS": (), "SEED_BLOCKS": False,
            "RUN_ID_KEYS": (), "estimate": None, "work": None, "reading_keys": None, "READING_CHOICES": {},
            "NONFINITE": {}, "FINITE_THEORY": (), "RUN_DIMS_OF_STRUCTURE": (), "FIT_VARIABLES": (),
            "config_sizes": lambda cfg: {}, "PAPER_FIGURE": None,
            "stage_bytes": lambda cfg, stage: 0.0}
# the file beside a kind's module holding its section of the config schema ($defs/<kind>)
SCHEMA_FILE = "schema.yaml"


def _in_key_order(value):
    """``value`` with every mapping in it in sorted key order (left as it is where keys of
    different types do not sort)."""
    if isinstance(value, Mapping):
        items = [(k, _in_key_order(v)) for k, v in value.items()]
        try:
            items.sort(key=lambda kv: kv[0])
        except TypeError:
            pass
        return dict(items)
    if isinstance(value, list):
        return [_in_key_order(v) for v in value]
    return value


class StageConfig(dict):
    """The config one stage was handed, refusing to read any other key.

    A plain dict fails on ``cfg[key]`` for a key outside the stage's params, but ``cfg.get(key,
    default)`` would quietly use the default, and a rerun would then miss a change of that key.
    Here both raise :class:`StageKeyError` naming the stage and the key, so a kind that reads a
    key its ``STAGE_KEYS`` does not list fails in its tests, not with a stale result.
    """

    def __init__(self, cfg: Mapping, stage: str):
        # Nested mappings (sizes, steps, tolerances) in key order: Snakemake compares a rule's
        # params by their repr, so a config that writes them in another order (or a tool that
        # sorts YAML keys) would otherwise rerun the stage on the same settings.
        super().__init__({key: _in_key_order(value) for key, value in cfg.items()})
        self.stage = stage

    def _refuse(self, key):
        kind = dict.get(self, "kind", "?")
        raise StageKeyError(f"stage {self.stage!r} of kind {kind!r} reads config key {key!r}, which is "
                            f"not among the keys it is handed ({', '.join(sorted(self))}); add it to "
                            f"STAGE_KEYS[{self.stage!r}] of nqf.experiments.{kind}")

    def __getitem__(self, key):
        if not dict.__contains__(self, key):
            self._refuse(key)
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        if not dict.__contains__(self, key):
            self._refuse(key)
        return dict.__getitem__(self, key)

    def __reduce__(self):  # pickles (e.g. into a Snakemake script) as the stage's config
        return (StageConfig, (dict(self), self.stage))


def hook(module: ModuleType, name: str):
    """The kind's optional member ``name`` (one of ``OPTIONAL``), or its default."""
    if name not in OPTIONAL:
        raise KeyError(f"{name!r} is not an optional member of an experiment kind; known: {sorted(OPTIONAL)}")
    return getattr(module, name, DEFAULTS[name])


def _accepts(fn, positional: int, keywords=()) -> str | None:
    """None when ``fn`` can be called with ``positional`` positional arguments and ``keywords``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return "is not an inspectable function"
    params = list(sig.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        n_max = positional
    else:
        n_max = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    n_min = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)
    if not n_min <= positional <= n_max:
        return f"takes {n_min}-{n_max} positional arguments, the workflow passes {positional}"
    names = {p.name for p in params}
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    missing = [k for k in keywords if k not in names and not var_kw]
    return f"lacks the keyword argument(s) {', '.join(missing)}" if missing else None


def figure_module(kind: str) -> ModuleType:
    """The figure module nqf.experiments.<kind>.figure of a kind (its figure stage), imported on
    first use; ModuleNotFoundError naming it where the kind has none."""
    return importlib.import_module(f"{KINDS_PACKAGE}.{kind}.figure")


def _tuple_of_names(value) -> bool:
    return isinstance(value, tuple) and all(isinstance(v, str) for v in value)


def fact_breaches(module: ModuleType) -> list[str]:
    """Every fact (``OPTIONAL``) ``module`` declares in another shape than the contract's."""
    name = getattr(module, "__name__", repr(module))
    out = []
    for fact in ("FINITE_THEORY", "RUN_DIMS_OF_STRUCTURE", "FIT_VARIABLES"):
        if not _tuple_of_names(hook(module, fact)):
            out.append(f"{name}.{fact} is not a tuple of names")
    nonfinite = hook(module, "NONFINITE")
    if not isinstance(nonfinite, Mapping) or not set(nonfinite) <= set(STAGES) or not all(
            isinstance(v, Mapping) and all(isinstance(k, str) and isinstance(w, str) for k, w in v.items())
            for v in nonfinite.values()):
        out.append(f"{name}.NONFINITE is not a mapping of stages ({', '.join(STAGES)}) to "
                   f"{{variable name pattern: why}}")
    paper = hook(module, "PAPER_FIGURE")
    if paper is not None and not isinstance(paper, PaperFigure):
        out.append(f"{name}.PAPER_FIGURE is not a PaperFigure (or None)")
    if not isinstance(getattr(module, "SEED_BLOCKS", False), bool):
        out.append(f"{name}.SEED_BLOCKS must be True or False")
    return out


def breaches(module: ModuleType, schema_keys: set[str] | None = None,
             figures: ModuleType | None = None) -> list[str]:
    """Every way ``module`` breaks the contract, one sentence each (empty when it conforms).

    ``schema_keys``: the config keys the kind's schema defines; when given, every key in
    ``STAGE_KEYS`` must be one of them (a stage cannot be handed a key that no config can set).
    ``figures``: the kind's figure module; by default nqf.experiments.<KIND>.figure, imported.
    """
    name = getattr(module, "__name__", repr(module))
    out = []
    if not isinstance(getattr(module, "KIND", None), str):
        out.append(f"{name} defines no KIND string")
    stage_keys = getattr(module, "STAGE_KEYS", None)
    if not isinstance(stage_keys, Mapping):
        out.append(f"{name} defines no STAGE_KEYS mapping")
    else:
        if set(stage_keys) != set(STAGES):
            out.append(f"{name}.STAGE_KEYS has stages {sorted(stage_keys)}; expected {list(STAGES)}")
        for stage, keys in stage_keys.items():
            if not isinstance(keys, tuple) or not all(isinstance(k, str) for k in keys):
                out.append(f"{name}.STAGE_KEYS[{stage!r}] is not a tuple of key names")
            elif schema_keys is not None and set(keys) - schema_keys:
                out.append(f"{name}.STAGE_KEYS[{stage!r}] names keys its schema does not define: "
                           f"{sorted(set(keys) - schema_keys)}")
    for fn_name, (n_pos, keywords) in SIGNATURES.items():
        fn = getattr(module, fn_name, None)
        if not callable(fn):
            out.append(f"{name} lacks the stage function {fn_name}")
        elif (why := _accepts(fn, n_pos, keywords)) is not None:
            out.append(f"{name}.{fn_name} {why}")
    if figures is None:
        package = f"{KINDS_PACKAGE}.{getattr(module, 'KIND', None)}"
        try:
            figures = figure_module(getattr(module, "KIND", None))
        except ModuleNotFoundError as exc:
            if exc.name not in (f"{package}.figure", package):
                raise
    fn_name, n_pos, keywords = FIGURE_SIGNATURE
    if figures is None:
        out.append(f"{name} has no figure module {KINDS_PACKAGE}.{getattr(module, 'KIND', '?')}.figure "
                   f"(its figure stage {fn_name})")
    elif not callable(fn := getattr(figures, fn_name, None)):
        out.append(f"{figures.__name__} lacks the stage function {fn_name}")
    elif (why := _accepts(fn, n_pos, keywords)) is not None:
        out.append(f"{figures.__name__}.{fn_name} {why}")
    for member, n_pos in OPTIONAL_ARITY.items():
        fn = getattr(module, member, None)
        if fn is not None and (not callable(fn) or (why := _accepts(fn, n_pos)) is not None):
            out.append(f"{name}.{member} (optional hook) " + ("is not callable" if not callable(fn) else why))
    return out + fact_breaches(module)
