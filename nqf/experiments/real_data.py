"""Experiment kind ``real_data``: modules beside their NQFs on odd-vs-even digits (paper Figure 7).

The paper trains a two-layer bias-free tanh MLP (hidden 20), a one-layer CNN (50 channels,
15x15 kernels on 28x28 MNIST) and a query-key self-attention with a fixed readout vector
(10 heads, d_k = 32, the image rows as 28 tokens of dimension 28) beside their NQFs from the same
N(0, 0.01^2) weights, full-batch Adam (lr 1e-3) on the MSE to +-1 odd/even targets. Without a
download the default data are scikit-learn's 8x8 digits (nqf.datasets), and the sizes scale
with the image: the CNN's kernel is 4x4 and the attention reads 8 tokens (rows) of dimension 8.
A local MNIST .npz gives the paper's data (config ``dataset: mnist_npz``).

Inputs: standardised pixels, then scaled per architecture so that the vector one unit reads
(the image for the MLP, a patch for the CNN, a token for the attention) has RMS norm
``input_norm``: with 1, every pre-activation stays O(|w|) and the learned state stays inside
the quadratic regime, as in nqf_approximation. The attention's fixed readout c (norm
``readout_norm``) also sets f(0) = heads * c^T x_avg, which the NQF keeps: it is trained on
y - f(0), so both models minimise the same loss of their outputs.

Theory. Every one of these NQFs is linear in an effective matrix E built from the weights,
f - f(0) = <Phi(x), E> (nqf.factored: Phi = sum_r left_r right_r^T), so its lowest reachable train
loss is a least-squares problem; the floor, and the test accuracy of the least-squares predictor,
are this kind's theory (Adam has no closure on M, Theorem 2 does not cover it). The structure
stage also projects the data on the least-squares solution's singular modes (r, C of Eq. 32).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from nqf.architectures import title
from nqf.config import ConfigError
from nqf.datasets import load_digit_task
from nqf.experiments.fits import real_data as fits
from nqf.experiments.matching import check_runs
from nqf.training import train

if TYPE_CHECKING:
    from nqf.architectures import UnitModule

KIND = "real_data"
READING_KEYS = ("preprocessing",)  # unstated by the paper: each reading is an experiment, labelled in its rows
SEED_BLOCKS = True  # results depend on each seed alone; see nqf.experiments (seed blocks)
FIGURE = "Fig. 7"  # the architectures' titles are this figure's (nqf.architectures.title)
_DATA = ("dataset", "path", "n_train", "n_test", "data_seed", "architectures", "sizes", "preprocessing",
         "input_norm", "readout_norm")
STAGE_KEYS = {
    "data": _DATA,
    "structure": ("architectures", "sizes", "n_train"),
    "train": ("architectures", "sizes", "n_train", "eps", "seeds", "loss", "lr", "steps", "optimizer",
              "n_record", "dtype"),
    "theory": ("architectures",),
    "fit": ("architectures", "n_test", "threshold", "floor_fraction", "tolerances"),
    "figure": ("description", "architectures", "dataset", "preprocessing", "n_train", "eps", "optimizer", "lr"),
}


# The config lists the run ids are made of (nqf.experiments.ids refuses a value listed twice).
RUN_ID_KEYS = ("architectures",)


def runs(cfg: dict) -> list[str]:
    """One run per architecture; it holds every seed."""
    return list(cfg["architectures"])


def check(cfg: dict) -> list[tuple[str, str]]:
    """Cross-key problems found before any job starts: (key path, sentence) pairs."""
    from nqf.datasets import IMAGE_SHAPE, IMAGES

    problems = []
    name = cfg["dataset"]
    if cfg.get("path") and name != "mnist_npz":
        return [("path", f"is read only with dataset mnist_npz, and dataset is {name}, whose images would be "
                         f"trained on instead; set dataset: mnist_npz to use the file, or remove path.")]
    if isinstance(cfg["n_train"], dict):
        missing = [a for a in cfg["architectures"] if a not in cfg["n_train"]]
        if missing:
            return [("n_train", f"gives no count for {', '.join(missing)}; give one per architecture or an integer.")]
    n_total = max(n_train_of(cfg, a) for a in cfg["architectures"])
    if name in IMAGES:
        if n_total + cfg["n_test"] > IMAGES[name]:
            problems.append(("n_train", f"n_train + n_test = {n_total + cfg['n_test']} exceeds the "
                                        f"{IMAGES[name]} images of {name}; lower n_train or n_test."))
        kernel, shape = cfg["sizes"]["cnn"]["kernel"], IMAGE_SHAPE[name]
        if "cnn" in cfg["architectures"] and any(k > n for k, n in zip(kernel, shape)):
            problems.append(("sizes.cnn.kernel", f"kernel {kernel} does not fit the {shape[0]}x{shape[1]} images "
                                                  f"of {name}; use at most {list(shape)}."))
    elif not cfg.get("path"):
        problems.append(("path", "dataset mnist_npz reads a local .npz; set path to it (x_train, y_train, "
                                 "x_test, y_test)."))
    else:
        from nqf.experiments.npz_check import npz_problems

        found, shape = npz_problems(cfg["path"], n_total, cfg["n_test"])
        problems += found
        kernel = cfg["sizes"]["cnn"]["kernel"]
        if shape and "cnn" in cfg["architectures"] and any(k > n for k, n in zip(kernel, shape)):
            problems.append(("sizes.cnn.kernel", f"kernel {kernel} does not fit the {shape[0]}x{shape[1]} images "
                                                  f"of {cfg['path']}; use at most {list(shape)}."))
    return problems


def estimate(cfg: dict) -> dict:
    """The largest run (nqf.experiments.machine): the images (train and test, float64, 28x28 for
    MNIST, as the data stage holds them) and the recorded trajectories of every seed; the module
    and its NQF themselves are small (p weights of a few hundred units)."""
    from nqf.experiments.machine import generic_estimate

    side = 8 if cfg["dataset"] == "digits8x8" else 28
    counts = cfg["n_train"]  # a mapping missing an architecture is refused by check, after this
    n = max(int(counts.get(a, 0)) if isinstance(counts, dict) else int(counts) for a in cfg["architectures"])
    n += int(cfg["n_test"])
    loss = generic_estimate(cfg)
    return {"bytes": 8 * 3 * n * side * side + 4 * loss["bytes"], "key": "n_train",
            "what": f"{n} images of {side}x{side}", "steps": _largest_steps(cfg)}


def _largest_steps(cfg: dict) -> int:
    return max(int(cfg["steps"][a]) for a in cfg["architectures"])


def run_config(cfg: dict, run: str) -> dict:
    """The keys one run reads: its architecture's size and step count."""
    if run not in cfg["architectures"]:
        raise ValueError(f"Run {run!r} is not one of this experiment's runs ({', '.join(runs(cfg))}).")
    return {"architecture": run, "size": cfg["sizes"][run], "n_train": n_train_of(cfg, run), "steps": cfg["steps"][run],
            **{k: cfg[k] for k in ("eps", "seeds", "loss", "lr", "optimizer", "n_record", "dtype")}}


def build_module(arch: str, size: dict, image: tuple[int, int], seed: int = 0) -> UnitModule:
    """The float64 one-output module of ``arch`` sized for ``image`` (H, W) images."""
    # torch is imported where needed: the theory, fit and figure jobs run without it
    from nqf.architectures import build

    return build(arch, size, image=image, n_outputs=1, seed=seed)


def module_inputs(module: UnitModule, images, scale: float):
    """Standardised images (m, H, W) as ``module`` takes them (its ``image_inputs``: flattened for
    the MLP, as they are for the CNN, rows as tokens for the attention), times ``scale``."""
    import torch

    return module.image_inputs(torch.as_tensor(np.asarray(images)) * scale)


def input_scale(module: UnitModule, images: np.ndarray, input_norm: float) -> float:
    """The factor that gives one unit's input RMS norm ``input_norm`` over the training images."""
    sq = module.unit_input_norm2(module_inputs(module, images, 1.0))
    return float(input_norm / math.sqrt(float(sq)))


def accuracy(f, y) -> np.ndarray:
    """Fraction of sign(f) == y along the last axis (f = 0 counts as wrong)."""
    return np.mean(np.sign(np.asarray(f)) == np.asarray(y), axis=-1)


def n_train_of(cfg: dict, arch: str) -> int:
    """Training images of ``arch``: ``n_train`` itself, or its entry for ``arch`` when it is a mapping."""
    n = cfg["n_train"]
    return int(n[arch]) if isinstance(n, dict) else int(n)


def make_data(cfg: dict) -> xr.Dataset:
    """Preprocessed train and test images, +-1 odd/even targets, per-architecture input scales.

    With a per-architecture ``n_train``, the file holds the largest number of training images and
    each architecture trains on the first ``n_train[arch]`` of them (a random subset: the split is
    a random permutation); the preprocessing statistics are those of the whole training set."""
    n_total = max(n_train_of(cfg, a) for a in cfg["architectures"])
    try:
        task = load_digit_task(cfg["dataset"], n_train=n_total, n_test=cfg["n_test"],
                               seed=cfg["data_seed"], path=cfg.get("path"), preprocessing=cfg["preprocessing"])
    except ValueError as exc:  # a wrong path, file or size: one sentence in the job log, no traceback
        raise ConfigError(f"Experiment kind real_data: {exc}") from None
    H, Wd = task.image_shape
    gen = np.random.default_rng(cfg["data_seed"])
    c = gen.standard_normal(Wd)
    c *= cfg["readout_norm"] / np.linalg.norm(c)
    attrs = {"experiment_kind": KIND, "dataset": cfg["dataset"], "source": task.source,
             "preprocessing": task.preprocessing,
             "architectures": ",".join(cfg["architectures"]), "data_seed": cfg["data_seed"],
             "targets": "+1 odd digit, -1 even digit"}
    for arch in cfg["architectures"]:
        module = build_module(arch, cfg["sizes"][arch], (H, Wd))
        n = n_train_of(cfg, arch)
        attrs[f"{arch}_input_scale"] = (1.0 if cfg["input_norm"] is None else
                                        input_scale(module, task.x_train[:n], cfg["input_norm"]))
    img = {"units": "1", "long_name": ("standardised pixel intensity (training-set mean 0, std 1 per pixel)"
                                       if task.preprocessing == "standardise" else "pixel intensity scaled to [0, 1]")}
    return xr.Dataset(
        {"x_train": (("sample", "row", "col"), task.x_train, img),
         "y_train": ("sample", task.y_train, {"units": "1", "long_name": "target: +1 odd digit, -1 even digit"}),
         "digit_train": ("sample", task.digit_train, {"long_name": "digit label 0-9"}),
         "x_test": (("test_sample", "row", "col"), task.x_test, img),
         "y_test": ("test_sample", task.y_test, {"units": "1", "long_name": "target: +1 odd digit, -1 even digit"}),
         "digit_test": ("test_sample", task.digit_test, {"long_name": "digit label 0-9"}),
         "readout": ("col", c, {"units": "1", "long_name": "fixed readout vector c of the self-attention"})},
        coords={"sample": np.arange(len(task.y_train)), "test_sample": np.arange(len(task.y_test)),
                "row": np.arange(H), "col": np.arange(Wd)},
        attrs=attrs)


def _prepared(data: xr.Dataset, arch: str, size: dict, n: int):
    """(module, train inputs, test inputs, train targets) of ``arch``, its first ``n`` training
    images; the input scale is a statistic of the data (computed by the data stage)."""
    module = build_module(arch, size, (data.sizes["row"], data.sizes["col"]))
    module.set_readout(data["readout"].values)
    scale = float(data.attrs[f"{arch}_input_scale"])
    return (module, module_inputs(module, data["x_train"].values[:n], scale),
            module_inputs(module, data["x_test"].values, scale), data["y_train"].values[:n])


def structure(data: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Per architecture: the NQF's least-squares floor and the GLV (Eq. 32) on its modes.

    E* = argmin of the NQF train loss over E (nqf.effective.least_squares_nqf). Its singular triplets
    (s_a, a_a, b_a) give balanced units psi_a = [a_a; b_a] / sqrt 2 (first Kronecker slot), and
    lambda_mu,a = psi_a^T A_mu psi_a, r_a = (8/m) sum lambda_mu,a (y_mu - f0_mu),
    C_ab = (8/m) sum lambda_mu,a lambda_mu,b (NaN beyond an architecture's number of modes).
    """
    import torch

    from nqf.effective import effective_features, least_squares_nqf

    archs = list(cfg["architectures"])
    y_test = data["y_test"].values
    out = {k: [] for k in ("floor", "test_loss", "test_acc", "f0_rms", "rank_ok")}
    modes = []
    for arch in archs:
        module, x, x_test, y = _prepared(data, arch, cfg["sizes"][arch], n_train_of(cfg, arch))
        m = y.size
        with torch.no_grad():
            zero = torch.zeros(module.p, module.width, dtype=torch.float64)
            f0, f0_test = module.forward_with(zero, x)[:, 0].numpy(), module.forward_with(zero, x_test)[:, 0].numpy()
            form, form_test = module.structure(x), module.structure(x_test)
            floor, e, f_test = least_squares_nqf(effective_features(form).numpy(), y - f0,
                                                 effective_features(form_test).numpy(), f0_test)
            n1, n2 = form.left.shape[-1], form.right.shape[-1]
            U, s, Vt = np.linalg.svd(e.reshape(n1, n2), full_matrices=False)
            (r0, _), (c0, _) = form.rows, form.cols
            psi = torch.zeros(s.size, module.p, 1, dtype=torch.float64)
            for a in range(s.size):  # entry (j, alpha = 0) of a block sits at j * q
                psi[a, r0 + form.q * np.arange(n1), 0] = torch.as_tensor(U[:, a]) / math.sqrt(2)
                psi[a, c0 + form.q * np.arange(n2), 0] = torch.as_tensor(Vt[a]) / math.sqrt(2)
            lam = form.outputs(psi).numpy()  # (modes, m)
        modes.append((8.0 / m * lam @ (y - f0), 8.0 / m * lam @ lam.T, s))
        out["floor"].append(floor)
        out["test_loss"].append(float(np.mean((f_test - y_test) ** 2)))
        out["test_acc"].append(float(accuracy(f_test, y_test)))
        out["f0_rms"].append(float(np.sqrt(np.mean(f0 ** 2))))
        out["rank_ok"].append(bool(min(n1, n2) <= module.width * form.q))
    n_modes = max(len(r) for r, _, _ in modes)
    r = np.full((len(archs), n_modes), np.nan)
    C = np.full((len(archs), n_modes, n_modes), np.nan)
    s_ls = np.full((len(archs), n_modes), np.nan)
    for i, (ri, Ci, si) in enumerate(modes):
        r[i, :ri.size], C[i, :ri.size, :ri.size], s_ls[i, :si.size] = ri, Ci, si
    return xr.Dataset(
        {"loss_floor": ("arch", out["floor"], {"units": "1", "long_name": "lowest NQF train loss: least squares over the effective matrix E"}),
         "ls_test_loss": ("arch", out["test_loss"], {"units": "1", "long_name": "test loss of the least-squares NQF"}),
         "ls_test_accuracy": ("arch", out["test_acc"], {"units": "1", "long_name": "test accuracy of the least-squares NQF"}),
         "f0_rms": ("arch", out["f0_rms"], {"units": "1", "long_name": "RMS over training images of the output at W = 0"}),
         "floor_is_reachable": ("arch", out["rank_ok"], {"long_name": "the width can represent any E (the floor is reachable, not only a bound)"}),
         "s_ls": (("arch", "mode"), s_ls, {"units": "1", "long_name": "singular values of the least-squares effective matrix E*"}),
         "r": (("arch", "mode"), r, {"units": "1", "long_name": "growth rate r_a = (8/m) sum lambda_mu,a (y_mu - f0_mu) of least-squares mode a"}),
         "C": (("arch", "mode", "mode_j"), C, {"units": "1", "long_name": "interaction C_ab = (8/m) sum lambda_mu,a lambda_mu,b"})},
        coords={"arch": archs, "mode": np.arange(n_modes), "mode_j": np.arange(n_modes)},
        attrs={"experiment_kind": KIND, "source": data.attrs.get("source", "")})


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """The module and its NQF from the same W0 for every seed (one tensor program each), with
    the same optimizer; train loss, train and test accuracy and test loss over log-spaced steps."""
    import torch
    from torch.func import vmap

    from nqf.approximation import ModuleReplicas
    from nqf.architectures import initial_weights
    from nqf.quadratic import QuadraticModel, resolve_device

    rc = cfg if "architecture" in cfg else run_config(cfg, run)
    arch = rc["architecture"]
    dev = resolve_device(device)
    dtype = torch.float64 if rc["dtype"] == "float64" else torch.float32
    module, x, x_test, y = _prepared(data, arch, rc["size"], int(rc["n_train"]))
    module = module.to(device=dev, dtype=dtype)
    x, x_test = x.to(dev, dtype), x_test.to(dev, dtype)
    y = torch.as_tensor(y, device=dev, dtype=dtype)
    y_test = torch.as_tensor(data["y_test"].values, device=dev, dtype=dtype)
    W0 = initial_weights(module, rc["seeds"], [rc["eps"]]).to(dev, dtype)
    with torch.no_grad():
        f0 = module.forward_with(torch.zeros_like(W0[0]), x)
        f0_test = module.forward_with(torch.zeros_like(W0[0]), x_test)[:, 0]
    form_test = module.structure(x_test)
    batched = vmap(module.forward_with, in_dims=(0, None))

    def scores(f_train, f_test):
        return {"train_accuracy": (torch.sign(f_train) == y).to(dtype).mean(-1),
                "test_accuracy": (torch.sign(f_test) == y_test).to(dtype).mean(-1),
                "test_loss": (f_test - y_test).pow(2).mean(-1)}

    def record_module(model):
        return scores(model()[..., 0], batched(model.W, x_test)[..., 0])

    def record_nqf(model):
        return scores(model().reshape(len(W0), -1) + f0[:, 0], f0_test + form_test.outputs(model.W))

    steps = int(rc["steps"])
    kwargs = dict(lr=float(rc["lr"]), steps=steps, optimizer=rc["optimizer"], n_record=rc["n_record"],
                  loss=rc.get("loss", "mean"),
                  replica_dim="seed", replica_coords=list(rc["seeds"]),
                  divergence_hint=f" for the {title(arch, FIGURE)} with {rc['optimizer']}")
    mod = train(ModuleReplicas(module, x, W0), y[:, None], record=record_module, **kwargs)
    nqf_ds = train(QuadraticModel(module.structure(x), W0, device=dev, dtype=dtype), (y[:, None] - f0),
                   record=record_nqf, **kwargs)
    ds = xr.Dataset(coords={"step": mod["step"], "time": mod["time"], "seed": mod["seed"]})
    names = {"loss": ("train loss (1/m) sum (f - y)^2", "1"), "train_accuracy": ("train accuracy", "1"),
             "test_accuracy": ("test accuracy", "1"), "test_loss": ("test loss (1/m_test) sum (f - y)^2", "1")}
    for key, (long_name, units) in names.items():
        for model_name, src in (("module", mod), ("nqf", nqf_ds)):
            ds[f"{key}_{model_name}"] = (("seed", "step"), src[key].values, {
                "units": units, "long_name": f"{'module' if model_name == 'module' else 'NQF'} {long_name}"})
    ds["seed"].attrs.update(long_name="torch seed of the initial weights")
    ds.attrs.update(run=run, experiment_kind=KIND, architecture=arch, p=module.p, width=module.width,
                    eps=float(rc["eps"]), optimizer=rc["optimizer"], lr=float(rc["lr"]),
                    steps=steps, f0_rms=float(f0.pow(2).mean().sqrt()), device=str(dev), dtype=rc["dtype"],
                    n_test=int(y_test.numel()), n_train=int(y.numel()), loss_convention=rc.get("loss", "mean"),
                    dataset=data.attrs.get("source", ""), preprocessing=data.attrs.get("preprocessing", ""))
    return ds


def theory(structure_ds: xr.Dataset, cfg: dict) -> xr.Dataset:
    """What the NQF can reach at best: its least-squares floor and that predictor's test scores."""
    keep = ["loss_floor", "ls_test_loss", "ls_test_accuracy", "f0_rms", "floor_is_reachable", "s_ls", "r", "C"]
    ds = structure_ds[keep].sel(arch=list(cfg["architectures"]))
    ds.attrs = {"experiment_kind": KIND,
                "method": "least squares over the NQF's effective matrix (Adam has no closure on M)"}
    return ds


def fit(structure_ds: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """Figure 7 judged as the paper compares: the train-loss and test-accuracy trajectories of each
    module and its NQF (seed means), up to the step at which the NQF reaches its least-squares
    floor (beyond it the NQF cannot follow a module that keeps learning); the steps where they
    part are reported beside it."""
    check_runs(run_ds, {a: {"experiment_kind": KIND, "architecture": a, "n_test": cfg["n_test"]}
                          for a in cfg["architectures"]})
    return fits.fit(structure_ds, theory_ds, run_ds, cfg)
