"""One training step of Fig. 7's self-attention at the paper's size, side by side in one run.

The module (10 heads, d_k = 32, 28 row tokens of dimension 28, a fixed readout) at 2 replicas
(seeds), float32, one thread, on m = 1000, 2000 and 4000 images: forward and backward of the
summed squared outputs through

* ``autograd``: the plain einsum forward (every head's D x D form applied to all tokens, the
  (m, heads, N, N) softmax mean-pooled over queries) differentiated by autograd, vmapped over
  the replicas (what the module's own forward does);
* ``blocked``: ``SelfAttentionReadout.forward_replicas``, the blocked softmax with its own
  gradient (nqf.architectures.query_key.PooledAttention).

Then the blocks' size (``PooledAttention.BLOCK_BYTES``, the logits a block holds, 0.5 to 8 MiB),
for the forward without gradient (a record) and the step, at 1200 images (real_data's default
attention) and 4000 (the paper's): the best and the median of 8 rounds that take each size in
turn, since one core's timings here spread by +-30 % from run to run.

Beside them, the FLOPs of the matrix products a step needs at least (:func:`step_flops`) and this
machine's float32 matmul peak on one thread, measured in the same run (a 1024^3 product), so each
step is reported as a share of the peak. Run: python benchmarks/attention_step.py   (writes benchmarks/results/attention_step.txt)
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
from torch.func import vmap

from nqf.architectures import build


def seconds(fn, repeats: int = 3) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def matmul_peak() -> float:
    a = torch.randn(1024, 1024)
    dt = seconds(lambda: a @ a, 5)
    return 2 * 1024 ** 3 / dt / 1e9


def step_flops(m: int, G: int, D: int, N: int) -> float:
    """Multiply-adds x 2 of the products a step needs at least: forward x_q^T B_g (m N D D G) and
    the logits (m N N D G), backward the logit gradient times X (m N N D G) and the B gradient
    (m N D D G); the readout products are lower order."""
    return 2.0 * m * G * (2 * N * D * D + 2 * N * N * D)


def main() -> str:
    torch.set_num_threads(1)
    module = build("qk_self_attention", {"width": 10, "d_k": 32}, image=(28, 28), n_outputs=1).to(torch.float32)
    peak = matmul_peak()
    lines = [f"Fig. 7 self-attention, one training step (forward + backward), torch {torch.__version__}, 1 thread, "
             f"float32, 2 replicas x 10 heads", f"matmul peak (1024^3, same run): {peak:.1f} GFLOP/s", "",
             f"{'images':>7} {'autograd s':>11} {'blocked s':>10} {'speed-up':>9} {'GFLOP':>7} "
             f"{'autograd %peak':>15} {'blocked %peak':>14}"]
    for m in (1000, 2000, 4000):
        X = torch.rand(m, 28, 28, generator=torch.Generator().manual_seed(0))
        W = (0.01 * torch.randn(2, module.p, module.width, generator=torch.Generator().manual_seed(1))).requires_grad_()
        plain = vmap(module.forward_with, in_dims=(0, None))

        def autograd_step():
            W.grad = None
            plain(W, X).pow(2).sum().backward()

        def blocked_step():
            W.grad = None
            module.forward_replicas(W, X).pow(2).sum().backward()

        t_auto, t_block = seconds(autograd_step), seconds(blocked_step)
        gflop = step_flops(m, 20, 28, 28) / 1e9
        lines.append(f"{m:>7} {t_auto:>11.3f} {t_block:>10.3f} {t_auto / t_block:>8.2f}x {gflop:>7.2f} "
                     f"{100 * gflop / t_auto / peak:>14.1f}% {100 * gflop / t_block / peak:>13.1f}%")
    lines += ["", "block size: best / median of 8 interleaved rounds, seconds",
              f"{'images':>7} {'MiB':>5} {'block':>6} {'forward best':>13} {'median':>7} {'step best':>10} {'median':>7}"]
    lines += block_sizes(module)
    text = "\n".join(lines) + "\n"
    out = Path(__file__).with_name("results") / "attention_step.txt"
    out.write_text(text)
    return text


def block_sizes(module, sizes=(0.5, 1, 2, 4, 7.66), rounds: int = 8) -> list[str]:
    """Forward (no gradient) and step times of forward_replicas with PooledAttention.BLOCK_BYTES at
    each of ``sizes`` MiB, interleaved over ``rounds`` (the library's own is 2 MiB; restored after)."""
    import statistics

    from nqf.architectures.query_key import PooledAttention

    kept, rows = PooledAttention.BLOCK_BYTES, []

    def block(mib):  # the library's own rule at 28 queries, 20 heads, 28 keys, float32
        PooledAttention.BLOCK_BYTES = int(mib * 2 ** 20)
        return PooledAttention.block_size(28, 20, 28, 4)

    try:
        for m in (1200, 4000):
            X = torch.rand(m, 28, 28, generator=torch.Generator().manual_seed(0))
            W = (0.01 * torch.randn(2, module.p, module.width, generator=torch.Generator().manual_seed(1))).requires_grad_()

            def forward():
                with torch.no_grad():
                    module.forward_replicas(W, X)

            def step():
                W.grad = None
                module.forward_replicas(W, X).pow(2).sum().backward()

            times = {(mib, name): [] for mib in sizes for name in ("forward", "step")}
            for _ in range(rounds):
                for mib in sizes:
                    block(mib)
                    for name, fn in (("forward", forward), ("step", step)):
                        times[mib, name].append(seconds(fn, 1))
            for mib in sizes:
                f, s = times[mib, "forward"], times[mib, "step"]
                rows.append(f"{m:>7} {mib:>5g} {block(mib):>6} {min(f):>13.3f} "
                            f"{statistics.median(f):>7.3f} {min(s):>10.3f} {statistics.median(s):>7.3f}")
    finally:
        PooledAttention.BLOCK_BYTES = kept
    return rows


if __name__ == "__main__":
    print(main())
