"""Side-by-side timings of the fast paths the Fig. 5 and Fig. 7 experiments rely on (one thread):

* a module's outputs for R weight replicas: ``vmap(forward_with)`` against ``forward_replicas``
  (one conv2d for the CNN, one batched contraction for the self-attention), at the paper's MNIST
  sizes (15x15 kernels, 50 channels; 10 heads, d_k = 32, 28 tokens), forward + backward;
* one plain-GD step of ``nqf.train`` with an analytic gradient: the torch.optim step against the
  in-place update it now takes, for the Fourier NQF and Fourier MLP of the default run (P = 104);
* the tanh of the Fourier MLP's arguments: numpy against torch (float64).

    python benchmarks/experiment_speed.py   # writes benchmarks/results/experiment_speed.txt
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch.func import vmap


def best_of(fn, repeat: int = 3, number: int = 1) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return min(times)


def module_replicas(lines):
    from nqf.architectures import ARCHITECTURES

    x = torch.randn(1000, 28, 28, generator=torch.Generator().manual_seed(0))
    for name, kw in (("cnn", dict(image=(28, 28), kernel=(15, 15), width=50, n_outputs=1)),
                     ("qk_self_attention", dict(D=28, d_k=32, width=10, n_outputs=1, seq_len=28))):
        m = ARCHITECTURES[name].build(**kw).float()
        W = (0.3 * torch.randn(3, m.p, m.width, generator=torch.Generator().manual_seed(1))).requires_grad_()

        def step(f):
            return lambda: f(W, x).sum().backward()

        old = best_of(step(vmap(m.forward_with, in_dims=(0, None))))
        new = best_of(step(m.forward_replicas))
        lines.append(f"{name:18s} 1000 images x 3 replicas, fwd+bwd: vmap {old:.3f} s, forward_replicas "
                     f"{new:.3f} s, ratio {old / new:.2f}")


def gd_step(lines):
    from nqf.theory.fourier_modes import fourier_features
    from nqf.training.fourier_training import FourierReplicas, fold_even_grid, init_draws
    from nqf.training.loop import make_optimizer

    P, M = 104, 256
    idx, w = fold_even_grid(M)
    psi = fourier_features(np.arange(M) / M, P)[idx]
    k = np.arange(1, P + 1.0)
    y = torch.as_tensor(np.repeat((psi @ k ** -1.5)[None], 6, 0))
    a0, W0 = init_draws(range(6), P, 1e-4)
    for nonlinear in (False, True):
        model = FourierReplicas(a0, W0, np.repeat((k ** -1.0)[None], 6, 0), psi, w, nonlinear=nonlinear)
        p = model.theta
        opt = make_optimizer("gd", [p], 1e-3)

        def with_optimizer():
            _, grad = model.loss_and_grad(y)
            p.grad = grad
            opt.step()

        def in_place():
            _, grad = model.loss_and_grad(y)
            with torch.no_grad():
                p.sub_(grad, alpha=1e-3)

        old = best_of(with_optimizer, number=500)
        new = best_of(in_place, number=500)
        lines.append(f"Fourier {'MLP' if nonlinear else 'NQF'} GD step (P = 104, 6 seeds): torch.optim "
                     f"{old * 1e6:.0f} us, in place {new * 1e6:.0f} us, ratio {old / new:.2f}")


def tanh(lines):
    x = torch.randn(6, 129, 104, dtype=torch.float64)
    old = best_of(lambda: torch.from_numpy(np.tanh(x.numpy())), number=200)
    new = best_of(lambda: torch.tanh(x), number=200)
    lines.append(f"tanh of (6, 129, 104) float64: numpy {old * 1e6:.0f} us, torch {new * 1e6:.0f} us, "
                 f"ratio {old / new:.2f}")


def main():
    torch.set_num_threads(1)
    lines = [f"torch {torch.__version__}, one thread; best of 3"]
    module_replicas(lines)
    gd_step(lines)
    tanh(lines)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    out = Path(__file__).parent / "results" / "experiment_speed.txt"
    out.write_text(text)


if __name__ == "__main__":
    main()
