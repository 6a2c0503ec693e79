"""Validation of workflow configurations against the JSON schema, with one-sentence errors.

Validation happens in two passes so that every message can name the exact key path and the
allowed values: first the top level (global keys, experiment ids and their ``kind``), then each
experiment against the schema of its kind (``$defs/<kind>`` in the schema file). Keys shared by
kinds are described once under ``$defs`` and referenced with ``$ref``; jsonschema resolves them
when validating, and :func:`resolve` does for the defaults and the number coercion. Defaults from
the schema are filled in, so downstream code sees every key.

Keys renamed for one vocabulary (``RENAMED``) are refused in their old spelling with one
sentence naming the new one, before any other check.
"""
from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "workflow" / "schemas" / "config.schema.yaml"
# PyYAML follows YAML 1.1, where "1e-5" (no dot) is a string; accept exactly that spelling.
_SCI_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key path and what is allowed."""


def load_schema(path: str | Path | None = None) -> dict:
    with open(path or SCHEMA_PATH) as fh:
        return yaml.safe_load(fh)


def load_yaml(path: str | Path) -> dict:
    """Read a YAML config with safe_load only (nothing in a config is ever executed)."""
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError(f"Cannot read the config file {path}: {exc.strerror}.") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"The config file {path} is not valid YAML: {exc}.") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"The config file {path} must hold a mapping of keys to values.")
    return data


def merge_overrides(base: dict, overrides: Mapping) -> dict:
    """``base`` with ``overrides`` applied recursively (nested mappings merge, values replace)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge_overrides(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# Old spelling -> (new key, what it holds): refused with the new name (one vocabulary, issue 15).
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
            raise ConfigError(f"Config key '{_key(prefix + (old,))}' was renamed: use '{new}' ({what}).")
    seeds = exp.get("seeds")
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        raise ConfigError(f"Config key '{_key(prefix + ('seeds',))}' is a list of integer seeds now, not a "
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


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _message(error: jsonschema.ValidationError, prefix: tuple) -> str:
    path = prefix + tuple(error.absolute_path)
    v, schema, inst = error.validator, error.schema, error.instance
    if v == "additionalProperties" and isinstance(inst, Mapping):
        allowed = sorted(schema.get("properties", {}))
        unknown = sorted(k for k in inst if k not in allowed)
        parts = []
        for k in unknown:
            close = difflib.get_close_matches(str(k), allowed, n=1)
            parts.append(f"'{_key(path + (k,))}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        return (f"Unknown config key {', '.join(parts)}; the keys allowed there are: "
                f"{', '.join(allowed)}.")
    if "propertyNames" in error.schema_path and v == "not":
        return (f"The name {inst!r} under '{_key(path)}' is reserved for another output; "
                f"choose another experiment id.")
    if "propertyNames" in error.schema_path:
        return (f"The name {inst!r} under '{_key(path)}' is not allowed: names must start with a "
                f"letter and use only letters, digits and '_' (at most 64 characters).")
    if "x-expect" in schema and v in ("type", "pattern", "minimum", "enum"):
        return f"Config key '{_key(path)}' must be {schema['x-expect']}; got {_describe(inst)}."
    if v == "type":
        want = schema["type"] if isinstance(schema["type"], str) else " or ".join(schema["type"])
        return f"Config key '{_key(path)}' must be of type {want}; got {_describe(inst)}."
    if v in ("enum", "const"):
        allowed = schema.get("enum", [schema.get("const")])
        return (f"Config key '{_key(path)}' must be one of {', '.join(map(str, allowed))}; "
                f"got {inst!r}.")
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        words = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
        bounds = [f"{words[b]} {schema[b]}" for b in words if b in schema]
        return f"Config key '{_key(path)}' must be {' and '.join(bounds)}; got {inst!r}."
    if v == "required":
        return f"Config key '{_key(path)}' is missing a required entry: {error.message}."
    if v == "minProperties":
        return f"Config key '{_key(path)}' must list at least {schema[v]} entry; it is empty."
    return f"Config key '{_key(path)}' is invalid: {error.message}."


def _coerce_numbers(value: Any, schema: Mapping, root: Mapping) -> Any:
    """Turn YAML-1.1 strings such as '1e-5' into floats where the schema wants a number."""
    schema = resolve(schema, root)
    types = schema.get("type")
    types = [types] if isinstance(types, str) else (types or [])
    if isinstance(value, str) and "number" in types and _SCI_NUMBER.match(value.strip()):
        return float(value)
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
    validator_cls = jsonschema.validators.validator_for(root)
    validator = validator_cls({**schema, "$defs": root.get("$defs", {})})
    errors = sorted(validator.iter_errors(instance), key=lambda e: (len(e.absolute_path), e.path))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise ConfigError(_message(best, prefix))


def validate_config(config: Mapping[str, Any], schema: Mapping | None = None) -> dict:
    """Return a validated copy of ``config`` with schema defaults filled in.

    Raises :class:`ConfigError` with one sentence naming the key path and the allowed values.
    """
    schema = schema or load_schema()
    cfg = copy.deepcopy(dict(config))
    top = {k: v for k, v in schema.items() if k != "$defs"}
    cfg = _coerce_numbers(cfg, top, schema)
    _check(cfg, top, (), schema)
    cfg = _fill_defaults(cfg, top, schema)
    kinds = schema.get("$defs", {})
    for exp_id, exp in cfg["experiments"].items():
        _refuse_old_spellings(exp, ("experiments", exp_id))
        sub = kinds[exp["kind"]]
        exp = _coerce_numbers(exp, sub, schema)
        _check(exp, sub, ("experiments", exp_id), schema)
        exp = _fill_defaults(exp, sub, schema)
        cfg["experiments"][exp_id] = exp
    return cfg
