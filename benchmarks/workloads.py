"""Every training loop of the default and paper configs measured against this machine, in one run.

In one process, on one torch thread (``--threads 1 2`` adds a second pass on 2):

1. the machine's matmul peak, float32 and float64: square products of n = 1024 and 2048 (512 and
   1024 with ``--quick``), the best GFLOP/s of a few repeats;
2. every training workload the kinds train: the first experiment of each kind fourier_powerlaw,
   nqf_approximation, real_data, featurewise, samplewise and deep in ``config/config.yaml``
   (``default``) and ``config/paper.yaml`` (``paper``), each run of it (real_data's ``screen``
   left out). Nothing is rebuilt here: the kind's own ``make_data`` and ``train_run`` run as the
   workflow runs them, and the benchmark steps in where the library's loop starts
   (``nqf.training.loop._run_steps`` for everything nqf.train trains, ``nqf.training.deep.train_deep_trio``
   for deep), taking the exact model, targets, optimizer and record function the kind built. The
   timings run that same library loop on them:

   * time per step = (T(1 + n steps) - T(1 step)) / n, each T one call of the library loop that
     records only step 0; the median of the repeats (after a warm-up call), n sized to ~0.25 s;
   * record cost = (T(k steps, a record at every step) - T(k steps, a record at step 0)) / k, per
     record, reported in steps (record time / step time);
   * FLOPs per step: the difference of the same two calls (1 + 1 and 1 step) counted by
     ``torch.utils.flop_counter.FlopCounterMode`` (matrix products and convolutions, ``mm``
     FLOPs = 2 m n k) plus, by a dispatch mode of this script, one FLOP per output element of each
     pointwise op (tanh, exp, mul, add, ... tagged ``pointwise``) and one per input element of each
     reduction (sum, mean, amax, softmax); copies and views count nothing. Both are counted on the
     tensors the step really runs (after vmap), so no formula is restated here.

   Then the training loop's own nqf.train continues on a stand-in trajectory (the step-0 values at
   every recorded step), so the kind's later trainings in the same run (the NQF after the module)
   are reached without training: only the first training of each model class in a run is timed.
3. a table in ``benchmarks/results/workloads.txt`` and ``.json``: the machine, torch version,
   threads, load average, date; per workload FLOPs/step (matmul and elementwise), ms/step,
   achieved GFLOP/s (both kinds of FLOPs over the step time) and its share of the matmul peak of the
   workload's dtype, and the record cost.

    python benchmarks/workloads.py                 # both configs, ~5 min on one thread
    python benchmarks/workloads.py --quick         # < 60 s: default config, short timings
    python benchmarks/workloads.py --only featurewise,fourier --configs default --out /tmp/w
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"default": ROOT / "config" / "config.yaml", "paper": ROOT / "config" / "paper.yaml"}
KINDS = ("fourier_powerlaw", "nqf_approximation", "real_data", "featurewise", "samplewise", "deep")
SKIP_RUNS = {("real_data", "screen")}
COLUMNS = ("workload", "dtype", "matmul_mflop", "elementwise_mflop", "ms_per_step", "gflops", "pct_peak",
           "record_steps")

aten = torch.ops.aten
REDUCTIONS = {aten.sum, aten.mean, aten.amax, aten.amin, aten.max, aten.min, aten.norm, aten.linalg_vector_norm,
              aten._softmax, aten._log_softmax, aten._softmax_backward_data, aten._log_softmax_backward_data,
              aten.prod, aten.var, aten.std, aten.logsumexp}


class ElementwiseCounter(TorchDispatchMode):
    """One FLOP per output element of a pointwise op, one per input element of a reduction."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in REDUCTIONS:
            if args and isinstance(args[0], torch.Tensor):
                self.flops += args[0].numel()
        elif torch.Tag.pointwise in func.tags:
            for o in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(o, torch.Tensor):
                    self.flops += o.numel()
        return out


def counted_flops(fn) -> tuple[int, int]:
    """(matmul FLOPs, elementwise FLOPs) of one call of ``fn``. NumPy's tanh (nqf.architectures.fast_tanh)
    is invisible to a dispatch mode, so the count runs the step with torch.tanh in its place: the
    same elements, counted once each."""
    import nqf.architectures.fast_tanh as fast_tanh

    elementwise = ElementwiseCounter()
    matmul = FlopCounterMode(display=False)
    enabled, fast_tanh.ENABLED = fast_tanh.ENABLED, False
    try:
        with matmul, elementwise:
            fn()
    finally:
        fast_tanh.ENABLED = enabled
    return int(matmul.get_total_flops()), int(elementwise.flops)


def matmul_peak(dtype, sizes, repeats: int) -> float:
    """Best GFLOP/s of square n x n products over ``sizes``."""
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t0) / 1e9)
    return best


def clock(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(run, *, target: float, repeats: int, record_k: int) -> dict:
    """``run(steps, record_every)`` calls the library loop for ``steps`` steps, recording step 0 or
    every step. Returns seconds per step, record cost in steps and the FLOPs per step."""
    run(1, False)  # warm-up
    n = 1
    while n < 4096:  # n doubled (at most x8 a time) until n steps take ``target``
        took = clock(lambda: run(1 + n, False)) - clock(lambda: run(1, False))
        if took >= target:
            break
        n *= int(min(8, max(2, target / max(took, 1e-9))))
    per_step = statistics.median(
        max(clock(lambda: run(1 + n, False)) - clock(lambda: run(1, False)), 0.0) / n for _ in range(repeats))
    k = max(1, min(record_k, n))
    rec = statistics.median(
        max(clock(lambda: run(k, True)) - clock(lambda: run(k, False)), 0.0) / k for _ in range(repeats))
    mm2, el2 = counted_flops(lambda: run(2, False))
    mm1, el1 = counted_flops(lambda: run(1, False))
    return {"seconds": per_step, "record_seconds": rec, "matmul_flops": mm2 - mm1, "elementwise_flops": el2 - el1,
            "n_timed": n}


class Skip(Exception):
    """Raised to leave a run once its training is measured (deep: one training per run)."""


class Interceptor:
    """Installs stand-ins for the library's training loops that measure the first training of each
    model class in a run and then let the kind go on without training."""

    def __init__(self, sink, opts):
        self.sink, self.opts, self.seen, self.label = sink, opts, set(), ""
        import nqf.training.deep as deep
        import nqf.training.loop as loop

        self.loop, self.deep = loop, deep
        self.orig_run_steps, self.orig_trio = loop._run_steps, deep.train_deep_trio

    def __enter__(self):
        self.loop._run_steps, self.deep.train_deep_trio = self.run_steps, self.trio
        return self

    def __exit__(self, *exc):
        self.loop._run_steps, self.deep.train_deep_trio = self.orig_run_steps, self.orig_trio

    def _name(self, model) -> str:
        name = type(model).__name__
        return {"ModuleReplicas": "module", "QuadraticModel": "NQF"}.get(name, "")

    def run_steps(self, model, y, params, opt, grid, record, probe, **kw):
        orig = self.orig_run_steps
        key = (self.label, self._name(model))
        if key not in self.seen:
            self.seen.add(key)

            def run(steps, every):
                g = np.arange(steps + 1) if every else np.array([0])
                orig(model, y, params, opt, g, record, None, **{**kw, "steps": steps})

            self.sink(f"{self.label} {self._name(model)}".strip(), params[0].dtype, measure(run, **self.opts))
        # a stand-in trajectory: the values at step 0 at every recorded step
        losses, recorded, tail = orig(model, y, params, opt, np.array([0]), record, probe, **{**kw, "steps": 0})
        return losses * len(grid), {k: v * len(grid) for k, v in recorded.items()}, tail

    def trio(self, model, W0, x_train, y_train, x_test, y_test, **kw):
        orig = self.orig_trio

        def run(steps, every):
            orig(model, W0, x_train, y_train, x_test, y_test,
                 **{**kw, "steps": steps, "record_steps": np.arange(steps + 1) if every else [0]})

        self.sink(f"{self.label} trio", W0[0].dtype, measure(run, **self.opts))
        raise Skip


def workloads(config: str, only, interceptor) -> None:
    from nqf.experiments import kind_of, run_config, run_ids, split_run_id, stage_config
    from nqf.pipeline.config import validate_config
    from nqf.pipeline.config_files import read_config_file

    cfg_all = validate_config(read_config_file(CONFIGS[config]))
    done = set()
    for exp, cfg in cfg_all["experiments"].items():
        kind = cfg["kind"]
        if kind not in KINDS or kind in done:
            continue
        done.add(kind)
        runs = []
        for run in run_ids(cfg):
            base, _ = split_run_id(cfg, run)
            label = f"{config} {kind}/{base}"
            if (kind, base) in SKIP_RUNS or base in [b for b, _ in runs]:
                continue
            if only and not any(o in label for o in only):
                continue
            runs.append((base, run))
        if not runs:
            continue
        kmod = kind_of(cfg)
        data = kmod.make_data(stage_config(cfg, "data"))
        for base, run in runs:
            interceptor.label = f"{config} {kind}/{base}"
            t0 = time.perf_counter()
            try:
                kmod.train_run(data, run_config(cfg, run), base, device="cpu")
            except Skip:
                pass
            print(f"  [{interceptor.label}: {time.perf_counter() - t0:.1f} s]", file=sys.stderr, flush=True)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


def table(rows: list[dict]) -> list[str]:
    head = (f"{'workload':<46} {'dtype':>7} {'matmul MFLOP':>12} {'elem MFLOP':>10} {'ms/step':>9} "
            f"{'GFLOP/s':>8} {'% peak':>7} {'record/step':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['workload']:<46} {r['dtype']:>7} {r['matmul_mflop']:>12.4g} {r['elementwise_mflop']:>10.4g} "
                     f"{r['ms_per_step']:>9.3f} {r['gflops']:>8.2f} {r['pct_peak']:>7.2f} {r['record_steps']:>11.2f}")
    return lines


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="short timings, default config only (< 60 s)")
    ap.add_argument("--configs", default=None, help="comma-separated: default,paper")
    ap.add_argument("--only", default="", help="comma-separated substrings of workload labels to keep")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "workloads"),
                    help="output path without suffix (.txt and .json are written)")
    args = ap.parse_args(argv)
    import logging
    import warnings

    logging.getLogger("nqf").setLevel(logging.WARNING)
    warnings.simplefilter("ignore")
    configs = args.configs.split(",") if args.configs else (["default"] if args.quick else ["default", "paper"])
    only = [o for o in args.only.split(",") if o]
    opts = ({"target": 0.03, "repeats": 2, "record_k": 2} if args.quick else
            {"target": 0.25, "repeats": 3, "record_k": 4})
    sizes, reps = ((512, 1024), 3) if args.quick else ((1024, 2048), 4)
    started = datetime.datetime.now().astimezone()
    load0 = os.getloadavg()
    t_start = time.perf_counter()
    passes = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        peak = {"float32": matmul_peak(torch.float32, sizes, reps), "float64": matmul_peak(torch.float64, sizes, reps)}
        rows = []

        def sink(label, dtype, m):
            dt = str(dtype).replace("torch.", "")
            flops = m["matmul_flops"] + m["elementwise_flops"]
            gflops = flops / m["seconds"] / 1e9 if m["seconds"] > 0 else float("nan")
            row = {"workload": label, "dtype": dt, "matmul_mflop": m["matmul_flops"] / 1e6,
                   "elementwise_mflop": m["elementwise_flops"] / 1e6, "ms_per_step": 1e3 * m["seconds"],
                   "gflops": gflops, "pct_peak": 100.0 * gflops / peak.get(dt, peak["float32"]),
                   "record_steps": m["record_seconds"] / m["seconds"] if m["seconds"] > 0 else float("nan"),
                   "record_ms": 1e3 * m["record_seconds"], "steps_timed": m["n_timed"]}
            rows.append(row)
            print(table([row])[-1], file=sys.stderr, flush=True)

        with Interceptor(sink, opts) as icp:
            for config in configs:
                workloads(config, only, icp)
        peak_again = {"float32": matmul_peak(torch.float32, sizes, reps),
                      "float64": matmul_peak(torch.float64, sizes, reps)}
        passes.append({"threads": threads, "peak_gflops": peak, "peak_gflops_after": peak_again, "rows": rows})
    load1 = os.getloadavg()
    result = {"machine": machine(), "torch": torch.__version__, "python": platform.python_version(),
              "date": started.isoformat(timespec="seconds"), "load_average_start": load0, "load_average_end": load1,
              "wall_seconds": time.perf_counter() - t_start, "configs": configs, "quick": args.quick,
              "columns": list(COLUMNS), "passes": passes}
    lines = [f"nqf training workloads against the matmul peak, measured in one run ({started:%Y-%m-%d %H:%M %Z})",
             f"machine: {result['machine']}; torch {torch.__version__}; python {result['python']}",
             f"load average (1, 5, 15 min) at start {', '.join(f'{v:.2f}' for v in load0)}, at end "
             f"{', '.join(f'{v:.2f}' for v in load1)}; wall {result['wall_seconds']:.0f} s",
             "FLOPs per step: matmul/conv by torch.utils.flop_counter.FlopCounterMode, elementwise = 1 per output",
             "element of pointwise ops + 1 per input element of reductions, both counted on one real step of the",
             "library loop. GFLOP/s = (matmul + elementwise) / time; % peak against the matmul peak of the step's",
             "dtype. record/step: time of one record of the kind's record function over one step's time.", ""]
    for p in passes:
        pk, pa = p["peak_gflops"], p["peak_gflops_after"]
        lines += [f"== {p['threads']} torch thread(s): matmul peak float32 {pk['float32']:.1f} GFLOP/s, float64 "
                  f"{pk['float64']:.1f} GFLOP/s (again at the end: {pa['float32']:.1f}, {pa['float64']:.1f})", ""]
        lines += table(p["rows"]) + [""]
    text = "\n".join(lines)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".txt").write_text(text)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(text)
    return result


if __name__ == "__main__":
    main()
