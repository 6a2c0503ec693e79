"""Validation of workflow configurations against the JSON schema, with one-sentence errors.

Validation happens in two passes so that every message can name the exact key path and the
allowed values: first the top level (global keys, experiment ids and their ``kind``), then each
experiment against the schema of its kind (``$defs/<kind>``, kept in the kind's folder
nqf/experiments/<kind>/schema.yaml and added by :func:`load_schema`). Keys shared by
kinds are described once under ``$defs`` and referenced with ``$ref``; jsonschema resolves them
when validating, and :func:`resolve` does for the defaults and the number coercion. Defaults from
the schema are filled in, so downstream code sees every key.

Before the schema, :mod:`nqf.pipeline.config_values` bounds the config's size (an alias bomb is refused
before anything walks it), copies it into a plain tree and refuses non-string keys; experiment
ids are checked to the true end of the string (a JSON-schema ``$`` also matches before a
trailing newline, and every ``pattern`` of the schema is checked that way too). The validator's
``type`` refuses NaN, +-inf and integers beyond the float range wherever the schema takes a
number (NaN passes every JSON-schema range check, inf every one-sided one), and a last pass
refuses them anywhere else. Every message summarises a value
(:func:`nqf.pipeline.config_values.describe`) instead of printing it whole.

Keys renamed for one vocabulary (``RENAMED``) are refused in their old spelling with one
sentence naming the new one, before any other check. Config files are read by
:mod:`nqf.pipeline.config_files` (strict YAML or JSON, duplicate keys refused).
"""
from __future__ import annotations

import copy
import difflib
import importlib.resources
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from nqf.io.runs import EXPERIMENT_ID
from nqf.pipeline.config_files import load_workflow_config, merge_overrides, read_config_file
from nqf.pipeline.config_values import (
    ConfigError,
    check_keys,
    check_tree,
    check_values,
    describe,
    key_path,
    non_finite,
    plain_tree,
)

__all__ = ["ConfigError", "RENAMED", "describe", "key_path", "kind_names", "load_schema",
           "load_workflow_config", "load_yaml", "merge_overrides", "read_config_file", "resolve",
           "validate_config"]

# Shipped inside the package (a wheel installs it with nqf); workflow/schemas/config.schema.yaml,
# where a Snakemake workflow keeps its schema, links to this file.
SCHEMA_PATH = Path(str(importlib.resources.files("nqf") / "schemas" / "config.schema.yaml"))
# PyYAML follows YAML 1.1, where "1e-5" (no dot) is a string; accept exactly that spelling.
_SCI_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")
_EXACT_INT = 2 ** 53  # every integer up to here is a float exactly
# The largest magnitude a real-valued config number may have. nqf squares the values it is given
# (data entries, rates, scales, learning rates enter losses, structure matrices and flow steps as
# products of two), and a float64 square overflows above sqrt(1.8e308) = 1.3e154; 1e150 leaves
# room for the factors of order one to 1e4 that the kinds multiply in. Integers (sizes, steps,
# seeds) are bounded by the size estimate instead.
MAGNITUDE_MAX = 1e150


_SCHEMAS: dict = {}

# Config lists of architectures and the registry selection each must come from (nqf.architectures.
# registry.SELECTIONS): (kind, key) -> (selection, filled). Every name a list holds must be in its
# selection; a filled list takes the whole selection as its choices, so an architecture joins it
# by its registry entry alone (init_scaling needs nothing else per architecture). nqf_approximation
# gives sizes, steps and learning rates per architecture in its own section, so it lists its own.
ARCHITECTURE_CHOICES = {
    ("nqf_approximation", "architectures"): ("effective_matrix", False),
    ("init_scaling", "architectures"): ("mode_design", True),
    ("init_scaling", "modules"): ("mode_design_module", True),
}


def _fill_architecture_choices(schema: dict) -> dict:
    """``schema`` with every ARCHITECTURE_CHOICES list checked against its registry selection (its
    enum and default may name only architectures of the selection), and the enum of a filled list
    extended by the rest of the selection, in registry order."""
    from nqf.architectures.registry import selection

    for (kind, key), (name, filled) in ARCHITECTURE_CHOICES.items():
        if kind not in schema.get("$defs", {}):
            continue
        node = schema["$defs"][kind].get("properties", {}).get(key, {})
        items = node.get("items", {})
        if "enum" not in items:
            raise ValueError(f"The config schema has no list of architectures at $defs.{kind}.properties.{key}.items.enum "
                             f"(nqf.pipeline.config.ARCHITECTURE_CHOICES names it).")
        chosen = selection(name)
        for what, names in (("enum", items["enum"]), ("default", node.get("default", []))):
            stray = [n for n in names if n not in chosen]
            if stray:
                raise ValueError(f"The config schema's {what} of {kind}.{key} lists {', '.join(stray)}, which the "
                                 f"architecture registry does not mark {name}.")
        if filled:
            items["enum"] = list(items["enum"]) + [n for n in chosen if n not in items["enum"]]
    return schema


def load_schema(path: str | Path | None = None) -> dict:
    """The config schema (a copy: callers may change it), its lists of architectures checked
    against and filled from the registry (:func:`_fill_architecture_choices`); parsed once per
    file version, since parsing takes longer than validating a config."""
    from nqf.experiments import KINDS, schema_path

    path = Path(path or SCHEMA_PATH)
    sections = [schema_path(kind) for kind in KINDS]
    key = tuple((str(p), p.stat().st_mtime_ns) for p in [path, *sections])
    if key not in _SCHEMAS:
        with open(path) as fh:
            _SCHEMAS[key] = _fill_architecture_choices(with_kind_sections(_load_own_yaml(fh)))
    return copy.deepcopy(_SCHEMAS[key])


# PyYAML's safe loader on libyaml's parser where PyYAML has it: the same safe constructor as
# yaml.safe_load, ~8x faster than the pure-Python parser (nqf's schema files: 0.3 s less in every
# snakemake call)
_FAST_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_own_yaml(stream):
    """One of nqf's own schema files (not a user's config: :func:`load_yaml` reads those, strictly)."""
    loader = _FAST_SAFE_LOADER(stream)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def with_kind_sections(schema: dict) -> dict:
    """``schema`` with the section of every registered kind (nqf.experiments.KINDS) under
    ``$defs/<kind>``, read from its folder (:func:`nqf.experiments.schema_path`), and those kinds,
    in registry order, as the enum of an experiment's ``kind``."""
    from nqf.experiments import KINDS, schema_path

    defs = schema.setdefault("$defs", {})
    for kind in KINDS:
        with open(schema_path(kind)) as fh:
            defs[kind] = _load_own_yaml(fh)
    experiment = schema["properties"]["experiments"]["additionalProperties"]
    experiment["properties"]["kind"]["enum"] = list(KINDS)
    return schema


def load_yaml(path: str | Path) -> dict:
    """Read a YAML (or JSON) config file strictly: nothing in it is executed, a key given twice
    is refused (:func:`nqf.pipeline.config_files.read_config_file`)."""
    return read_config_file(path)


# Old spelling -> (new key, what it holds): refused with the new name, so one word names one thing.
RENAMED = {
    "init_scale": ("eps", "the std of the Gaussian initial weights, a number"),
    "init_scales": ("eps", "the stds of the Gaussian initial weights, a list"),
    "init_std": ("eps", "the std of the Gaussian initial weights, a number"),
    "init_variances": ("init_variance", "the [small, large] init variances per architecture, the same values"),
}


def _seed_list(n: int) -> str:
    return "[" + (", ".join(map(str, range(n))) if n <= 8 else f"0, 1, ..., {n - 1}") + "]"


def _refuse_old_spellings(exp: Mapping, prefix: tuple) -> None:
    """One sentence for the first key of ``exp`` that uses a spelling renamed for one vocabulary."""
    for old, (new, what) in RENAMED.items():
        if old in exp:
            raise ConfigError(f"Config key '{key_path(prefix + (old,))}' was renamed: use '{new}' ({what}).")
    seeds = exp.get("seeds")
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds > 100_000:
        raise ConfigError(f"Config key '{key_path(prefix + ('seeds',))}' is a list of integer seeds now, not a "
                          f"count; got {describe(seeds)}.")
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        raise ConfigError(f"Config key '{key_path(prefix + ('seeds',))}' is a list of integer seeds now, not a "
                          f"count: use seeds: {_seed_list(max(seeds, 0))} for the same {seeds} seeds.")


def resolve(schema: Mapping, root: Mapping) -> Mapping:
    """``schema`` with its ``$ref`` (a '#/...' pointer into ``root``) merged in, recursively; the
    schema's own keywords win (a kind's default or description beside a shared definition)."""
    if not isinstance(schema, Mapping) or "$ref" not in schema:
        return schema
    ref = schema["$ref"]
    if not ref.startswith("#/"):
        raise ValueError(f"Only local references '#/...' are supported in the config schema; got {ref!r}.")
    target: Any = root
    for part in ref[2:].split("/"):
        target = target[part.replace("~1", "/").replace("~0", "~")]
    merged = dict(resolve(target, root))
    for key, value in schema.items():
        if key == "$ref":
            continue
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def kind_names(schema: Mapping) -> list[str]:
    """The experiment kinds the schema defines (the enum of ``kind``; the other ``$defs`` entries
    are parts the kinds share)."""
    return list(schema["properties"]["experiments"]["additionalProperties"]["properties"]["kind"]["enum"])


def _names(keys, path, allowed) -> str:
    """'a.b.x' (did you mean 'y'?) for the first few unknown keys, and how many more."""
    parts = []
    for k in keys[:5]:
        close = difflib.get_close_matches(k, allowed, n=1) if len(k) <= 64 else []
        parts.append(f"'{key_path(path + (k,))}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    more = f" and {len(keys) - 5} more" if len(keys) > 5 else ""
    return ", ".join(parts) + more


def _wants_number(schema: Mapping) -> bool:
    types = schema.get("type")
    return bool({"number", "integer"} & set([types] if isinstance(types, str) else types or []))


def _bounds(schema: Mapping) -> str:
    words = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
    return " and ".join(f"{words[b]} {schema[b]}" for b in words if b in schema)


def _message(error: jsonschema.ValidationError, prefix: tuple) -> str:
    path = prefix + tuple(error.absolute_path)
    v, schema, inst = error.validator, error.schema, error.instance
    where = f"Config key '{key_path(path)}'"
    if v == "additionalProperties" and isinstance(inst, Mapping):
        allowed = sorted(schema.get("properties", {}))
        unknown = sorted(k for k in inst if k not in allowed)
        return (f"Unknown config key {_names(unknown, path, allowed)}; the keys allowed there are: "
                f"{', '.join(allowed)}.")
    if "propertyNames" in error.schema_path and v == "not":
        return (f"The name {describe(inst)} under '{key_path(path)}' is reserved for another output; "
                f"choose another experiment id.")
    if "propertyNames" in error.schema_path:
        return (f"The name {describe(inst)} under '{key_path(path)}' is not allowed: names must start "
                f"with a letter and use only letters, digits and '_' (at most 64 characters).")
    if v == "type" and _wants_number(schema) and non_finite(inst):
        what = "number" if "number" in str(schema["type"]) else "integer"
        bounds = _bounds(schema)
        return f"{where} must be a finite {what}{' ' + bounds if bounds else ''}; got {describe(inst)}."
    if v == "type" and "number" in str(schema.get("type")) and _too_large(inst):
        return (f"{where} must be at most {MAGNITUDE_MAX:.0e} in magnitude (nqf squares the numbers it "
                f"is given, and a float64 square overflows above 1.3e+154); got {describe(inst)}.")
    if "x-expect" in schema and v in ("type", "pattern", "minimum", "maximum", "exclusiveMinimum",
                                      "exclusiveMaximum", "enum", "items"):
        return f"{where} must be {schema['x-expect']}; got {describe(inst)}."
    if v == "type":
        want = schema["type"] if isinstance(schema["type"], str) else " or ".join(schema["type"])
        return f"{where} must be of type {want}; got {describe(inst)}."
    if v in ("enum", "const"):
        allowed = schema.get("enum", [schema.get("const")])
        return f"{where} must be one of {', '.join(map(str, allowed))}; got {describe(inst)}."
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{where} must be {_bounds(schema)}; got {describe(inst)}."
    if v in ("minItems", "maxItems"):
        lo, hi = schema.get("minItems"), schema.get("maxItems")
        want = (f"{lo} to {hi} items" if lo is not None and hi is not None else
                f"at least {lo} item{'s' * (lo != 1)}" if lo is not None else f"at most {hi} items")
        return f"{where} must list {want}; got {len(inst)}: {describe(inst)}."
    if v == "uniqueItems":
        return f"{where} must list distinct values; got {describe(inst)}."
    if v == "pattern":
        return f"{where} must match {schema['pattern']}; got {describe(inst)}."
    if v == "required":
        missing = [k for k in schema["required"] if isinstance(inst, Mapping) and k not in inst]
        return f"{where} is missing the required key '{missing[0] if missing else schema['required'][0]}'."
    if v == "minProperties":
        return f"{where} must list at least {schema[v]} entry; it is empty."
    message = " ".join(error.message.split())
    return f"{where} is invalid: {message if len(message) <= 200 else message[:200] + '...'}."


def _pattern(validator, pattern, instance, schema):
    """JSON-schema ``pattern`` with '$' meaning the true end: Python's re.search lets '$' match
    before a final newline, so 'a\\n' would pass '^[a-z]+$' and name a file with a newline."""
    if not validator.is_type(instance, "string"):
        return
    match = re.search(pattern, instance)
    if match is None or (pattern.endswith("$") and match.end() != len(instance)):
        yield jsonschema.ValidationError(f"{describe(instance)} does not match {pattern!r}")


_VALIDATORS: dict = {}


def _finite_type(base_type):
    """JSON-schema ``type`` that also refuses NaN, +-inf and integers beyond the float range where a
    number is expected (NaN passes every range check, inf every one-sided one)."""
    def check(validator, types, instance, schema):
        yield from base_type(validator, types, instance, schema)
        wanted = [types] if isinstance(types, str) else types
        if ({"number", "integer"} & set(wanted) and not isinstance(instance, (str, bool))
                and non_finite(instance)):
            yield jsonschema.ValidationError(f"{describe(instance)} is not a finite number")
        elif "number" in wanted and _too_large(instance):
            yield jsonschema.ValidationError(f"{describe(instance)} is beyond {MAGNITUDE_MAX:.0e}")
    return check


def _too_large(value: Any) -> bool:
    """A finite real number beyond MAGNITUDE_MAX (its square would overflow float64 in nqf)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and not non_finite(value)
            and abs(value) > MAGNITUDE_MAX)


def _validator(root: Mapping):
    """The schema's validator class (by its $schema) with the true-end ``pattern`` and the finite
    ``type``."""
    base = jsonschema.validators.validator_for(root)
    if base not in _VALIDATORS:
        _VALIDATORS[base] = jsonschema.validators.extend(
            base, {"pattern": _pattern, "type": _finite_type(base.VALIDATORS["type"])})
    return _VALIDATORS[base]


def _integral(value: Any) -> int | None:
    """``value`` as an int where it is a float (2000.0, 1.0e+5) or a YAML-1.1 number string
    ('1e5') holding an integer exactly, else None."""
    if isinstance(value, str) and _SCI_NUMBER.match(value.strip()):
        value = float(value)
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT_INT:
        return int(value)
    return None


def _coerce_numbers(value: Any, schema: Mapping, root: Mapping) -> Any:
    """Turn YAML-1.1 strings such as '1e-5' into floats where the schema wants a number, and
    integral floats (2000.0, '1e5') into ints where it wants an integer: JSON Schema's
    ``integer`` takes 2000.0, which range(), seed generators and run ids do not."""
    schema = resolve(schema, root)
    types = schema.get("type")
    types = [types] if isinstance(types, str) else (types or [])
    if isinstance(value, str) and "number" in types and _SCI_NUMBER.match(value.strip()):
        return float(value)
    if "integer" in types and "number" not in types and not isinstance(value, bool) and _integral(value) is not None:
        return _integral(value)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_coerce_numbers(v, schema["items"], root) for v in value]
    if isinstance(value, dict) and "properties" in schema:
        return {k: _coerce_numbers(v, schema["properties"].get(k, {}), root) for k, v in value.items()}
    return value


def _fill_defaults(value: Any, schema: Mapping, root: Mapping) -> Any:
    schema = resolve(schema, root)
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            sub = resolve(sub, root)
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _fill_defaults(value[key], sub, root)
    return value


def _check(instance: Any, schema: Mapping, prefix: tuple, root: Mapping) -> None:
    validator = _validator(root)({**schema, "$defs": root.get("$defs", {})})
    errors = sorted(validator.iter_errors(instance),
                    key=lambda e: (len(e.absolute_path), [str(p) for p in e.path]))
    if errors:
        # a non-finite number gets the same sentence whatever range check it also failed
        finite = [e for e in errors if e.validator == "type" and _wants_number(e.schema)
                  and (non_finite(e.instance) or _too_large(e.instance))]
        best = finite[0] if finite else jsonschema.exceptions.best_match(errors)
        raise ConfigError(_message(best, prefix))


# Output names the workflow writes beside the experiments' (the schema's propertyNames.not.enum).
RESERVED_IDS = ("structure_matrices", "summary")
# Names Windows reserves for devices in any case and with any extension (results/figures/con.pdf).
WINDOWS_DEVICES = ("con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10)))
# Snakemake refuses a wildcard value that ends in one part repeated 20 times or more (its
# PeriodicityDetector, a guard against recursive rules), after parsing: 'a' * 20 stops the DAG.
_PERIODIC = re.compile(r"((.+?)\2{19,99})$")


def _check_experiment_ids(experiments: Any) -> None:
    """Every id a string of letters, digits and '_' to its very end (ids name output files)."""
    if not isinstance(experiments, Mapping):
        return  # the schema names the wrong type
    for exp_id in experiments:
        if not isinstance(exp_id, str) or not EXPERIMENT_ID.fullmatch(exp_id):
            raise ConfigError(
                f"The name {describe(exp_id)} under 'experiments' is not allowed: names must start "
                f"with a letter and use only letters, digits and '_' (at most 64 characters).")
    # Ids name files: on a case-insensitive file system (macOS, Windows) two ids that differ in
    # case only, or an id spelling a reserved output name in other case, would share a file.
    seen: dict[str, str] = {}
    for exp_id in experiments:
        folded = exp_id.casefold()
        if folded in seen:
            raise ConfigError(f"The names '{seen[folded]}' and '{exp_id}' under 'experiments' differ in case "
                              f"only, and would share their output files on a case-insensitive file system "
                              f"(macOS, Windows); choose ids that differ in more than case.")
        seen[folded] = exp_id
        if folded in RESERVED_IDS and exp_id not in RESERVED_IDS:
            raise ConfigError(f"The name '{exp_id}' under 'experiments' spells the reserved output name "
                              f"'{folded}' in other case (the same file on a case-insensitive file system); "
                              f"choose another experiment id.")
        if folded in WINDOWS_DEVICES:
            raise ConfigError(f"The name '{exp_id}' under 'experiments' is a device name on Windows, where "
                              f"no file may be called {folded}.nc or {folded}.pdf; choose another experiment id.")
        periodic = _PERIODIC.search(exp_id)
        if periodic:
            raise ConfigError(f"The name '{exp_id}' under 'experiments' ends in '{periodic.group(2)}' repeated "
                              f"{len(periodic.group(1)) // len(periodic.group(2))} times, which Snakemake refuses "
                              f"in a wildcard (it takes it for a recursive rule); choose another experiment id.")


def validate_config(config: Mapping[str, Any], schema: Mapping | None = None) -> dict:
    """Return a validated copy of ``config`` with schema defaults filled in.

    Raises :class:`ConfigError` with one sentence naming the key path and the allowed values.
    """
    schema = schema or load_schema()
    if not isinstance(config, Mapping):
        raise ConfigError(f"The config must be a mapping of keys to values; got {describe(config)}.")
    check_tree(config)  # before anything walks it whole: an alias bomb stops here
    cfg = plain_tree(config)  # no part shared by two keys (YAML aliases), nothing shared with the caller
    check_keys(cfg)
    _check_experiment_ids(cfg.get("experiments"))
    top = {k: v for k, v in schema.items() if k != "$defs"}
    cfg = _coerce_numbers(cfg, top, schema)
    _check(cfg, top, (), schema)
    cfg = _fill_defaults(cfg, top, schema)
    kinds = schema.get("$defs", {})
    for exp_id, exp in cfg["experiments"].items():
        prefix = ("experiments", exp_id)
        _refuse_old_spellings(exp, prefix)
        sub = kinds[exp["kind"]]
        exp = _coerce_numbers(exp, sub, schema)
        _check(exp, sub, prefix, schema)
        exp = _fill_defaults(exp, sub, schema)
        cfg["experiments"][exp_id] = exp
    check_values(cfg)  # no NaN or inf where the schema has no type either
    for exp_id, exp in cfg["experiments"].items():
        _check_title_text(exp.get("description"), ("experiments", exp_id, "description"))
    return cfg


def _check_title_text(text: Any, path: tuple) -> None:
    """A description is a figure title, where matplotlib reads text between two '$' as math: an odd
    number of unescaped '$' or math that does not parse fails the figure job after every other job
    ran (ValueError from matplotlib's mathtext)."""
    if not isinstance(text, str) or "$" not in text:
        return
    where = f"Config key '{key_path(path)}' is shown in figure titles, where matplotlib reads text between two '$' as math"
    if len(re.findall(r"(?<!\\)\$", text)) % 2:
        raise ConfigError(f"{where}, and {describe(text)} has an odd number of '$'; write a literal dollar as \\$.")
    from matplotlib.mathtext import MathTextParser

    try:
        MathTextParser("path").parse(text)
    except ValueError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        first = (lines[-1] if lines else type(exc).__name__)[:80]
        raise ConfigError(f"{where}, and the math in {describe(text)} does not parse ({first}); fix it or write "
                          f"each literal dollar as \\$.") from None
