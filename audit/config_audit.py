"""Adversarial config audit: bad and borderline configs against the workflow's parse-time checks.

Each case is a config file (YAML, JSON or bytes) and/or ``--config`` overrides. A case runs either
through the snakemake CLI (``snakemake -s Snakefile --directory <tmp> --configfile ... -n``, one
temp directory and one process per case, its time and peak memory measured with ``os.wait4``) or,
for the bulk of the number grid, through the same library calls the Snakefile makes
(``load_workflow_config``, ``validate_config``, ``check_config``) in this process. Outcomes:

* ``refused cleanly``: non-zero exit (or ConfigError), no traceback, nqf's message at most three
  lines and naming the offending key or value (and, for an alias bomb, < 30 s and < 1 GB);
* ``crashed``: non-zero exit with a traceback, a message that names nothing, or a timeout;
* ``accepted``: exit 0; for a run-id case the planned ``results/runs/<exp>/*.nc`` are counted.

    PYTHONPATH=. .venv/bin/python audit/config_audit.py [--only SUBSTRING] [--no-grid-cli]

writes audit/results/config_audit.md and .csv and prints a summary.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SNAKEFILE = ROOT / "Snakefile"
OUT_DIR = ROOT / "audit" / "results"
ADDRESS_SPACE = 3 * 2**30  # every CLI case runs under this limit, so that no case can take the machine
BOMB_SECONDS, BOMB_BYTES = 30, 2**30


@dataclass
class Case:
    cls: str
    desc: str
    expected: str  # refuse | valid | distinct (run ids: refused, or accepted with distinct run files)
    files: dict = field(default_factory=dict)  # name -> str | bytes, written into the case's directory
    configfiles: list | None = None  # default: the first of files; names are relative to the directory
    overrides: list = field(default_factory=list)
    names: tuple = ()  # the message must contain one of these (the offending key or value)
    runs: tuple | None = None  # (experiment id, number of distinct run files the plan must list)
    path: str = "cli"  # cli | lib
    timeout: float = 90
    marker: str | None = None  # a file a template would write: recorded whether it exists after
    bomb: bool = False  # clean only in < 30 s and < 1 GB
    # filled in by the run
    outcome: str = ""
    correct: bool = False
    seconds: float = 0.0
    peak_mb: float | None = None
    message: str = ""
    note: str = ""
    precheck: str = ""  # where Snakemake's own reading failed: `python -m nqf check-config`'s outcome
    tmp: Path | None = None


def cfg_text(experiments: dict, **top) -> str:
    return yaml.safe_dump({"device": "cpu", **top, "experiments": experiments}, sort_keys=False)


def one(kind: str, exp_id: str | None = None, **keys) -> str:
    return cfg_text({exp_id or kind: {"kind": kind, **keys}})


def flow(value) -> str:
    """A value in YAML flow syntax as a ``--config`` word writes it (nan, inf as bare words)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    return str(value)


# -- the cases ------------------------------------------------------------------------------------

def collision_cases() -> list[Case]:
    c = "1 run-id collisions"
    return [
        Case(c, "competition eps [1.0e-3, 1.2e-3] (round alike at :.0e)", "distinct",
             {"c.yaml": one("competition", eps=[1.0e-3, 1.2e-3])}, runs=("competition", 2)),
        Case(c, "competition eps 1 ulp apart [1e-3, 0.0010000000000000002]", "distinct",
             {"c.yaml": one("competition", eps=[1.0e-3, 0.0010000000000000002])}, runs=("competition", 2)),
        Case(c, "competition eps [0.001, 1.0e-3] (one value twice)", "refuse",
             {"c.yaml": one("competition", eps=[0.001, 1.0e-3])}, names=("eps",)),
        Case(c, "competition eps [1e-3, '1e-3'] (YAML 1.1 string and number)", "refuse",
             {"c.yaml": "device: cpu\nexperiments:\n  competition:\n    kind: competition\n    eps: [1.0e-3, 1e-3]\n"},
             names=("eps",)),
        Case(c, "competition eps [1.0e-3, 1.2e-3] via --config", "distinct",
             {"c.yaml": one("competition")}, overrides=["experiments={competition: {eps: [1.0e-3, 1.2e-3]}}"],
             runs=("competition", 2)),
        Case(c, "collapse eps [1.0e-3, 1.2e-3] x 2 architectures", "distinct",
             {"c.yaml": one("collapse", architectures=["diagonal", "rectangular"], eps=[1.0e-3, 1.2e-3])},
             runs=("collapse", 4)),
        Case(c, "collapse eps [1.0e-3, 1.0000001e-3]", "distinct",
             {"c.yaml": one("collapse", architectures=["diagonal", "rectangular"], eps=[1.0e-3, 1.0000001e-3])},
             runs=("collapse", 4)),
        Case(c, "collapse eps [1e-300, 1.0000001e-300] (tiny, near-equal)", "distinct",
             {"c.yaml": one("collapse", architectures=["diagonal", "rectangular"], eps=[1e-300, 1.0000001e-300])},
             runs=("collapse", 4)),
        Case(c, "collapse eps with a subnormal 5e-324", "refuse",
             {"c.yaml": one("collapse", architectures=["diagonal", "rectangular"], eps=[5e-324, 1e-3])}, names=("eps",)),
        Case(c, "collapse architectures [diagonal, diagonal]", "refuse",
             {"c.yaml": one("collapse", architectures=["diagonal", "diagonal"])}, names=("architectures",)),
        Case(c, "collapse eps [1e-3, 1.2e-3] via --config, configfile eps [1e-3, 1e-6]", "distinct",
             {"c.yaml": one("collapse", architectures=["diagonal", "rectangular"], eps=[1e-3, 1e-6])},
             overrides=["experiments={collapse: {eps: [1.0e-3, 1.2e-3]}}"], runs=("collapse", 4)),
        Case(c, "init_scaling eps [1.0e-3, 1.2e-3] (eps is no run-id key)", "distinct",
             {"c.yaml": one("init_scaling", architectures=["mlp", "diagonal_net"], modules=[],
                            eps=[1.0e-3, 1.2e-3], seeds=[0, 1])}, runs=("init_scaling", 2)),
        Case(c, "featurewise_powerlaw crossover_eps [1e-2, 1.0000001e-2]", "distinct",
             {"c.yaml": one("featurewise_powerlaw", crossover_eps=[1e-2, 1.0000001e-2])},
             runs=("featurewise_powerlaw", 2)),
        # steps long enough to reach the first fitting window (8201), else the run-length check refuses first
        Case(c, "fourier_powerlaw thetas [0.5, 0.50000001]", "distinct",
             {"c.yaml": one("fourier_powerlaw", thetas=[0.5, 0.50000001], steps=[10000, 10000])},
             runs=("fourier_powerlaw", 3)),
        Case(c, "nqf_approximation optimizers [gd, gd]", "refuse",
             {"c.yaml": one("nqf_approximation", architectures=["mlp"], optimizers=["gd", "gd"])},
             names=("optimizers",)),
        Case(c, "deep architectures [mlp, mlp]", "refuse",
             {"c.yaml": one("deep", architectures=["mlp", "mlp"])}, names=("architectures",)),
        Case(c, "teacher_student seeds [1, 1.0], seeds_per_job 1", "refuse",
             {"c.yaml": "device: cpu\nexperiments:\n  ts:\n    kind: teacher_student\n    seeds_per_job: 1\n"
                        "    seeds: [1, 1.0]\n"}, names=("seeds",)),
        Case(c, "teacher_student seeds_per_job 2 over seeds [0..3] x 2 architectures", "distinct",
             {"c.yaml": one("teacher_student", "ts", seeds_per_job=2, seeds=[0, 1, 2, 3])}, runs=("ts", 4)),
        Case(c, "two experiments differing in case only (comp, Comp)", "refuse",
             {"c.yaml": cfg_text({"comp": {"kind": "competition"}, "Comp": {"kind": "competition"}})},
             names=("Comp",)),
    ]


def _fields() -> list[tuple[tuple, str, str]]:
    """(key path, kind or '', 'number' | 'integer') of every numeric field the schema defines; a
    list item is the path of its list plus 0."""
    from nqf.pipeline.config import kind_names, load_schema, resolve

    schema, out = load_schema(), []

    def walk(sub, path, kind):
        sub = resolve(sub, schema)
        types = sub.get("type")
        types = [types] if isinstance(types, str) else (types or [])
        if "number" in types or "integer" in types:
            out.append((path, kind, "number" if "number" in types else "integer"))
        if "array" in types and isinstance(sub.get("items"), dict):
            walk(sub["items"], path + (0,), kind)
        for key, child in sub.get("properties", {}).items():
            if key != "kind":
                walk(child, path + (key,), kind)

    walk({k: v for k, v in schema.items() if k != "$defs"}, (), "")
    for kind in kind_names(schema):
        walk(schema["$defs"][kind], (), kind)
    return [f for f in out if f[0]]


def _put(tree: dict, path: tuple, value, defaults: dict) -> dict:
    """``tree`` with ``value`` at ``path``; a list on the way is the default list with that item
    replaced (so that a list of at least two keeps its length)."""
    key, rest = path[0], path[1:]
    sub_default = defaults.get(key, {}) if isinstance(defaults, dict) else {}
    if not rest:
        return {**tree, key: value}
    if isinstance(rest[0], int):
        return {**tree, key: _put_list(sub_default, rest, value)}
    return {**tree, key: _put(tree.get(key, {}), rest, value, sub_default)}


def _put_list(default, path: tuple, value):
    items = [list(x) if isinstance(x, list) else x for x in (default if isinstance(default, list) and default else [None])]
    if len(path) == 1:
        items[0] = value
    elif isinstance(path[1], int):  # a list of lists (competition's lam)
        items[0] = _put_list(items[0], path[1:], value)
    else:
        items[0] = _put(items[0] if isinstance(items[0], dict) else {}, path[1:], value, items[0] or {})
    return items


# Values a field may take although they look bad: (kind, dotted path) or a dotted path for all kinds.
NEGATIVE_OK = {("competition", "lam.0.0"), ("competition", "y.0")}  # coupling matrix and targets: any sign
ZERO_OK = {"data_seed", "init_seed", "seeds.0", "raw_seeds.0", "n_boot", "momentum", "thetas.0", "main_theta",
           "beta0", "record_M_max_p", "tolerances.min_agree_steps", "tolerances.drops_abs_error",
           "lam.0.0", ("competition", "y.0")}
# seeds_per_job beyond the seeds: one block of all seeds (as "all"); record_M_max_p beyond every p:
# M recorded for every architecture, which the size estimate then counts
HUGE_OK: set = {"seeds_per_job", "record_M_max_p"}


def _ok(table, kind, dotted) -> bool:
    return dotted in table or (kind, dotted) in table


def grid_cases(cli_fields: set) -> list[Case]:
    """NaN, +-inf, huge, negative and zero in every numeric field, the syntax rotating over YAML,
    JSON and --config; the fields in ``cli_fields`` go through the CLI, the others through the
    library."""
    from nqf.pipeline.config import validate_config

    cases = []
    for i, (path, kind, typ) in enumerate(_fields()):
        dotted = ".".join(map(str, path))
        exp_id = kind or "featurewise"
        defaults = validate_config({"experiments": {exp_id: {"kind": exp_id}}})
        base = defaults["experiments"][exp_id] if kind else defaults
        huge = 1e300 if typ == "number" else 10**20
        values = [("nan", math.nan, ("yaml", "json", "override")[i % 3]),
                  ("-inf" if i % 2 else "inf", -math.inf if i % 2 else math.inf, ("yaml", "json", "override")[(i + 1) % 3]),
                  ("huge", huge, "yaml"), ("negative", -1, "yaml"), ("zero", 0, "yaml")]
        for label, value, syntax in values:
            expected = "refuse"
            if (label == "negative" and _ok(NEGATIVE_OK, kind, dotted) or label == "zero" and _ok(ZERO_OK, kind, dotted)
                    or label == "huge" and _ok(HUGE_OK, kind, dotted)):
                expected = "valid"
            keys = _put({}, path, value, base)
            where = (kind + "." if kind else "") + dotted
            names = tuple(str(p) for p in path if not isinstance(p, int))[-1:]
            case = Case("2 non-finite / huge / negative / zero numbers", f"{where} = {label} ({syntax})", expected,
                        names=names, path="cli" if (kind, dotted) in cli_fields else "lib")
            if kind:
                experiment = {"kind": kind, **keys}
                top = {}
            else:
                experiment, top = {"kind": "featurewise"}, keys
            if syntax == "override":
                case.files = {"c.yaml": cfg_text({exp_id: {"kind": exp_id}})}
                case.overrides = ([f"experiments={flow({exp_id: experiment})}"] if kind else
                                  [f"{k}={flow(v)}" for k, v in top.items()])
            elif syntax == "json":
                case.files = {"c.json": json.dumps({"device": "cpu", **top, "experiments": {exp_id: experiment}})}
            else:
                case.files = {"c.yaml": cfg_text({exp_id: experiment}, **top)}
            cases.append(case)
    return cases


def duplicate_and_id_cases() -> list[Case]:
    c = "3 duplicate keys and bad ids"
    fw = "    kind: featurewise\n"
    return [
        Case(c, "YAML: 'kind' twice in one experiment", "refuse",
             {"c.yaml": "device: cpu\nexperiments:\n  f:\n" + fw + "    kind: samplewise\n"}, names=("kind",)),
        Case(c, "YAML: 'eps' twice (different values)", "refuse",
             {"c.yaml": "device: cpu\nexperiments:\n  f:\n" + fw + "    eps: 1.0e-3\n    eps: 1.0e-4\n"}, names=("eps",)),
        Case(c, "YAML: top-level 'device' twice", "refuse",
             {"c.yaml": "device: cpu\ndevice: cuda\nexperiments:\n  f:\n" + fw}, names=("device",)),
        Case(c, "YAML: 'experiments' twice", "refuse",
             {"c.yaml": "experiments:\n  f:\n" + fw + "experiments:\n  g:\n" + fw}, names=("experiments",)),
        Case(c, "YAML: experiment id given twice", "refuse",
             {"c.yaml": "device: cpu\nexperiments:\n  f:\n" + fw + "  f:\n    kind: samplewise\n"}, names=("'f'",)),
        Case(c, "YAML: the same key twice through a merge key '<<' (valid YAML override)", "valid",
             {"c.yaml": "device: cpu\nexperiments:\n  f: &b {kind: featurewise, eps: 1.0e-3}\n  g:\n    <<: *b\n"
                        "    eps: 1.0e-4\n"}),
        Case(c, "JSON: 'eps' twice in one experiment", "refuse",
             {"c.json": '{"device": "cpu", "experiments": {"f": {"kind": "featurewise", "eps": 0.001, "eps": 0.01}}}'},
             names=("eps",)),
        Case(c, "JSON: top-level 'experiments' twice", "refuse",
             {"c.json": '{"experiments": {"f": {"kind": "featurewise"}}, "experiments": {"g": {"kind": "samplewise"}}}'},
             names=("experiments",)),
        Case(c, "JSON: experiment id twice", "refuse",
             {"c.json": '{"experiments": {"f": {"kind": "featurewise"}, "f": {"kind": "samplewise"}}}'}, names=("f",)),
        Case(c, "id with a trailing newline (YAML \"f\\n\")", "refuse",
             {"c.yaml": 'device: cpu\nexperiments:\n  "f\\n":\n' + fw}, names=("f\\n",)),
        Case(c, "id with a trailing space", "refuse",
             {"c.yaml": 'device: cpu\nexperiments:\n  "f ":\n' + fw}, names=("'f '",)),
        Case(c, "id with a slash a/b", "refuse", {"c.yaml": one("featurewise", "a/b")}, names=("a/b",)),
        Case(c, "id ../x (path traversal)", "refuse", {"c.yaml": one("featurewise", "../x")}, names=("../x",)),
        Case(c, "integer id 1", "refuse", {"c.yaml": "device: cpu\nexperiments:\n  1:\n" + fw}, names=("1",)),
        Case(c, "empty id ''", "refuse", {"c.yaml": "device: cpu\nexperiments:\n  '':\n" + fw}, names=("''",)),
        Case(c, "null id ~", "refuse", {"c.yaml": "device: cpu\nexperiments:\n  ~:\n" + fw}, names=("None",)),
        Case(c, "bool id yes", "refuse", {"c.yaml": "device: cpu\nexperiments:\n  yes:\n" + fw}, names=("True",)),
        Case(c, "id 'summary' (reserved output name)", "refuse", {"c.yaml": one("featurewise", "summary")},
             names=("summary",)),
        Case(c, "id 'Structure_Matrices' (reserved name in other case)", "refuse",
             {"c.yaml": one("featurewise", "Structure_Matrices")}, names=("Structure_Matrices",)),
        Case(c, "id 'con' (Windows device name)", "refuse", {"c.yaml": one("featurewise", "con")}, names=("con",)),
        Case(c, "id of 65 characters", "refuse", {"c.yaml": one("featurewise", "f" + "x" * 64)}, names=("fxxx",)),
        Case(c, "id of 64 characters (longest allowed)", "valid", {"c.yaml": one("featurewise", "f" + "x1" * 31 + "y")}),
        Case(c, "id 'a.b' (dot)", "refuse", {"c.yaml": one("featurewise", "a.b")}, names=("a.b",)),
        Case(c, "id 'é' (non-ASCII letter)", "refuse", {"c.yaml": one("featurewise", "\u00e9")}, names=("\u00e9",)),
        Case(c, "id ending in 'ab' x 20 (Snakemake periodic wildcard)", "refuse",
             {"c.yaml": one("featurewise", "x" + "ab" * 20)}, names=("xabab",)),
        Case(c, "id 'f' and --config adds id 'a/b'", "refuse", {"c.yaml": one("featurewise", "f")},
             overrides=["experiments={a/b: {kind: featurewise}}"], names=("a/b",)),
        Case(c, "id 'f1' in the file and 'F1' via --config", "refuse", {"c.yaml": one("featurewise", "f1")},
             overrides=["experiments={F1: {kind: featurewise}}"], names=("F1",)),
    ]


def _bomb(leaf: str, mapping: bool) -> str:
    """A billion-laughs YAML: 9 levels of 9 aliases each (9^9 = 387 million leaves)."""
    lines = [f"a0: &a0 {leaf}"]
    for i in range(1, 10):
        inner = ", ".join(f"k{j}: *a{i - 1}" if mapping else f"*a{i - 1}" for j in range(9))
        lines.append(f"a{i}: &a{i} {{{inner}}}" if mapping else f"a{i}: &a{i} [{inner}]")
    return lines


def bomb_cases() -> list[Case]:
    c = "4 YAML alias bombs"
    out = []
    for field_name, leaf in (("description", "lol"), ("eps", "1.0e-3")):
        for mapping in (False, True):
            anchors = _bomb(leaf, mapping)
            # the anchors live inside the experiment's own key, so that the file has no unknown top key
            text = ("device: cpu\nexperiments:\n  f:\n    kind: featurewise\n    x_anchors:\n"
                    + "".join(f"      {line}\n" for line in anchors) + f"    {field_name}: *a9\n")
            out.append(Case(c, f"{'mapping' if mapping else 'list'} bomb in {field_name} ({len(text)} bytes)",
                            "refuse", {"c.yaml": text}, names=("alias", "x_anchors", field_name), bomb=True, timeout=45))
    list_bomb = "[" + ", ".join(["&a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
                                + [f"&b{i} [" + ", ".join([f"*{'a' if i == 0 else 'b' + str(i - 1)}"] * 9) + "]"
                                   for i in range(8)]) + "]"
    out.append(Case(c, f"list bomb through --config description ({len(list_bomb)} bytes)", "refuse",
                    {"c.yaml": one("featurewise", "f")}, overrides=[f"experiments={{f: {{description: {list_bomb}}}}}"],
                    names=("alias", "description", "values"), bomb=True, timeout=45))
    return out


def machine_and_data_cases() -> list[Case]:
    c = "5 device, cross-key rules, data paths, sizes"
    return [
        Case(c, "device: cuda on a CPU-only machine", "refuse", {"c.yaml": one("featurewise").replace("device: cpu", "device: cuda")},
             names=("device",)),
        Case(c, "device: cuda via --config", "refuse", {"c.yaml": one("featurewise")}, overrides=["device=cuda"],
             names=("device",)),
        Case(c, "device: 'cuda:0'", "refuse", {"c.yaml": one("featurewise").replace("device: cpu", "device: cuda:0")},
             names=("device",)),
        Case(c, "device: CPU (upper case)", "refuse", {"c.yaml": one("featurewise").replace("device: cpu", "device: CPU")},
             names=("device",)),
        Case(c, "competition lam 3 rows, y 2 targets", "refuse",
             {"c.yaml": one("competition", lam=[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], y=[1.0, 0.5])}, names=("lam",)),
        Case(c, "competition ragged lam rows", "refuse",
             {"c.yaml": one("competition", lam=[[1.0, 0.0], [0.0]], y=[1.0, 0.5])}, names=("lam",)),
        Case(c, "competition lam [] and y []", "refuse", {"c.yaml": one("competition", lam=[], y=[])}, names=("lam", "y")),
        Case(c, "competition lam rows of zero length", "refuse", {"c.yaml": one("competition", lam=[[], []], y=[1.0, 0.5])},
             names=("lam",)),
        Case(c, "competition lam not a list of lists (a list of numbers)", "refuse",
             {"c.yaml": one("competition", lam=[1.0, 2.0], y=[1.0, 0.5])}, names=("lam",)),
        Case(c, "featurewise lr 9.9 (above the GD stability bound)", "refuse", {"c.yaml": one("featurewise", lr=9.9)},
             names=("lr",)),
        Case(c, "fourier_powerlaw M = 2 P (cosines not orthonormal)", "refuse",
             {"c.yaml": one("fourier_powerlaw", P=64, M=128)}, names=("M", "P")),
        Case(c, "fourier_powerlaw steps list of 2 for 3 thetas", "refuse",
             {"c.yaml": one("fourier_powerlaw", steps=[100, 100])}, names=("steps", "thetas")),
        Case(c, "init_scaling modules not among architectures", "refuse",
             {"c.yaml": one("init_scaling", architectures=["diagonal_net"], modules=["mlp"])}, names=("modules",)),
        Case(c, "real_data mnist_npz, path that does not exist", "refuse",
             {"c.yaml": one("real_data", dataset="mnist_npz", path="nowhere/mnist.npz")}, names=("path", "nowhere")),
        Case(c, "real_data mnist_npz, path is a text file", "refuse",
             {"c.yaml": one("real_data", dataset="mnist_npz", path="digits.npz"), "digits.npz": "not a zip\n"},
             names=("path", "digits.npz")),
        Case(c, "real_data mnist_npz, path is a directory", "refuse",
             {"c.yaml": one("real_data", dataset="mnist_npz", path="."), }, names=("path",)),
        Case(c, "real_data mnist_npz, npz without x_test", "refuse",
             {"c.yaml": one("real_data", dataset="mnist_npz", path="m.npz"), "m.npz": _npz(missing="x_test")},
             names=("path", "x_test", "m.npz")),
        Case(c, "real_data mnist_npz, npz holding a pickled object array", "refuse",
             {"c.yaml": one("real_data", dataset="mnist_npz", path="m.npz"), "m.npz": _npz(pickled=True)},
             names=("path", "m.npz", "x_train")),
        Case(c, "real_data mnist_npz without a path", "refuse", {"c.yaml": one("real_data", dataset="mnist_npz")},
             names=("path",)),
        Case(c, "real_data digits8x8 with n_train 5000 (> 1797 images)", "refuse",
             {"c.yaml": one("real_data", dataset="digits8x8", n_train=5000, sizes={"cnn": {"kernel": [4, 4]}})},
             names=("n_train",)),
        Case(c, "real_data digits8x8, CNN kernel 15x15 on 8x8 images", "refuse",
             {"c.yaml": one("real_data", dataset="digits8x8", n_train=300, n_test=60)}, names=("kernel",)),
        Case(c, "featurewise_powerlaw m 100000, n_record 100000 (absurd history)", "refuse",
             {"c.yaml": one("featurewise_powerlaw", m=100000, n_record=100000, steps=100000)}, names=("n_record", "m")),
        Case(c, "competition 4096 modes x 1e5 recorded steps", "refuse",
             {"c.yaml": one("competition", lam=[[1.0] * 4096], y=[1.0], n_record=100000)}, names=("n_record", "lam")),
        # M is recorded only for p <= record_M_max_p (64): this run holds 6 replicas of 4104 x 4096
        # weights with gradients and optimizer states, estimated 6.7 GB, which fits a 24 GB machine
        Case(c, "nqf_approximation MLP width 4096, D 4096, n_record 1e5 (6.7 GB: fits)", "valid",
             {"c.yaml": one("nqf_approximation", architectures=["mlp"], sizes={"mlp": {"D": 4096, "width": 4096}},
                            n_record=100000)}),
        Case(c, "nqf_approximation MLP width 16384, D 16384 (about 100 GB)", "refuse",
             {"c.yaml": one("nqf_approximation", architectures=["mlp"], sizes={"mlp": {"D": 16384, "width": 16384}})},
             names=("sizes.mlp",)),
        Case(c, "nqf_approximation record_M_max_p 1e6 with MLP width 4096, D 4096, n_record 1e5", "refuse",
             {"c.yaml": one("nqf_approximation", architectures=["mlp"], sizes={"mlp": {"D": 4096, "width": 4096}},
                            n_record=100000, record_M_max_p=1000000)}, names=("n_record",)),
        Case(c, "init_scaling 100000 seeds x width 256 x 1e5 records", "refuse",
             {"c.yaml": one("init_scaling", width=256, seeds=list(range(100000)), n_record=100000, steps=100000)},
             names=("n_record", "seeds", "width")),
        Case(c, "fourier_powerlaw steps 1e8 x 3 thetas (hours of training)", "valid",
             {"c.yaml": one("fourier_powerlaw", steps=100000000, n_record=400)}),
        Case(c, "collapse lr 1e-9 (steps past the 1e8 bound)", "refuse",
             {"c.yaml": one("collapse", architectures=["diagonal", "rectangular"], lr=1e-9)}, names=("lr", "steps")),
        # issue 30, item 4: a run too short for the rows it judges is refused, naming the smallest steps
        Case(c, "featurewise of config/test.yaml with steps: 20 (ends before the slowest ignition)", "refuse",
             {"c.yaml": one("featurewise", **{**TEST_FEATUREWISE, "steps": 20})}, names=("steps >= ",)),
        Case(c, "featurewise of config/test.yaml with eps: 1e-300 (steps 2000 reach no ignition)", "refuse",
             {"c.yaml": one("featurewise", **{**TEST_FEATUREWISE, "eps": 1e-300})}, names=("steps >= ",)),
    ]


# config/test.yaml's featurewise experiment (a tiny run that every stage finishes in seconds)
TEST_FEATUREWISE = {"r": [1.0, 0.5, 0.25], "eps": 1.0e-3, "lr": 0.02, "steps": 2000, "n_record": 120}


def _npz(missing: str | None = None, pickled: bool = False) -> bytes:
    import io

    import numpy as np

    arrays = {"x_train": np.zeros((20, 8, 8)), "y_train": np.arange(20) % 10,
              "x_test": np.zeros((10, 8, 8)), "y_test": np.arange(10) % 10}
    if missing:
        arrays.pop(missing)
    if pickled:
        arrays["x_train"] = np.array([{"a": 1}] * 20, dtype=object)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def type_and_structure_cases() -> list[Case]:
    c = "6 unknown keys, wrong types, structure"
    return [
        Case(c, "unknown top-level key", "refuse", {"c.yaml": one("featurewise") + "devcie: cpu\n"}, names=("devcie",)),
        Case(c, "unknown experiment key (typo 'lrr')", "refuse", {"c.yaml": one("featurewise", lrr=0.01)}, names=("lrr",)),
        Case(c, "unknown key in figures", "refuse", {"c.yaml": one("featurewise") + "figures: {dpii: 100}\n"}, names=("dpii",)),
        Case(c, "unknown key in tolerances", "refuse", {"c.yaml": one("featurewise", tolerances={"bogus": 1.0})},
             names=("bogus",)),
        Case(c, "eps as the string 'small'", "refuse", {"c.yaml": one("featurewise", eps="small")}, names=("eps",)),
        Case(c, "eps as the string '0.001' (quoted number)", "refuse", {"c.yaml": one("featurewise", eps="0.001")},
             names=("eps",)),
        Case(c, "eps as a list where a scalar is expected", "refuse", {"c.yaml": one("featurewise", eps=[1e-3])},
             names=("eps",)),
        Case(c, "competition eps as a scalar where a list is expected", "refuse", {"c.yaml": one("competition", eps=1e-3)},
             names=("eps",)),
        Case(c, "steps: true (bool where a number is expected)", "refuse", {"c.yaml": one("featurewise", steps=True)},
             names=("steps",)),
        Case(c, "figures.dpi: false", "refuse", {"c.yaml": one("featurewise") + "figures: {dpi: false}\n"}, names=("dpi",)),
        Case(c, "steps 2000.5 (non-integral float for an integer)", "refuse", {"c.yaml": one("featurewise", steps=2000.5)},
             names=("steps",)),
        # 20000: the default featurewise run needs steps >= 13989 to reach its slowest ignition
        Case(c, "steps 2.0e+4 (integral float, coerced)", "valid", {"c.yaml": one("featurewise", steps=20000.0)}),
        Case(c, "r as a mapping", "refuse", {"c.yaml": one("featurewise", r={"a": 1.0})}, names=("r",)),
        Case(c, "experiment is a list, not a mapping", "refuse", {"c.yaml": "device: cpu\nexperiments:\n  f: [featurewise]\n"},
             names=("f",)),
        Case(c, "experiment is null", "refuse", {"c.yaml": "device: cpu\nexperiments:\n  f:\n"}, names=("f",)),
        Case(c, "experiment without 'kind'", "refuse", {"c.yaml": cfg_text({"f": {"eps": 1e-3}})}, names=("kind",)),
        Case(c, "unknown kind 'featurewize'", "refuse", {"c.yaml": one("featurewize", "f")}, names=("kind", "featurewize")),
        Case(c, "kind: 3 (an integer)", "refuse", {"c.yaml": cfg_text({"f": {"kind": 3}})}, names=("kind",)),
        Case(c, "experiments: {} (empty mapping)", "refuse", {"c.yaml": "device: cpu\nexperiments: {}\n"},
             names=("experiments",)),
        Case(c, "experiments: null", "refuse", {"c.yaml": "device: cpu\nexperiments:\n"}, names=("experiments",)),
        Case(c, "experiments: [] (a list)", "refuse", {"c.yaml": "device: cpu\nexperiments: []\n"}, names=("experiments",)),
        Case(c, "no 'experiments' key (the default config is read under it)", "valid", {"c.yaml": "device: cpu\n"}),
        Case(c, "missing --configfile path", "refuse", {}, configfiles=["missing.yaml"], names=("missing.yaml",)),
        Case(c, "--configfile is a directory", "refuse", {"d/keep": ""}, configfiles=["d"], names=("d",)),
        Case(c, "empty config file", "refuse", {"c.yaml": ""}, names=("c.yaml", "empty")),
        Case(c, "config file of comments only", "refuse", {"c.yaml": "# nothing\n"}, names=("c.yaml", "empty")),
        Case(c, "config that is a list", "refuse", {"c.yaml": "- device: cpu\n"}, names=("c.yaml", "mapping")),
        Case(c, "config that is a scalar", "refuse", {"c.yaml": "featurewise\n"}, names=("c.yaml", "mapping")),
        Case(c, "JSON config that is a number", "refuse", {"c.json": "42"}, names=("c.json", "mapping")),
        Case(c, "binary file as config (random bytes, not UTF-8)", "refuse",
             {"c.bin": bytes(range(256)) * 4}, names=("c.bin", "UTF-8")),
        Case(c, "binary file that is valid UTF-8 (NULs)", "refuse", {"c.bin": b"\x00" * 64}, names=("c.bin",)),
        Case(c, "a gzip file as config", "refuse", {"c.yaml.gz": _gz(one("featurewise"))}, names=("c.yaml.gz", "UTF-8")),
        Case(c, "YAML syntax error (tab indentation)", "refuse", {"c.yaml": "device: cpu\nexperiments:\n\tf: {kind: featurewise}\n"},
             names=("c.yaml", "YAML")),
        Case(c, "renamed key init_std", "refuse", {"c.yaml": one("teacher_student", "ts", init_std=0.01)}, names=("init_std",)),
        Case(c, "integer seeds: 4 (old count spelling)", "refuse", {"c.yaml": one("collapse", seeds=4)}, names=("seeds",)),
        Case(c, "on_divergence: ignore", "refuse", {"c.yaml": one("featurewise") + "on_divergence: ignore\n"},
             names=("on_divergence",)),
        Case(c, "two configfiles: the second sets figures only (merged)", "valid",
             {"a.yaml": one("featurewise"), "b.yaml": "figures: {dpi: 100}\n"}, configfiles=["a.yaml", "b.yaml"]),
        Case(c, "two configfiles: the second has a bad key", "refuse",
             {"a.yaml": one("featurewise"), "b.yaml": "figures: {dpi: 10}\n"}, configfiles=["a.yaml", "b.yaml"],
             names=("dpi",)),
    ]


def _gz(text: str) -> bytes:
    import gzip

    return gzip.compress(text.encode())


def yte_cases() -> list[Case]:
    c = "8 YTE templates (__use_yte__)"
    code = "?open('yte_ran', 'w').write('code ran') and 'x'"
    return [
        Case(c, "YTE template whose expression writes a file", "refuse",
             {"c.yaml": f"__use_yte__: true\ndevice: cpu\nexperiments:\n  f:\n    kind: featurewise\n    description: {code}\n"},
             names=("__use_yte__",), marker="yte_ran"),
        Case(c, "YTE template computing eps (?1e-3 * 2)", "refuse",
             {"c.yaml": "__use_yte__: true\ndevice: cpu\nexperiments:\n  f:\n    kind: featurewise\n    eps: ?1e-3 * 2\n"},
             names=("__use_yte__",)),
        Case(c, "__use_yte__: false (not a template, key still present)", "refuse",
             {"c.yaml": "__use_yte__: false\n" + one("featurewise")}, names=("__use_yte__",)),
        Case(c, "__use_yte__ in a JSON file", "refuse",
             {"c.json": '{"__use_yte__": true, "device": "cpu", "experiments": {"f": {"kind": "featurewise"}}}'},
             names=("__use_yte__",)),
        Case(c, "YTE template as the second of two configfiles", "refuse",
             {"a.yaml": one("featurewise"), "b.yaml": f"__use_yte__: true\nfigures:\n  dpi: ?{code[1:]} and 100\n"},
             configfiles=["a.yaml", "b.yaml"], names=("__use_yte__", "b.yaml"), marker="yte_ran"),
        Case(c, "python/object/apply tag (FullLoader does not build it)", "refuse",
             {"c.yaml": one("featurewise") + "x: !!python/object/apply:os.system ['touch tag_ran']\n"},
             names=("c.yaml", "tag", "python"), marker="tag_ran"),
        Case(c, "python/name tag", "refuse", {"c.yaml": one("featurewise", description="x") +
                                              "figures: {dpi: !!python/name:os.getpid }\n"}, names=("c.yaml", "python", "dpi")),
    ]


def quirk_cases() -> list[Case]:
    c = "9 YAML 1.1 quirks and text"
    fw = "device: cpu\nexperiments:\n  f:\n    kind: featurewise\n"
    return [
        Case(c, "steps: 017 (YAML 1.1 octal 15)", "refuse", {"c.yaml": fw + "    steps: 017\n"}, names=("017",)),
        Case(c, "steps: 3:20 (YAML 1.1 base-60 200)", "refuse", {"c.yaml": fw + "    steps: 3:20\n"}, names=("3:20",)),
        # 20000 (the default featurewise run needs steps >= 13989 to reach its slowest ignition)
        Case(c, "steps: 0x4e20 (hex, same in YAML 1.1 and 1.2)", "valid", {"c.yaml": fw + "    steps: 0x4e20\n"}),
        # YAML 1.1 (which Snakemake and nqf read) makes 20_000 the integer 20000, as Python does; unlike 017
        # and 3:20 that is what a reader of the file expects, so it is taken
        Case(c, "steps: 20_000 (YAML 1.1 underscore: 20000)", "valid", {"c.yaml": fw + "    steps: 20_000\n"}),
        Case(c, "eps: 1e-3 (no dot: a string to YAML 1.1, coerced)", "valid", {"c.yaml": fw + "    eps: 1e-3\n"}),
        Case(c, "on_divergence: off (YAML 1.1 bool)", "refuse", {"c.yaml": fw + "on_divergence: off\n"}, names=("on_divergence",)),
        Case(c, "dtype: yes (bool)", "refuse", {"c.yaml": fw + "    dtype: yes\n"}, names=("dtype",)),
        Case(c, "description: 123 (a number)", "refuse", {"c.yaml": fw + "    description: 123\n"}, names=("description",)),
        Case(c, "description with an odd '$'", "refuse", {"c.yaml": fw + "    description: 'cost $5'\n"}, names=("description",)),
        Case(c, "description with math that does not parse", "refuse",
             {"c.yaml": fw + "    description: '$\\frac{1}$'\n"}, names=("description",)),
        # issue 30: config text is inert in every HTML page (Snakemake's report and nqf's own)
        Case(c, "description '</script><img src=x onerror=alert(1)>' (HTML, inert in the pages)", "valid",
             {"c.yaml": fw + "    description: \"</script><img src=x onerror=alert(1)>\"\n"}),
        Case(c, "description of 100000 characters", "valid", {"c.yaml": fw + "    description: '" + "x" * 100000 + "'\n"}),
        Case(c, "description with a lone surrogate (JSON \\ud800)", "refuse",
             {"c.json": '{"device": "cpu", "experiments": {"f": {"kind": "featurewise", "description": "a\\ud800"}}}'},
             names=("description",)),
        Case(c, "description with NUL and ESC characters", "refuse",
             {"c.json": '{"device": "cpu", "experiments": {"f": {"kind": "featurewise", "description": "a\\u0000\\u001b[31m"}}}'},
             names=("description",)),
        Case(c, "UTF-8 BOM and CRLF line ends", "valid", {"c.yaml": "\ufeff" + one("featurewise").replace("\n", "\r\n")}),
        Case(c, "UTF-16 file", "refuse", {"c.yaml": one("featurewise").encode("utf-16")}, names=("c.yaml", "UTF-8")),
        Case(c, "file over 2 MB (a long comment)", "refuse", {"c.yaml": one("featurewise") + "#" + "x" * (3 * 2**20) + "\n"},
             names=("c.yaml", "MB")),
        Case(c, "500 levels of [ nesting", "refuse", {"c.yaml": fw + "    r: " + "[" * 500 + "]" * 500 + "\n"},
             names=("c.yaml", "nested")),
        Case(c, "integer of 5000 digits", "refuse", {"c.yaml": fw + "    steps: " + "9" * 5000 + "\n"}, names=("steps", "c.yaml")),
        Case(c, "eps: 1e999 (overflows to inf in JSON)", "refuse",
             {"c.json": '{"experiments": {"f": {"kind": "featurewise", "eps": 1e999}}}'}, names=("eps",)),
    ]


def override_cases() -> list[Case]:
    c = "10 --config overrides"
    base = {"c.yaml": one("featurewise", "f")}
    return [
        Case(c, "--config experiments= (empty value)", "refuse", base, overrides=["experiments="], names=("experiments",)),
        Case(c, "--config experiments=null", "refuse", base, overrides=["experiments=null"], names=("experiments",)),
        Case(c, "--config adds an experiment without kind", "refuse", base,
             overrides=["experiments={g: {eps: 0.1}}"], names=("kind", "g")),
        Case(c, "--config figures=300 (scalar for a mapping)", "refuse", base, overrides=["figures=300"], names=("figures",)),
        Case(c, "--config 'figures={dpi: 300.5}'", "refuse", base, overrides=["figures={dpi: 300.5}"], names=("dpi",)),
        Case(c, "--config 'figures={dpi: 1e3}' (integral float)", "valid", base, overrides=["figures={dpi: 1e3}"]),
        Case(c, "--config bogus=1 (unknown top key)", "refuse", base, overrides=["bogus=1"], names=("bogus",)),
        Case(c, "--config 'experiments={f: {eps: \"0.001\"}}' (quoted, typed as a number)", "valid", base,
             overrides=['experiments={f: {eps: "0.001"}}']),
        Case(c, "--config 'experiments={f: {steps: True}}'", "refuse", base, overrides=["experiments={f: {steps: True}}"],
             names=("steps",)),
        Case(c, "--config 'experiments={f: {r: [1, nan]}}'", "refuse", base, overrides=["experiments={f: {r: [1, nan]}}"],
             names=("r",)),
        Case(c, "--config eps=nan at top level", "refuse", base, overrides=["eps=nan"], names=("eps",)),
        Case(c, "--config with a target after it (read as an override)", "refuse", base,
             overrides=["device=cpu", "results/fits/f.nc"], names=("results/fits/f.nc", "name=value")),
        Case(c, "--config 'experiments={f: {description: [a, b]}}'", "refuse", base,
             overrides=["experiments={f: {description: [a, b]}}"], names=("description",)),
        Case(c, "--config 'experiments={f: {kind: samplewise}}' (changes kind)", "valid", base,
             overrides=["experiments={f: {kind: samplewise}}"]),
    ]


def all_cases(grid_cli: bool) -> list[Case]:
    cli_fields = {("featurewise", "eps"), ("", "figures.font_size"), ("competition", "eps.0"), ("real_data", "lr"),
                  ("deep", "seeds.0")} if grid_cli else set()
    return (collision_cases() + grid_cases(cli_fields) + duplicate_and_id_cases() + bomb_cases()
            + machine_and_data_cases() + type_and_structure_cases() + yte_cases() + quirk_cases() + override_cases())


# -- running a case -------------------------------------------------------------------------------

def _write_files(case: Case, tmp: Path) -> list[str]:
    for name, content in case.files.items():
        target = tmp / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.write_bytes if isinstance(content, bytes) else target.write_text)(content)
    names = case.configfiles if case.configfiles is not None else list(case.files)[:1]
    return [str(tmp / n) for n in names]


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_cli(case: Case, tmp: Path, configfiles: list[str]) -> tuple[int | None, str]:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp), "-n"]
    if configfiles:
        cmd += ["--configfile", *configfiles]
    if case.overrides:
        cmd += ["--config", *case.overrides]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NQF_MAX_MEMORY_GB", None)
    log = tmp / "snakemake.out"
    start = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=tmp, env=env,
                                preexec_fn=_limit_memory, start_new_session=True)
    rc, timed_out = None, False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() - start > case.timeout:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    proc.returncode = rc if rc is not None else -9
    case.seconds = time.monotonic() - start
    case.peak_mb = usage.ru_maxrss / 1024
    text = log.read_text(errors="replace")
    if timed_out:
        case.note = f"killed after {case.timeout:.0f} s"
    return (None if timed_out else rc), text


def run_lib(case: Case, tmp: Path, configfiles: list[str]) -> tuple[int, str]:
    from snakemake.cli import parse_config

    from nqf import experiments
    from nqf.pipeline.config import load_workflow_config, validate_config
    from nqf.errors import ConfigError

    start = time.monotonic()
    cwd = os.getcwd()
    os.chdir(tmp)  # relative paths in a config are read from the workflow's directory
    try:
        raw = load_workflow_config(configfiles, parse_config(case.overrides), ROOT / "config" / "config.yaml")
        experiments.check_config(validate_config(raw), jobs_run_here=True)
        return 0, ""
    except ConfigError as exc:
        return 1, f"Invalid configuration: {exc}"
    except Exception:  # noqa: BLE001 - a crash is what the audit records
        return 1, traceback.format_exc()
    finally:
        os.chdir(cwd)
        case.seconds = time.monotonic() - start


def _message(text: str) -> list[str]:
    """nqf's message (from 'Invalid configuration:' to the next traceback line), else the last
    error-looking line of the output."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Invalid configuration: " in line:
            msg = [line[line.index("Invalid configuration: "):]]
            for nxt in lines[i + 1:]:
                if not nxt.strip() or nxt.startswith("  File "):
                    break
                msg.append(nxt)
            return msg
        if line.strip() == "WorkflowError:" and i + 1 < len(lines):  # Snakemake's own refusal
            return ["WorkflowError: " + lines[i + 1].strip()]
    errors = [ln for ln in lines if re.match(r"^\w*(Error|Exception)\b", ln.strip()) or ln.startswith("Error")]
    meaningful = [ln for ln in lines if ln.strip() and not ln.startswith("Using workflow specific profile")]
    return [errors[-1].strip() if errors else (meaningful[-1].strip() if meaningful else "")]


PLANNED_RUN = re.compile(r"results/runs/(\w+)/([A-Za-z0-9][A-Za-z0-9_.-]*)\.nc")


def classify(case: Case, rc: int | None, text: str) -> None:
    msg = _message(text)
    case.message = msg[0][:300] if msg else ""
    tb = "Traceback (most recent call last)" in text
    if rc is None:
        case.outcome = "crashed"
    elif rc == 0:
        case.outcome = "accepted"
        if case.runs:
            exp, n = case.runs
            planned = {m.group(2) for m in PLANNED_RUN.finditer(text) if m.group(1) == exp}
            case.note = (case.note + f" planned {len(planned)} run files: {', '.join(sorted(planned))}").strip()
            if len(planned) != n:
                case.outcome = "accepted (runs collide)"
    else:
        names = any(n in " ".join(msg) for n in case.names) if case.names else True
        clean = not tb and "Invalid configuration: " in text and len(msg) <= 3 and names
        if case.bomb and (case.seconds >= BOMB_SECONDS or (case.peak_mb or 0) * 2**20 >= BOMB_BYTES):
            clean = False
        case.outcome = "refused cleanly" if clean else "crashed"
        if "Invalid configuration: " not in text and "Using workflow specific profile" in text:
            case.note = (case.note + " (refused by Snakemake's own reading, before nqf runs)").strip()
        if not clean:
            why = ("traceback" if tb else "no nqf message" if "Invalid configuration: " not in text else
                   f"{len(msg)} message lines" if len(msg) > 3 else "message names no key" if not names else
                   "too slow or too big")
            case.note = (case.note + " " + why).strip()
    if case.marker:
        ran = (case.tmp / case.marker).exists()
        case.note = (case.note + f" {case.marker} written: {'yes' if ran else 'no'}").strip()
    case.correct = {"refuse": case.outcome == "refused cleanly",
                    "valid": case.outcome == "accepted",
                    "distinct": case.outcome in ("accepted", "refused cleanly")}[case.expected]


def run_case(case: Case) -> None:
    with tempfile.TemporaryDirectory(prefix="nqf-audit-") as tmp:
        tmp = Path(tmp)
        case.tmp = tmp
        configfiles = _write_files(case, tmp)
        rc, text = (run_cli if case.path == "cli" else run_lib)(case, tmp, configfiles)
        classify(case, rc, text)
        if case.path == "cli" and not case.correct and ("Snakemake's own reading" in case.note
                                                         or "killed after" in case.note):
            run_precheck(case, tmp, configfiles)


def run_precheck(case: Case, tmp: Path, configfiles: list[str]) -> None:
    """The same files and overrides through `python -m nqf check-config` (the pre-check of docs/security.md
    for configs Snakemake itself cannot read): 'refused cleanly' is one 'Invalid configuration:'
    line, no traceback, within the bomb limits."""
    cmd = [sys.executable, "-m", "nqf", "check-config"]
    if configfiles:
        cmd += ["--configfile", *configfiles]
    if case.overrides:
        cmd += ["--config", *case.overrides]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=case.timeout,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        case.precheck = f"crashed (killed after {case.timeout:.0f} s)"
        return
    err = p.stderr.strip().splitlines()
    clean = (p.returncode == 2 and len(err) == 1 and err[0].startswith("Invalid configuration: ")
             and time.monotonic() - start < BOMB_SECONDS)
    case.precheck = ("refused cleanly: " + err[0][:200]) if clean else \
        ("accepted" if p.returncode == 0 else f"crashed: {(err or [''])[-1][:200]}")


# -- the report -----------------------------------------------------------------------------------

OUTCOMES = ("refused cleanly", "crashed", "accepted", "accepted (runs collide)")


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def write_report(cases: list[Case], seconds: float) -> str:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    cols = ["class", "description", "path", "expected", "outcome", "correct", "seconds", "peak_mb", "message", "note",
            "precheck"]
    with open(OUT_DIR / "config_audit.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(cols)
        for c in cases:
            writer.writerow([c.cls, c.desc, c.path, c.expected, c.outcome, c.correct, f"{c.seconds:.2f}",
                             "" if c.peak_mb is None else f"{c.peak_mb:.0f}", c.message, c.note, c.precheck])
    classes = sorted({c.cls for c in cases}, key=lambda s: int(s.split()[0]))
    head = ("| class | cases | refused cleanly | crashed | accepted | valid-accepted | as expected |\n"
            "|---|---|---|---|---|---|---|\n")
    rows = []
    for cls in classes + ["all"]:
        group = [c for c in cases if cls in ("all", c.cls)]
        count = lambda *o: sum(c.outcome in o for c in group)  # noqa: E731
        valid_ok = sum(c.outcome == "accepted" and c.expected in ("valid", "distinct") for c in group)
        rows.append(f"| {cls} | {len(group)} | {count('refused cleanly')} | {count('crashed')} | "
                    f"{count('accepted', 'accepted (runs collide)')} | {valid_ok} | {sum(c.correct for c in group)} |")
    table = head + "\n".join(rows) + "\n"
    n_cli = sum(c.path == "cli" for c in cases)
    lines = ["# Config audit", "",
             f"{len(cases)} cases ({n_cli} through `snakemake -n`, {len(cases) - n_cli} through the library's "
             f"loader and checks in one process), {seconds:.0f} s. Generated by `audit/config_audit.py`.", "",
             table, "## Not as expected", ""]
    bad = [c for c in cases if not c.correct]
    lines += [f"* [{c.cls}] {c.desc}: expected {c.expected}, got {c.outcome}: {_cell(c.message)[:200]} {c.note}"
              + (f" -- `python -m nqf check-config`: {_cell(c.precheck)}" if c.precheck else "")
              for c in bad] or ["None."]
    pre = [c for c in bad if c.precheck]
    lines += ["", f"Of the {len(bad)} not as expected, {len(pre)} failed inside Snakemake's own reading of the "
                  f"config, before nqf runs; `python -m nqf check-config` on the same files refused "
                  f"{sum(c.precheck.startswith('refused cleanly') for c in pre)} of them cleanly."]
    lines += ["", "## Every case", "", "| # | class | description | path | expected | outcome | s | MB | message | note |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for i, c in enumerate(cases, 1):
        lines.append(f"| {i} | {c.cls} | {_cell(c.desc)} | {c.path} | {c.expected} | {c.outcome}{'' if c.correct else ' (!)'} | "
                     f"{c.seconds:.1f} | {'' if c.peak_mb is None else f'{c.peak_mb:.0f}'} | {_cell(c.message)[:160]} | "
                     f"{_cell(c.note)[:160]} |")
    (OUT_DIR / "config_audit.md").write_text("\n".join(lines) + "\n")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run only the cases whose class or description contains this text")
    parser.add_argument("--no-grid-cli", action="store_true", help="run the whole number grid through the library")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    start = time.monotonic()
    cases = all_cases(grid_cli=not args.no_grid_cli)
    if args.only:
        cases = [c for c in cases if args.only in c.cls or args.only in c.desc]
    for i, case in enumerate(cases, 1):
        run_case(case)
        if case.path == "cli" or not case.correct:
            print(f"[{i}/{len(cases)}] {case.path} {case.outcome:24s} {'ok ' if case.correct else 'BAD'} "
                  f"{case.seconds:5.1f}s  {case.cls}: {case.desc}", flush=True)
    seconds = time.monotonic() - start
    table = write_report(cases, seconds)
    print(table)
    print(f"{sum(not c.correct for c in cases)} of {len(cases)} cases not as expected; {seconds:.0f} s; "
          f"report in {OUT_DIR / 'config_audit.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
