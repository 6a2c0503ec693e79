"""CPU, wall time and peak memory of a finished run, per experiment and stage, from the job
server's usage record ``results/benchmarks/jobs.tsv`` (nqf.pipeline.job_server: one row per job,
its own CPU and peak resident memory from wait4).

    python benchmarks/usage_by_experiment.py [--workdir .] [--out FILE] [--cores N] [--wall SECONDS]

One row per experiment: its jobs, their CPU seconds (all, and training alone), the sum of their
wall times and the largest peak memory; then the rows of jobs that belong to no experiment
(summary, reproduction page, structure figure) and the totals. A job that ran more than once
counts each time (its CPU was spent); failed attempts are counted and marked. With ``--cores``,
the least wall time any order of these jobs could take on that many cores (each job one thread):
the larger of their summed wall time over the cores and the longest job; with ``--wall`` (the
run's measured wall time, e.g. from /usr/bin/time) also how far the run was from it.
"""
from __future__ import annotations

import argparse
import collections
import csv
import sys
from pathlib import Path

STAGE_DIRS = {"data", "structure", "theory", "runs", "fits", "figures"}


def job_of(output: str) -> tuple[str | None, str | None]:
    """(experiment, run) of a job from its first output: results/runs/<exp>/<run>.nc (a seed
    block's run id keeps its tag) or results/<stage dir>/<exp>.<ext> (run None); (None, None) for
    a job of no experiment."""
    parts = Path(output).parts
    if len(parts) == 4 and parts[:2] == ("results", "runs"):
        return parts[2], parts[3].removesuffix(".nc")
    if len(parts) == 3 and parts[0] == "results" and parts[1] in STAGE_DIRS:
        return Path(parts[2]).stem, None
    return None, None


def experiment_of(output: str) -> str | None:
    """The experiment a job's first output belongs to."""
    return job_of(output)[0]


def usage_table(rows: list[dict]) -> list[str]:
    per = collections.defaultdict(lambda: {"jobs": 0, "cpu": 0.0, "train_cpu": 0.0, "wall": 0.0, "rss": 0.0,
                                           "failed": 0})
    for r in rows:
        key = experiment_of(r["output"]) or f"({r['rule']})"
        e = per[key]
        e["jobs"] += 1
        e["cpu"] += float(r["cpu_s"])
        e["train_cpu"] += float(r["cpu_s"]) if r["rule"] == "train" else 0.0
        e["wall"] += float(r["wall_s"])
        e["rss"] = max(e["rss"], float(r["max_rss_mb"]))
        e["failed"] += r.get("exit_status", "0") != "0"
    header = f"{'experiment':32s} {'jobs':>5s} {'CPU s':>9s} {'train CPU s':>12s} {'job wall s':>11s} {'peak MB':>8s}"
    lines = [header, "-" * len(header)]
    for name, e in sorted(per.items(), key=lambda kv: -kv[1]["cpu"]):
        failed = f"  ({e['failed']} failed)" if e["failed"] else ""
        lines.append(f"{name:32s} {e['jobs']:5d} {e['cpu']:9.1f} {e['train_cpu']:12.1f} {e['wall']:11.1f} "
                     f"{e['rss']:8.0f}{failed}")
    total = {k: sum(e[k] for e in per.values()) for k in ("jobs", "cpu", "train_cpu", "wall")}
    lines += ["-" * len(header),
              f"{'total':32s} {total['jobs']:5d} {total['cpu']:9.1f} {total['train_cpu']:12.1f} {total['wall']:11.1f} "
              f"{max(e['rss'] for e in per.values()):8.0f}"]
    return lines


def schedule_bound(rows: list[dict], cores: int, wall: float | None = None) -> list[str]:
    """The least wall time of the jobs in ``rows`` on ``cores`` cores, one job per core at a time:
    max(sum of their wall times / cores, the longest job's wall time); ``wall``, the run's own,
    against it."""
    walls = [float(r["wall_s"]) for r in rows]
    longest = max(rows, key=lambda r: float(r["wall_s"]))
    packed = sum(walls) / cores
    bound = max(packed, float(longest["wall_s"]))
    lines = [f"least wall time on {cores} cores: {bound:.0f} s (job wall times summed over the cores {packed:.0f} s; "
             f"longest job {float(longest['wall_s']):.0f} s, {longest['output']})"]
    if wall is not None:
        lines.append(f"the run's wall time: {wall:.0f} s, {wall / bound:.2f} x that bound "
                     f"({wall - bound:.0f} s beyond it: planning, start-up, jobs waiting on others)")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("."), help="the finished run's folder")
    ap.add_argument("--out", type=Path, default=None, help="write the table here too")
    ap.add_argument("--cores", type=int, default=None, help="the cores the run had: print the least wall time")
    ap.add_argument("--wall", type=float, default=None, help="the run's wall time in seconds (with --cores)")
    args = ap.parse_args(argv)
    usage = args.workdir / "results" / "benchmarks" / "jobs.tsv"
    if not usage.exists():
        print(f"no usage record at {usage} (the job server writes it; NQF_JOB_SERVER=off runs have none)",
              file=sys.stderr)
        return 1
    with open(usage) as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    text = "\n".join([f"Usage per experiment of the run in {args.workdir} ({usage.name}, {len(rows)} jobs)", "",
                      *usage_table(rows)]) + "\n"
    if args.cores:
        text += "\n" + "\n".join(schedule_bound(rows, args.cores, args.wall)) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
