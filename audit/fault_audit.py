"""Fault-injection audit of the workflow (audit/README.md, "Fault audit").

Makes one finished run of config/test.yaml in <work>/template, then for each fault copies that
tree (cp -a: mtimes kept) to a fresh directory, injects the fault, reruns snakemake (--cores 1),
applies the recovery the output asks for (a plain rerun after a refusal, --unlock) and compares
every results file with the template's. Writes <out>/fault_audit.md and fault_audit.csv.

    PYTHONPATH=. .venv/bin/python audit/fault_audit.py [--work DIR] [--only NAME,...] [--reuse-template]
"""
from __future__ import annotations

import argparse
import csv
import filecmp
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import xarray as xr

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
R = Path("results")


def snakemake_cmd(work: Path, *args: str, config: Path | None = None) -> list[str]:
    return [PY, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(work),
            "--configfile", str(config or REPO / "config" / "test.yaml"), "--cores", "1", *args]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def run(work: Path, *args: str, config: Path | None = None, preexec=None) -> tuple[int, str]:
    p = subprocess.run(snakemake_cmd(work, *args, config=config), capture_output=True, text=True,
                       env=env(), preexec_fn=preexec, timeout=900)
    return p.returncode, p.stdout + p.stderr


def start(work: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(snakemake_cmd(work, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env(), start_new_session=True)


# -- injections ------------------------------------------------------------------------------

def keep_mtime(path: Path, change: Callable[[Path], None]) -> None:
    st = path.stat()
    change(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def truncate(p):
    keep_mtime(p, lambda q: q.write_bytes(q.read_bytes()[: q.stat().st_size // 2]))


def random_bytes(p):
    keep_mtime(p, lambda q: q.write_bytes(np.random.default_rng(0).bytes(q.stat().st_size)))


def zero_fill(p):
    keep_mtime(p, lambda q: q.write_bytes(b"\0" * q.stat().st_size))


def empty(p):
    keep_mtime(p, lambda q: q.write_bytes(b""))


def delete(p):
    p.unlink()


def copy_over(src: str, old_mtime: bool = True):
    """Another file copied in place (cp -a: the source's mtime; else the mtime of now)."""
    def inject(p):
        (shutil.copy2 if old_mtime else shutil.copyfile)(R_ROOT[0] / src, p)
    return inject


R_ROOT: list[Path] = [Path(".")]  # the fault's work directory (set before each injection)


def nc_edit(edit: Callable[[xr.Dataset], xr.Dataset], old_mtime: bool):
    """Rewrite a NetCDF file with an edit (a tool other than nqf), keeping its old mtime or not."""
    def inject(p):
        st = p.stat()
        with xr.open_dataset(p, engine="netcdf4") as ds:
            ds = edit(ds.load())
        ds.to_netcdf(p, engine="netcdf4")
        if old_mtime:
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    return inject


def set_values(var, value, where=np.s_[...]):
    def edit(ds):
        v = ds[var].values.copy()
        v[where] = value
        ds[var].values = v
        return ds
    return edit


def text_edit(old: str, new: str):
    def inject(p):
        keep_mtime(p, lambda q: q.write_text(q.read_text().replace(old, new, 1)))
    return inject


def other_data(key: str, value):
    """The file's recorded data config (attribute data_config_json) says another ``key``, as for a
    file made from other data (retrained, or copied in from a run of another config)."""
    def edit(ds):
        cfg = json.loads(ds.attrs["data_config_json"])
        cfg[key] = value
        return ds.assign_attrs(data_config_json=json.dumps(cfg, sort_keys=True))
    return edit


def edit_summary_measured(p):
    """One numeric 'measured' cell of summary.csv changed (x 1.5), the rest of the file as written;
    new mtime."""
    lines = p.read_bytes().decode().splitlines(keepends=True)  # line ends as written (CRLF)
    header = next(csv.reader([lines[0]]))
    col = header.index("measured")
    for i, line in enumerate(lines[1:], start=1):
        cells = next(csv.reader([line]))
        try:
            value = float(cells[col])
        except (ValueError, IndexError):
            continue
        new_line = line.replace(f",{cells[col]},", f",{value * 1.5!r},", 1)
        edited = next(csv.reader([new_line]))
        if value == 0 or [c for j, c in enumerate(edited) if j != col] != [c for j, c in enumerate(cells) if j != col]:
            continue  # the text also stands in an earlier cell: take another row
        lines[i] = new_line
        p.write_bytes("".join(lines).encode())
        return
    raise RuntimeError("no row with a measured value to edit")


def runs_replaced_by_file(p):
    shutil.rmtree(p)
    p.write_text("not a folder\n")


def elsewhere_of(work: Path) -> Path:
    return work.parent / f"{work.name}.results_elsewhere"


def results_linked_and_edited(p):
    """results/ moved to another folder and linked there (results -> elsewhere); then, inside it, a
    run's last loss changed by a tool that keeps the mtime."""
    elsewhere = elsewhere_of(p.parent)
    shutil.rmtree(elsewhere, ignore_errors=True)
    p.rename(elsewhere)
    p.symlink_to(elsewhere, target_is_directory=True)
    nc_edit(set_values("loss", 0.5, np.s_[..., -1]), old_mtime=True)(p / "runs/featurewise_b/gd.nc")


def results_snapshot(work: Path) -> dict[str, tuple[str, int]]:
    """relative path -> (SHA-256, mtime_ns) of every file under results/ (through a link), logs,
    benchmarks and hidden files aside."""
    out = {}
    root = work / R
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        rel_dir = Path(dirpath).relative_to(root)
        dirnames[:] = [d for d in dirnames if not d.startswith(".")
                       and not (rel_dir == Path(".") and d in ("logs", "benchmarks"))]
        for name in filenames:
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            out[str(R / rel_dir / name)] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return out


# a config other than the test config's, given on the command line (featurewise_b's eps)
OTHER_CONFIG = ("--config", "experiments={featurewise_b: {eps: 0.02}}")


def verify_dry_run(work: Path, target: str) -> tuple[bool, str]:
    """`python -m nqf verify --dry-run` on the tree: (whether it names ``target``, a sentence for the
    detail column)."""
    p = subprocess.run([PY, "-m", "nqf", "verify", "--dry-run", "--configfile", str(REPO / "config" / "test.yaml"),
                        "--directory", str(work)], capture_output=True, text=True, env=env(), timeout=600)
    text = p.stdout + p.stderr
    lines = [ln.strip() for ln in text.splitlines() if target in ln]
    named = p.returncode != 0 and bool(lines) and "Traceback" not in text
    return named, (f"nqf verify --dry-run: exit {p.returncode}, " + (f"names it: {lines[0][:160]}" if lines
                                                                      else "does not name it"))


# -- comparison with the template ------------------------------------------------------------

def compare(template: Path, work: Path) -> list[str]:
    """Differences between the results trees: missing files, .nc values (attributes hold
    timestamps), text outputs, figures (PNG bytes; a PDF must be a whole PDF)."""
    out = []
    for a in sorted((template / R).rglob("*")):
        rel = a.relative_to(template)
        if not a.is_file() or "logs" in rel.parts or "benchmarks" in rel.parts or a.name.startswith("."):
            continue
        b = work / rel
        if not b.is_file():
            out.append(f"{rel} missing")
        elif filecmp.cmp(a, b, shallow=False):
            continue
        elif a.suffix == ".nc":
            try:
                with xr.open_dataset(a, engine="netcdf4") as x, xr.open_dataset(b, engine="netcdf4") as y:
                    xr.testing.assert_identical(x.drop_attrs(), y.drop_attrs())
            except Exception as exc:  # noqa: BLE001 (any difference or unreadable copy)
                out.append(f"{rel} differs ({type(exc).__name__})")
        elif a.suffix == ".pdf":
            data = b.read_bytes()
            if not (data.startswith(b"%PDF") and b"%%EOF" in data[-64:]):
                out.append(f"{rel} is not a whole PDF")
        elif rel.name != "reproduction.md" or a.read_text().splitlines()[1:] != b.read_text().splitlines()[1:]:
            out.append(f"{rel} differs")
    return out


# -- faults ----------------------------------------------------------------------------------

@dataclass
class Fault:
    name: str
    stage: str
    description: str
    target: str | None = None  # the file injected (under the work directory)
    inject: Callable[[Path], None] | None = None
    procedure: str = "standard"
    extra: dict = field(default_factory=dict)


def cut_at_line(text: str) -> str:
    """``text`` up to the line end nearest its middle (whole rows kept)."""
    return text[: text.rfind("\n", 0, len(text) // 2) + 1]


def faults() -> list[Fault]:
    F = Fault
    d, s, t, r, f = "results/data", "results/structure", "results/theory", "results/runs", "results/fits"
    nan, inf = np.nan, np.inf
    return [
        F("control", "run-level", "no fault: a cp -a copy of the finished tree is rerun"),
        # data
        F("data_truncated", "data", "data file cut to half its size, old mtime", f"{d}/featurewise_b.nc", truncate),
        F("data_random", "data", "data file overwritten by random bytes, old mtime", f"{d}/samplewise.nc", random_bytes),
        F("data_zero", "data", "data file zero-filled, old mtime", f"{d}/featurewise_b.nc", zero_fill),
        F("data_empty", "data", "data file emptied, old mtime", f"{d}/featurewise_b.nc", empty),
        F("data_other_rule", "data", "data file replaced by the structure file (wrong variables), new mtime",
          f"{d}/featurewise_b.nc", copy_over(f"{s}/featurewise_b.nc", old_mtime=False)),
        F("data_nan_old", "data", "one NaN in A_diag, old mtime kept", f"{d}/featurewise_b.nc",
          nc_edit(set_values("A_diag", nan, (0, 0)), old_mtime=True)),
        F("data_nan_new", "data", "one NaN in A_diag, new mtime", f"{d}/featurewise_b.nc",
          nc_edit(set_values("A_diag", nan, (0, 0)), old_mtime=False)),
        F("data_other_exp", "data", "another experiment's data file (3 modes for 2) copied in, new mtime",
          f"{d}/featurewise_b.nc", copy_over(f"{d}/featurewise.nc", old_mtime=False)),
        F("data_no_experiment_attr", "data", "attribute 'experiment' removed, new mtime", f"{d}/featurewise_b.nc",
          nc_edit(lambda ds: ds.drop_attrs(deep=False).assign_attrs(
              {k: v for k, v in ds.attrs.items() if k != "experiment"}), old_mtime=False)),
        # structure
        F("structure_truncated", "structure", "structure file cut to half, old mtime", f"{s}/featurewise_b.nc", truncate),
        F("structure_nan_r_old", "structure", "r[0] set to NaN, old mtime kept", f"{s}/featurewise_b.nc",
          nc_edit(set_values("r", nan, 0), old_mtime=True)),
        F("structure_nan_r_new", "structure", "r[0] set to NaN, new mtime", f"{s}/featurewise_b.nc",
          nc_edit(set_values("r", nan, 0), old_mtime=False)),
        F("structure_wrong_size", "structure", "competition structure with one mode fewer, new mtime",
          f"{s}/competition.nc", nc_edit(lambda ds: ds.isel(mode=slice(0, 2)), old_mtime=False)),
        F("structure_deleted", "structure", "structure file deleted", f"{s}/featurewise_b.nc", delete),
        # theory
        F("theory_fewer_modes", "theory", "theory with fewer modes than the data, new mtime", f"{t}/featurewise.nc",
          nc_edit(lambda ds: ds.isel(mode=slice(0, 2)), old_mtime=False)),
        F("theory_nan_loss_old", "theory", "theory loss set to NaN, old mtime kept", f"{t}/featurewise_b.nc",
          nc_edit(set_values("loss", nan), old_mtime=True)),
        F("theory_inf_tstar_new", "theory", "theory t_star[0] = inf, new mtime", f"{t}/featurewise_b.nc",
          nc_edit(set_values("t_star", inf, 0), old_mtime=False)),
        F("theory_zero", "theory", "theory file zero-filled, old mtime", f"{t}/samplewise.nc", zero_fill),
        F("theory_other_rule", "theory", "theory replaced by the fit file (wrong variables), new mtime",
          f"{t}/featurewise_b.nc", copy_over(f"{f}/featurewise_b.nc", old_mtime=False)),
        # train
        F("train_truncated", "train", "run file cut to half, old mtime", f"{r}/featurewise_b/gd.nc", truncate),
        F("train_random", "train", "run file overwritten by random bytes, old mtime", f"{r}/samplewise/gd.nc", random_bytes),
        F("train_empty", "train", "run file emptied, old mtime", f"{r}/featurewise_b/gd.nc", empty),
        F("train_nan_loss_new", "train", "last losses NaN, new mtime", f"{r}/featurewise_b/gd.nc",
          nc_edit(set_values("loss", nan, np.s_[..., -3:]), old_mtime=False)),
        F("train_nan_M_old", "train", "M NaN at the last step, old mtime kept", f"{r}/featurewise_b/gd.nc",
          nc_edit(set_values("M", nan, np.s_[..., -1, :, :]), old_mtime=True)),
        F("train_wrong_run_old", "train", "competition run eps1e-06 replaced by run eps1e-03 (cp -a: old mtime)",
          f"{r}/competition/eps1e-06.nc", copy_over(f"{r}/competition/eps1e-03.nc", old_mtime=True)),
        F("train_wrong_run_new", "train", "competition run eps1e-06 replaced by run eps1e-03, new mtime",
          f"{r}/competition/eps1e-06.nc", copy_over(f"{r}/competition/eps1e-03.nc", old_mtime=False)),
        F("train_wrong_seed_block_old", "train", "teacher_student seed block 1 replaced by block 0 (old mtime)",
          f"{r}/teacher_student/mlp.seeds-1.nc", copy_over(f"{r}/teacher_student/mlp.seeds-0.nc", old_mtime=True)),
        F("train_wrong_seeds_new", "train", "collapse run's seed coordinate changed to [0, 5], new mtime",
          f"{r}/collapse/diagonal_eps1e-03.nc", nc_edit(lambda ds: ds.assign_coords(seed=[0, 5]), old_mtime=False)),
        F("train_deleted", "train", "run file deleted", f"{r}/featurewise_b/gd.nc", delete),
        F("run_other_data_new", "train", "run file made from other data (its data_config_json says r = [0.9, 0.3]), "
          "new mtime", f"{r}/featurewise_b/gd.nc", nc_edit(other_data("r", [0.9, 0.3]), old_mtime=False),
          extra={"named": "made from other data", "same_attrs": ("data_config_json",)}),
        # fit
        F("fit_nan_old", "fit", "fit t_star_measured set to NaN, old mtime kept", f"{f}/featurewise.nc",
          nc_edit(set_values("t_star_measured", nan), old_mtime=True)),
        F("fit_nan_claim_new", "fit", "claim_measured[0] NaN with the claim still passed, new mtime",
          f"{f}/featurewise_b.nc", nc_edit(set_values("claim_measured", nan, 0), old_mtime=False)),
        F("fit_flip_claim_old", "fit", "a claim's claim_passed flipped, old mtime kept", f"{f}/featurewise_b.nc",
          nc_edit(lambda ds: ds.assign(claim_passed=1 - ds.claim_passed), old_mtime=True)),
        F("fit_truncated", "fit", "fit file cut to half, old mtime", f"{f}/samplewise.nc", truncate),
        F("fit_missing_var_new", "fit", "fit lacks t_star_gd_shift, new mtime", f"{f}/competition.nc",
          nc_edit(lambda ds: ds.drop_vars("t_star_gd_shift"), old_mtime=False)),
        F("fit_other_rule", "fit", "fit replaced by the theory file (wrong variables), new mtime",
          f"{f}/samplewise.nc", copy_over(f"{t}/samplewise.nc", old_mtime=False)),
        F("fit_other_exp_old", "fit", "featurewise_b's fit copied over featurewise's (cp -a)",
          f"{f}/featurewise.nc", copy_over(f"{f}/featurewise_b.nc", old_mtime=True)),
        F("fit_deleted", "fit", "fit file deleted", f"{f}/featurewise_b.nc", delete),
        F("fit_claim_measured_doubled_new", "fit", "fit claim_measured doubled (rel_error, passed untouched), "
          "new mtime", f"{f}/featurewise_b.nc",
          nc_edit(lambda ds: ds.assign(claim_measured=2 * ds.claim_measured), old_mtime=False),
          extra={"named": "featurewise_b.nc", "verify": True}),
        # figure
        F("figure_png_deleted", "figure", "figure PNG deleted", "results/figures/featurewise_b.png", delete),
        F("figure_pdf_truncated", "figure", "figure PDF cut to half, old mtime", "results/figures/featurewise_b.pdf", truncate),
        F("figure_claims_edited", "figure", "claims.csv 'True' changed to 'False', old mtime",
          "results/figures/featurewise_b.claims.csv", text_edit("True", "False")),
        F("figure_structure_random", "figure", "structure_matrices.png random bytes, old mtime",
          "results/figures/structure_matrices.png", random_bytes),
        # summary / report
        F("summary_deleted", "summary", "results/summary.csv deleted", "results/summary.csv", delete),
        F("summary_edited", "summary", "summary.csv 'True' changed to 'False', old mtime",
          "results/summary.csv", text_edit("True", "False")),
        F("summary_truncated_new", "summary", "summary.csv cut to half, new mtime", "results/summary.csv",
          lambda p: p.write_text(p.read_text()[: len(p.read_text()) // 2])),
        F("summary_cut_at_line_new", "summary", "summary.csv cut at the line end nearest its middle, new mtime",
          "results/summary.csv", lambda p: p.write_text(cut_at_line(p.read_text()))),
        F("summary_row_edited_new", "summary", "summary.csv: one row's measured value x 1.5, new mtime",
          "results/summary.csv", edit_summary_measured, extra={"named": "summary.csv", "verify": True}),
        F("claims_other_exp_new", "figure", "featurewise's claims.csv copied over featurewise_b's, new mtime",
          "results/figures/featurewise_b.claims.csv",
          copy_over("results/figures/featurewise.claims.csv", old_mtime=False)),
        F("figure_png_half_new", "figure", "figure PNG cut to half, new mtime", "results/figures/featurewise_b.png",
          lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])),
        F("report_md_deleted", "summary", "results/reproduction.md deleted", "results/reproduction.md", delete),
        F("report_html_empty", "summary", "results/reproduction.html emptied, old mtime", "results/reproduction.html", empty),
        # leftovers
        F("tmp_dead_writer", "leftover", "hidden temporary of a dead writer beside a run file", None, None, "tmp_dead"),
        F("tmp_old_plain", "leftover", "plain .featurewise.nc.tmp, 2 days old, open by no process", None, None, "tmp_plain"),
        # run level: kills, locks, concurrency
        F("lock_sigkill", "lock", "snakemake SIGKILLed mid-run (lock left behind)", None, None, "sigkill_main"),
        F("sigint", "lock", "snakemake SIGINTed mid-run, then rerun", None, None, "sigint_main"),
        F("job_sigkill_mid_write", "run-level", "a training job SIGKILLed while its temporary file exists",
          None, None, "sigkill_job"),
        F("concurrent", "lock", "two snakemake calls at once in one directory", None, None, "concurrent"),
        F("dry_run_during_run", "lock", "snakemake -n with another eps while a run trains", None, None, "during_dry"),
        F("refused_run_during_run", "lock", "a second real snakemake run with another eps while a run trains "
          "(Snakemake's lock refuses it)", None, None, "during_refused"),
        F("touch_same_content", "run-level", "data file touched (new mtime, same bytes)", f"{d}/featurewise_b.nc",
          lambda p: os.utime(p)),
        F("metadata_deleted", "run-level", "snakemake's metadata of one fit output deleted", None, None, "metadata"),
        F("dry_run_copied_tree_stopped", "run-level", "cp -a copy with .snakemake/nqf_results.json removed (as after "
          "a stopped run): snakemake -n with another eps, then a plain rerun", None, None, "copied_stopped"),
        F("benchmark_symlink_out", "run-level", "a benchmark .tsv replaced by a link to a file outside results/",
          "results/benchmarks/train/featurewise_b/gd.tsv", None, "bench_link", extra={"named": "removed the link"}),
        F("runs_dir_is_file", "run-level", "results/runs replaced by a file", "results/runs", runs_replaced_by_file,
          extra={"named": "is not a folder"}),
        F("results_symlinked_edit", "run-level", "results/ kept elsewhere and linked (results -> elsewhere), a run "
          "file's last loss edited there, old mtime kept", "results", results_linked_and_edited,
          extra={"named": "changed since nqf recorded it"}),
        # disk full
        F("disk_full_fit", "fit", "disk full (tmpfs at results/fits) while the fit writes", None, None, "tmpfs_fits"),
        F("fsize_limit_train", "train", "ulimit -f (RLIMIT_FSIZE 16 KiB) while a run file is written", None, None,
          "fsize_train"),
        F("disk_full_figure", "figure", "disk full (tmpfs at results/figures) while a figure is written", None, None,
          "tmpfs_figures"),
        # config
        F("config_eps_changed", "config", "featurewise_b eps changed, then changed back", None, None, "config_eps"),
        F("config_style_changed", "config", "figures.dpi changed (plan only)", None, None, "config_dpi"),
        F("config_invalid", "config", "eps: -1 in a config", None, None, "config_invalid"),
        F("config_duplicate_key", "config", "a key given twice in a config file", None, None, "config_duplicate"),
    ]


# -- procedures --------------------------------------------------------------------------------

def nqf_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith(("nqf:", "Error", "Invalid", "LockException"))]


def first_message(text: str) -> str:
    """nqf's first sentence, else Snakemake's first error line."""
    lines = nqf_lines(text)
    ours = [ln for ln in lines if ln.startswith("nqf:")]
    return (ours or lines or [""])[0]


def recover(work: Path, rc: int, text: str, log: list, config: Path | None = None) -> tuple[int, str, list[str]]:
    """Rerun as the output asks: --unlock where it says so, else a plain rerun; up to twice."""
    steps = []
    for _ in range(2):
        if rc == 0:
            break
        if "--unlock" in text and "cannot be locked" in text:
            steps.append("--unlock")
            run(work, "--unlock", config=config)
        steps.append("rerun")
        rc, text = run(work, config=config)
        log.append(text)
    return rc, text, steps


def wait_for(cond, timeout=120.0, step=0.05) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(step)
    return False


def killed_run(work: Path, sig: int, log: list) -> tuple[int, str]:
    """Start snakemake with a fit to redo, signal its main process while a job runs."""
    (work / "results/fits/featurewise_b.nc").unlink()
    (work / "results/runs/featurewise_b/gd.nc").unlink()
    p = start(work)
    wait_for(lambda: (work / "results/logs/train/featurewise_b/gd.log").stat().st_mtime > time.time() - 30
             if (work / "results/logs/train/featurewise_b/gd.log").exists() else False)
    time.sleep(1.0)
    os.kill(p.pid, sig)
    out = p.communicate(timeout=300)[0]
    # a SIGKILLed snakemake leaves its job running (orphaned): wait for that process to end
    wait_for(lambda: not any(_cwd(pid) == work for pid in os.listdir("/proc") if pid.isdigit()), timeout=120)
    log.append(out)
    return run(work)


def _cwd(pid: str) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def tmpfs_full(work: Path, folder: str, victim: str, log: list) -> tuple[int, str, list[str], str]:
    """Mount a tmpfs over ``folder`` holding its files, remove ``victim``, fill what is left but
    4 KiB, run; then free the space and rerun. The mount is removed before returning."""
    path = work / folder
    keep = path.with_name(path.name + ".orig")
    path.rename(keep)
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], check=True)
    try:
        shutil.copytree(keep, path, dirs_exist_ok=True, copy_function=shutil.copy2)
        (path / victim).unlink()
        st = os.statvfs(path)
        filler = path / ".filler"
        filler.write_bytes(b"\1" * max(st.f_bavail * st.f_frsize - 4096, 0))
        rc, text = run(work)
        log.append(text)
        first = first_message(text)
        filler.unlink()
        rc2, text2, steps = recover(work, rc, text, log)
        diff = compare(work.parent / "template", work)
        shutil.rmtree(keep)
        shutil.copytree(path, keep, copy_function=shutil.copy2)
    finally:
        subprocess.run(["umount", str(path)], check=False)
    path.rmdir()
    keep.rename(path)
    return rc, first, ["free space", *steps], "; ".join(diff)


def plan(work: Path, config: Path | None = None) -> list[str]:
    """Jobs of a dry run as 'rule[exp]' (or 'rule' for rules without {exp})."""
    _, text = run(work, "-n", config=config)
    jobs, rule = [], None
    for ln in text.splitlines():
        ln = ln.strip()
        if ln.startswith(("rule ", "localrule ")) and ln.endswith(":"):
            rule = ln.split()[1][:-1]
            jobs.append(rule)
        elif ln.startswith("wildcards:") and rule and jobs:
            jobs[-1] = f"{rule}[{ln.split('exp=')[1].split(',')[0]}]" if "exp=" in ln else rule
    return sorted(set(jobs) - {"all"})


def write_config(work: Path, edit) -> Path:
    import yaml
    cfg = yaml.safe_load((REPO / "config/test.yaml").read_text())
    edit(cfg)
    path = work / "audit_config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def procedure(fault: Fault, work: Path) -> dict:
    """Inject, run, recover, compare: the fault's row (without name, stage, wall)."""
    log: list[str] = []
    kind = fault.procedure
    told = ""
    if kind == "standard":
        if fault.inject:
            fault.inject(work / fault.target)
        if fault.extra.get("verify"):
            fault.extra["verified"] = verify_dry_run(work, fault.target)
        rc, text = run(work)
        log.append(text)
    elif kind == "bench_link":
        outside = work.parent / f"{work.name}.outside.tsv"
        outside.write_text("keep me\n")
        bench = work / fault.target
        bench.unlink()
        bench.symlink_to(outside)
        rc, text = run(work)
        log.append(text)
        keep = outside.read_text()
        fault.extra["check"] = lambda: ("" if keep == "keep me\n" and not bench.is_symlink() else
                                        f"outside file now {keep[:40]!r}, link {'kept' if bench.is_symlink() else 'removed'}")
    elif kind == "tmp_dead":
        from nqf.io.atomic import HOST
        stale = work / f"results/runs/featurewise/.gd.nc.{2 ** 22 + 7}@{HOST}.abcd1234.tmp"
        stale.write_bytes(b"x" * 1000)
        rc, text = run(work)
        log.append(text)
        if stale.exists():
            return dict(outcome="not survived", detail="temporary left in place", first=first_message(text))
    elif kind == "tmp_plain":
        stale = work / "results/data/.featurewise.nc.tmp"
        stale.write_bytes(b"x" * 1000)
        old = time.time() - 2 * 86400
        os.utime(stale, (old, old))
        rc, text = run(work)
        log.append(text)
        if stale.exists():
            return dict(outcome="not survived", detail="temporary left in place", first=first_message(text))
    elif kind in ("sigkill_main", "sigint_main"):
        rc, text = killed_run(work, signal.SIGKILL if kind == "sigkill_main" else signal.SIGINT, log)
        log.append(text)
        told = "yes" if "--unlock" in text else ("n.a." if rc == 0 else "no")
    elif kind == "sigkill_job":
        target = work / "results/runs/init_scaling/mlp.nc"
        target.unlink()
        p = start(work)
        found = []
        def tmp_seen():
            found[:] = [q for q in target.parent.glob(".mlp.nc.*@*.tmp")]
            return bool(found)
        hit = wait_for(tmp_seen, timeout=180, step=0.005)
        if hit:
            os.kill(int(found[0].name.split(".")[3].split("@")[0]), signal.SIGKILL)
        out = p.communicate(timeout=300)[0]
        log.append(out)
        fault.extra["note"] = "killed while its temporary existed" if hit else "write not caught"
        rc, text = p.returncode, out
        # the recovery is a plain rerun: the message must name the job and say so
        job_line = "nqf: the job of rule 'train' for results/runs/init_scaling/mlp.nc "
        told = "yes" if ((job_line + "was killed by SIGKILL" in out or job_line + "ended without finishing" in out)
                         and "rerunning the same command" in out) else "no"
    elif kind == "concurrent":
        for name in ("featurewise_b", "samplewise"):
            (work / f"results/fits/{name}.nc").unlink()
        a = start(work)
        wait_for(lambda: any((work / ".snakemake/locks").glob("*")) if (work / ".snakemake/locks").exists() else False)
        rc_b, text_b = run(work)
        out_a = a.communicate(timeout=600)[0]
        log += [text_b, out_a]
        if a.returncode != 0 or "Traceback" in text_b:
            return dict(outcome="not survived", detail=f"first call rc {a.returncode}, second rc {rc_b}",
                        first=first_message(text_b))
        rc, text = run(work)
        log.append(text)
        told = "yes" if "--unlock" in text_b else "no"
        fault.extra["note"] = f"second call rc {rc_b} while the first ran"
        text = text_b if rc_b else text
    elif kind in ("during_dry", "during_refused"):
        return during_run(fault, work, dry=kind == "during_dry")
    elif kind == "copied_stopped":
        (work / ".snakemake/nqf_results.json").unlink()
        before = results_snapshot(work)
        rc_b, text_b = run(work, "-n", *OTHER_CONFIG)
        log.append(text_b)
        after = results_snapshot(work)
        unusable = [str(q.relative_to(work)) for q in (work / R).rglob("*.unusable")]
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        rc, text = run(work)
        log.append(text)
        final = results_snapshot(work)
        remade = sorted(k for k in set(after) | set(final) if after.get(k) != final.get(k))
        diff = compare(work.parent / "template", work)
        said = "left in place" in text_b and "moved aside" not in text_b
        problems = ([f"the dry run exited {rc_b}"] if rc_b else []) + (["a traceback"] if "Traceback" in text_b + text else []) \
            + ([f"the dry run changed {len(changed)} file(s): {', '.join(changed[:3])}"] if changed else []) \
            + ([f"moved aside: {', '.join(unusable[:3])}"] if unusable else []) \
            + ([] if said else ["the dry run did not only say what a run would do"]) \
            + ([f"the rerun exited {rc}"] if rc else []) \
            + ([f"the rerun remade {len(remade)} file(s): {', '.join(remade[:3])}"] if remade else []) + diff[:4]
        return dict(outcome="not survived" if problems else "survived", recovery="none", told="n.a.",
                    first=first_message(text_b), detail="; ".join(problems),
                    note=f"dry run: {len(before)} files unchanged; rerun: nothing remade" if not problems else "")
    elif kind == "metadata":
        from base64 import urlsafe_b64encode
        meta = work / ".snakemake/metadata" / urlsafe_b64encode(b"results/fits/featurewise_b.nc").decode()
        meta.unlink()
        rc, text = run(work)
        log.append(text)
    elif kind in ("tmpfs_fits", "tmpfs_figures"):
        if os.geteuid() != 0:
            return dict(outcome="skipped", detail="needs root to mount a tmpfs", first="")
        folder, victim = (("results/fits", "featurewise_b.nc") if kind == "tmpfs_fits"
                          else ("results/figures", "featurewise_b.png"))
        rc, first, steps, diff = tmpfs_full(work, folder, victim, log)
        one = rc != 0 and first.startswith("nqf: Could not write") and not any("Traceback" in t for t in log[:1])
        ok = one and not diff and "rerun" in steps
        return dict(outcome="survived" if ok else "not survived", recovery=" + ".join(steps), told="yes" if one else "no",
                    first=first, detail=diff or ("" if one else "no one-sentence message (see first line)"))
    elif kind == "fsize_train":
        (work / "results/runs/featurewise_b/gd.nc").unlink()
        lim = 16 * 1024
        rc, text = run(work, preexec=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (lim, lim)))
        log.append(text)
        one = rc != 0 and "nqf: Could not write" in text and "Traceback" not in text
        rc2, text2, steps = recover(work, rc, text, log)
        diff = compare(work.parent / "template", work)
        ok = one and rc2 == 0 and not diff
        return dict(outcome="survived" if ok else "not survived", recovery=" + ".join(["raise the limit", *steps]),
                    told="yes" if one else "no", first=first_message(text), detail="; ".join(diff))
    elif kind == "config_eps":
        changed = write_config(work, lambda c: c["experiments"]["featurewise_b"].update(eps=2.0e-2))
        jobs = plan(work, changed)
        want = sorted(["train[featurewise_b]", "theory[featurewise_b]", "fit[featurewise_b]",
                       "figure[featurewise_b]", "summary", "reproduction"])
        rc, text = run(work, config=changed)
        rc_back, text_back = run(work)
        log += [text, text_back]
        diff = compare(work.parent / "template", work)
        ok = jobs == want and rc == 0 and rc_back == 0 and not diff
        return dict(outcome="survived" if ok else "not survived", recovery="none", told="n.a.",
                    first=first_message(text), detail="; ".join(diff) or ("" if jobs == want else f"planned {jobs}"),
                    note=f"planned: {', '.join(jobs)}")
    elif kind == "config_dpi":
        changed = write_config(work, lambda c: c["figures"].update(dpi=61))
        jobs = plan(work, changed)
        ok = all(j.startswith(("figure", "structure_figure")) for j in jobs) and len(jobs) == 13
        return dict(outcome="survived" if ok else "not survived", recovery="none", told="n.a.", first="",
                    detail="" if ok else f"planned {jobs}", note=f"{len(jobs)} jobs planned, all figures")
    elif kind in ("config_invalid", "config_duplicate"):
        if kind == "config_invalid":
            bad = write_config(work, lambda c: c["experiments"]["featurewise_b"].update(eps=-1.0))
        else:
            bad = work / "audit_config.yaml"
            bad.write_text((REPO / "config/test.yaml").read_text().replace("  featurewise_b:\n", "  featurewise_b:\n    lr: 0.01\n", 1))
        rc, text = run(work, config=bad)
        log.append(text)
        first = first_message(text)
        diff = compare(work.parent / "template", work)
        ok = rc != 0 and "Traceback" not in text and "featurewise_b" in first and not diff
        return dict(outcome="survived" if ok else "not survived", recovery="fix the config", told="yes" if ok else "no",
                    first=first, detail="; ".join(diff) or ("" if ok else "no one-sentence refusal"))
    first = first_message(log[0] if log else text)
    if "Traceback" in (log[0] if log else ""):
        return dict(outcome="not survived", detail="traceback", first=first, recovery="")
    rc_end, text_end, steps = recover(work, rc, text, log)
    if rc != 0 and not told:
        named = fault.target is None or (Path(fault.target).name in first and "rule '" in first)
        told = "yes" if named and ("moved aside" in first or "--unlock" in first) else "no"
    diff = compare(work.parent / "template", work)
    must_say = fault.extra.get("named")
    verified = fault.extra.get("verified")
    unequal = [a for a in fault.extra.get("same_attrs", ()) if _attr(work / fault.target, a)
               != _attr(work.parent / "template" / fault.target, a)]
    check = fault.extra["check"]() if "check" in fault.extra else ""
    if rc_end != 0:
        outcome, detail = "not survived", "stuck: still failing after the recovery"
    elif diff:
        outcome, detail = "not survived", ("wrong results with exit 0: " if rc == 0 else "after recovery: ") + "; ".join(diff[:4])
    elif rc != 0 and told == "no":
        outcome, detail = "not survived", "refused without naming the file and its rule / the recovery"
    elif must_say and not any(must_say in ln for t in log for ln in nqf_lines(t)):
        outcome, detail = "not survived", f"no nqf message says '{must_say}': the fault went unnoticed"
    elif unequal:
        outcome, detail = "not survived", f"attribute(s) {', '.join(unequal)} still differ from the template's: not regenerated"
    elif check:
        outcome, detail = "not survived", check
    elif verified and not verified[0]:
        outcome, detail = "not survived", verified[1]
    else:
        outcome, detail = "survived", ""
    if verified and outcome == "survived":
        detail = verified[1]
    return dict(outcome=outcome, detail=detail, first=first, recovery=" + ".join(steps) or "none",
                told=told or "n.a.", note=fault.extra.get("note", ""))


def _attr(path: Path, name: str):
    try:
        with xr.open_dataset(path, engine="netcdf4") as ds:
            return ds.attrs.get(name)
    except Exception as exc:  # noqa: BLE001
        return f"unreadable ({type(exc).__name__})"


# experiments whose run and fit files the during-run faults delete, so that the run that redoes
# them trains for minutes (--cores 1) while the other call runs
LONG_RERUN = ("init_scaling", "featurewise_powerlaw", "samplewise_powerlaw", "collapse")


def during_run(fault: Fault, work: Path, dry: bool) -> dict:
    """Run A redoes the runs and fits of LONG_RERUN; once it trains (Snakemake's lock taken), a
    second call with another config (``-n``, or a real run Snakemake's lock refuses) must change
    no file (content and mtime of every file A does not remake) and move nothing aside; A must end
    with exit 0 and the template's results."""
    remade = {str(R / "summary.csv")} | {str(R / n) for n in ("reproduction.md", "reproduction.html",
                                                                "reproduction_verdicts.html")}
    for exp in LONG_RERUN:
        for q in (work / R / "runs" / exp).glob("*.nc"):
            q.unlink()
        (work / R / "fits" / f"{exp}.nc").unlink()
    log_a = work.parent / f"{work.name}.run_a.log"
    with open(log_a, "w") as fh:
        a = subprocess.Popen(snakemake_cmd(work), stdout=fh, stderr=subprocess.STDOUT, text=True, env=env(),
                             start_new_session=True)
    locks = work / ".snakemake/locks"
    trains = wait_for(lambda: locks.is_dir() and any(locks.iterdir()), timeout=300)
    time.sleep(2.0)
    before = results_snapshot(work)
    t_b = time.time()
    rc_b, text_b = run(work, *(("-n",) if dry else ()), *OTHER_CONFIG)
    seconds_b = time.time() - t_b
    running = a.poll() is None
    after = results_snapshot(work)
    try:
        rc_a = a.wait(timeout=1200)
    except subprocess.TimeoutExpired:
        os.killpg(a.pid, signal.SIGKILL)
        rc_a = a.wait()
    out_a = log_a.read_text()
    log_a.unlink()
    if not (trains and running):
        return dict(outcome="harness error", first=first_message(text_b),
                    detail=f"run A {'finished' if trains else 'never took its lock'} before the second call ended "
                           f"({seconds_b:.0f} s): make it longer")

    def made_by_a(rel: str) -> bool:
        parts = Path(rel).parts
        return rel in remade or (len(parts) > 2 and (parts[1] in ("runs", "fits", "figures"))
                                 and any(parts[-1].startswith(exp + ".") or parts[2] == exp for exp in LONG_RERUN))

    changed = sorted(k for k in before if not made_by_a(k) and after.get(k) != before[k])
    unusable = [str(q.relative_to(work)) for q in (work / R).rglob("*.unusable")]
    said = "another snakemake run works on" in text_b
    diff = compare(work.parent / "template", work)
    problems = (([f"the dry run exited {rc_b}"] if dry and rc_b else []) + ([] if dry or rc_b else ["the second run was not refused"])
                + (["a traceback in the second call"] if "Traceback" in text_b else [])
                + ([f"the second call changed {len(changed)} file(s): {', '.join(changed[:3])}"] if changed else [])
                + ([f"moved aside: {', '.join(unusable[:3])}"] if unusable else [])
                + (["the second call moved files"] if "moved aside" in text_b else [])
                + ([] if said else ["the second call did not say that another run works on results/"])
                + ([f"run A exited {rc_a}: {first_message(out_a)}"] if rc_a else []) + diff[:4])
    return dict(outcome="not survived" if problems else "survived", first=first_message(text_b),
                recovery="none" if dry else "wait for the first run", told="yes" if said else "no",
                detail="; ".join(problems),
                note=f"second call {seconds_b:.0f} s, exit {rc_b}, while run A trained; {len(before)} files compared")


# -- main ------------------------------------------------------------------------------------

COLUMNS = ["name", "stage", "description", "outcome", "recovery", "told", "wall_s", "first", "detail", "note"]


def report(rows: list[dict], out: Path, total_s: float, template_s: float, note: str = "") -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "fault_audit.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows({k: row.get(k, "") for k in COLUMNS} for row in rows)
    stages = sorted({r["stage"] for r in rows}, key=[r["stage"] for r in rows].index)
    lines = ["# Fault audit", "", f"Written by `audit/fault_audit.py` on config/test.yaml, --cores 1: "
             f"{len(rows)} faults, template run {template_s:.0f} s, whole harness {total_s / 60:.1f} min."
             + (f" {note}" if note else ""), "",
             "| stage | injected | survived |", "|---|---|---|"]
    for st in stages:
        sel = [r for r in rows if r["stage"] == st]
        lines.append(f"| {st} | {len(sel)} | {sum(r['outcome'] == 'survived' for r in sel)} |")
    lines.append(f"| **all** | {len(rows)} | {sum(r['outcome'] == 'survived' for r in rows)} |")
    lines += ["", "| fault | stage | description | outcome | recovery | message told it | wall s | first line of message | detail |",
              "|---|---|---|---|---|---|---|---|---|"]
    esc = lambda v: str(v).replace("|", "\\|").replace("\n", " ")[:300]  # noqa: E731
    for r in rows:
        lines.append("| " + " | ".join(esc(r.get(k, "")) for k in
                                       ("name", "stage", "description", "outcome", "recovery", "told", "wall_s",
                                        "first", "detail")) + " |")
    (out / "fault_audit.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/nqf-fault-audit"))
    ap.add_argument("--out", type=Path, default=REPO / "audit" / "results")
    ap.add_argument("--only", default="", help="comma-separated fault names")
    ap.add_argument("--reuse-template", action="store_true", help="keep a finished template from an earlier call")
    ap.add_argument("--merge", action="store_true",
                    help="with --only: replace those rows in the existing report, keep the others")
    ap.add_argument("--merge-total-min", default="", help="with --merge: the whole harness's minutes to report")
    ap.add_argument("--merge-template-s", default="", help="with --merge: the template run's seconds to report")
    ap.add_argument("--merge-note", default="", help="with --merge: the sentence on the rows rerun (default: their names)")
    args = ap.parse_args()
    t0 = time.time()
    template = args.work / "template"
    if not (args.reuse_template and (template / "results/summary.csv").exists()):
        shutil.rmtree(template, ignore_errors=True)
        template.mkdir(parents=True)
        rc, text = run(template)
        if rc != 0:
            sys.exit(f"template run failed:\n{text[-3000:]}")
    template_s = time.time() - t0
    only = set(filter(None, args.only.split(",")))
    rows = []
    for fault in faults():
        if only and fault.name not in only:
            continue
        work = args.work / fault.name
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run(["cp", "-a", str(template), str(work)], check=True)
        R_ROOT[0] = work
        t = time.time()
        try:
            row = procedure(fault, work)
        except Exception as exc:  # noqa: BLE001 (a harness failure is a row too)
            row = dict(outcome="harness error", detail=f"{type(exc).__name__}: {exc}")
        row.update(name=fault.name, stage=fault.stage, description=fault.description, wall_s=f"{time.time() - t:.1f}")
        rows.append(row)
        print(f"{fault.name:28s} {row['outcome']:13s} {row['wall_s']:>6s}s {row.get('detail', '')[:100]}", flush=True)
        shutil.rmtree(work, ignore_errors=True)
        for extra in args.work.glob(f"{fault.name}.*"):  # files and folders a fault kept beside the tree
            shutil.rmtree(extra) if extra.is_dir() and not extra.is_symlink() else extra.unlink()
    if only and args.merge and (args.out / "fault_audit.csv").exists():
        with open(args.out / "fault_audit.csv", newline="") as fh:
            earlier = {r["name"]: r for r in csv.DictReader(fh)}
        rerun = {r["name"]: r for r in rows}
        order = [f.name for f in faults()]
        rows = [rerun.get(n) or earlier[n] for n in order if n in rerun or n in earlier]
        total_s = float(args.merge_total_min or 0) * 60 or time.time() - t0
        report(rows, args.out, total_s, float(args.merge_template_s or template_s),
               note=args.merge_note or f"Rows rerun with --only --merge after a fix: {', '.join(sorted(rerun))}.")
        return
    report(rows, args.out, time.time() - t0, template_s)


if __name__ == "__main__":
    main()
