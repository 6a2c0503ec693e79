"""What a workflow job pays before it computes anything: a fresh interpreter importing what the
stage's script imports, for every kind (the default run starts ~160 such jobs), and what a job's
own process pays where the run has a job server (nqf.pipeline.job_server).

Each job is timed as `python -c "<the stage's imports>"` in a fresh process, best of 3 (the disk
cache warm), and the top-level packages it loaded are listed (torch, matplotlib). Run it on two
checkouts to compare:

    python benchmarks/job_startup.py                 # this checkout
    python benchmarks/job_startup.py --repo OTHER    # another checkout (PYTHONPATH=OTHER)

Writes benchmarks/results/job_startup.txt (this checkout only).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

COMMON = "import nqf, nqf.experiments, nqf.io.netcdf\nfrom nqf.experiments import kind_of\n"
STAGES = {
    # the imports of workflow/scripts/<stage>.py, then the kind's module as the stage touches it
    "theory": COMMON + "m = kind_of({{'kind': '{kind}'}}); m.theory\n",
    "fit": COMMON + "import nqf.experiments.divergence\nm = kind_of({{'kind': '{kind}'}}); m.fit\n",
    "figure": COMMON + "import nqf.plotting\nfrom nqf.experiments import figure_of\nfigure_of({{'kind': '{kind}'}})\n",
    "train": COMMON + "import nqf.training.loop, nqf.training.quadratic\nm = kind_of({{'kind': '{kind}'}}); m.train_run\n",
}
# a job's own process when the run has a job server (nqf.pipeline.job_server): Snakemake's script
# preamble (snakemake.script, the pickled ``snakemake`` object, whose params load
# nqf.pipeline.snakefile) and the client; the stage's imports are the server's, made once per run
CLIENT = "import pickle, snakemake.script, nqf.pipeline.snakefile, nqf.pipeline.job_server\n"
REPORT = "import sys; print(' '.join(sorted({n.split('.')[0] for n in sys.modules} & {'torch', 'matplotlib'})))"


def kinds_of(repo: Path) -> list[str]:
    """The kinds registered in the checkout ``repo`` (nqf.experiments.KINDS)."""
    out = subprocess.run([sys.executable, "-c", "from nqf.experiments import KINDS; print(' '.join(KINDS))"],
                         env={**os.environ, "PYTHONPATH": str(repo)}, cwd=repo, capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def time_job(code: str, repo: Path, repeat: int = 3) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    best, loaded = float("inf"), ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code + REPORT], env=env, cwd=repo, capture_output=True,
                             text=True, check=True)
        best = min(best, time.perf_counter() - t0)
        loaded = out.stdout.split("\n")[-2] if out.stdout.strip() else ""
    return best, loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    repo = args.repo.resolve()
    bare, _ = time_job("pass\n", repo)
    lines = [f"python {sys.version.split()[0]}; checkout {repo}; best of 3 fresh processes per job",
             f"bare interpreter: {bare:.2f} s"]
    totals, kinds = {}, kinds_of(repo)
    for stage, template in STAGES.items():
        times = []
        for kind in kinds:
            t, loaded = time_job(template.format(kind=kind), repo)
            times.append(t)
            lines.append(f"{stage:7s} {kind:22s} {t:5.2f} s  loads: {loaded or '-'}")
        totals[stage] = sum(times) / len(times)
    lines.append("mean per job: " + ", ".join(f"{s} {v:.2f} s" for s, v in totals.items()))
    client, loaded = time_job(CLIENT, repo)
    lines.append(f"with the job server, every job: {client:.2f} s  loads: {loaded or '-'} "
                 "(the stage's imports are made once per run, by the server)")
    text = "\n".join(lines)
    print(text)
    if args.repo.resolve() == Path(__file__).resolve().parents[1]:
        out = Path(__file__).resolve().parent / "results" / "job_startup.txt"
        out.write_text(text + "\n")


if __name__ == "__main__":
    main()
