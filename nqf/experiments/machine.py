"""What the machine that runs the jobs must offer, checked before any job starts: the device the
config names, and memory for the largest arrays of each experiment's largest run.

Each kind may define ``estimate(exp_cfg) -> {"bytes": b, "steps": n, "what": text}`` for its
largest run: ``bytes`` the float64 arrays it holds at once (the recorded M history, modes^2 x
recorded steps x replicas, the data and structure matrices), ``steps`` its training steps and
``what`` the sizes they come from, for the message; it may add ``key`` (the config key to
name) and ``refusal`` (its own sentence for a machine too small, where '{available}' stands for
the memory available). :func:`generic_estimate` covers the others
from the keys every trained kind shares. An estimate is an order of magnitude (the trainer's
own buffers, Python and torch add a few hundred MB); it refuses only what is far beyond the
machine.
"""
from __future__ import annotations

import os
from types import ModuleType

from nqf.experiments.contract import hook

BYTES = 8  # float64
# The schema's largest `steps`; a kind whose steps follow from other keys (tau_max ln(1/eps) / lr)
# is held to the same bound.
MAX_STEPS = 100_000_000
# Where the jobs run elsewhere (a cluster), no node is taken to hold more than this.
CLUSTER_MEMORY = 4 * 1024 ** 4
# An environment variable that lowers (or raises) the memory a run may take, in GB.
MEMORY_ENV = "NQF_MAX_MEMORY_GB"


def device_problem(device: str) -> str | None:
    """A sentence when the config's ``device`` names CUDA and torch sees none here, else None."""
    device = str(device)
    if not device.startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        return (f"Config key 'device' is {device!r} but torch sees no CUDA device on this machine; "
                "use auto (CUDA where present, else the CPU) or cpu.")
    return None


# Executors under which a job runs on this machine (the main process's own cores).
LOCAL_EXECUTORS = ("local", "dryrun", "touch")


def cluster_executor(argv: list[str], basedir: str | os.PathLike = ".") -> str | None:
    """The executor a snakemake command line submits jobs to when it is not this machine (e.g.
    'slurm'), read from ``--executor``/``-e`` or the ``executor:`` of its profile
    (``--workflow-profile``/``--profile``, else ``basedir``/profiles/default), or None. Snakemake parses the
    Snakefile before it hands the workflow its executor, so the command line is what says where
    the jobs will run."""
    import yaml

    def value_of(flags):
        for i, arg in enumerate(argv):
            for flag in flags:
                if arg == flag and i + 1 < len(argv):
                    return argv[i + 1]
                if arg.startswith(flag + "="):
                    return arg.split("=", 1)[1]
        return None

    executor = value_of(("--executor", "-e"))
    if executor is None:
        for profile in (value_of(("--workflow-profile",)), value_of(("--profile",)),
                        os.path.join(basedir, "profiles", "default")):
            if not profile or profile == "none":
                continue
            path = os.path.join(profile, "config.yaml")
            try:
                with open(path) as fh:
                    executor = (yaml.safe_load(fh) or {}).get("executor")
            except (OSError, yaml.YAMLError, AttributeError):
                executor = None
            if executor:
                break
    return None if executor in (None, *LOCAL_EXECUTORS) else str(executor)


def machine_memory() -> int:
    """Bytes of physical memory of this machine (os.sysconf), or of NQF_MAX_MEMORY_GB where set."""
    if os.environ.get(MEMORY_ENV):
        return int(float(os.environ[MEMORY_ENV]) * 1e9)
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return CLUSTER_MEMORY


def human_bytes(n: float) -> str:
    """1.3e13 -> '13 TB' (decimal units)."""
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def _largest(value) -> int:
    """The largest integer of a number, a list or a mapping of them (steps, sizes), else 1."""
    if isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, dict):
        return max((_largest(v) for v in value.values()), default=1)
    if isinstance(value, list):
        return max((_largest(v) for v in value), default=1)
    return 1


def _count(value) -> int:
    return len(value) if isinstance(value, list) else 1


def seed_draw(exp: dict, row: int) -> tuple[int, str]:
    """Bytes and words for the one Gaussian draw of max(seeds) + 1 rows of ``row`` float64 values
    that collapse, init_scaling and the power-law kinds take (seed s is row s): a list such as
    [10**9] draws a billion rows, whatever its length."""
    rows = max((int(s) for s in exp.get("seeds", [0])), default=0) + 1
    return BYTES * rows * int(row), f"a draw of max(seeds) + 1 = {rows} rows of {int(row)} initial weights"


def job_seeds(exp: dict) -> int:
    """Seeds one training job holds: a block of ``seeds_per_job``, or every seed."""
    n, seeds = exp.get("seeds_per_job", "all"), len(exp.get("seeds", [0]))
    return seeds if n == "all" else min(int(n), seeds)


def module_footprint(arch: str, size: dict, **build_kwargs) -> tuple[int, int, int, int] | None:
    """(p, width, input values per sample, tokens per sample) of the module ``arch`` at ``size``,
    built on torch's meta device (no weights are allocated, however large), or None when it
    cannot be built (the kind's own check names that). Tokens: the positions a unit reads per
    sample (1 for an MLP, the sequence for attention, about the patches for a CNN)."""
    import torch

    from nqf.architectures import build

    try:
        with torch.device("meta"):
            module = build(arch, size, **build_kwargs)
            x = module.sample_inputs(1, torch.Generator().manual_seed(0))
    except (ValueError, TypeError, RuntimeError):
        return None
    numel = sum(int(t.numel()) for t in (x if isinstance(x, tuple) else (x,)))
    return int(module.p), int(module.width), numel, max(1, numel // max(int(module.unit_input_dim), 1))


def module_run(arch: str, size: dict, replicas: int, held: int, per_step: int, samples_key: str,
               build_kwargs: dict, record: tuple[int, int] | None = None) -> dict:
    """A floor for one run that trains ``replicas`` copies of the module ``arch`` beside its NQF:
    ``held`` inputs in memory, the weights W (p x width) of both models with gradients and
    optimizer states (8 copies), activations of ``per_step`` samples x width x tokens for both,
    and, with ``record = (n_record, record_M_max_p)``, M (p x p) of both at every recorded step
    where p <= record_M_max_p. Returns {"bytes", "key", "what"} (the key of the largest part)."""
    fp = module_footprint(arch, size, **build_kwargs)
    if fp is None:
        return {"bytes": 0, "key": f"sizes.{arch}", "what": f"the {arch} module (it cannot be built)"}
    p, width, numel, tokens = fp
    parts = {samples_key: BYTES * (held * numel + 2 * replicas * per_step * width * tokens),
             f"sizes.{arch}": BYTES * 8 * replicas * p * width}
    what = (f"{arch}: {held} inputs of {numel} values, {replicas} replicas of W of {p}x{width} in the module and "
            f"its NQF with gradients and optimizer states, activations of {per_step} samples x {width} units x "
            f"{tokens} tokens")
    if record is not None and p <= record[1]:
        parts["n_record"] = BYTES * 2 * record[0] * replicas * p * p
        what += f", M of {p}x{p} at {record[0]} recorded steps"
    return {"bytes": sum(parts.values()), "key": max(parts, key=parts.get), "what": what}


def largest_run(estimates: list[dict], steps: int) -> dict:
    """The largest of one estimate per architecture, with the run's steps."""
    return {**max(estimates, key=lambda e: e["bytes"]), "steps": int(steps)}


def generic_estimate(exp: dict) -> dict:
    """Recorded loss trajectories (replicas: seeds x eps values x init variances, times
    ``n_record``) and the largest ``steps`` entry: a floor for kinds with no estimate of their own."""
    replicas = _count(exp.get("seeds", [0])) * _count(exp.get("eps", 0.0))
    n_record = int(exp.get("n_record", 1000)) if isinstance(exp.get("n_record"), int) else 1000
    return {"bytes": BYTES * replicas * n_record, "steps": _largest(exp.get("steps", 1)),
            "what": f"{replicas} replicas x {n_record} recorded steps of the loss"}


def estimate(kind: ModuleType, exp: dict) -> dict:
    """The estimate of the largest run of ``exp`` by its kind's module ``kind``, or :func:`generic_estimate`."""
    from nqf.experiments.estimate_cache import cached

    own = hook(kind, "estimate")
    return cached("estimate", [kind.__name__, exp],
                  lambda: own(exp) if own is not None else generic_estimate(exp))


def resource_problems(exp_id: str, exp: dict, kind: ModuleType, limit: int | None = None) -> list[tuple[str, str]]:
    """(key, sentence) when the largest run of ``exp`` (of the kind module ``kind``) would need
    more memory than ``limit`` bytes (default: this machine's, :func:`machine_memory`) or more
    than MAX_STEPS steps."""
    est = estimate(kind, exp)
    limit = machine_memory() if limit is None else int(limit)
    if est["bytes"] > limit:
        key = est.get("key", "n_record")
        if est.get("refusal"):  # the kind's own sentence; '{available}' stands for the limit
            return [(key, est["refusal"].replace("{available}", f"{limit / 2**30:.3g} GiB"))]
        return [(key, f"experiment {exp_id} would hold {human_bytes(est['bytes'])} in one run ({est['what']}, "
                      f"float64); this machine has {human_bytes(limit)} (set {MEMORY_ENV} to change the limit): "
                      f"lower {key} or the other sizes named.")]
    if est["steps"] > MAX_STEPS:
        return [(est.get("steps_key", "steps"),
                 f"experiment {exp_id} would train {est['steps']:.3g} steps in one run"
                 f"{' (' + est['steps_what'] + ')' if est.get('steps_what') else ''}, more than "
                 f"{MAX_STEPS:.0e}; raise lr or lower the horizon.")]
    return []
