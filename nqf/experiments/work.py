"""What a training run computes, counted before it runs, and the seconds that takes: the cluster
runtime and memory requests (nqf.pipeline.resources) come from here.

:func:`count_work` runs a step on torch's meta device (shapes only) and counts its FLOPs, its
torch operations and the most bytes its tensors hold at once; :func:`module_work` does so for the
batched forward and backward of a module's replicas; a kind's ``work(cfg, run)`` hook says what
its run computes (:func:`run_work`, with :func:`generic_work` from the kind's size estimate where
it has none); :func:`run_seconds` turns that into seconds on one CPU thread.
"""
from __future__ import annotations

from types import ModuleType

from nqf.experiments.contract import hook
from nqf.experiments.machine import BYTES, estimate


def count_work(step, device: str = "meta") -> tuple[float, int, float]:
    """(FLOPs, torch operations, bytes) of ``step()`` run on ``device`` (by default torch's meta
    device: shapes only, nothing computed): FLOPs of its matrix products and convolutions by
    ``torch.utils.flop_counter``; operations, and the most bytes that the tensors they return
    (views excluded) hold at once, by a dispatch mode that follows each tensor until it is
    freed (the activations autograd keeps for the backward pass included). (0, 0, 0) when it
    fails (e.g. sizes that do not build, which the kind's own check names, or a step that reads
    its values)."""
    import weakref

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    class Count(TorchDispatchMode):
        n, live, nbytes = 0, 0, 0  # operations; bytes of the step's tensors alive now, at most

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            out = func(*args, **(kwargs or {}))
            returns = func._schema.returns
            for i, t in enumerate(tree_leaves(out)):
                aliased = i < len(returns) and returns[i].alias_info is not None  # a view: no new memory
                if isinstance(t, torch.Tensor) and not aliased:
                    size = t.numel() * t.element_size()
                    self.live += size
                    weakref.finalize(t, self._free, size)
            self.nbytes = max(self.nbytes, self.live)
            return out

        def _free(self, size):
            self.live -= size

    flops, ops = FlopCounterMode(display=False), Count()
    try:
        with torch.device(device), flops, ops:
            step()
    except (ValueError, TypeError, RuntimeError, NotImplementedError):
        return 0.0, 0, 0.0
    return float(flops.get_total_flops()), int(ops.n), float(ops.nbytes)


# Inputs at which a step the meta device cannot run is run for real (:func:`probed`): two counts,
# a line through both.
PROBES = (64, 128)


def module_work(arch: str, size: dict, replicas: int, samples: int, build_kwargs: dict) -> tuple[float, int, float]:
    """(FLOPs, torch operations, bytes) of one training step of ``replicas`` copies of the module
    ``arch`` at ``size`` on ``samples`` inputs: its batched forward and backward
    (``forward_replicas``, as the trainers call it), by :func:`count_work` on the meta device (in
    the module's float64); a module whose forward reads values (the attention's softmax shift) is
    run for real on the CPU (:func:`probed`)."""
    import torch

    from nqf.architectures import build

    def step(n):
        module = build(arch, size, **build_kwargs)
        if torch.get_default_device().type == "meta":
            module.check_inputs = lambda x: None  # it refuses meta inputs, which hold no data to check
        x = module.sample_inputs(int(n), torch.Generator().manual_seed(0))
        W0 = module.unit_weights().detach()
        W = W0.expand(int(replicas), *W0.shape).clone().requires_grad_(True)
        module.forward_replicas(W, x).square().sum().backward()

    flops, ops, nbytes = count_work(lambda: step(samples))
    if ops == 0:
        return probed(step, samples)
    return flops, ops, nbytes


def probed(run, samples: int) -> tuple[float, int, float]:
    """:func:`count_work` of ``run(samples)`` run for real on the CPU: directly up to the larger of
    PROBES inputs, beyond them on the line through both probes (FLOPs and the bytes of inputs'
    activations grow linearly with the inputs; the weights, their gradients and the operations do
    not, and the line keeps them once instead of scaling them up)."""
    samples = int(samples)
    if samples <= PROBES[1]:
        return count_work(lambda: run(samples), device="cpu")
    (f1, _, b1), (f2, ops, b2) = (count_work(lambda n=n: run(n), device="cpu") for n in PROBES)
    if ops == 0:
        return 0.0, 0, 0.0
    t = (samples - PROBES[1]) / (PROBES[1] - PROBES[0])
    return max(0.0, f2 + (f2 - f1) * t), ops, max(0.0, b2 + (b2 - b1) * t)


def form_bytes(arch: str, size: dict, samples: int, build_kwargs: dict, *, replicas: int = 0,
               features: bool = False) -> float:
    """The most bytes (in float64) held at once while building the NQF's structure form of the
    module ``arch`` at ``size`` on ``samples`` inputs and keeping it: with ``replicas`` > 0 also
    one step of its quadratic model on that many replicas (its outputs and the gradient), with
    ``features`` also its effective features (nqf.architectures.effective, as the least-squares
    floor builds them). Forms check their values, which the meta device does not hold, so this
    runs for real (:func:`probed`: a form, its outputs and its features grow linearly with the
    inputs). 0 when the module does not build."""
    import torch

    from nqf.architectures import build

    def make(n):
        module = build(arch, size, **build_kwargs)
        x = module.sample_inputs(n, torch.Generator().manual_seed(0))
        form = module.structure(x)
        kept = [form]
        if features:
            from nqf.architectures.effective import effective_features

            kept.append(effective_features(form))
        if replicas:
            W = torch.zeros(int(replicas), module.p, module.width, dtype=torch.float64, requires_grad=True)
            form.outputs(W).square().sum().backward()
        return kept

    return probed(make, samples)[2]


# The runtime model of a training run (:func:`run_seconds`): a step costs OP_SECONDS per torch
# operation (dispatch, autograd and small kernels on one CPU thread: 5-20 us measured, the
# overhead-bound loops of benchmarks/results/workloads.txt) plus its FLOPs at FLOP_RATE in float32
# and half that in float64, whose peak is half; a job adds STARTUP_SECONDS (the imports, reading
# its data, writing its file). FLOP_RATE is set by the slowest machine measured: on an AVX-512
# core (matmul peak 94 GFLOP/s float32, 45 float64) the loops ran at 2-50 % of peak and 20 GFLOP/s
# left every default training below its model; on an AVX2 core of the same cloud (peak 55-76
# float32) paper.yaml's 18 nqf_approximation and real_data trainings ran at 0.48-2.0x the model
# at 20 GFLOP/s (median 0.82: its float64 CNN took 481 s against 232 s), at 10 GFLOP/s 0.84-2.9x,
# so that the requests (RUNTIME_FACTOR x the model) are at least 1.75x their wall time there.
OP_SECONDS = 20e-6
FLOP_RATE = 10e9
STARTUP_SECONDS = 30.0
# A record (loss, test set, M) costs about this many training steps (2-3.6 measured,
# benchmarks/results/workloads.txt "record/step").
RECORD_STEPS = 4
# A kind with no work hook: each step touches the run's arrays (its estimate's bytes) a few times,
# in a few hundred operations.
GENERIC_FLOPS_PER_VALUE, GENERIC_OPS = 10, 200


def run_work(kind: ModuleType, exp: dict, run: str) -> dict:
    """The work of training run ``run`` of ``exp`` (a run id without a seed block: the caller narrows
    ``exp`` to a block's seeds, nqf.pipeline.resources.run_work): {"steps": steps it trains in all (records
    included), "flops": FLOPs per step, "ops": torch operations per step, and optionally
    "flops_once": FLOPs outside the steps (evaluations), "bytes": what a step's operations
    return (its module's activations and gradients, beside the arrays of the estimate) and
    "dtype": the run's float type (default: the config's ``dtype``, else float64)}, from the kind's
    ``work(cfg, run)`` hook, else from its estimate of the largest run (:func:`generic_work`)."""
    from nqf.experiments.estimate_cache import cached

    own = hook(kind, "work")
    work = cached("work", [kind.__name__, exp, run],
                  lambda: own(exp, run) if own is not None else generic_work(estimate(kind, exp)))
    return {"dtype": str(exp.get("dtype", "float64")), **work}


def generic_work(est: dict) -> dict:
    """The work of a run with the estimate ``est``: its steps, each touching its arrays
    (GENERIC_FLOPS_PER_VALUE operations per float64 value) in GENERIC_OPS operations."""
    return {"steps": int(est["steps"]), "flops": GENERIC_FLOPS_PER_VALUE * est["bytes"] / BYTES, "ops": GENERIC_OPS}


def run_seconds(work: dict) -> float:
    """Seconds one training job takes by the runtime model above (a bound for one CPU thread, not
    a prediction: GPUs and large products run faster)."""
    rate = FLOP_RATE / (2 if work.get("dtype", "float64") == "float64" else 1)
    return (STARTUP_SECONDS + work["steps"] * (work["ops"] * OP_SECONDS + work["flops"] / rate)
            + work.get("flops_once", 0.0) / rate)
