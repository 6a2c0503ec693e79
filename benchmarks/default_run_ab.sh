#!/usr/bin/env bash
# The default run (config/config.yaml) of two commits, back to back, each from a fresh clone, on
# this machine: wall and CPU of the whole run (/usr/bin/time), each stage's job CPU from the job
# server's results/benchmarks/jobs.tsv (commits from c238c62 on write it), whether the two
# summary.csv files are byte-identical, and the float32 matmul peak of one thread before, between
# and after (this machine's speed drifts: compare runs only within one call).
#
#   bash benchmarks/default_run_ab.sh BEFORE AFTER [OUT]    # e.g. HEAD~1 HEAD
#
# Uses this checkout's .venv (PYTHONPATH points each run at its own clone). Takes two full runs
# (~7-14 min each on 2 cores). Writes OUT (default benchmarks/results/default_run_ab.txt).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
before="$(git -C "$root" rev-parse --short "$1")"
after="$(git -C "$root" rev-parse --short "$2")"
out="${3:-$root/benchmarks/results/default_run_ab.txt}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
py="$root/.venv/bin/python"
# the float32 matmul peak of one torch thread (benchmarks/matmul_peak.py)
peak() { "$py" "$root/benchmarks/matmul_peak.py"; }
{
  echo "Default run A/B on $(hostname), $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC'); snakemake --cores 2, job server on"
  for commit in "$before" "$after"; do
    peak
    git clone -q "$root" "$work/$commit"
    git -C "$work/$commit" checkout -q "$commit"
    (cd "$work/$commit" && /usr/bin/time -f "$commit: wall %e s, CPU %U s user + %S s system" \
        env PYTHONPATH="$work/$commit" "$root/.venv/bin/snakemake" --cores 2 > run.log 2> run.err) || {
        tail -20 "$work/$commit/run.err"; exit 1; }
    tail -1 "$work/$commit/run.err"
    awk -F'\t' 'NR > 1 { cpu[$1] += $4; n[$1]++; total += $4 }
        END { for (r in cpu) printf "  %-16s %3d jobs, CPU %7.1f s\n", r, n[r], cpu[r];
              printf "  all jobs, the server children: CPU %.1f s\n", total }' "$work/$commit/results/benchmarks/jobs.tsv"
  done
  peak
  if cmp -s "$work/$before/results/summary.csv" "$work/$after/results/summary.csv"; then
    echo "summary.csv: byte-identical"
  else
    echo "summary.csv: differs"; diff "$work/$before/results/summary.csv" "$work/$after/results/summary.csv" | head -20
  fi
} | tee "$out"
