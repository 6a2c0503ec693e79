"""What any config value may be, whatever the schema says, and how a message shows a value.

A config is read from YAML (whose aliases let a few hundred bytes stand for a structure of
billions of nodes that share their parts), JSON (whose parser takes NaN and Infinity) or
Snakemake's ``--config`` overrides (parsed by float(), so 'nan' and 'inf' are numbers). Before the
schema, repr, deepcopy or jsonschema walk a config, :func:`check_tree` bounds its size counted with
every shared part expanded (computed in time linear in the distinct objects, never by expanding),
refuses a structure that contains itself, and :func:`plain_tree` copies it so that no two places
share an object. :func:`check_keys` refuses a mapping key that is not a string;
:func:`non_finite` tells NaN, inf and numbers beyond the float range, which the schema's
validator refuses wherever it expects a number (nqf.pipeline.config) and :func:`check_values` everywhere
else, naming the key path. :func:`describe` summarises a value in at most about
80 characters, so that no message prints a huge value whole.
"""
from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from nqf.errors import ConfigError

# Nodes (mappings, lists and scalars) of a config counted with every alias expanded. The largest
# list the schema allows has 100000 items (init_scaling's seeds; validating it takes seconds, as
# jsonschema resolves each item's $ref); an alias bomb is far above, and so is any config whose
# validation alone would take minutes.
MAX_NODES = 250_000
DESCRIBE_CHARS = 80
_KEY_CHARS = 64
_FLOAT_MAX = sys.float_info.max


def key_path(path) -> str:
    """'a.b.0.c' for a path of keys and list indices; long keys are cut (a key is user text)."""
    parts = []
    for p in path:
        printable = (isinstance(p, int) and not isinstance(p, bool) and p.bit_length() <= 256
                     or isinstance(p, str) and p.isprintable())
        text = str(p) if printable else _short(p, _KEY_CHARS)  # a newline in a key shows as '\n'
        parts.append(text if len(text) <= _KEY_CHARS else text[:_KEY_CHARS] + "...")
    return ".".join(parts) or "<top level>"


def _pieces(value: Any) -> Iterator[str]:
    """The repr of ``value`` in pieces, lazily: a caller that stops early never walks the rest."""
    if isinstance(value, Mapping):
        yield "{"
        for i, (k, v) in enumerate(value.items()):
            yield ", " if i else ""
            yield from _pieces(k)
            yield ": "
            yield from _pieces(v)
        yield "}"
    elif isinstance(value, (list, tuple)):
        yield "[" if isinstance(value, list) else "("
        for i, v in enumerate(value):
            yield ", " if i else ""
            yield from _pieces(v)
        yield "]" if isinstance(value, list) else ")"
    elif isinstance(value, str):
        yield repr(value[:DESCRIBE_CHARS + 1])
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        # repr of a huge int is slow and, past 4300 digits, an error in Python >= 3.11
        yield f"<an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits>"
    else:
        yield repr(value)[:DESCRIBE_CHARS + 1]


def _short(value: Any, limit: int = DESCRIBE_CHARS) -> str:
    out, n = [], 0
    for piece in _pieces(value):
        out.append(piece)
        n += len(piece)
        if n > limit:
            return "".join(out)[:limit] + "..."
    return "".join(out)


def describe(value: Any) -> str:
    """A short repr of ``value`` with its type, e.g. ``[0, 1, 2, ... (list of 1000 items)``."""
    text, kind = _short(value), type(value).__name__
    if text.endswith("...") and isinstance(value, (str, list, tuple, Mapping)):
        kind += f" of {len(value)} {'characters' if isinstance(value, str) else 'items'}"
    return f"{text} ({kind})"


def expanded_size(value: Any, limit: int | None = None) -> int:
    """Nodes of ``value`` counted with every shared part expanded, at most ``limit + 1`` (then it
    stops). Each distinct container is visited once (its size is remembered), so a structure
    that shares its parts is measured in time linear in its distinct objects. A structure that
    contains itself raises :class:`ConfigError`."""
    limit = MAX_NODES if limit is None else limit
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: Any, path: tuple) -> int:
        if not isinstance(node, (Mapping, list, tuple)):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise ConfigError(f"Config key '{key_path(path)}' contains itself (a YAML alias to an "
                              f"enclosing anchor); a config must be a finite tree of values.")
        open_.add(key)
        total = 1
        children = node.items() if isinstance(node, Mapping) else enumerate(node)
        for k, child in children:
            total += size(child, path + (k,))
            if total > limit:
                break
        open_.discard(key)
        sizes[key] = min(total, limit + 1)
        return sizes[key]

    return size(value, ())


def check_tree(value: Any, source: str = "The config") -> None:
    """Refuse a config too big to be one (an alias bomb) before anything walks it whole."""
    try:
        n = expanded_size(value)
    except RecursionError:
        raise ConfigError(f"{source} is nested too deeply to be a config.") from None
    if n > MAX_NODES:
        raise too_big(source)


def too_big(source: str) -> ConfigError:
    return ConfigError(f"{source} holds more than {MAX_NODES:,} values once its YAML aliases are "
                       f"expanded (an alias bomb?); a config must stay below that.")


def plain_tree(value: Any) -> Any:
    """A copy in which every mapping is a dict and every list a new list, shared by no two places
    (call after :func:`check_tree`, which bounds the copy's size)."""
    if isinstance(value, Mapping):
        return {k: plain_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_tree(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain_tree(v) for v in value)
    return value


def non_finite(value: Any) -> bool:
    """NaN, +-inf, an integer beyond the float range, or a string that float() reads as one."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) > _FLOAT_MAX
    if isinstance(value, str) and len(value) < 64:
        try:
            return not math.isfinite(float(value))
        except ValueError:
            return False
    return False


def check_keys(value: Any, path: tuple = ()) -> None:
    """Refuse a mapping key that is not a string (YAML reads ``1:`` or ``yes:`` as int, bool)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(
                    f"The key {describe(k)} under '{key_path(path)}' must be a string (letters, "
                    f"digits and '_'; in YAML quote it: '{_short(k, 20)}':).")
            check_keys(v, path + (k,))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_keys(v, path + (i,))


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def check_values(value: Any, path: tuple = ()) -> None:
    """Refuse a non-finite number anywhere in ``value`` (no key of the config may hold one): the
    net behind the schema, which names the allowed values where it expects a number; and text
    that cannot be written as UTF-8 (a lone surrogate), which every file and message of a run
    would fail to write."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_values(v, path + (k,))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_values(v, path + (i,))
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: JSON's "\ud800", or argv bytes not UTF-8
            raise ConfigError(f"Config key '{key_path(path)}' holds text that is not valid Unicode (the code "
                              f"point {ord(value[exc.start]):#06x}, a lone surrogate, at character {exc.start}); "
                              f"write it as UTF-8 text.") from None
        control = _CONTROL.search(value)
        if control:
            # NUL ends a string in NetCDF/HDF5 attributes (text after it is lost), ESC and the
            # other C0/C1 controls rewrite the terminal that shows a message or log holding them
            raise ConfigError(f"Config key '{key_path(path)}' holds the control character "
                              f"{ord(control.group()):#04x} at character {control.start()}; text may use "
                              f"tabs and line breaks but no other control characters.")
    elif non_finite(value):
        raise ConfigError(f"Config key '{key_path(path)}' must be a finite number; got {_short(value)}.")
