"""One call on a machine with a GPU: does nqf run on CUDA, and what does the GPU buy?

    .venv/bin/python benchmarks/gpu_check.py                    # writes benchmarks/results/gpu_check.json
    .venv/bin/python benchmarks/gpu_check.py --quick --out /tmp/gpu_check.json   # the test's short form

It writes one JSON file with

1. ``environment``: python, torch, its CUDA and cuDNN versions, the GPU (name, capability,
   memory), the TF32 switches (cuDNN convolutions use TF32 by default on Ampere and later, which
   rounds float32 products to 10 mantissa bits), CPU cores and the checkout's commit;
2. ``device_resolution``: what nqf makes of ``auto``, ``cpu``, ``cuda``, ``cuda:0`` and one
   device past the last (nqf.training.quadratic.resolve_device) and the workflow's device check
   (nqf.experiments.machine.device_problem): on a machine without CUDA, ``cuda`` must be refused
   with a sentence, on one with CUDA accepted;
3. ``cuda_paths``: the same trainings on the CPU and on CUDA, compared: a dense QuadraticModel
   under GD in float64 and under Adam in float32 (nqf.train), and the real_data CNN's forward
   and gradient in float32 (ModuleReplicas); each with its largest relative difference and the
   tolerance it is held to;
4. ``timings``: seconds per training step (forward, backward, optimizer step) on the CPU (one
   torch thread, as every workflow job runs, and all cores) and on CUDA: the real_data CNN
   (50 channels 15x15) and the query-key attention (10 heads, d_k = 32) at the paper's 4000
   training images and 2 seeds in float32 (config/paper.yaml), each module and its NQF
   (QuadraticModel of module.structure(x)) as real_data's train_run trains them, and a
   small-step loop: nqf.train of a featurewise-size model (DiagonalForm, m = p = d = 5, float64
   GD), where a step is a few tiny kernels and the launch latency decides;
5. ``snakemake``: config/test.yaml run into a temporary folder with ``--config device=cuda``
   and ``--resources gpu=1`` (its wall time, its train jobs' gpu resource), and the same config
   on the CPU (``device=cpu``), their summary.csv compared row by row.

Without CUDA every CUDA part is recorded as skipped with the reason, the CPU parts run, and the
snakemake part is skipped unless ``--snakemake on`` (then only the CPU run, which tests this
script). ``--quick`` shrinks everything for the test (tests/package/test_gpu_check.py): 500
images instead of 4000, fewer repeats, no all-cores CPU timing. A failing part is recorded with
its error and the others still run; the exit status is 1 when a check failed, else 0.
"""
from __future__ import annotations

import argparse
import copy
import csv
import functools
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "gpu_check.json"
# real_data at the paper's sizes (config/paper.yaml, nqf/experiments/real_data/schema.yaml)
PAPER_IMAGES, PAPER_SEEDS, IMAGE = 4000, 2, (28, 28)
MODULES = {"cnn": {"width": 50, "kernel": [15, 15]}, "qk_self_attention": {"width": 10, "d_k": 32}}


# -- helpers -------------------------------------------------------------------------------------

def cuda_ok() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def no_cuda_reason() -> str:
    import torch

    built = torch.version.cuda
    return (f"torch sees no CUDA device (torch {torch.__version__}, built "
            + (f"with CUDA {built}" if built else "without CUDA") + ")")


def sync(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def per_call(fn, device, repeats: int, warmup: int = 1) -> float:
    """Seconds per call of ``fn`` (after ``warmup`` calls), the device synchronised around."""
    for _ in range(warmup):
        fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / repeats


def rel_diff(a, b) -> float:
    """max |a - b| / max |b| over all entries (0 when both are 0)."""
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return float(np.max(np.abs(a - b)) / scale) if scale > 0 else float(np.max(np.abs(a - b), initial=0.0))


def part(results: dict, name: str, fn, *args) -> None:
    """results[name] = fn(*args), or the error it raised (the other parts still run)."""
    t0 = time.perf_counter()
    try:
        out = fn(*args)
    except Exception as exc:  # noqa: BLE001 - recorded, not hidden
        out = {"status": "error", "error": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc()[-4000:]}
    out["seconds"] = round(time.perf_counter() - t0, 2)
    results[name] = out
    print(f"[gpu_check] {name}: {out.get('status', 'done')} ({out['seconds']} s)", flush=True)


# -- 1. environment ------------------------------------------------------------------------------

def environment() -> dict:
    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    except OSError:  # no git on the machine
        commit = subprocess.CompletedProcess([], 1, "", "")
    env = {"status": "ok", "python": sys.version.split()[0], "platform": platform.platform(),
           "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "cuda_available": cuda_ok(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "commit": commit.stdout.strip() or None,
           "tf32": {"cuda_matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}}
    if env["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        env["gpu0"] = {"name": props.name, "capability": f"{props.major}.{props.minor}",
                       "memory_gib": round(props.total_memory / 2 ** 30, 1),
                       "multiprocessors": props.multi_processor_count}
    else:
        env["cuda_absent"] = no_cuda_reason()
    return env


# -- 2. device resolution ------------------------------------------------------------------------

def device_resolution() -> dict:
    import torch

    from nqf.experiments.machine import device_problem
    from nqf.training.quadratic import resolve_device

    count = torch.cuda.device_count() if cuda_ok() else 0
    names = ["auto", "cpu", "cuda", "cuda:0", f"cuda:{count}"]
    resolved = {}
    for name in names:
        try:
            resolved[name] = {"device": str(resolve_device(name))}
        except ValueError as exc:
            resolved[name] = {"refused": str(exc)}
    problems = {name: device_problem(name) for name in ("auto", "cpu", "cuda")}
    if count:
        expected = {"auto": "cuda", "cpu": "cpu", "cuda": "cuda", "cuda:0": "cuda:0", f"cuda:{count}": None}
    else:
        expected = {"auto": "cpu", "cpu": "cpu", "cuda": None, "cuda:0": None}
    failures = [f"{name}: expected {want or 'a refusal'}, got {resolved[name]}" for name, want in expected.items()
                if resolved[name].get("device") != want]
    # the workflow refuses device: cuda exactly where torch sees no CUDA
    if (problems["cuda"] is None) != bool(count) or problems["auto"] or problems["cpu"]:
        failures.append(f"device_problem: {problems}")
    return {"status": "fail" if failures else "ok", "resolved": resolved, "device_problem": problems,
            "failures": failures}


# -- 3. CUDA paths -------------------------------------------------------------------------------

def quadratic_curves(device: str, dtype, optimizer: str, steps: int):
    """Loss curve and final W of a dense NQF (m = 64 samples, p = 8, d = 8, 2 replicas) trained by
    nqf.train on ``device``; the data are drawn on the CPU, so both devices start equal."""
    import torch

    import nqf
    from nqf.training.loop import train

    g = torch.Generator().manual_seed(0)
    B = torch.randn(64, 8, 8, generator=g, dtype=torch.float64)
    form = nqf.DenseForm((B + B.transpose(1, 2)) / 8)
    y = torch.randn(64, generator=g, dtype=torch.float64)
    W0 = 0.1 * torch.randn(2, 8, 8, generator=g, dtype=torch.float64)
    model = nqf.QuadraticModel(form, W0.to(dtype), device=device, dtype=dtype)
    ds = train(model, y, lr=0.02 if optimizer == "gd" else 1e-2, steps=steps, optimizer=optimizer, n_record=50,
               progress_seconds=math.inf)
    return ds["loss"].values, model.W.detach().cpu().to(torch.float64).numpy()


def cnn_forward_grad(device: str, images: int):
    """The real_data CNN's outputs and the gradient of their summed squares, float32, 2 seeds."""
    import torch

    from nqf.experiments.real_data import build_module, module_inputs
    from nqf.training.approximation import ModuleReplicas

    module = build_module("cnn", MODULES["cnn"], IMAGE)
    images_np = torch.rand(images, *IMAGE, generator=torch.Generator().manual_seed(1)).numpy()
    x = module_inputs(module, images_np, 1.0).to(device, torch.float32)
    module = module.to(device=device, dtype=torch.float32)
    W0 = 0.01 * torch.randn(PAPER_SEEDS, module.p, module.width, generator=torch.Generator().manual_seed(2))
    model = ModuleReplicas(module, x, W0.to(device))
    f = model()
    f.pow(2).sum().backward()
    return f.detach().cpu().numpy(), model.W.grad.cpu().numpy()


def cuda_paths(quick: bool) -> dict:
    import torch

    if not cuda_ok():
        return {"status": "skipped", "reason": no_cuda_reason()}
    steps = 200 if quick else 2000
    checks = {}
    for name, dtype, optimizer, tol in (("quadratic_gd_float64", torch.float64, "gd", 1e-9),
                                        ("quadratic_adam_float32", torch.float32, "adam", 1e-3)):
        cpu_loss, cpu_W = quadratic_curves("cpu", dtype, optimizer, steps)
        gpu_loss, gpu_W = quadratic_curves("cuda", dtype, optimizer, steps)
        diff = max(rel_diff(gpu_loss, cpu_loss), rel_diff(gpu_W, cpu_W))
        checks[name] = {"steps": steps, "max_rel_diff": diff, "tolerance": tol, "ok": diff <= tol,
                        "final_loss_cpu": float(cpu_loss[..., -1].mean()), "final_loss_cuda": float(gpu_loss[..., -1].mean())}
    # cuDNN convolutions in float32 may use TF32 (environment.tf32.cudnn): a looser tolerance then
    f_cpu, g_cpu = cnn_forward_grad("cpu", 200)
    f_gpu, g_gpu = cnn_forward_grad("cuda", 200)
    tol = 1e-2 if torch.backends.cudnn.allow_tf32 else 1e-4
    diff = max(rel_diff(f_gpu, f_cpu), rel_diff(g_gpu, g_cpu))
    checks["cnn_forward_grad_float32"] = {"images": 200, "max_rel_diff": diff, "tolerance": tol, "ok": diff <= tol,
                                          "tf32_cudnn": torch.backends.cudnn.allow_tf32}
    return {"status": "ok" if all(c["ok"] for c in checks.values()) else "fail", "checks": checks}


# -- 4. timings ----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=2)
def real_data_setup(arch: str, images: int):
    """(module, inputs, +-1 targets, W0 of 2 seeds, NQF form) of ``arch`` on ``images`` random
    images, float64 on the CPU as the run builds them; made once for every device."""
    import torch

    from nqf.experiments.real_data import build_module, module_inputs

    module = build_module(arch, MODULES[arch], IMAGE)
    module.set_readout(torch.randn(IMAGE[1], generator=torch.Generator().manual_seed(3), dtype=torch.float64).numpy())
    images_np = torch.randn(images, *IMAGE, generator=torch.Generator().manual_seed(1), dtype=torch.float64).numpy()
    x = module_inputs(module, images_np, 1.0)
    y = torch.sign(torch.randn(images, generator=torch.Generator().manual_seed(4)))
    W0 = 0.01 * torch.randn(PAPER_SEEDS, module.p, module.width, generator=torch.Generator().manual_seed(2))
    return module, x, y, W0, module.structure(x)


def real_data_steps(arch: str, device: str, images: int):
    """Adam steps of ``arch`` (float32, 2 seeds, ``images`` training images) and of its NQF, as
    real_data's train_run builds them: {"module": step(), "nqf": step()}."""
    import torch

    from nqf.training.approximation import ModuleReplicas
    from nqf.training.loop import mse_per_replica
    from nqf.training.quadratic import QuadraticModel

    module, x, y, W0, form = real_data_setup(arch, images)
    module = copy.deepcopy(module).to(device=device, dtype=torch.float32)
    x, y, W0 = x.to(device, torch.float32), y.to(device, torch.float32), W0.to(device, torch.float32)
    models = {"module": (ModuleReplicas(module, x, W0), y[:, None]),
              "nqf": (QuadraticModel(form, W0, device=device, dtype=torch.float32), y)}
    steps = {}
    for name, (model, target) in models.items():
        opt = torch.optim.Adam([model.W], lr=1e-3)

        def step(model=model, target=target, opt=opt):
            # as nqf.training.loop steps: the NQF's closed-form gradient, the module's by autograd
            if hasattr(model, "loss_and_grad"):
                model.W.grad = model.loss_and_grad(target)[1]
            else:
                opt.zero_grad(set_to_none=True)
                mse_per_replica(model(), target).sum().backward()
            opt.step()

        steps[name] = step
    return steps


def small_loop(device: str, steps: int) -> float:
    """Seconds per step of nqf.train on a featurewise-size model (DiagonalForm m = p = d = 5,
    float64 GD, 100 recorded steps), the whole call divided by its steps."""
    import torch

    import nqf
    from nqf.training.loop import train

    g = torch.Generator().manual_seed(0)
    form = nqf.DiagonalForm(torch.rand(5, 5, generator=g, dtype=torch.float64))
    y = torch.rand(5, generator=g, dtype=torch.float64)
    W0 = 1e-3 * torch.randn(1, 5, 5, generator=g, dtype=torch.float64)

    def run(n):
        model = nqf.QuadraticModel(form, W0, device=device)
        train(model, y, lr=0.02, steps=n, n_record=100, progress_seconds=math.inf)

    run(50)  # warm-up (CUDA context, kernels)
    sync(device)
    t0 = time.perf_counter()
    run(steps)
    sync(device)
    return (time.perf_counter() - t0) / steps


def timings(quick: bool) -> dict:
    import torch

    images = 500 if quick else PAPER_IMAGES
    # CPU steps at 4000 images take seconds: 2 timed after 1 warm-up; CUDA's take milliseconds
    repeats = {"cpu": 1 if quick else 2, "cuda": 3 if quick else 20}
    loop_steps = 300 if quick else 5000
    all_cores = os.cpu_count() or 1
    settings = [("cpu_1_thread", "cpu", 1)]
    if not quick and all_cores > 1:
        settings.append((f"cpu_{all_cores}_threads", "cpu", all_cores))
    if cuda_ok():
        settings.append(("cuda", "cuda", None))
    threads_before = torch.get_num_threads()
    out = {"images": images, "seeds": PAPER_SEEDS, "dtype": "float32", "repeats": repeats,
           "small_loop_steps": loop_steps, "seconds_per_step": {}}
    if not cuda_ok():
        out["cuda"] = {"status": "skipped", "reason": no_cuda_reason()}
    try:
        for label, device, threads in settings:
            if threads:
                torch.set_num_threads(threads)
            row = {}
            for arch in MODULES:
                for name, step in real_data_steps(arch, device, images).items():
                    row[f"{arch}_{name}"] = per_call(step, device, repeats[device], warmup=3 if device == "cuda" else 1)
            row["small_loop_featurewise"] = small_loop(device, loop_steps)
            out["seconds_per_step"][label] = row
            print(f"[gpu_check]   {label}: " + ", ".join(f"{k} {v:.3g} s" for k, v in row.items()), flush=True)
    finally:
        torch.set_num_threads(threads_before)
    per = out["seconds_per_step"]
    if "cuda" in per:
        out["cuda_speedup"] = {base: {k: per[base][k] / per["cuda"][k] for k in per["cuda"]}
                               for base in per if base != "cuda"}
    out["status"] = "ok"
    return out


# -- 5. snakemake on config/test.yaml ------------------------------------------------------------

def snakemake_exe() -> str | None:
    """The snakemake beside this interpreter, else the one on PATH, else None."""
    beside = Path(sys.executable).with_name("snakemake")
    return str(beside) if beside.exists() else shutil.which("snakemake")


def start_snakemake(work: Path, device: str, cores: int):
    """config/test.yaml with ``device`` into ``work``, one training at a time on the GPU."""
    command = [snakemake_exe(), "--cores", str(cores), "--resources", "gpu=1",
               "--configfile", str(ROOT / "config" / "test.yaml"), "--config", f"device={device}",
               "--directory", str(work), "--snakefile", str(ROOT / "Snakefile")]
    work.mkdir(parents=True)
    log = open(work.parent / f"{device}.log", "w+")  # noqa: SIM115 - closed by finish_snakemake
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    # its own process group: at the time limit snakemake and the jobs it started are stopped together
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    return proc, log, command, time.perf_counter()


def finish_snakemake(device: str, started, deadline: float) -> dict:
    proc, log, command, t0 = started
    try:
        proc.wait(timeout=max(1.0, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    wall = time.perf_counter() - t0
    log.seek(0)
    text = log.read()
    log.close()
    # the train jobs as snakemake lists them, and those that carried the gpu resource
    blocks = [b.split("\n\n")[0] for b in text.split("rule train:")[1:]]
    return {"device": device, "returncode": proc.returncode, "wall_s": round(wall, 1), "command": command[1:],
            "train_jobs": len(blocks), "train_jobs_with_gpu_resource": sum("gpu=1" in b for b in blocks),
            "log_tail": text[-3000:] if proc.returncode else ""}


def read_summary(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def compare_summaries(cuda_rows: list[dict], cpu_rows: list[dict], rtol: float = 1e-6) -> dict:
    """Numeric cells of two summary.csv files, row by row (the rows are in the same order): the
    largest relative difference and every cell beyond ``rtol`` (float32 experiments move at their
    rounding; a verdict that flips shows up as a changed text cell)."""
    if len(cuda_rows) != len(cpu_rows):
        return {"same_rows": False, "rows_cuda": len(cuda_rows), "rows_cpu": len(cpu_rows)}
    largest, moved, text_changed = 0.0, [], []
    for i, (a, b) in enumerate(zip(cuda_rows, cpu_rows)):
        for key in b:
            va, vb = a.get(key), b[key]
            try:
                fa, fb = float(va), float(vb)
            except (TypeError, ValueError):
                if va != vb:
                    text_changed.append({"row": i, "column": key, "cuda": va, "cpu": vb})
                continue
            if math.isnan(fa) and math.isnan(fb):
                continue
            d = abs(fa - fb) / max(abs(fb), 1e-300) if fb else abs(fa)
            largest = max(largest, d)
            if d > rtol:
                moved.append({"row": i, "column": key, "cuda": va, "cpu": vb, "rel_diff": d})
    return {"same_rows": True, "rows": len(cpu_rows), "max_rel_diff": largest, "rtol": rtol,
            "moved": moved[:50], "n_moved": len(moved), "text_changed": text_changed[:50]}


def snakemake_part(mode: str, limit_s: float) -> dict:
    """config/test.yaml on CUDA and on the CPU, side by side (half the cores each), compared."""
    has_cuda = cuda_ok()
    if mode == "off" or (mode == "auto" and not has_cuda):
        return {"status": "skipped", "reason": "--snakemake off" if mode == "off" else
                no_cuda_reason() + "; --snakemake on runs the CPU half here"}
    if snakemake_exe() is None:
        return {"status": "fail", "reason": "snakemake is not installed (pip install -e . installs it)"}
    devices = ["cuda", "cpu"] if has_cuda else ["cpu"]
    cores = max(1, (os.cpu_count() or 1) // len(devices))
    out = {"cores_each": cores, "limit_s": limit_s}
    if not has_cuda:
        out["cuda"] = {"status": "skipped", "reason": no_cuda_reason()}
    with tempfile.TemporaryDirectory(prefix="nqf_gpu_check_") as tmp:
        started = {d: start_snakemake(Path(tmp) / d, d, cores) for d in devices}
        deadline = time.perf_counter() + limit_s
        runs = {d: finish_snakemake(d, started[d], deadline) for d in devices}
        out.update(runs)
        ok = all(r["returncode"] == 0 for r in runs.values())
        if has_cuda:
            ok = ok and runs["cuda"]["train_jobs_with_gpu_resource"] == runs["cuda"]["train_jobs"] > 0
            if ok:
                out["summary_cuda_vs_cpu"] = compare_summaries(
                    read_summary(Path(tmp) / "cuda" / "results" / "summary.csv"),
                    read_summary(Path(tmp) / "cpu" / "results" / "summary.csv"))
                ok = out["summary_cuda_vs_cpu"]["same_rows"]
        ok = ok and runs["cpu"]["train_jobs_with_gpu_resource"] == 0
    out["status"] = "ok" if ok else "fail"
    return out


# -- main ----------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results file (default {DEFAULT_OUT.relative_to(ROOT)})")
    parser.add_argument("--quick", action="store_true", help="small sizes and one repeat (the test)")
    parser.add_argument("--snakemake", choices=("auto", "on", "off"), default="auto",
                        help="run config/test.yaml: auto = where CUDA is present; on = also the CPU run without CUDA")
    parser.add_argument("--snakemake-limit", type=float, default=360.0,
                        help="seconds the config/test.yaml runs may take (default 360)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    results = {"script": "benchmarks/gpu_check.py", "started": started.isoformat(timespec="seconds"),
               "quick": args.quick, "cuda": cuda_ok()}
    if not results["cuda"]:
        results["cuda_absent"] = no_cuda_reason() + ": every CUDA part below is skipped"
    part(results, "environment", environment)
    part(results, "device_resolution", device_resolution)
    part(results, "cuda_paths", cuda_paths, args.quick)
    part(results, "timings", timings, args.quick)
    part(results, "snakemake", snakemake_part, args.snakemake, args.snakemake_limit)
    results["wall_s"] = round(time.perf_counter() - t0, 1)
    statuses = {name: results[name]["status"] for name in
                ("environment", "device_resolution", "cuda_paths", "timings", "snakemake")}
    results["statuses"] = statuses
    results["ok"] = all(s in ("ok", "skipped") for s in statuses.values())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"[gpu_check] {'ok' if results['ok'] else 'FAILED'}: {statuses}; {results['wall_s']} s; wrote {args.out}")
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
