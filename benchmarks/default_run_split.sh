#!/usr/bin/env bash
# Where the default run's CPU goes (config/config.yaml, snakemake --cores 2, job server on), from a
# fresh clone of COMMIT: the jobs' own CPU (the job server's results/benchmarks/jobs.tsv, per rule)
# beside what starts and schedules them, each Python process's own CPU as it exits
# (benchmarks/startup/sitecustomize.py): snakemake's main process, the job server, and the job
# clients (the rule's script: process that hands its job to the server). The float32 matmul peak
# of one thread before and after (this machine's speed drifts: compare runs of one session).
#
#   bash benchmarks/default_run_split.sh [COMMIT] [OUT]      # default HEAD; ~12-14 min on 2 cores
#   SNAKEMAKE_ARGS="--configfile config/test.yaml" bash benchmarks/default_run_split.sh   # another config
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
commit="$(git -C "$root" rev-parse --short "${1:-HEAD}")"
out="${2:-/dev/stdout}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
py="$root/.venv/bin/python"
# the float32 matmul peak of one torch thread (benchmarks/matmul_peak.py)
peak() { "$py" "$root/benchmarks/matmul_peak.py"; }
git clone -q "$root" "$work/run" && git -C "$work/run" checkout -q "$commit"
cd "$work/run"
{
  echo "snakemake --cores 2 ${SNAKEMAKE_ARGS:-}: CPU by process, commit $commit, $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC')"
  peak
  NQF_CPU_LOG="$work/cpu.log" PYTHONPATH="$work/run:$root/benchmarks/startup" \
    /usr/bin/time -f "wall %e s, CPU %U s user + %S s system (everything)" \
    "$py" -m snakemake --cores 2 ${SNAKEMAKE_ARGS:-} > "$work/run.log" 2> "$work/run.err" || { tail -20 "$work/run.err"; exit 1; }
  tail -1 "$work/run.err"
  awk -F'\t' 'NR > 1 { cpu[$1] += $4; n[$1]++; total += $4 } END {
      for (r in cpu) printf "  %-16s %3d jobs, CPU %7.1f s\n", r, n[r], cpu[r]; printf "  the jobs: CPU %.1f s\n", total }' \
    results/benchmarks/jobs.tsv
  awk -F'\t' '/\.snakemake\/scripts\// { n++; c += $1; next }
      /nqf\.pipeline\.job_server|nqf\/pipeline\/job_server\.py/ { s += $1; next }
      /-m snakemake|snakemake\/__main__|bin\/snakemake/ { m += $1; next }
      { o += $1; no++ }
      END { printf "  snakemake main process: CPU %.1f s\n  job server (its own, not its jobs): CPU %.1f s\n  job clients: %d, CPU %.1f s\n  other Python processes: %d, CPU %.1f s\n", m, s, n, c, no, o }' \
    "$work/cpu.log"
  peak
} > "$out"
