"""Training runs with glibc's default allocator settings and with the workflow's
(nqf.pipeline.snakefile.ALLOCATOR_SETTINGS), side by side in fresh processes.

Each run is one experiment's training run of a config (its data made first, outside the timing),
in a fresh process with one torch thread, as a workflow job runs it; the two settings alternate,
``--repeat`` times each, and the table lists the best wall time, its user and system CPU, the
minor page faults and the peak resident memory:

    python benchmarks/allocator.py                       # default config: real_data/cnn, nqf_approximation/cnn
    python benchmarks/allocator.py --runs real_data:mlp --repeat 1

Writes benchmarks/results/allocator.txt (``--out`` to write elsewhere).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import json, os, resource, sys, time
import torch, xarray as xr
from nqf.experiments import kind_of, split_run_id
from nqf.pipeline.config import load_workflow_config, validate_config
from nqf.pipeline.snakefile import Workflow

config_file, exp, run, data_file = sys.argv[1:5]
torch.set_num_threads(1)
cfg = validate_config(load_workflow_config([config_file], {}, None))
workflow = Workflow(cfg, {"sha256": "", "matches": ""}, None)
class Wildcards: pass
wildcards = Wildcards(); wildcards.exp, wildcards.run = exp, run
run_cfg = workflow.run_params(wildcards)
base, _ = split_run_id(cfg["experiments"][exp], run)
data = xr.load_dataset(data_file)
before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
kind_of(run_cfg).train_run(data, run_cfg, base, device="cpu")
wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": wall, "user": after.ru_utime - before.ru_utime, "sys": after.ru_stime - before.ru_stime,
                  "minflt": after.ru_minflt - before.ru_minflt, "maxrss_mb": after.ru_maxrss / 1024}))
"""
MAKE_DATA = r"""
import sys
from nqf.experiments import kind_of
from nqf.pipeline.config import load_workflow_config, validate_config
cfg = validate_config(load_workflow_config([sys.argv[1]], {}, None))["experiments"][sys.argv[2]]
kind_of(cfg).make_data(cfg).to_netcdf(sys.argv[3])
"""


def base_environment() -> dict:
    """This environment without the allocator settings, one BLAS/OpenMP thread (a workflow job's)."""
    from nqf.pipeline.snakefile import ALLOCATOR_SETTINGS

    env = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_SETTINGS}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return env


def measure(config: Path, exp: str, run: str, data: Path, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(config), exp, run, str(data)], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from nqf.pipeline.snakefile import ALLOCATOR_SETTINGS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml")
    parser.add_argument("--runs", default="real_data:cnn,nqf_approximation:cnn",
                        help="experiment:run pairs, comma-separated")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "allocator.txt")
    args = parser.parse_args()
    base = base_environment()
    settings = {"glibc default": base, "workflow's": {**base, **ALLOCATOR_SETTINGS}}
    lines = [f"{__doc__.splitlines()[0]}",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} CPUs; python {platform.python_version()}; load average at start "
             f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}",
             "workflow's settings: " + ", ".join(f"{k}={v}" for k, v in ALLOCATOR_SETTINGS.items()),
             f"best of {args.repeat} fresh processes each (settings alternating)", "",
             f"{'run':32s} {'allocator':14s} {'wall s':>7s} {'user s':>7s} {'sys s':>7s} {'faults':>10s} {'peak MB':>8s}"]
    with tempfile.TemporaryDirectory() as tmp:
        for pair in args.runs.split(","):
            exp, run = pair.split(":")
            data = Path(tmp) / f"{exp}.nc"
            subprocess.run([sys.executable, "-c", MAKE_DATA, str(args.config), exp, str(data)], env=base, cwd=ROOT,
                           check=True, capture_output=True)
            results = {name: [] for name in settings}
            for _ in range(args.repeat):
                for name, env in settings.items():
                    results[name].append(measure(args.config, exp, run, data, env))
            walls = {}
            for name, rows in results.items():
                best = min(rows, key=lambda r: r["wall"])
                walls[name] = best["wall"]
                lines.append(f"{exp + '/' + run:32s} {name:14s} {best['wall']:7.2f} {best['user']:7.2f} "
                             f"{best['sys']:7.2f} {best['minflt']:10d} {best['maxrss_mb']:8.0f}")
            speedup = walls["glibc default"] / walls["workflow's"]
            lines.append(f"{'':32s} {'speed-up':14s} {speedup:7.2f}x")
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
