"""Run ids that name exactly one parameter value each, and the guard that refuses an experiment
whose runs would share an id.

A run id names a training job and its file (results/runs/<exp>/<run>.nc). Two distinct values
that format alike (eps 1.0e-3 and 1.2e-3 under a fixed ``:.0e``) would be trained once and the
fit would compare one value's prediction with the other's data, so a number in an id is written
in the shortest scientific form that reads back as the same float: ``1e-03`` for the values
that one digit spells exactly, ``1.2e-03`` or
``1.0000001e-03`` for the others.
"""
from __future__ import annotations

import math
import re
from collections import Counter

# The {run} wildcard of workflow/rules/common.smk: a run id must match it whole.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def exact_number(value: float) -> str:
    """The shortest ``%.Ne`` spelling of ``value`` that parses back to the same float, with the
    exponent's '+' dropped (file-name and wildcard safe): 1e-03, 1.2e-03, 2.5e00."""
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"A run id needs a finite number; got {x!r}.")
    for digits in range(18):
        text = f"{x:.{digits}e}"
        if float(text) == x:
            return text.replace("+", "")
    raise AssertionError(f"no exact spelling of {x!r}")  # 17 significant digits always round-trip


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return float(a) == float(b)
    return a == b


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def repeated_value(values) -> object | None:
    """The first value a list holds twice (1 and 1.0 count as one value), or None."""
    seen: list = []
    for v in values:
        if any(_same(v, s) for s in seen):
            return v
        seen.append(v)
    return None


def run_id_problems(exp: dict, keys, ids: list[str]) -> list[tuple[str, str]]:
    """(key, sentence) pairs for run ids that cannot name one run each: a list among ``keys`` (the
    config lists the kind's ids are made of) holding a value twice, two runs under one id, or an
    id that is not a safe file name."""
    for key in keys:
        values = exp.get(key)
        if isinstance(values, list):
            twice = repeated_value(values)
            if twice is not None:
                return [(key, f"lists {_short(twice)} twice; give each value once (each one is its own run).")]
    where = keys[0] if keys else "kind"
    counts = Counter(ids)
    for run, n in counts.items():
        if n > 1:
            return [(where, f"gives {n} runs the same run id {run!r}, so they would be trained once and "
                            f"compared as one; make the values distinct.")]
    for run in ids:
        if not isinstance(run, str) or not RUN_ID_PATTERN.fullmatch(run):
            return [(where, f"makes the run id {_short(run)}, which is not a safe file name (letters, "
                            f"digits, '_', '.', '-', starting with a letter or digit); rename the value.")]
    return []
