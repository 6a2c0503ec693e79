"""The Snakemake DAG end to end on config/test.yaml, through the snakemake CLI."""
import csv
import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from helpers import ROOT, read_test_config, snakemake, time_limit

from nqf.experiments.claims import CHECKS

pytestmark = pytest.mark.workflow
# Outputs every rerun of a fit also replans: the summary and the reproduction page.
SUMMARIES = {"results/summary.csv", "results/reproduction.md", "results/reproduction.html",
             "results/reproduction_verdicts.html"}


def planned_outputs(proc) -> set[str]:
    """Output files of the jobs a dry run would execute."""
    text = proc.stdout + proc.stderr
    outs = set()
    for line in re.findall(r"^\s+output: (.+)$", text, flags=re.M):
        outs.update(p.strip() for p in line.split(","))
    return outs


def write_config(tmp_path, **changes):
    cfg = read_test_config()
    for path, value in changes.items():
        node = cfg
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    out = tmp_path / f"config_{len(list(tmp_path.glob('config_*')))}.yaml"
    # sort_keys=False keeps the config as written (key order is not a parameter of any rule)
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


# `finished` (a finished config/test.yaml run, shared with the other workflow tests): conftest.py


def test_all_outputs_and_passing_claims(finished):
    work, _ = finished
    res = work / "results"
    for exp in ("featurewise", "featurewise_b"):
        for sub in (f"data/{exp}.nc", f"structure/{exp}.nc", f"theory/{exp}.nc", f"fits/{exp}.nc",
                    f"runs/{exp}/gd.nc", f"figures/{exp}.pdf", f"figures/{exp}.png"):
            assert (res / sub).stat().st_size > 0, sub
    theory = xr.open_dataset(res / "theory/featurewise.nc")
    assert theory["z"].dims == ("time", "mode") and theory["t_star"].dims == ("mode",)
    fits = xr.open_dataset(res / "fits/featurewise.nc")
    assert fits["t_star_measured"].dims == ("mode",) and fits["t_star_predicted"].dims == ("mode",)
    assert np.all(np.abs(fits["t_star_measured"] - fits["t_star_predicted"]) / fits["t_star_predicted"] < 0.02)
    runs = xr.open_mfdataset(str(res / "runs/featurewise/*.nc"), combine="nested", concat_dim="run")
    assert "loss" in runs and "time" in runs.coords
    for attr in ("Conventions", "title", "history", "nqf_version", "git_commit", "config_json"):
        assert attr in theory.attrs
    with open(res / "summary.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {"experiment", "quantity", "checks", "source", "reading", "predicted", "measured", "rel_error",
            "tolerance", "tolerance_source", "passed"} <= set(rows[0])
    assert len(rows) >= 10 and all(r["passed"] == "True" for r in rows), rows
    # every row says what it checks, under which reading, and where a paper claim comes from
    assert {r["checks"] for r in rows} <= set(CHECKS) and all(r["reading"] for r in rows)
    assert all("Fig." in r["source"] for r in rows if r["checks"] == "paper")
    assert all(r["source"].startswith("holds by construction (") for r in rows if r["checks"] == "construction")
    assert any(r["checks"] == "construction" for r in rows)  # featurewise's Assumption 1 row
    page = (res / "reproduction.md").read_text()
    assert "## Fig. 6" in page and "## Fig. 7" in page and "teacher_student" in page
    assert "<table>" in (res / "reproduction.html").read_text()
    assert "nothing to be done" in (snakemake(work, "--configfile", str(finished[1]), "-n").stdout
                                    + snakemake(work, "--configfile", str(finished[1]), "-n").stderr).lower()


def test_changing_eps_reruns_only_that_experiment_from_train_on(finished, tmp_path):
    work, _ = finished
    cfg = write_config(tmp_path, experiments__featurewise__eps=2.0e-3)
    planned = planned_outputs(snakemake(work, "--configfile", str(cfg), "-n"))
    assert planned == {"results/runs/featurewise/gd.nc", "results/theory/featurewise.nc",
                       "results/fits/featurewise.nc", "results/figures/featurewise.pdf",
                       "results/figures/featurewise.png", "results/figures/featurewise.claims.csv",
                                 "results/figures/featurewise.claims.html"} | SUMMARIES


def test_changing_data_reruns_every_stage_of_that_experiment_only(finished, tmp_path):
    work, _ = finished
    cfg = write_config(tmp_path, experiments__featurewise_b__data_seed=11)
    planned = planned_outputs(snakemake(work, "--configfile", str(cfg), "-n"))
    assert planned and all("featurewise_b" in p or p in SUMMARIES for p in planned)
    assert "results/data/featurewise_b.nc" in planned


def test_changing_figure_style_reruns_only_figures(finished, tmp_path):
    work, _ = finished
    cfg = write_config(tmp_path, figures__dpi=72)
    planned = planned_outputs(snakemake(work, "--configfile", str(cfg), "-n"))
    assert planned and all(p.startswith("results/figures/") for p in planned)


@pytest.mark.parametrize("change, key", [
    ({"experiments__featurewise__eps": -1.0e-3}, "experiments.featurewise.eps"),
    ({"experiments__featurewise__kind": "featurewize"}, "experiments.featurewise.kind"),
    ({"experiments__featurewise__epsilon": 1.0e-3}, "experiments.featurewise.epsilon"),
    ({"experiments__featurewise__lr": "fast"}, "experiments.featurewise.lr"),
])
def test_bad_config_fails_before_any_job(tmp_path, change, key):
    cfg = write_config(tmp_path, **change)
    proc = snakemake(tmp_path, "--configfile", str(cfg), check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Invalid configuration: " in text and f"'{key}'" in text
    assert "Traceback" not in text
    assert not (tmp_path / "results").exists()


def test_adding_an_eps_value_trains_only_the_new_runs(finished, tmp_path):
    """Runs are narrowed to their own eps (run_config): an added eps value plans its own training
    jobs and the experiment's theory, fit and figure, nothing of finished runs or other experiments."""
    work, _ = finished
    base = read_test_config()
    eps = base["experiments"]["competition"]["eps"] + [1.0e-9]
    cfg = write_config(tmp_path, experiments__competition__eps=eps)
    planned = planned_outputs(snakemake(work, "--configfile", str(cfg), "-n"))
    trained = {p for p in planned if p.startswith("results/runs/")}
    assert trained == {"results/runs/competition/eps1e-09.nc"}
    assert planned - trained <= {"results/theory/competition.nc", "results/fits/competition.nc",
                                 "results/figures/competition.pdf", "results/figures/competition.png",
                                 "results/figures/competition.claims.csv",
                                 "results/figures/competition.claims.html"} | SUMMARIES


def test_adding_a_seed_trains_only_its_block(finished, tmp_path):
    """teacher_student runs one job per seed in config/test.yaml (seeds_per_job: 1): an appended
    seed plans only its own training job and the experiment's fit, figure and the summary; run in a
    copy of the finished tree, the fit then holds every seed and no finished run file is rewritten."""
    import shutil

    from nqf.io.netcdf import open_result

    work, _ = finished
    copy = tmp_path / "wf"
    shutil.copytree(work, copy, symlinks=True)  # copy2 keeps the mtimes snakemake compares
    base = read_test_config()
    seeds = base["experiments"]["teacher_student"]["seeds"]
    new = max(seeds) + 1
    cfg = write_config(tmp_path, experiments__teacher_student__seeds=seeds + [new])
    planned = planned_outputs(snakemake(copy, "--configfile", str(cfg), "-n"))
    trained = {p for p in planned if p.startswith("results/runs/")}
    assert trained == {f"results/runs/teacher_student/mlp.seeds-{new}.nc"}
    assert planned - trained == {"results/fits/teacher_student.nc", "results/figures/teacher_student.pdf",
                                 "results/figures/teacher_student.png",
                                 "results/figures/teacher_student.claims.csv",
                                 "results/figures/teacher_student.claims.html"} | SUMMARIES
    old = {p: p.stat().st_mtime_ns for p in (copy / "results" / "runs").rglob("*.nc")}
    snakemake(copy, "--configfile", str(cfg))
    assert {p: p.stat().st_mtime_ns for p in old} == old
    with xr.open_dataset(copy / "results" / "fits" / "teacher_student.nc") as fit:
        assert sorted(fit["seed"].values.tolist()) == sorted(seeds + [new])
    run = open_result(copy / "results" / "runs" / "teacher_student" / f"mlp.seeds-{new}.nc")
    assert run["seed"].values.tolist() == [new] and run.attrs["seed_block_of"] == "mlp"


def test_interrupted_run_is_completed_without_redoing_finished_jobs(tmp_path):
    """Kill a training job mid-way (SIGKILL, no chance to clean up); the next snakemake call
    finishes the work without redoing any finished job."""
    import os
    import signal
    import time

    # featurewise_b first, in a call of its own: finished work of another experiment, there before
    # the interrupted call starts. The interrupted call then finishes featurewise's data and
    # structure jobs and starts its training, which is killed as soon as its log says it started:
    # 60 000 steps take ~11 s at the ~0.19 ms a step measured on 2 CI-kind cores, against the
    # ~0.1 s between two looks at the log (before: 250 000 steps, killed once featurewise_b had
    # finished beside it, and the second call retrained them, ~45 s)
    cfg = write_config(tmp_path, experiments__featurewise__steps=60_000,
                       experiments__featurewise__n_record=60)
    cfg_data = yaml.safe_load(cfg.read_text())
    cfg_data["experiments"] = {k: cfg_data["experiments"][k] for k in ("featurewise", "featurewise_b")}
    cfg.write_text(yaml.safe_dump(cfg_data, sort_keys=False))
    work = tmp_path / "run"
    snakemake(work, "results/figures/featurewise_b.png", "--configfile", str(cfg))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(work),
           "--cores", "2", "--configfile", str(cfg)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log = work / "results" / "logs" / "train" / "featurewise" / "gd.log"
    deadline = time.time() + time_limit(600)
    while time.time() < deadline and proc.poll() is None and not (log.exists() and "start train" in log.read_text()):
        time.sleep(0.1)
    assert log.exists() and "start train" in log.read_text(), "the training job never started"
    killed = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"train.py") and str(work).encode() in a for a in args):
            os.kill(int(cmdline.parent.name), signal.SIGKILL)  # the training job only
            killed += 1
    assert killed == 1
    proc.wait(timeout=time_limit(300))
    assert proc.returncode != 0  # snakemake saw the job die
    assert not (work / "results" / "runs" / "featurewise" / "gd.nc").exists()
    finished_before = {p: p.stat().st_mtime_ns for p in (work / "results").rglob("*.nc")}
    assert {"data/featurewise.nc", "runs/featurewise_b/gd.nc"} <= {
        str(p.relative_to(work / "results")) for p in finished_before}
    again = snakemake(work, "--configfile", str(cfg))  # a plain call
    assert again.returncode == 0
    assert (work / "results" / "runs" / "featurewise" / "gd.nc").exists()
    assert (work / "results" / "figures" / "featurewise.png").exists()
    for path, mtime in finished_before.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was redone"


def test_html_report_groups_figures_and_claims_by_experiment(finished):
    work, cfg = finished
    snakemake(work, "--configfile", str(cfg), "--report", "results/report.html")
    html = (work / "results" / "report.html").read_text()
    for exp in yaml.safe_load(cfg.read_text())["experiments"]:
        assert f"{exp}.claims.csv" in html and f"exp={exp}" in html, exp
    assert "summary.csv" in html and "reproduction.html" in html
    # the results: every experiment's PNG (shown inline), PDF and claims table (HTML, shown inline)
    results = json.loads(re.search(r"var results = (\{.*?\});\n", html, re.S).group(1))
    for exp in yaml.safe_load(cfg.read_text())["experiments"]:
        mimes = {Path(p).name: r["mime_type"] for p, r in results.items() if f"/{exp}." in p}
        assert mimes == {f"{exp}.png": "image/png", f"{exp}.pdf": "application/pdf",
                         f"{exp}.claims.html": "text/html", f"{exp}.claims.csv": "text/csv"}, mimes
    # the front page: the workflow's description and the verdicts table, and no RST error
    front = json.loads(re.search(r"var workflow_desc = (\".*?\");\n", html, re.S).group(1))
    assert "system-message" not in html and "Verdicts." in front and "The workflow." in front
    assert re.search(r"<b>\d+ checked rows, \d+ pass</b>", front)
    assert "<td>Fig. 3 (left, middle)</td>" in front and "<code>featurewise</code>: <b>holds (" in front


def test_html_report_shows_a_hostile_description_as_text(finished, tmp_path):
    """Issue 30: Snakemake writes a job's params unescaped into the report's <script id="results">
    and renders captions without escaping, so a description holding </script> used to end that
    script and turn the rest into live HTML. A copy of the finished run with such a description
    reruns its figure and the pages, and the report keeps the text as text."""
    import shutil
    from html.parser import HTMLParser

    hostile = "</script><img src=x onerror=alert(1)> javascript:alert(2)"
    work = tmp_path / "wf"
    shutil.copytree(finished[0], work, symlinks=True)  # mtimes kept: only what the description changes reruns
    cfg = write_config(tmp_path, experiments__featurewise_b__description=hostile)
    usage = work / "results" / "benchmarks" / "jobs.tsv"
    served_before = len(usage.read_text().splitlines())
    run = snakemake(work, "--configfile", str(cfg))
    # the tests' shared job server ran every job of the run but the target rule `all`
    assert "forks of the job server that NQF_JOB_SERVER_SOCKET names" in run.stderr
    assert len(usage.read_text().splitlines()) - served_before == run.stderr.count("Finished job") - 1 > 0
    snakemake(work, "--configfile", str(cfg), "--report", "results/report.html")
    html = (work / "results" / "report.html").read_text()

    class Tags(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags = []

        def handle_starttag(self, tag, attrs):
            self.tags.append((tag, dict(attrs)))

    parser = Tags()
    parser.feed(html)
    assert not [t for t, attrs in parser.tags if "onerror" in attrs or attrs.get("src") == "x"]
    assert "</script><img" not in html
    results = json.loads(re.search(r"var results = (\{.*?\});\n", html, re.S).group(1))
    png = next(r for p, r in results.items() if p.endswith("/featurewise_b.png"))
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt; javascript:alert(2)" in png["caption"]
    assert "href=\"javascript:alert" not in png["caption"]
    assert "\\x3c/script>\\x3cimg src=x onerror=alert(1)>" in png["job_properties"]["params"]
    for page in ("figures/featurewise_b.claims.html", "reproduction.html", "reproduction_verdicts.html"):
        assert "<img" not in (work / "results" / page).read_text(), page


# Empty CF tables for the checker, which otherwise downloads them (no file here uses a standard
# name, area type or region, so an empty table checks the same).
_CF_TABLES = {"std": "<standard_name_table><version_number>0</version_number><last_modified>2026-01-01T00:00:00Z"
                     "</last_modified></standard_name_table>",
              "area": "<area_type_table><version_number>0</version_number><date>2026-01-01</date></area_type_table>",
              "region": "<standardized_region_list><version_number>0</version_number><date>2026-01-01</date>"
                        "</standardized_region_list>"}


def test_every_netcdf_file_passes_the_cf_checker(finished, tmp_path):
    """cfchecker (PyPI; needs the UDUNITS-2 library) on every NetCDF file of the run: 0 errors and
    0 warnings each. Skipped where it cannot be imported, except in CI, which installs it."""
    import os

    try:
        import cfchecker.cfchecks  # noqa: F401
    except Exception as exc:  # ImportError, or cfunits' FileNotFoundError without UDUNITS-2
        if os.environ.get("CI"):
            raise
        pytest.skip(f"cfchecker not usable here ({type(exc).__name__}: {exc})")
    tables = {}
    for name, text in _CF_TABLES.items():
        tables[name] = tmp_path / f"{name}.xml"
        tables[name].write_text('<?xml version="1.0"?>\n' + text + "\n")
    files = sorted((finished[0] / "results").rglob("*.nc"))
    assert len(files) > 40
    proc = subprocess.run([sys.executable, "-m", "cfchecker.cfchecks", "-s", str(tables["std"]), "-a", str(tables["area"]),
                           "-r", str(tables["region"]), *map(str, files)], capture_output=True, text=True, timeout=time_limit(600))
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    assert out.count("ERRORS detected: 0") == len(files) and out.count("WARNINGS given: 0") == len(files), \
        "\n".join(line for line in out.splitlines() if line.startswith(("CHECKING NetCDF", "ERROR", "WARN")))[-4000:]


def test_every_variable_says_what_it_is(finished):
    """long_name on every variable and coordinate; units on every numeric one but flags (CF 3.1)."""
    from nqf.io.netcdf import open_result

    for path in sorted((finished[0] / "results").rglob("*.nc")):
        with xr.open_dataset(path) as ds:
            for name, var in ds.variables.items():
                assert "long_name" in var.attrs, (path, name)
                if var.dtype.kind in "fiu" and "flag_values" not in var.attrs:
                    assert "units" in var.attrs, (path, name)
        open_result(path)  # labels of text dimensions restored (architecture_label -> architecture)


def test_provenance_names_the_command_and_the_workflow_commit(finished):
    from nqf.io.netcdf import git_commit

    with xr.open_dataset(finished[0] / "results" / "runs" / "featurewise" / "gd.nc") as ds:
        assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: snakemake .*--configfile .*test\.yaml", ds.attrs["history"])
        assert ds.attrs["git_commit"] == git_commit(ROOT) != "unknown"


def test_plain_xarray_on_every_kinds_run_files_is_correct_or_refused(finished):
    """An analyst's xr.open_mfdataset on results/runs/<exp>/*.nc (nqf.io.run_layout): the plain
    call (combine by coordinates) refuses more than one file, since 'run' has no index to order
    by; the nested call along 'run' gives every file's variables and coordinates exactly, or
    refuses runs whose axes differ in length (AlignmentError) or in their coordinates
    (ValueError). Never NaN that the file does not hold: each value is compared with the file's
    own. Every kind of config/test.yaml, with no warning."""
    import warnings

    res = finished[0] / "results"
    opened, refused = set(), set()
    for exp in read_test_config()["experiments"]:
        files = sorted(str(p) for p in (res / "runs" / exp).glob("*.nc"))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            if len(files) > 1:
                with pytest.raises(ValueError, match="Could not find any dimension coordinates"):
                    xr.open_mfdataset(files)
            try:
                both = xr.open_mfdataset(files, combine="nested", concat_dim="run").load()
            except (ValueError, xr.AlignmentError) as exc:
                assert re.search(r"conflicting dimension sizes|not present in all datasets", str(exc)), (exp, exc)
                refused.add(exp)
                continue
        opened.add(exp)
        assert both.sizes["run"] == len(files)
        for i, path in enumerate(files):
            with xr.open_dataset(path) as one:
                assert set(both.data_vars) == set(one.data_vars), (exp, path)  # none NaN-filled for a run that lacks it
                for name in [*one.data_vars, *one.coords]:
                    got = both[name].isel(run=i) if "run" in both[name].dims else both[name]
                    want = one[name].isel(run=0) if "run" in one[name].dims else one[name]
                    assert got.shape == want.shape, (exp, path, name)
                    assert np.array_equal(got.values, want.values, equal_nan=got.dtype.kind in "fc"), (exp, path, name)
    assert opened and refused, (opened, refused)  # the test config has both kinds of experiment


def test_run_files_open_as_one_labelled_dataset_per_experiment(finished):
    """nqf.open_runs per experiment of config/test.yaml (a selection where its runs differ in
    shape, as docs/results.md's table says): one Dataset along `run`, the run parameters as
    coordinates, no NaN but the padding a kind declares, no warning; and the raw
    xr.open_mfdataset recipe gives the same."""
    import warnings

    from nqf.io.runs import CONCAT, by_record, open_runs
    from nqf.pipeline.verify_stage import nonfinite_patterns

    res = finished[0] / "results"
    cfg = read_test_config()["experiments"]
    select = {"collapse": {"architecture": "rectangular"}, "featurewise_powerlaw": {"run": "seeds"}}
    for exp, exp_cfg in cfg.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ds = open_runs(exp, res, **select.get(exp, {}))
        assert "run" in ds.dims and {"experiment", "experiment_kind"} <= set(ds.coords), exp
        allowed = nonfinite_patterns(exp_cfg["kind"], "train")
        for name, var in ds.data_vars.items():
            if var.dtype.kind == "f" and not any(fnmatch.fnmatch(name, p) for p in allowed):
                assert not var.isnull().any(), (exp, name)
    comp = open_runs("competition", res)
    assert comp.sizes["run"] == 2 and comp["eps"].dims == ("run",) and comp["step"].dims == ("run", "record")
    assert sorted(comp["eps"].values) == sorted(cfg["competition"]["eps"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        raw = xr.open_mfdataset(sorted(str(p) for p in (res / "runs" / "competition").glob("*.nc")), combine="nested",
                                concat_dim="run", preprocess=by_record, **CONCAT).load()
    xr.testing.assert_allclose(raw.drop_attrs(), comp.drop_attrs())
    with pytest.raises(ValueError, match=r"dimension 'mode' differs between runs .* open_runs\('collapse', architecture="):
        open_runs("collapse", res)

