"""What each job of a finished run asked a cluster for (nqf.pipeline.resources) beside what it
used: wall time and peak memory from Snakemake's benchmark files, or with ``--usage`` from the job
server's usage record ``results/benchmarks/jobs.tsv`` (nqf.pipeline.job_server: each forked job's
own wall time and peak resident memory, from wait4).

    NQF_JOB_SERVER=off snakemake --cores 2 [--configfile C]     (one process per job: the
                                                               benchmark files then measure the job)
    python benchmarks/resources.py [--workdir .] [--configfile C] [--out benchmarks/results/resources.txt]
    snakemake --cores 2 --configfile C                           (job server on)
    python benchmarks/resources.py --usage --workdir . --configfile C

Writes one row per job (rule, experiment, run; requested mem_mb and measured max_rss; requested
runtime and measured seconds; the runtime model's seconds for a training run) and a summary: the
smallest ratio of request to measurement (below 1 a job would have been killed on its first
attempt), the median and the largest. With ``--paper`` it adds the runtime model's seconds per
experiment of config/paper.yaml (its requests, no measurement).
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nqf.experiments import run_ids  # noqa: E402
from nqf.experiments.work import run_seconds  # noqa: E402
from nqf.pipeline import resources as R  # noqa: E402
from nqf.pipeline.config import validate_config  # noqa: E402

# benchmark file (under results/benchmarks) -> (rule, wildcards)
PER_EXPERIMENT = ("data", "structure", "theory", "fit", "figure")
SINGLE = {"summary.tsv": "summary", "reproduction.tsv": "reproduction", "structure_figure.tsv": "structure_figure"}


def jobs_of(bench: Path) -> list[tuple[str, dict, Path]]:
    """(rule, wildcards, benchmark file) of every job that left a benchmark file."""
    out = []
    for path in sorted(bench.rglob("*.tsv")):
        rel = path.relative_to(bench)
        parts = rel.parts
        if parts[0] == "train" and len(parts) == 3:
            out.append(("train", {"exp": parts[1], "run": rel.stem}, path))
        elif parts[0] in PER_EXPERIMENT and len(parts) == 2:
            out.append((parts[0], {"exp": rel.stem}, path))
        elif len(parts) == 1 and parts[0] in SINGLE:
            out.append((SINGLE[parts[0]], {}, path))
    return out


def jobs_of_usage(usage: Path) -> list[tuple[str, dict, tuple[float, float]]]:
    """(rule, wildcards, (wall s, peak MB)) of every job in the job server's usage record (its
    first output names the job: results/runs/{exp}/{run}.nc, results/<stage dir>/{exp}.*); the
    last row of a job run more than once."""
    from usage_by_experiment import job_of

    found: dict[tuple, tuple] = {}
    with open(usage) as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if row.get("exit_status", "0") != "0":
                continue
            rule = row["rule"]
            exp, run = job_of(row["output"])
            if exp is None or rule not in ("train", *PER_EXPERIMENT):  # e.g. the structure figure's file
                wc = {}
            else:
                wc = {"exp": exp} if run is None else {"exp": exp, "run": run}
            found[(rule, tuple(sorted(wc.items())))] = (rule, wc, (float(row["wall_s"]), float(row["max_rss_mb"])))
    return list(found.values())


def measured(path: Path) -> tuple[float, float]:
    """(seconds, max_rss in MB) of a Snakemake benchmark file (its first repeat)."""
    with open(path) as fh:
        row = next(csv.DictReader(fh, delimiter="\t"))
    rss = row.get("max_rss", "NA")
    return float(row["s"]), float(rss) if rss not in ("NA", "-", "") else float("nan")


def ratio_line(name: str, values: list[float]) -> str:
    return (f"{name}: smallest {min(values):.2f}, median {statistics.median(values):.2f}, largest {max(values):.1f} "
            f"(over {len(values)} jobs)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("."), help="the finished run's folder")
    ap.add_argument("--configfile", type=Path, default=ROOT / "config" / "config.yaml")
    ap.add_argument("--out", type=Path, default=None, help="write the table here too")
    ap.add_argument("--paper", action="store_true", help="add config/paper.yaml's runtime model per experiment")
    ap.add_argument("--usage", action="store_true",
                    help="read the job server's results/benchmarks/jobs.tsv instead of the benchmark files")
    ap.add_argument("--note", default="", help="a line saying which run this is (commit, machine, date)")
    args = ap.parse_args(argv)
    cfg = validate_config(yaml.safe_load(args.configfile.read_text()))
    jobs = R.JobResources(cfg["experiments"])
    source = "the job server's jobs.tsv" if args.usage else "Snakemake's benchmark files"
    lines = [f"Requests (nqf.pipeline.resources, attempt 1) against a run of {args.configfile.name} "
             f"in {args.workdir} ({source}: wall s, max_rss MB)"]
    lines += [args.note, ""] if args.note else [""]
    header = f"{'rule':17s} {'experiment':28s} {'run':22s} {'mem_mb':>7s} {'rss MB':>7s} {'x':>6s} " \
             f"{'min':>5s} {'wall s':>7s} {'x':>6s} {'model s':>8s}"
    lines += [header, "-" * len(header)]
    mem_ratios, time_ratios, model_ratios = [], [], []
    bench = args.workdir / "results" / "benchmarks"
    found = jobs_of_usage(bench / "jobs.tsv") if args.usage else jobs_of(bench)
    if not found:
        print(f"no {'usage record' if args.usage else 'benchmark files'} under {bench}", file=sys.stderr)
        return 1
    for rule, wc, source in found:
        if wc.get("exp") is not None and wc["exp"] not in cfg["experiments"]:
            continue
        if rule == "train" and wc.get("run") not in run_ids(cfg["experiments"][wc["exp"]]):
            continue  # a seed block or a run this config no longer has
        ns = SimpleNamespace(**wc)
        mem, minutes = jobs.mem_mb(rule)(ns, 1), jobs.runtime(rule)(ns, 1)
        wall, rss = source if args.usage else measured(source)
        model = jobs.train_seconds(wc["exp"], wc["run"]) if rule == "train" else float("nan")
        mem_ratios.append(mem / rss)
        time_ratios.append(60 * minutes / max(wall, 1e-9))
        if rule == "train":
            model_ratios.append(model / max(wall, 1e-9))
        lines.append(f"{rule:17s} {wc.get('exp', '-'):28s} {wc.get('run', '-'):22s} {mem:7d} {rss:7.0f} "
                     f"{mem / rss:6.2f} {minutes:5d} {wall:7.1f} {60 * minutes / wall:6.1f} {model:8.1f}")
    lines += ["", ratio_line("memory asked / peak", mem_ratios), ratio_line("runtime asked / wall", time_ratios),
              ratio_line("runtime model / wall (training runs, before the factor and the floor)", model_ratios)]
    if args.paper:
        paper = validate_config(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()))
        lines += ["", "config/paper.yaml: the runtime model per experiment (seconds on one CPU thread, summed "
                      "over its training runs) and the largest memory one of its training runs asks for"]
        total = 0.0
        pjobs = R.JobResources(paper["experiments"])
        for exp, ecfg in paper["experiments"].items():
            secs = [run_seconds(R.run_work(ecfg, r)) for r in run_ids(ecfg)]
            total += sum(secs)
            mem = max(pjobs.mem_mb("train")(SimpleNamespace(exp=exp, run=r), 1) for r in run_ids(ecfg))
            lines.append(f"  {exp:30s} {len(secs):3d} runs {sum(secs):9.0f} s (largest run {max(secs):7.0f} s) "
                         f"largest mem_mb {mem}")
        lines.append(f"  total {total:.0f} s of training on one thread ({total / 3600:.2f} h)")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
