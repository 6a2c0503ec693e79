"""Validation of workflow configurations against the JSON schema, with one-sentence errors.

Validation happens in two passes so that every message can name the exact key path and the
allowed values: first the top level (global keys, experiment ids and their ``kind``), then each
experiment against the schema of its kind (``$defs/<kind>`` in the schema file). Defaults from
the schema are filled in, so downstream code sees every key.
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


def _coerce_numbers(value: Any, schema: Mapping) -> Any:
    """Turn YAML-1.1 strings such as '1e-5' into floats where the schema wants a number."""
    types = schema.get("type")
    types = [types] if isinstance(types, str) else (types or [])
    if isinstance(value, str) and "number" in types and _SCI_NUMBER.match(value.strip()):
        return float(value)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_coerce_numbers(v, schema["items"]) for v in value]
    if isinstance(value, dict) and "properties" in schema:
        return {k: _coerce_numbers(v, schema["properties"].get(k, {})) for k, v in value.items()}
    return value


def _fill_defaults(value: Any, schema: Mapping) -> Any:
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _fill_defaults(value[key], sub)
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
    cfg = _coerce_numbers(cfg, top)
    _check(cfg, top, (), schema)
    cfg = _fill_defaults(cfg, top)
    kinds = schema.get("$defs", {})
    for exp_id, exp in cfg["experiments"].items():
        sub = kinds[exp["kind"]]
        exp = _coerce_numbers(exp, sub)
        _check(exp, sub, ("experiments", exp_id), schema)
        exp = _fill_defaults(exp, sub)
        cfg["experiments"][exp_id] = exp
    return cfg
