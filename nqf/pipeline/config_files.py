"""Reading config files strictly: what nqf runs is exactly what the file says, once.

Snakemake reads a ``--configfile`` itself before the Snakefile runs (JSON first, else YAML; a
YAML file with ``__use_yte__: true`` is a YTE template whose Python expressions it evaluates)
and keeps the last of two equal keys. So the workflow does not use Snakemake's ``config``:
:func:`load_workflow_config` reads each config file again with :func:`read_config_file` and
applies the ``--config`` overrides on top. That reader refuses, in one sentence each: a key
given twice in one mapping (YAML: file and line; JSON: the key path), a number YAML 1.1 reads
otherwise than it shows (017 as octal 15, 3:20 as base-60 200), a YTE template, a file
that is not UTF-8, empty, larger than ``MAX_BYTES``, not a mapping, or that expands past
``nqf.pipeline.config_values.MAX_NODES`` values (an alias bomb). YAML is read with a SafeLoader subclass
(no tag can build a Python object, nothing is executed); nqf cannot stop what Snakemake
evaluates before it (see docs/security.md).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

import nqf.pipeline.config_values
from nqf.errors import ConfigError
from nqf.pipeline.config_values import check_tree, key_path, plain_tree, too_big

MAX_BYTES = 2 * 2**20  # a config with the longest list the schema allows (100000 seeds) is 0.7 MB
YTE_KEY = "__use_yte__"


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key, first: int, second: int, key_node=None):
        super().__init__(key, first, second)
        self.key, self.lines, self.key_node = key, (first, second), key_node


class _AmbiguousNumber(yaml.YAMLError):
    def __init__(self, text: str, value, line: int, reading: str):
        super().__init__(text, value, line, reading)
        self.text, self.value, self.line, self.reading = text, value, line, reading


# YAML 1.1 (PyYAML, and Snakemake's reading) takes a leading 0 for octal (017 is 15) and colons
# for base 60 (3:20 is 200); YAML 1.2 and every other reader take 017 as 17 and 3:20 as text.
_OCTAL = re.compile(r"[-+]?0[0-7_]+")
_BASE60 = re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?")


# libyaml's parser where PyYAML has it (the pure-Python one takes seconds per MB); either way the
# constructor is SafeConstructor, which builds only plain values.
_SafeBase = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_SafeBase):
    """PyYAML's safe loader that refuses a key written twice in one mapping (merge keys '<<' may
    still be overridden, as YAML intends)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeLoader's own error names it
                    break
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise _DuplicateKey(key, first, line, key_node)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        value = super().construct_yaml_int(node)
        self._unambiguous(node, value)
        return value

    def construct_yaml_float(self, node):
        value = super().construct_yaml_float(node)
        self._unambiguous(node, value)
        return value

    @staticmethod
    def _unambiguous(node, value) -> None:
        """Refuse the YAML 1.1 spellings that read as another number than they show."""
        text = str(node.value).strip()
        octal = _OCTAL.fullmatch(text) and int(text.replace("_", ""), 10) != value  # 01..07 read alike
        reading = "the octal number" if octal else "the base-60 number" if _BASE60.fullmatch(text) else None
        if reading:
            raise _AmbiguousNumber(text, value, node.start_mark.line + 1, reading)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line from a PyYAML error: its problem and where (PyYAML's own text spans lines)."""
    context, problem = getattr(exc, "context", None), getattr(exc, "problem", None)
    problem = (f"{context}, {problem}" if context and problem else problem or str(exc).splitlines()[0])
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return " ".join(f"{problem}{where}".split())


# PyYAML's pure-Python scanner takes time quadratic in the depth of '[' and '{' nesting (5000
# levels: 8 s), and its constructor recurses once per level; no config nests more than a few.
MAX_FLOW_DEPTH = 100


def _flow_depth(text: str) -> int:
    """The deepest nesting of '[' and '{' (counted in strings too: an upper bound that a config
    reaches only by nesting)."""
    depth = deepest = 0
    for match in re.finditer(r"[\[\]{}]", text):
        depth = depth + 1 if match.group() in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
        if deepest > MAX_FLOW_DEPTH:
            break
    return deepest


def _node_count(root: yaml.Node, path) -> int:
    """Nodes of a composed YAML document with every alias expanded, at most MAX_NODES + 1: counted
    before PyYAML's (pure-Python) constructor runs, each distinct node once."""
    limit = nqf.pipeline.config_values.MAX_NODES  # read at call time (a test lowers it)
    counts: dict[int, int] = {}
    open_: set[int] = set()

    def count(node: yaml.Node) -> int:
        if isinstance(node, yaml.ScalarNode):
            return 1
        if id(node) in counts:
            return counts[id(node)]
        if id(node) in open_:
            raise ConfigError(f"The config file {path} has a YAML alias inside its own anchor (line "
                              f"{node.start_mark.line + 1}); a config must be a finite tree of values.")
        open_.add(id(node))
        total = 1
        children = (c for pair in node.value for c in pair) if isinstance(node, yaml.MappingNode) else node.value
        for child in children:
            total += count(child)
            if total > limit:
                break
        open_.discard(id(node))
        counts[id(node)] = min(total, limit + 1)
        return counts[id(node)]

    return count(root)


def _parent_path(root: yaml.Node, target: yaml.Node) -> tuple:
    """The key path of the mapping whose key node is ``target`` in a composed document (() at the
    top), the first path in document order; each node visited once, so aliases cost nothing."""
    seen, stack = set(), [(root, ())]
    while stack:
        node, where = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            if any(key_node is target for key_node, _ in node.value):
                return where
            for key_node, value in reversed(node.value):  # popped in document order
                name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
                stack.append((value, where + (name,)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, where + (i,)) for i, child in reversed(list(enumerate(node.value))))
    return ()


def _read_yaml(text: str, path) -> Any:
    if _flow_depth(text) > MAX_FLOW_DEPTH:
        raise ConfigError(f"The config file {path} is nested too deeply to be a config (more than "
                          f"{MAX_FLOW_DEPTH} levels of '[' or '{{').")
    loader = _StrictLoader(text)
    node = None
    try:
        node = loader.get_single_node()
        if node is not None and _node_count(node, path) > nqf.pipeline.config_values.MAX_NODES:
            raise too_big(f"The config file {path}")
        return None if node is None else loader.construct_document(node)
    except _DuplicateKey as exc:
        parent = _parent_path(node, exc.key_node) if node is not None and exc.key_node is not None else ()
        under = f", under '{key_path(parent)}'" if parent else ""
        raise ConfigError(f"The config file {path} gives the key '{key_path((exc.key,))}' twice in one "
                          f"mapping (lines {exc.lines[0]} and {exc.lines[1]}{under}); each key may appear "
                          f"once.") from None
    except _AmbiguousNumber as exc:
        raise ConfigError(f"The config file {path} writes {exc.text} at line {exc.line}, which YAML 1.1 reads "
                          f"as {exc.reading} {exc.value:g} (YAML 1.2 and JSON differ); write the number without "
                          f"a leading 0 or ':' (or quote it for text).") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"The config file {path} is not valid YAML: {_yaml_problem(exc)}.") from None
    except ConfigError:
        raise
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ConfigError(f"The config file {path} holds a value nqf cannot read: "
                          f"{' '.join(str(exc).split())[:120]}.") from None
    finally:
        loader.dispose()


def _read_json(text: str, path) -> tuple[bool, Any]:
    """(True, data) when ``text`` is JSON (Snakemake tries JSON first, so does nqf), else (False, None)."""
    duplicated: dict[int, str] = {}

    def pairs(items):
        out = {}
        for k, v in items:
            if k in out and id(out) not in duplicated:
                duplicated[id(out)] = k
            out[k] = v
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except ValueError:  # not JSON: read as YAML
        return False, None
    if duplicated:
        raise ConfigError(f"Config key '{key_path(_find(data, duplicated))}' is given twice in one "
                          f"mapping of the JSON config file {path}; each key may appear once.")
    return True, data


def _find(data: Any, duplicated: Mapping[int, str], path: tuple = ()) -> tuple:
    """The key path of the first mapping in ``data`` that had a key twice (JSON has no aliases:
    ``data`` is a tree)."""
    if isinstance(data, dict):
        if id(data) in duplicated:
            return path + (duplicated[id(data)],)
        children = data.items()
    elif isinstance(data, list):
        children = enumerate(data)
    else:
        return ()
    for k, child in children:
        found = _find(child, duplicated, path + (k,))
        if found:
            return found
    return ()


def read_config_file(path: str | Path) -> dict:
    """The mapping in the JSON or YAML config file ``path``, read strictly (module docstring)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"Cannot read the config file {path}: {exc.strerror}.") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"The config file {path} is larger than {MAX_BYTES // 2**20} MB; a config "
                          f"is a short list of settings (the largest the schema allows is under 1 MB).")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"The config file {path} is not UTF-8 text (byte {raw[exc.start]:#04x} at "
                          f"offset {exc.start}); save it as UTF-8.") from None
    text = text.removeprefix("\ufeff")
    try:
        is_json, data = _read_json(text, path)
        if not is_json:
            data = _read_yaml(text, path)
    except RecursionError:
        raise ConfigError(f"The config file {path} is nested too deeply to be a config.") from None
    if data is None:
        raise ConfigError(f"The config file {path} is empty; it must hold a mapping of keys to "
                          f"values (at least 'experiments:').")
    if not isinstance(data, dict):
        raise ConfigError(f"The config file {path} must hold a mapping of keys to values; it holds "
                          f"a {type(data).__name__}.")
    if YTE_KEY in data:
        raise ConfigError(
            f"The config file {path} is a YTE template ({YTE_KEY}): Snakemake evaluates its Python "
            f"expressions when it reads the file, before nqf can refuse it, and nqf runs only plain "
            f"YAML or JSON configs, so write the values out and remove {YTE_KEY}.")
    check_tree(data, f"The config file {path}")
    return plain_tree(data)


def merge_overrides(base: Mapping, overrides: Mapping) -> dict:
    """``base`` with ``overrides`` applied recursively (nested mappings merge, values replace), as
    Snakemake merges config files and ``--config``; neither input is changed."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_overrides(out[key], value)
        else:
            out[key] = value
    return out


def _override_scalar(text: str) -> Any:
    """A string from inside a ``--config key={...}`` value, typed as Snakemake types a top-level
    value (int, then float, then the words True/False; anything else stays a string)."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


def typed_overrides(overrides: Mapping) -> dict:
    """``--config`` overrides with the values nested in a mapping typed like top-level ones.

    Snakemake parses ``--config key=value`` with int, float, True/False and, failing those,
    YAML's base loader, which keeps every scalar inside ``{...}`` or ``[...]`` a string:
    ``--config 'experiments={f: {eps: 0.002}}'`` arrives as ``{'f': {'eps': '0.002'}}``. Each
    such string is typed here as Snakemake types a top-level value, so a nested number means
    the same as ``--config device=...`` would; top-level values are left as Snakemake made them.
    Their size is bounded first: YAML aliases in a ``--config`` value (an alias bomb) would make
    the typing walk every shared part again.
    """
    check_tree(overrides, "The --config value")
    def typed(value: Any) -> Any:
        if isinstance(value, str):
            return _override_scalar(value)
        if isinstance(value, Mapping):
            return {key: typed(item) for key, item in value.items()}
        if isinstance(value, list):
            return [typed(item) for item in value]
        return value

    return {key: typed(value) if isinstance(value, (Mapping, list)) else value
            for key, value in overrides.items()}


def load_workflow_config(configfiles: Iterable[str | Path], overrides: Mapping, default: str | Path) -> dict:
    """The raw config of a workflow run: the ``--configfile`` files (read by nqf, in order, each
    merged over the last) or, when none lists ``experiments``, the default file under them, and
    the ``--config`` overrides on top of either (nested mappings merge key by key, and values
    nested in a mapping are typed by :func:`typed_overrides`). Validate it with
    :func:`nqf.pipeline.config.validate_config`."""
    raw: dict = {}
    for path in configfiles:
        raw = merge_overrides(raw, read_config_file(path))
    if "experiments" not in raw:
        raw = merge_overrides(read_config_file(default), raw)
    return merge_overrides(raw, typed_overrides(overrides))
