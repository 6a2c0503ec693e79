#!/usr/bin/env bash
# What every snakemake call costs besides its jobs' own work, for two commits, interleaved on this
# machine (its speed drifts: compare only within one call of this script):
#   1. a dry run of config/test.yaml (planning: Snakemake's and nqf's imports, the config check):
#      CPU of the whole process, 4 rounds A B A B ...;
#   2. the figure jobs of a finished config/test.yaml run, redrawn (--forcerun figure
#      structure_figure): their CPU from the job server's results/benchmarks/jobs.tsv, 2 rounds;
#   3. with AFTER's code only: 3 runs of three small experiments, each with its own job server
#      against one server shared by the three (nqf.pipeline.job_server.shared): CPU of everything
#      those runs started, servers included, 2 rounds.
#
#   bash benchmarks/call_overhead_ab.sh BEFORE AFTER [OUT]    # e.g. HEAD~3 HEAD
#
# Uses this checkout's .venv (PYTHONPATH points each call at its own clone). ~10 min on 2 cores.
# Writes OUT (default benchmarks/results/call_overhead_ab.txt).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
before="$(git -C "$root" rev-parse --short "$1")"
after="$(git -C "$root" rev-parse --short "$2")"
out="${3:-$root/benchmarks/results/call_overhead_ab.txt}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
py="$root/.venv/bin/python"
for commit in "$before" "$after"; do
  git clone -q "$root" "$work/$commit" && git -C "$work/$commit" checkout -q "$commit"
done
smk() {  # smk COMMIT DIR ARGS...: snakemake of COMMIT's clone on DIR, from a neutral folder
  local commit="$1" dir="$2"
  shift 2
  (cd "$work" && PYTHONPATH="$work/$commit" "$py" -m snakemake -s "$work/$commit/Snakefile" --directory "$dir" \
    --cores 2 --configfile "$dir/test.yaml" "$@")
}
{
  echo "Call overhead A/B on $(hostname), $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC'): A = $before, B = $after"
  "$py" "$root/benchmarks/matmul_peak.py"
  # a finished test-config run, made with AFTER's code, that both commits then work in
  mkdir -p "$work/finished" && cp "$root/config/test.yaml" "$work/finished/test.yaml"
  smk "$after" "$work/finished" > "$work/finished.log" 2>&1
  echo "1. dry run of config/test.yaml, CPU of the snakemake process (s)"
  for round in 1 2 3 4; do
    for commit in "$before" "$after"; do
      (cd "$work" && /usr/bin/time -f "   round $round, $commit: %U user + %S system, wall %e" \
        env PYTHONPATH="$work/$commit" "$py" -m snakemake -s "$work/$commit/Snakefile" --directory "$work/finished" \
        --cores 2 --configfile "$work/finished/test.yaml" -n --rerun-triggers mtime > /dev/null 2> "$work/dry.err"
       tail -1 "$work/dry.err")
    done
  done
  echo "2. the figure jobs of the finished run redrawn, their CPU (s, jobs.tsv)"
  for round in 1 2; do
    for commit in "$before" "$after"; do
      copy="$work/figures-$commit-$round"
      cp -a "$work/finished" "$copy" && rm -f "$copy/results/benchmarks/jobs.tsv"
      smk "$commit" "$copy" --forcerun figure structure_figure --rerun-triggers mtime > /dev/null 2>&1
      awk -F'\t' -v c="$commit" -v r="$round" 'NR > 1 && ($1 == "figure" || $1 == "structure_figure") { s += $4; n++ }
        END { printf "   round %s, %s: %d jobs, CPU %.1f\n", r, c, n, s }' "$copy/results/benchmarks/jobs.tsv"
    done
  done
  echo "3. 3 runs of featurewise, featurewise_b and samplewise (test config), $after: own servers vs one shared"
  PYTHONPATH="$work/$after" "$py" - "$work" <<'EOF'
import contextlib, os, resource, shutil, subprocess, sys, time
import yaml
from nqf.pipeline import job_server
work = sys.argv[1]
clone = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(job_server.__file__))))
cfg = yaml.safe_load(open(os.path.join(clone, "config", "test.yaml")))
cfg["experiments"] = {k: cfg["experiments"][k] for k in ("featurewise", "featurewise_b", "samplewise")}
config = os.path.join(work, "three.yaml")
with open(config, "w") as f:
    yaml.safe_dump(cfg, f, sort_keys=False)
for rnd in (1, 2):
    for mode in ("own", "shared"):
        os.environ.pop(job_server.ENV_SOCKET, None)
        before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        with job_server.shared() if mode == "shared" else contextlib.nullcontext():
            for i in range(3):
                target = os.path.join(work, f"three-{mode}-{rnd}-{i}")
                shutil.rmtree(target, ignore_errors=True)
                subprocess.run([sys.executable, "-m", "snakemake", "-s", os.path.join(clone, "Snakefile"), "--directory",
                                target, "--cores", "2", "--configfile", config], check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        print(f"   round {rnd}, {mode} servers: CPU {cpu:.1f} s, wall {time.monotonic() - t0:.1f} s")
EOF
  "$py" "$root/benchmarks/matmul_peak.py"
} | tee "$out"
