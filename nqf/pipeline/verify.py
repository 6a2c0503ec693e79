"""Check every results file of a config against its stage's contract, whatever its mtime.

Snakemake reruns a job when an input is newer than its output, never because a file's content
changed: a file edited or copied in with its old mtime (``cp -a``, a restore from a backup, a
tool that keeps mtimes) is used as it is. :func:`verify_results` opens each NetCDF file the
config's DAG holds with the same checks the jobs make on read (:func:`nqf.pipeline.verify_stage.open_stage`:
nqf's file, the experiment it was written for, expected variables, dims and sizes from the
config, finite values where the stage requires them), checks that theory and run files agree
with their structure file in size, and moves each wrong file aside (``<name>.unusable``), so that
the next ``snakemake`` call regenerates it and everything made from it. Run it as
``python -m nqf verify`` with the config options of the snakemake call.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from nqf.errors import ResultFileError
from nqf.experiments import run_ids
from nqf.pipeline.verify_stage import check_derived, open_stage, run_dims_of_structure

# stage -> folder under results/ (train files are results/runs/<exp>/<run>.nc)
FOLDERS = {"data": "data", "structure": "structure", "theory": "theory", "fit": "fits"}


@dataclass
class Finding:
    path: Path
    stage: str
    problem: str  # "" for a file that holds
    action: str = ""


def stage_files(experiments: Mapping[str, Mapping], results: Path) -> Iterator[tuple[str, str, Path]]:
    """(experiment id, stage, path) of every NetCDF file the config's DAG makes, in stage order."""
    for exp_id, exp in experiments.items():
        for stage in ("data", "structure", "theory"):
            yield exp_id, stage, results / FOLDERS[stage] / f"{exp_id}.nc"
        for run in run_ids(exp):
            yield exp_id, "train", results / "runs" / exp_id / f"{run}.nc"
        yield exp_id, "fit", results / FOLDERS["fit"] / f"{exp_id}.nc"


FIGURE_EXTENSIONS = ("pdf", "png", "claims.csv", "claims.html")
REPORT_FILES = ("summary.csv", "reproduction.md", "reproduction.html", "reproduction_verdicts.html")


def made_by(experiments: Mapping[str, Mapping], results: Path = Path("results")) -> dict[Path, str]:
    """Every file the config's DAG makes under ``results`` (logs and benchmarks aside) -> the rule
    that makes it: the NetCDF files of :func:`stage_files`, each experiment's figure and claims
    tables, the structure-matrix figure, the summary and the reproduction report."""
    results = Path(results)
    out = {p: stage for _, stage, p in stage_files(experiments, results)}
    out.update({results / "figures" / f"{exp}.{ext}": "figure" for exp in experiments for ext in FIGURE_EXTENSIONS})
    out.update({results / "figures" / f"structure_matrices.{ext}": "structure_figure" for ext in ("pdf", "png")})
    out[results / "summary.csv"] = "summary"
    out.update({results / name: "reproduction" for name in REPORT_FILES[1:]})
    return out


def outputs(experiments: Mapping[str, Mapping], results: Path = Path("results")) -> list[Path]:
    """The files of :func:`made_by`; the Snakefile's ``rule all`` asks for all of them."""
    return list(made_by(experiments, results))


def _read_table(path: Path) -> tuple[list[str], list[dict]] | None:
    """(header, rows) of a CSV file; None when it cannot be read as one."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            return list(reader.fieldnames or ()), rows
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def table_problem(path: Path, experiments: Mapping[str, Mapping], results: Path = Path("results"), *,
                  against_fits: bool = False) -> str | None:
    """Why the summary or a claims table of the DAG does not hold what its rule writes (None when
    it may): its header must be :data:`nqf.experiments.claims.SUMMARY_COLUMNS`; a claims table's
    rows are all of its experiment; the summary names only the config's experiments and every one
    whose claims table has rows; with ``against_fits``, every row is the one its fit file gives
    (:func:`rows_problem`). (The form, a table cut short, is
    :func:`nqf.pipeline.results_tree.output_problem`'s.)"""
    from nqf.experiments.claims import SUMMARY_COLUMNS

    path, results = Path(path), Path(results)
    table = _read_table(path)
    if table is None:
        return None  # the form check names it
    header, rows = table
    if tuple(header) != tuple(SUMMARY_COLUMNS):
        return f"has the columns {', '.join(header[:4])}{', ...' if len(header) > 4 else ''}, not nqf's claims columns"
    found = {r["experiment"] for r in rows}
    if path.name.endswith(".claims.csv"):
        exp = path.name.removesuffix(".claims.csv")
        other = sorted(found - {exp})
        if other:
            return f"holds rows of another experiment ({other[0]})"
        return rows_problem(path, rows, [exp], results) if against_fits else None
    unknown = sorted(found - set(experiments))
    if unknown:
        return f"holds rows of an experiment the config does not run ({unknown[0]})"
    for exp in sorted(set(experiments) - found):
        claims = _read_table(results / "figures" / f"{exp}.claims.csv")
        if claims is not None and claims[1]:
            return f"lacks the rows of experiment {exp} (its claims table has them): it is cut short"
    return rows_problem(path, rows, sorted(experiments), results) if against_fits else None


def rows_problem(path: Path, rows: list[dict], exps, results: Path) -> str | None:
    """The first row of the claims table or summary ``path`` that its experiments' fit files do
    not give (rebuilt as the rules write them: nqf.experiments.claims.summary_rows); None when
    every row is theirs, when a fit file cannot be read (its own check names it), or when a fit
    file is newer than the table (Snakemake remakes the table from it)."""
    import csv
    import io

    from nqf.experiments.claims import SUMMARY_COLUMNS, summary_csv, summary_rows
    from nqf.io.netcdf import open_result

    rebuilt = []
    for exp in exps:
        fit_path = Path(results) / FOLDERS["fit"] / f"{exp}.nc"
        try:
            if fit_path.stat().st_mtime > Path(path).stat().st_mtime:
                return None
            with open_result(fit_path, made_by="fit") as fit:
                rebuilt += summary_rows(exp, fit)
        except (ResultFileError, OSError, ValueError):
            return None
    expected = list(csv.DictReader(io.StringIO(summary_csv(rebuilt))))
    key = lambda row: tuple(row.get(c) or "" for c in SUMMARY_COLUMNS)  # noqa: E731
    missing = sorted(set(map(key, expected)) - set(map(key, rows)))
    extra = [r for r in rows if key(r) not in set(map(key, expected))]
    if extra:
        r = extra[0]
        twin = next((e for e in expected if (e["experiment"], e["quantity"], e["reading"])
                     == (r.get("experiment"), r.get("quantity"), r.get("reading"))), None)
        if twin is not None:
            col = next(c for c in SUMMARY_COLUMNS if (r.get(c) or "") != (twin.get(c) or ""))
            return (f"has {col} {_cut(r.get(col))} for {r['experiment']}: {_cut(r['quantity'])}, where its fit "
                    f"file gives {_cut(twin.get(col))}: it was changed after the rule wrote it")
        return f"holds a row its fit files do not give ({r.get('experiment')}: {_cut(r.get('quantity'))})"
    if missing:
        return f"lacks {len(missing)} row(s) its fit files give: it is out of date or cut short"
    return None


def _cut(text, limit: int = 60) -> str:
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


def verify_results(experiments: Mapping[str, Mapping], results: str | os.PathLike = "results", *,
                   move_aside: bool = True, only=None, progress=None,
                   regenerated_by: str = "the next snakemake call") -> list[Finding]:
    """One Finding per existing results file of ``experiments`` (a validated config's
    ``experiments``), or per file of ``only`` (paths) among them; missing files are left to
    snakemake. Wrong files are moved aside unless ``move_aside`` is False. ``progress(i, n,
    path)`` is called before each file."""
    from nqf.pipeline.jobs import set_aside

    results = Path(results)
    files = [f for f in stage_files(experiments, results) if f[2].exists()]
    if only is not None:
        wanted = {Path(p) for p in only}
        files = [f for f in files if f[2] in wanted]
    findings, structures = [], {}

    def structure_of(exp_id):
        """The experiment's structure file for the size cross-checks (None if it does not open)."""
        if exp_id not in structures:
            path = results / FOLDERS["structure"] / f"{exp_id}.nc"
            try:
                structures[exp_id] = open_stage(path, "structure", experiments[exp_id], experiment=exp_id)
            except Exception:  # noqa: BLE001 (its own check names it, where it is checked)
                structures[exp_id] = None
        return structures[exp_id]

    for i, (exp_id, stage, path) in enumerate(files):
        if progress:
            progress(i, len(files), path)
        exp = experiments[exp_id]
        try:
            with open_stage(path, stage, exp, experiment=exp_id) as ds:
                if stage == "structure":
                    structures[exp_id] = ds.copy()
                elif stage == "theory" and structure_of(exp_id) is not None:
                    check_derived(structures[exp_id], ds, path, "theory")
                elif stage == "train" and structure_of(exp_id) is not None:
                    check_derived(structures[exp_id], ds, path, "train",
                                  dims=run_dims_of_structure(exp["kind"]))
        except ResultFileError as exc:
            action = set_aside(exc, regenerated_by).strip() if move_aside else "left in place (this call moves nothing)"
            findings.append(Finding(path, stage, str(exc), action))
            continue
        except Exception as exc:  # noqa: BLE001 (a file the checks themselves trip over: said, not moved)
            findings.append(Finding(path, stage, f"the check itself failed on it ({type(exc).__name__}: "
                                                 f"{' '.join(str(exc).split())[:200]}); please report it",
                                    "left in place"))
            continue
        findings.append(Finding(path, stage, ""))
    # the summary and the claims tables, row by row against their fit files
    from nqf.pipeline.results_tree import move_aside as _move_aside

    for path, rule in made_by(experiments, results).items():
        if path.suffix != ".csv" or not path.is_file() or (only is not None and path not in wanted):
            continue
        problem = table_problem(path, experiments, results, against_fits=True)
        if problem is None:
            findings.append(Finding(path, rule, ""))
            continue
        moved, sentence = _move_aside(path, f"{problem} (it is made by the rule '{rule}')", move=move_aside)
        action = (f"It was moved aside to {path.name}.unusable, so {regenerated_by} regenerates it." if moved
                  else "left in place (this call moves nothing)" if not move_aside else sentence)
        findings.append(Finding(path, rule, f"The results file {path} is readable but wrong: it {problem}.", action))
    return findings
