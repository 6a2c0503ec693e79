"""Semantic checks of an intermediate result file on read: readable is not enough.

:func:`nqf.io.netcdf.open_result` refuses files that cannot be read or were not written by nqf. A
file can read fine and still be wrong: a stale file of another configuration (copied over, or
kept by ``--rerun-triggers mtime``), a NaN in a data matrix or in a run's loss, a theory file with
fewer modes than the structure it claims to come from. Each would be consumed (NaN in the
summary, exit 0) or end in a numpy traceback that names no file. :func:`open_stage` checks

* provenance: the config stored in the file (``config_json``) equals the config the rule that
  makes it is handed now, in the keys that stage reads (what Snakemake's params compare, so a
  normal params change reruns the producer first and never trips this);
* coordinates that a config list defines (``seed`` = ``seeds``, ``eps`` = ``eps``, ...) hold
  exactly that list;
* finite values: every float variable of a data, structure or run file is finite, except those
  a kind declares as holding NaN/inf on purpose (its ``NONFINITE``: padding of ragged records,
  losses after a divergence the kind tolerates). A run recorded as diverged
  (``on_divergence: record``, attribute ``diverged``) is exempt: its NaN is the record. Of a
  theory file only the variables of its kind's ``FINITE_THEORY`` (trajectories, and the numbers every
  valid config makes finite) are checked, and fit files not at all: NaN and inf are how they say
  "never ignites", "no power law" or "not measured", and a failing claim row is their verdict;
* the experiment: a file written for another experiment (attribute ``experiment``, else its
  title) is refused, whatever its config (two experiments may share a stage's config and still
  differ in size);
* the dimensions of the variables every kind writes alike (:data:`VARIABLE_DIMS`: a data file's
  A_diag, A and y, a run's loss, z and M); dimensions ``d`` and ``d_j`` (the axes of one square
  matrix) of the same size, and the sizes the config fixes (its kind's ``config_sizes``: e.g. the
  modes, samples and parameters of featurewise and competition);
* the claim variables of a fit file, the variables its kind's fit always writes
  (its ``FIT_VARIABLES``), and that no claim is marked passed without a finite measurement and
  a prediction (what Claim.passed requires);

and :func:`check_derived` checks that a file and the file it is derived from agree in the size of
every dimension they share (theory against structure; runs against structure in the dimensions
its kind's ``RUN_DIMS_OF_STRUCTURE`` names). A file that fails raises
:class:`~nqf.io.netcdf.ResultFileError` with ``unusable=True``, naming the file and its rule; the
workflow job moves it aside (:func:`nqf.pipeline.jobs.set_aside`) and the next snakemake call
regenerates it, as for a truncated file. What a kind's files hold by design (the facts named
above) the kind declares itself (nqf.experiments.contract.OPTIONAL); nothing here names a kind.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from nqf.errors import ResultFileError
from nqf.io.netcdf import config_of, open_result

# The stage of each results/ folder, and the workflow rule that writes it.
RULES = {"data": "data", "structure": "structure", "train": "train", "theory": "theory", "fit": "fit"}
# Stages whose float variables must be finite (theory and fit use NaN/inf as markers).
FINITE_STAGES = ("data", "structure", "train")


def kind_fact(kind: str, name: str):
    """The fact ``name`` a kind declares (nqf.experiments.contract.OPTIONAL), or its default."""
    from nqf.experiments import KINDS
    from nqf.experiments.contract import hook

    return hook(KINDS[kind], name)


def run_dims_of_structure(kind: str) -> tuple[str, ...]:
    """The dimensions of a kind's run files that are its structure file's (checked in the fit job
    by :func:`check_derived`); other kinds' runs may differ (collapse's rectangular networks have
    twice the modes; real_data's structure pads every architecture to the largest)."""
    return tuple(kind_fact(kind, "RUN_DIMS_OF_STRUCTURE"))


# stage -> variable -> the dimensions it is along, or '...' then the dimensions it ends in, in
# every kind that writes it: the structure matrices and targets of a data file
# (nqf.experiments.structure_files.form_to_dataset), the recorded loss, z and M of a run
# (nqf.experiments.diagonal_gd and the kinds that record along 'step').
VARIABLE_DIMS: dict[str, dict[str, tuple[str, ...]]] = {
    # leading axes allowed: fourier_powerlaw's data hold one problem per theta, y (theta, sample)
    "data": {"A_diag": ("...", "sample", "param"), "A": ("...", "sample", "param", "param_j"),
             "y": ("...", "sample")},
    "train": {"loss": ("...", "step"), "z": ("...", "step", "mode"), "M": ("...", "step", "row", "col")},
}


def dimension_problems(ds: xr.Dataset, stage: str) -> list[str]:
    """Variables of :data:`VARIABLE_DIMS` along other dimensions (a file rewritten with renamed
    dimensions reads fine and would be used as if it had them)."""
    out = []
    for name, want in VARIABLE_DIMS.get(stage, {}).items():
        if name not in ds.variables:
            continue
        have = tuple(str(d) for d in ds[name].dims)
        ok = have[-(len(want) - 1):] == want[1:] if want[0] == "..." else have == want
        if not ok:
            shown = ", ".join(d for d in want if d != "...")
            out.append(f"variable '{name}' is along ({', '.join(have)}), not "
                       f"({'..., ' if want[0] == '...' else ''}{shown})")
    return out


def config_size_problems(ds: xr.Dataset, exp_cfg: Mapping) -> list[str]:
    """Dimensions whose size is not the one the config fixes (the kind's ``config_sizes``; other
    kinds' sizes, set by architectures, padding or power-law grids, are checked through their
    stage configs only)."""
    sizes = kind_fact(str(exp_cfg["kind"]), "config_sizes")(exp_cfg)
    return [f"its dimension '{dim}' has size {ds.sizes[dim]}, the config makes it {n}"
            for dim, n in sizes.items() if dim in ds.sizes and ds.sizes[dim] != n]


# coordinate -> the config key whose list it holds, where the stage's config has that key as a list
COORD_KEYS = {"seed": "seeds", "eps": "eps", "architecture": "architectures", "arch": "architectures",
              "optimizer": "optimizers", "theta": "thetas"}
CLAIM_VARIABLES = ("claim_quantity", "claim_predicted", "claim_measured", "claim_passed")


def expected_config(exp_cfg: Mapping, stage: str, run: str | None = None) -> dict:
    """The config the rule making a ``stage`` file is handed now (the run's own for ``train``)."""
    from nqf.experiments import run_config, stage_config

    cfg = run_config(dict(exp_cfg), run) if stage == "train" else stage_config(dict(exp_cfg), stage)
    return json.loads(json.dumps(dict(cfg), sort_keys=True, default=str))


def _short(value, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _differ(stored: Mapping, expected: Mapping, what: str) -> list[str]:
    keys = sorted(set(stored) | set(expected))
    diff = [k for k in keys if stored.get(k, "<absent>") != expected.get(k, "<absent>")]
    if not diff:
        return []
    k = diff[0]
    more = f" (and {len(diff) - 1} more key(s))" if len(diff) > 1 else ""
    return [f"{what}: key '{k}' is {_short(stored.get(k, '<absent>'))} in the "
            f"file and {_short(expected.get(k, '<absent>'))} in the config{more}"]


def config_problems(ds: xr.Dataset, expected: Mapping) -> list[str]:
    """Keys whose value in the file's stored config differs from ``expected`` (one sentence)."""
    try:
        stored = config_of(ds)
    except (TypeError, ValueError):
        return ["its stored config (attribute config_json) is not valid JSON"]
    return _differ(stored, expected, "it was made for another configuration")


# every file made from an experiment's data (structure, theory, run and fit files) records the
# data stage's config it was made from, so that a run trained on other data (other r, C_diag,
# data_seed) is refused by the fit even though its own stage's keys match
DATA_CONFIG = "data_config_json"


def with_data_config(ds: xr.Dataset, exp_cfg: Mapping) -> xr.Dataset:
    """``ds`` with the attribute :data:`DATA_CONFIG`: the data stage's config of ``exp_cfg``."""
    ds.attrs[DATA_CONFIG] = json.dumps(expected_config(exp_cfg, "data"), sort_keys=True)
    return ds


def data_problems(ds: xr.Dataset, exp_cfg: Mapping) -> list[str]:
    """Why a file made from the data was not made from the data ``exp_cfg`` makes (one sentence)."""
    raw = ds.attrs.get(DATA_CONFIG)
    if raw is None:
        return [f"it does not record the data it was made from (attribute {DATA_CONFIG}): it was not "
                f"written by this version of the workflow"]
    try:
        stored = json.loads(str(raw))
    except ValueError:
        return [f"its attribute {DATA_CONFIG} is not valid JSON"]
    if not isinstance(stored, dict):
        return [f"its attribute {DATA_CONFIG} is not a mapping of data keys"]
    return _differ(stored, expected_config(exp_cfg, "data"), "it was made from other data")


def nonfinite_patterns(kind: str, stage: str) -> dict[str, str]:
    """{variable name pattern: why} of the variables a kind's ``stage`` files hold NaN/inf in by
    design (its ``NONFINITE``)."""
    return dict(kind_fact(kind, "NONFINITE").get(stage, {}))


def _allowed(kind: str, stage: str, name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pat) for pat in nonfinite_patterns(kind, stage))


def finite_problems(ds: xr.Dataset, stage: str, kind: str) -> list[str]:
    """Float variables (and coordinates) holding NaN or inf that the stage requires finite: every
    one of a data, structure or run file (less the kind's ``NONFINITE``), those of its
    ``FINITE_THEORY`` of a theory file (the others may hold NaN/inf on purpose: a mode that never
    ignites, a suppressed mode's tau, an open-ended plateau)."""
    if stage == "theory":
        names = [n for n in kind_fact(kind, "FINITE_THEORY") if n in ds.variables]
    elif stage not in FINITE_STAGES or (stage == "train" and int(ds.attrs.get("diverged", 0))):
        return []
    else:
        names = list(ds.variables)
    out = []
    for name in names:
        var = ds[name].variable
        if var.dtype.kind not in "fc" or _allowed(kind, stage, str(name)):
            continue
        bad = ~np.isfinite(var.values)
        if bad.any():
            first = dict(zip(var.dims, (int(i[0]) for i in np.nonzero(bad))))
            where = f" (first at {', '.join(f'{d}={i}' for d, i in first.items())})" if first else ""
            out.append(f"variable '{name}' holds {int(bad.sum())} NaN/inf value(s) of {var.size}{where}")
    return out


def _as_list(value) -> list:
    return [v.item() if isinstance(v, np.generic) else v for v in np.asarray(value).ravel().tolist()]


def coordinate_problems(ds: xr.Dataset, cfg: Mapping) -> list[str]:
    """Coordinates that a config list defines but that hold other values."""
    out = []
    for coord, key in COORD_KEYS.items():
        want = cfg.get(key)
        # a dimension's coordinate (a scalar coordinate is one run's parameter, e.g. its eps)
        if coord not in ds.dims or coord not in ds.coords or not isinstance(want, list) or not want:
            continue
        have = _as_list(ds[coord].values)
        if len(have) != len(want):
            out.append(f"coordinate '{coord}' has {len(have)} value(s), the config's '{key}' {len(want)}")
        elif all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in want):
            if not np.allclose(np.asarray(have, float), np.asarray(want, float), rtol=1e-12, atol=0):
                out.append(f"coordinate '{coord}' is {_short(have)}, the config's '{key}' {_short(want)}")
        elif [str(h) for h in have] != [str(w) for w in want]:
            out.append(f"coordinate '{coord}' is {_short(have)}, the config's '{key}' {_short(want)}")
    return out


def claim_problems(ds: xr.Dataset) -> list[str]:
    """A fit file without its claims along ``claim``."""
    missing = [v for v in CLAIM_VARIABLES if v not in ds.variables]
    if missing:
        return [f"it lacks the claim variable(s) {', '.join(missing)}"]
    odd = [v for v in CLAIM_VARIABLES if ds[v].dims != ("claim",)]
    if odd:
        return [f"its claim variable(s) {', '.join(odd)} are not along 'claim'"]
    passed = np.asarray(ds["claim_passed"].values)
    if not np.isin(passed, (0, 1)).all():
        return ["its claim_passed holds values other than 0 and 1"]
    # a claim passes only on a finite measurement compared with a prediction (Claim.passed)
    hollow = passed.astype(bool) & ~(np.isfinite(ds["claim_measured"].values.astype(float))
                                     & ~np.isnan(ds["claim_predicted"].values.astype(float)))
    if hollow.any():
        i = int(np.nonzero(hollow)[0][0])
        return [f"claim {i} ({_short(str(ds['claim_quantity'].values[i]))}) is marked passed without a finite "
                f"measured and predicted value"]
    return claim_consistency_problems(ds)


def claim_consistency_problems(ds: xr.Dataset) -> list[str]:
    """Claims whose columns contradict each other: a stored rel_error that is neither
    |measured - predicted| / |predicted| nor |measured - predicted| (Claim.rel_error), or a
    close-comparison row (finite tolerance) whose passed is not rel_error <= tolerance (and
    judged). An edit of one column (a measurement changed, a verdict flipped) shows here."""
    m = ds["claim_measured"].values.astype(float)
    p = ds["claim_predicted"].values.astype(float)
    if "claim_rel_error" not in ds:
        return []
    stored = ds["claim_rel_error"].values.astype(float)
    finite = np.isfinite(m) & np.isfinite(p)
    absolute = np.abs(m - p)
    relative = absolute / np.maximum(np.abs(p), 1e-300)

    def same(a, b):
        return np.isclose(a, b, rtol=1e-9, atol=0.0) | (a == b)

    with np.errstate(invalid="ignore"):
        wrong = (finite & ~(same(stored, relative) | same(stored, absolute))) | (~finite & np.isfinite(stored))
    if wrong.any():
        i = int(np.nonzero(wrong)[0][0])
        return [f"claim {i} ({_short(str(ds['claim_quantity'].values[i]))}) has rel_error {stored[i]:.6g}, but its "
                f"measured {m[i]:.6g} and predicted {p[i]:.6g} give {relative[i]:.6g} (relative) or "
                f"{absolute[i]:.6g}: a column was changed after the fit wrote it"]
    if "claim_tolerance" in ds:
        tol = ds["claim_tolerance"].values.astype(float)
        judged = ds["claim_judged"].values.astype(bool) if "claim_judged" in ds else np.ones(len(m), bool)
        close = np.isfinite(tol)
        with np.errstate(invalid="ignore"):
            should = judged & np.isfinite(stored) & (stored <= tol)
        passed = ds["claim_passed"].values.astype(bool)
        flipped = close & (passed != should)
        if flipped.any():
            i = int(np.nonzero(flipped)[0][0])
            return [f"claim {i} ({_short(str(ds['claim_quantity'].values[i]))}) is marked "
                    f"{'passed' if passed[i] else 'failed'} with rel_error {stored[i]:.6g} against tolerance "
                    f"{tol[i]:.6g}: a column was changed after the fit wrote it"]
    return []


_TITLE_EXPERIMENT = re.compile(r" of experiment (\S+)$")


def experiment_of(ds: xr.Dataset) -> str | None:
    """The experiment id a file was written for: its ``experiment`` attribute, else the end of its
    title ('nqf theory of experiment featurewise')."""
    found = ds.attrs.get("experiment")
    if found is None:
        m = _TITLE_EXPERIMENT.search(str(ds.attrs.get("title", "")))
        found = m.group(1) if m else None
    return None if found is None else str(found)


def experiment_problems(ds: xr.Dataset, experiment: str | None) -> list[str]:
    """A file written for another experiment (copied or linked over this one's)."""
    found = experiment_of(ds)
    if experiment is None or found is None or found == experiment:
        return []
    return [f"it was written for the experiment '{_short(found, 40)[1:-1]}', not '{experiment}'"]


def paired_dimension_problems(ds: xr.Dataset) -> list[str]:
    """Dimensions ``d`` and ``d_j`` (the two axes of one square matrix, e.g. C[mode, mode_j]) of
    other sizes: a file cut along one of them."""
    out = []
    for dim in sorted(str(d) for d in ds.dims):
        if dim.endswith("_j") and dim[:-2] in ds.dims and ds.sizes[dim] != ds.sizes[dim[:-2]]:
            out.append(f"its dimensions '{dim[:-2]}' and '{dim}' (the two axes of one square matrix) have "
                       f"sizes {ds.sizes[dim[:-2]]} and {ds.sizes[dim]}")
    return out


def file_problems(ds: xr.Dataset, stage: str, exp_cfg: Mapping, run: str | None = None,
                  experiment: str | None = None) -> list[str]:
    """Every way the ``stage`` file ``ds`` of an experiment (its whole config ``exp_cfg``, its id
    ``experiment`` where known) is wrong, one phrase each; empty when it is as the config says."""
    if stage not in RULES:
        raise ValueError(f"stage must be one of {', '.join(RULES)}, not {stage!r}")
    out = experiment_problems(ds, experiment)
    if out:
        return out
    expected = expected_config(exp_cfg, stage, run)
    out = config_problems(ds, expected)
    if not out and stage != "data":
        out = data_problems(ds, exp_cfg)
    if out:  # a file of another config: its sizes and values mean nothing here
        return out
    out += dimension_problems(ds, stage)
    out += paired_dimension_problems(ds)
    out += config_size_problems(ds, exp_cfg)
    out += coordinate_problems(ds, expected)
    out += finite_problems(ds, stage, str(exp_cfg["kind"]))
    if stage == "fit":
        out += claim_problems(ds)
        missing = [] if "diverged_runs" in ds.attrs else \
            [v for v in kind_fact(str(exp_cfg["kind"]), "FIT_VARIABLES") if v not in ds.variables]
        if missing:
            out.append(f"it lacks the variable(s) {', '.join(missing)} that the fit of a {exp_cfg['kind']} "
                       f"experiment writes")
    return out


def wrong_file(path, stage: str, problem: str) -> ResultFileError:
    """The error for a readable but wrong file: its path, what is wrong, and the rule that makes it."""
    return ResultFileError(f"The results file {path} is readable but wrong: {problem} (it is made by the rule "
                           f"'{RULES[stage]}').",
                           path, unusable=True)


def open_stage(path: str | os.PathLike, stage: str, exp_cfg: Mapping, *, run: str | None = None,
               require: Sequence[str] = (), experiment: str | None = None) -> xr.Dataset:
    """:func:`nqf.io.netcdf.open_result` of a ``stage`` file, then :func:`file_problems`; a wrong file raises
    ResultFileError(unusable=True) naming it and its rule. ``run``: the run id of a train file
    (default: the file's stem); ``experiment``: the experiment id the file must have been written
    for (its ``experiment`` attribute or title)."""
    if stage == "train" and run is None:
        run = Path(path).stem
    ds = open_result(path, made_by=RULES.get(stage, stage), require=tuple(require))
    found = file_problems(ds, stage, exp_cfg, run, experiment)
    if found:
        raise wrong_file(path, stage, found[0])
    return ds


def check_derived(source: xr.Dataset, derived: xr.Dataset, derived_path, derived_stage: str,
                  dims: Sequence[str] | None = None) -> None:
    """The ``derived`` file (made from ``source``, e.g. theory from structure) has the size of every
    dimension the two share (of those in ``dims``, where given); else it is stale or foreign and
    raises naming it."""
    shared = set(source.sizes) & set(derived.sizes)
    for dim in sorted(shared if dims is None else shared & set(dims)):
        if source.sizes[dim] != derived.sizes[dim]:
            raise wrong_file(derived_path, derived_stage,
                             f"its dimension '{dim}' has size {derived.sizes[dim]}, the file it is made from "
                             f"{source.sizes[dim]}")
