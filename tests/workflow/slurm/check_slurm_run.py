"""Checks of a workflow run through SLURM (called by tests/workflow/slurm/run_slurm_test.sh).

1. Every job the dry run planned ran inside a SLURM job: snakemake's log names the SLURM job id
   and log file of every submission; each such job was allocated and exited 0 according to
   slurmctld's own log; and the union of the outputs the jobs' SLURM logs report covers every
   planned output (a grouped SLURM job runs several snakemake jobs and reports all of them).
2. Each SLURM job asked for what nqf estimates for the jobs it ran (nqf.pipeline.resources, as
   the dry run prints them): its memory (scontrol's MinMemoryNode) and time limit (TimeLimit)
   equal the single job's request, or for a group lie between the largest of its jobs' requests
   and their sum (Snakemake sums memory over the jobs a group runs side by side and runtime over
   its sequential layers).
3. The SLURM run's results equal a local run's: the same NetCDF files, each data variable and
   coordinate equal by xarray.testing.assert_allclose (attrs such as history differ), and the
   same summary.csv rows and verdicts.
"""
from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import xarray as xr

# Both runs execute the same code on the same inputs on the same host; the only freedom is the
# order of floating-point reductions (thread count of a SLURM job vs a local job), a relative
# effect of ~1e-13 in float64 that the training dynamics amplify by at most a few orders of
# magnitude near an ignition. rtol = 1e-6 leaves that room and still catches any real change
# (a different seed, step count or config key changes results at the percent level).
RTOL, ATOL = 1e-6, 1e-12

SUBMITTED = re.compile(r"Job (\S+) has been submitted with SLURM jobid (\d+) \(log: (.+?)\)\.?$",
                       re.M)
OUTPUT_LINE = re.compile(r"^\s+output: (.+)$", re.M)
ALLOCATED = re.compile(r"(?:sched: Allocate JobId=|_start_job: Started JobId=)(\d+)")
EXIT_OK = re.compile(r"_job_complete: JobId=(\d+) WEXITSTATUS 0\b")


def outputs(text: str) -> set[str]:
    """Output files named by snakemake's job descriptions ("    output: a, b") in a log."""
    found = set()
    for line in OUTPUT_LINE.findall(text):
        found.update(p.strip() for p in line.split(",") if p.strip())
    return found


def check_jobs(plan_log: Path, snakemake_log: Path, slurmctld_log: Path) -> list[str]:
    planned = outputs(plan_log.read_text())
    if not planned:
        return [f"the dry run in {plan_log} planned no job"]
    text = snakemake_log.read_text()
    submissions = SUBMITTED.findall(text)
    errors = []
    if not submissions:
        return [f"{snakemake_log} records no SLURM submission"]
    slurm_ids = [sid for _, sid, _ in submissions]
    if len(set(slurm_ids)) != len(slurm_ids):
        errors.append(f"SLURM job ids repeat: {slurm_ids}")
    ctld = slurmctld_log.read_text()
    allocated, exited_ok = set(ALLOCATED.findall(ctld)), set(EXIT_OK.findall(ctld))
    ran_under_slurm: set[str] = set()
    for job, sid, logfile in submissions:
        if sid not in allocated:
            errors.append(f"slurmctld never allocated SLURM job {sid} (snakemake job {job})")
        if sid not in exited_ok:
            errors.append(f"SLURM job {sid} (snakemake job {job}) did not exit 0 in slurmctld's log")
        path = Path(logfile)
        if not path.is_file():
            errors.append(f"SLURM log {path} of job {sid} is missing")
            continue
        body = path.read_text(errors="replace")
        if not outputs(body):
            errors.append(f"SLURM log {path} of job {sid} names no output")
        ran_under_slurm |= outputs(body)
    missing = planned - ran_under_slurm
    if missing:
        errors.append(f"{len(missing)} planned outputs were not made in a SLURM job: {sorted(missing)[:10]}")
    print(f"jobs: {len(planned)} planned outputs, {len(submissions)} SLURM jobs submitted, "
          f"all allocated and exited 0 per slurmctld: {not any('slurmctld' in e or 'exit 0' in e for e in errors)}, "
          f"outputs made under SLURM: {len(planned & ran_under_slurm)}/{len(planned)}")
    return errors


JOB_BLOCK = re.compile(r"^\s*(?:local)?rule \w+:\n(?:\s+\w[\w ]*:.*\n)*", re.M)
RESOURCE = re.compile(r"\b(runtime|mem_mb)=(\d+)")


def planned_requests(plan_log: Path) -> dict[str, tuple[int, int]]:
    """First output file of each planned job -> (mem_mb, runtime) the dry run printed for it."""
    out = {}
    for block in JOB_BLOCK.findall(plan_log.read_text()):
        files = outputs(block)
        found = dict(RESOURCE.findall(block.split("resources:", 1)[-1])) if "resources:" in block else {}
        if files and {"runtime", "mem_mb"} <= found.keys():
            first = OUTPUT_LINE.search(block).group(1).split(",")[0].strip()
            out[first] = (int(found["mem_mb"]), int(found["runtime"]))
    return out


def minutes(limit: str) -> int:
    """SLURM's TimeLimit ('[days-]hours:minutes:seconds' or 'minutes') in minutes."""
    days, _, clock = limit.rpartition("-")
    parts = [int(v) for v in clock.split(":")]
    h, m, s = ([0] * (3 - len(parts)) + parts) if len(parts) > 1 else (0, parts[0], 0)
    return int(days or 0) * 1440 + h * 60 + m + (s > 0)


def check_requests(plan_log: Path, snakemake_log: Path) -> list[str]:
    """Each SLURM job's memory and time limit against nqf's requests for the jobs it ran."""
    plan = planned_requests(plan_log)
    if not plan:
        return [f"the dry run in {plan_log} printed no job with mem_mb and runtime"]
    errors, rows = [], []
    for job, sid, logfile in SUBMITTED.findall(snakemake_log.read_text()):
        path = Path(logfile)
        if not path.is_file():
            continue  # check_jobs names it
        members = {}  # by first output: the log describes a job twice (the group's and its own run)
        for block in JOB_BLOCK.findall(path.read_text(errors="replace")):
            hit = OUTPUT_LINE.search(block)
            if hit and hit.group(1).split(",")[0].strip() in plan:
                members[hit.group(1).split(",")[0].strip()] = plan[hit.group(1).split(",")[0].strip()]
        members = list(members.values())
        proc = subprocess.run(["scontrol", "show", "job", "-o", sid], capture_output=True, text=True)
        fields = dict(f.split("=", 1) for f in proc.stdout.split() if "=" in f)
        if proc.returncode != 0 or "TimeLimit" not in fields or "MinMemoryNode" not in fields:
            errors.append(f"scontrol knows no memory and time limit of SLURM job {sid}: {proc.stderr.strip()[:200]}")
            continue
        if not members:
            errors.append(f"SLURM job {sid} (snakemake job {job}) ran no planned job")
            continue
        mem = int(re.match(r"(\d+)", fields["MinMemoryNode"]).group(1)) * (1024 if fields["MinMemoryNode"].endswith("G") else 1)
        limit = minutes(fields["TimeLimit"])
        for what, asked, values in (("memory (MB)", mem, [m for m, _ in members]),
                                    ("time limit (min)", limit, [r for _, r in members])):
            low, high = max(values), sum(values)
            if not low <= asked <= high:
                errors.append(f"SLURM job {sid} asked for {what} {asked}; its {len(values)} jobs' requests are "
                              f"{values} (expected between {low} and {high})")
        rows.append((sid, len(members), mem, sum(m for m, _ in members), limit, sum(r for _, r in members)))
    single = sum(1 for row in rows if row[1] == 1)
    if not single:
        errors.append("no SLURM job ran a single snakemake job: no request was checked exactly")
    print(f"requests: {len(rows)} SLURM jobs ({single} of one job, checked exactly), each asked for nqf's "
          f"requests of its jobs: {not errors}; (job, jobs, mem asked, mem sum, minutes asked, minutes sum): "
          f"{rows[:12]}")
    return errors


def check_results(slurm_run: Path, local_run: Path) -> list[str]:
    res_s, res_l = slurm_run / "results", local_run / "results"
    files_s = {p.relative_to(res_s) for p in res_s.rglob("*.nc")}
    files_l = {p.relative_to(res_l) for p in res_l.rglob("*.nc")}
    errors = []
    if files_s != files_l:
        errors.append(f"NetCDF files differ: only SLURM {sorted(map(str, files_s - files_l))}, "
                      f"only local {sorted(map(str, files_l - files_s))}")
    if not files_l:
        errors.append(f"no NetCDF file under {res_l}")
    identical = 0
    for rel in sorted(files_s & files_l):
        with xr.open_dataset(res_s / rel) as a, xr.open_dataset(res_l / rel) as b:
            a, b = a.load(), b.load()
            try:
                xr.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
            except AssertionError as exc:
                errors.append(f"{rel}: SLURM and local results differ:\n{str(exc)[:2000]}")
                continue
            identical += a.drop_attrs().identical(b.drop_attrs())
    with open(res_s / "summary.csv") as fs, open(res_l / "summary.csv") as fl:
        rows_s, rows_l = list(csv.DictReader(fs)), list(csv.DictReader(fl))
    key = lambda r: (r["experiment"], r["quantity"])  # noqa: E731
    if sorted(map(key, rows_s)) != sorted(map(key, rows_l)):
        errors.append("summary.csv rows differ between the SLURM and the local run")
    else:
        by_key = {key(r): r for r in rows_l}
        for r in rows_s:
            other = by_key[key(r)]
            if r["passed"] != other["passed"]:
                errors.append(f"summary.csv {key(r)}: passed {r['passed']} (SLURM) vs {other['passed']} (local)")
            for col in ("predicted", "measured"):
                x, y = float(r[col]), float(other[col])
                if not np.isclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True):
                    errors.append(f"summary.csv {key(r)} {col}: {x} (SLURM) vs {y} (local)")
    print(f"results: {len(files_s & files_l)} NetCDF files compared (rtol {RTOL}, atol {ATOL}), "
          f"{identical} bitwise identical in data; {len(rows_s)} summary rows compared")
    return errors


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", type=Path, required=True, help="log of the dry run (planned jobs)")
    ap.add_argument("--slurm-run", type=Path, required=True, help="workdir of the SLURM run")
    ap.add_argument("--snakemake-log", type=Path, required=True, help="stdout+stderr of the SLURM run")
    ap.add_argument("--slurmctld-log", type=Path, required=True, help="slurmctld's log file")
    ap.add_argument("--local-run", type=Path, required=True, help="workdir of the local run")
    args = ap.parse_args(argv)
    errors = check_jobs(args.plan, args.snakemake_log, args.slurmctld_log)
    errors += check_requests(args.plan, args.snakemake_log)
    errors += check_results(args.slurm_run, args.local_run)
    for e in errors:
        print("ERROR:", e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
