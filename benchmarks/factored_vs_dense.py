"""Factored vs dense structure matrices: one training step's worth of work, side by side.

For the CNN and the multi-head attention module at p >= 2000 and m = 10^4 samples, time
f_mu = Tr[W W^T A_mu] for every sample plus the gradient H W, H = (4/m) sum_mu Delta_mu A_mu
(``QuadraticModel.loss_and_grad``, what every training step needs), once from the factored A(x)
the module provides and once from dense (m, p, p) matrices, and record the memory each needs.

Dense A at this size needs m p^2 * 8 bytes (hundreds of GB), so it is measured on two chunks of
samples and extrapolated linearly in m (both the work and the storage are exactly linear in m),
using the chunk with the lower time per sample, i.e. the estimate most favourable to dense;
the output says so. Each measurement runs in a fresh process so that its peak resident memory
is its own. Run: python benchmarks/factored_vs_dense.py [--quick]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "factored_vs_dense.txt"
M_SAMPLES = 10_000
WIDTH = 16
SETUPS = {
    # kernel 45 x 45 = 2025 weights + 1 readout: p = 2026
    "cnn": dict(image=(48, 48), kernel=(45, 45), width=WIDTH, n_outputs=1),
    # 2 d_k D + d_v D + d_v = 1024 + 1024 + 32: p = 2080
    "mha": dict(D=32, d_k=16, d_v=32, width=WIDTH, n_outputs=1, seq_len=16),
}


def _rss_bytes(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) so the next peak is this section's alone."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _measure(kind: str, name: str, m: int, repeats: int, queue) -> None:
    import torch

    import nqf
    from nqf.architectures import ARCHITECTURES

    torch.manual_seed(0)
    module = ARCHITECTURES[name].build(**SETUPS[name])
    x = module.sample_inputs(m, torch.Generator().manual_seed(1))
    y = torch.randn(m, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    W0 = 0.01 * torch.randn(module.p, module.width, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    base = _rss_bytes("VmRSS")
    exact_peak = _reset_peak()
    t0 = time.perf_counter()
    factored = module.structure(x)
    if kind == "dense":
        form = nqf.DenseForm(factored.dense())
        storage = form.A.numel() * form.A.element_size()
    else:
        form = factored
        storage = form.nbytes()
    build = time.perf_counter() - t0
    model = nqf.QuadraticModel(form, W0, device="cpu")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        loss, grad = model.loss_and_grad(y)
        times.append(time.perf_counter() - t0)
    peak = (_rss_bytes("VmHWM") if exact_peak else _rss_bytes("VmRSS")) - base
    check = None
    if kind == "dense":  # same chunk through the factored form: the two must agree
        ref_loss, ref_grad = nqf.QuadraticModel(factored, W0, device="cpu").loss_and_grad(y)
        check = float((grad - ref_grad).abs().max() / ref_grad.abs().max())
    queue.put(dict(p=module.p, m=m, step=statistics.median(times), build=build, storage=storage,
                   peak=peak, exact_peak=exact_peak, check=check, threads=torch.get_num_threads()))


def measure(kind: str, name: str, m: int, repeats: int) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_measure, args=(kind, name, m, repeats, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**28 else f"{n / 2**20:.3g} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller dense chunk, fewer repeats")
    args = parser.parse_args()
    chunks = (4, 8) if args.quick else (16, 48)
    lines = [
        "Factored vs dense A(x): f_mu = Tr[W W^T A_mu] for all samples + gradient H W (one loss_and_grad)",
        f"m = {M_SAMPLES} samples, width d = {WIDTH}, float64, CPU ({platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores)",
        f"dense: measured on chunks of {chunks[0]} and {chunks[1]} samples and extrapolated linearly to "
        f"m = {M_SAMPLES} from the chunk with the lower time per sample (the dense (m, p, p) array would "
        "not fit in memory); factored: measured at full m. Step = median of repeated loss_and_grad calls.",
        "",
    ]
    for name in SETUPS:
        fac = measure("factored", name, M_SAMPLES, repeats=5 if args.quick else 11)
        dens = [measure("dense", name, chunk, repeats=2 if args.quick else 3) for chunk in chunks]
        den = min(dens, key=lambda r: r["step"] / r["m"])
        scale = M_SAMPLES / den["m"]
        dense_step, dense_storage = den["step"] * scale, den["storage"] * scale
        per_sample = ", ".join(f"{r['step'] / r['m'] * 1e3:.2f} ms/sample at {r['m']}" for r in dens)
        lines += [
            f"[{name}] p = {fac['p']}",
            f"  factored : step {fac['step'] * 1e3:9.2f} ms   storage {gib(fac['storage']):>10}   "
            f"peak RSS increase (build + step) {gib(fac['peak'])}",
            f"  dense    : step {dense_step * 1e3:9.0f} ms   storage {gib(dense_storage):>10}   "
            f"(extrapolated x{scale:.0f} from {den['m']} samples; {per_sample}; "
            f"peak RSS increase (build + step) {gib(den['peak'])} for {den['m']} samples)",
            f"  speed-up (dense / factored step time): {dense_step / fac['step']:.0f}x",
            f"  memory ratio (factored / dense storage): {fac['storage'] / dense_storage:.2e}",
            f"  agreement on the chunk (max rel. gradient difference): {den['check']:.1e}",
            "",
        ]
    if not fac["exact_peak"]:
        lines.append("note: /proc/self/clear_refs unavailable; peak RSS shown is the final RSS increase")
    text = "\n".join(lines)
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text + "\n")


if __name__ == "__main__":
    main()
