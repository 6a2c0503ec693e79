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

import json
import math

import numpy as np
import torch
import xarray as xr
from torch.func import vmap

from nqf.approximation import ModuleReplicas
from nqf.architectures import ARCHITECTURES, UnitModule
from nqf.config import ConfigError
from nqf.datasets import load_digit_task
from nqf.experiments.common import Claim, claims_dataset
from nqf.factored import BlockBilinearForm
from nqf.quadratic import QuadraticModel, resolve_device
from nqf.training import train

KIND = "real_data"
SEED_BLOCKS = True  # results depend on each seed alone; see nqf.experiments (seed blocks)
TITLES = {"mlp": "2-layer MLP (tanh)", "cnn": "1-layer CNN", "qk_self_attention": "self-attention, fixed readout"}
HIGHER_ORDER = {
    "mlp": "tanh cubic term, error O(|W|^4)",
    "cnn": "tanh cubic term per patch, error O(|W|^4)",
    "qk_self_attention": "softmax second order in the logits, error O(|W|^4)",
}
_DATA = ("dataset", "path", "n_train", "n_test", "data_seed", "architectures", "sizes", "input_norm",
         "readout_norm")
STAGE_KEYS = {
    "data": _DATA,
    "train": ("architectures", "sizes", "init_scale", "seeds", "lr", "steps", "optimizer", "n_record",
              "dtype"),
    "theory": ("architectures",),
    "fit": ("architectures", "tolerances"),
    "figure": ("description", "architectures", "dataset", "init_scale", "optimizer", "lr"),
}


def runs(cfg: dict) -> list[str]:
    """One run per architecture; it holds every seed."""
    return list(cfg["architectures"])


DIGITS8X8 = {"images": 1797, "shape": (8, 8)}


def check(cfg: dict) -> list[tuple[str, str]]:
    """Cross-key problems found before any job starts: (key path, sentence) pairs."""
    problems = []
    if cfg["dataset"] == "digits8x8":
        if cfg["n_train"] + cfg["n_test"] > DIGITS8X8["images"]:
            problems.append(("n_train", f"n_train + n_test = {cfg['n_train'] + cfg['n_test']} exceeds the "
                                        f"{DIGITS8X8['images']} images of digits8x8; lower n_train or n_test."))
        kernel = cfg["sizes"]["cnn"]["kernel"]
        if "cnn" in cfg["architectures"] and any(k > n for k, n in zip(kernel, DIGITS8X8["shape"])):
            problems.append(("sizes.cnn.kernel", f"kernel {kernel} does not fit the 8x8 digits; use at most [8, 8]."))
    elif not cfg.get("path"):
        problems.append(("path", "dataset mnist_npz reads a local .npz; set path to it (x_train, y_train, "
                                 "x_test, y_test)."))
    return problems


def run_config(cfg: dict, run: str) -> dict:
    """The keys one run reads: its architecture's size and step count."""
    if run not in cfg["architectures"]:
        raise ValueError(f"Run {run!r} is not one of this experiment's runs ({', '.join(runs(cfg))}).")
    return {"architecture": run, "size": cfg["sizes"][run], "steps": cfg["steps"][run],
            **{k: cfg[k] for k in ("init_scale", "seeds", "lr", "optimizer", "n_record", "dtype")}}


def build_module(arch: str, size: dict, image: tuple[int, int], seed: int = 0) -> UnitModule:
    """The float64 one-output module of ``arch`` sized for ``image`` (H, W) images."""
    H, Wd = image
    if arch == "mlp":
        return ARCHITECTURES["mlp"].build(D=H * Wd, width=size["width"], n_outputs=1, seed=seed)
    if arch == "cnn":
        return ARCHITECTURES["cnn"].build(image=(H, Wd), kernel=tuple(size["kernel"]), width=size["width"],
                                          n_outputs=1, seed=seed)
    if arch == "qk_self_attention":
        return ARCHITECTURES["qk_self_attention"].build(D=Wd, d_k=size["d_k"], width=size["width"],
                                                        n_outputs=1, seq_len=H, seed=seed)
    raise ValueError(f"Unknown architecture {arch!r}; choose from {', '.join(TITLES)}.")


def unit_input_dim(arch: str, module: UnitModule) -> int:
    """Length of the vector one unit reads: the image (MLP), a patch (CNN) or a token (attention)."""
    if arch == "cnn":
        return module.kernel[0] * module.kernel[1]
    return module.D


def module_inputs(arch: str, images, scale: float):
    """Standardised images (m, H, W) as ``arch`` takes them, times ``scale``: flattened for the MLP,
    as they are for the CNN, and as a sequence of rows (m, D = W, N = H) for the attention."""
    x = torch.as_tensor(np.asarray(images)) * scale
    if arch == "mlp":
        return x.reshape(x.shape[0], -1)
    if arch == "qk_self_attention":
        return x.transpose(-1, -2)
    return x


def input_scale(arch: str, module: UnitModule, images: np.ndarray, input_norm: float) -> float:
    """The factor that gives one unit's input RMS norm ``input_norm`` over the training images."""
    x = module_inputs(arch, images, 1.0)
    if arch == "cnn":
        sq = module.patches(x).pow(2).sum(-1).mean()
    elif arch == "qk_self_attention":
        sq = x.pow(2).sum(-2).mean()
    else:
        sq = x.pow(2).sum(-1).mean()
    return float(input_norm / math.sqrt(float(sq)))


def set_readout(module: UnitModule, c) -> None:
    if hasattr(module, "readout"):
        with torch.no_grad():
            module.readout.copy_(torch.as_tensor(np.asarray(c)).reshape(module.readout.shape))


def effective_features(form: BlockBilinearForm) -> torch.Tensor:
    """Phi(x_mu) with f_NQF - f(0) = <Phi, E(W)>, flattened to (m, n1 * n2).

    For a form without a Kronecker scale, A = 1/2 [[0, C (x) I_q], [.., 0]], C = sum_r a_r b_r^T,
    and Tr[W W^T A] = <C, E> with E[j, l] = sum over units and alpha of Z1[(j, alpha)] Z2[(l, alpha)].
    """
    if not isinstance(form, BlockBilinearForm) or form.scale is not None:
        raise ValueError("effective_features needs a BlockBilinearForm without a Kronecker scale.")
    left = form.left.expand(form.n_samples, form.n_outputs, form.rank, -1)
    right = form.right.expand(form.n_samples, form.n_outputs, form.rank, -1)
    return torch.einsum("skrj,skrl->skjl", left, right).reshape(form.m, -1)


def least_squares_nqf(phi_train, target_train, phi_test, f0_test):
    """The NQF's lowest reachable train loss and its minimiser's test predictions.

    min_E (1/m) |Phi vec(E) - (y - f0)|^2 over unconstrained E (a lower bound when the rank of E
    is capped below min(n1, n2); nqf.experiments.real_data checks that it is not). Returns
    (floor, vec E*, test outputs f0 + Phi_test vec E*).
    """
    phi, t = np.asarray(phi_train, float), np.asarray(target_train, float)
    e, *_ = np.linalg.lstsq(phi, t, rcond=None)
    floor = float(np.mean((phi @ e - t) ** 2))
    return floor, e, np.asarray(f0_test, float) + np.asarray(phi_test, float) @ e


def accuracy(f, y) -> np.ndarray:
    """Fraction of sign(f) == y along the last axis (f = 0 counts as wrong)."""
    return np.mean(np.sign(np.asarray(f)) == np.asarray(y), axis=-1)


def make_data(cfg: dict) -> xr.Dataset:
    """Standardised train and test images, +-1 odd/even targets, per-architecture input scales."""
    try:
        task = load_digit_task(cfg["dataset"], n_train=cfg["n_train"], n_test=cfg["n_test"],
                               seed=cfg["data_seed"], path=cfg.get("path"))
    except ValueError as exc:  # a wrong path, file or size: one sentence in the job log, no traceback
        raise ConfigError(f"Experiment kind real_data: {exc}") from None
    H, Wd = task.image_shape
    gen = np.random.default_rng(cfg["data_seed"])
    c = gen.standard_normal(Wd)
    c *= cfg["readout_norm"] / np.linalg.norm(c)
    attrs = {"experiment_kind": KIND, "dataset": cfg["dataset"], "source": task.source,
             "architectures": ",".join(cfg["architectures"]), "data_seed": cfg["data_seed"],
             "targets": "+1 odd digit, -1 even digit"}
    for arch in cfg["architectures"]:
        module = build_module(arch, cfg["sizes"][arch], (H, Wd))
        attrs[f"{arch}_input_scale"] = input_scale(arch, module, task.x_train, cfg["input_norm"])
        attrs[f"{arch}_size"] = json.dumps(cfg["sizes"][arch], sort_keys=True)
    img = {"units": "1", "long_name": "standardised pixel intensity (training-set mean 0, std 1 per pixel)"}
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


def _prepared(data: xr.Dataset, arch: str, size: dict):
    module = build_module(arch, size, (data.sizes["row"], data.sizes["col"]))
    set_readout(module, data["readout"].values)
    scale = float(data.attrs[f"{arch}_input_scale"])
    return (module, module_inputs(arch, data["x_train"].values, scale),
            module_inputs(arch, data["x_test"].values, scale))


def structure(data: xr.Dataset) -> xr.Dataset:
    """Per architecture: the NQF's least-squares floor and the GLV (Eq. 32) on its modes.

    E* = argmin of the NQF train loss over E (``least_squares_nqf``). Its singular triplets
    (s_a, a_a, b_a) give balanced units psi_a = [a_a; b_a] / sqrt 2 (first Kronecker slot), and
    lambda_mu,a = psi_a^T A_mu psi_a, r_a = (8/m) sum lambda_mu,a (y_mu - f0_mu),
    C_ab = (8/m) sum lambda_mu,a lambda_mu,b (NaN beyond an architecture's number of modes).
    """
    archs = data.attrs["architectures"].split(",")
    y, y_test = data["y_train"].values, data["y_test"].values
    m = y.size
    out = {k: [] for k in ("floor", "test_loss", "test_acc", "f0_rms", "rank_ok")}
    modes = []
    for arch in archs:
        module, x, x_test = _prepared(data, arch, json.loads(data.attrs[f"{arch}_size"]))
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


def initial_weights(p: int, d: int, init_scale: float, seeds) -> torch.Tensor:
    """W0 (seeds, p, d): N(0, init_scale^2) entries, one torch seed per replica."""
    return torch.stack([init_scale * torch.randn(p, d, generator=torch.Generator().manual_seed(int(s)),
                                                 dtype=torch.float64) for s in seeds])


def train_run(data: xr.Dataset, cfg: dict, run: str, device: str = "auto") -> xr.Dataset:
    """The module and its NQF from the same W0 for every seed (one tensor program each), with
    the same optimizer; train loss, train and test accuracy and test loss over log-spaced steps."""
    rc = cfg if "architecture" in cfg else run_config(cfg, run)
    arch = rc["architecture"]
    dev = resolve_device(device)
    dtype = torch.float64 if rc["dtype"] == "float64" else torch.float32
    module, x, x_test = _prepared(data, arch, rc["size"])
    module = module.to(device=dev, dtype=dtype)
    x, x_test = x.to(dev, dtype), x_test.to(dev, dtype)
    y = torch.as_tensor(data["y_train"].values, device=dev, dtype=dtype)
    y_test = torch.as_tensor(data["y_test"].values, device=dev, dtype=dtype)
    W0 = initial_weights(module.p, module.width, rc["init_scale"], rc["seeds"]).to(dev, dtype)
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
                  replica_dim="seed", replica_coords=list(rc["seeds"]),
                  divergence_hint=f" for the {TITLES[arch]} with {rc['optimizer']}")
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
                    init_scale=float(rc["init_scale"]), optimizer=rc["optimizer"], lr=float(rc["lr"]),
                    steps=steps, f0_rms=float(f0.pow(2).mean().sqrt()), device=str(dev),
                    dataset=data.attrs.get("source", ""))
    return ds


def theory(structure_ds: xr.Dataset, cfg: dict) -> xr.Dataset:
    """What the NQF can reach at best: its least-squares floor and that predictor's test scores."""
    keep = ["loss_floor", "ls_test_loss", "ls_test_accuracy", "f0_rms", "floor_is_reachable", "s_ls", "r", "C"]
    ds = structure_ds[keep].sel(arch=list(cfg["architectures"]))
    ds.attrs = {"experiment_kind": KIND,
                "method": "least squares over the NQF's effective matrix (Adam has no closure on M)"}
    return ds


def final_values(run: xr.Dataset) -> dict[str, np.ndarray]:
    """Last recorded train loss and test accuracy of module and NQF, per seed."""
    last = run.isel(step=-1)
    return {k: last[k].values for k in ("loss_module", "loss_nqf", "test_accuracy_module", "test_accuracy_nqf")}


def fit(structure_ds: xr.Dataset, theory_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict) -> xr.Dataset:
    """Final train loss and test accuracy of each NQF against its module (means over seeds)."""
    archs = list(cfg["architectures"])
    tol = cfg["tolerances"]
    seeds = run_ds[archs[0]]["seed"].values
    vals = {k: np.full((len(archs), seeds.size), np.nan) for k in
            ("loss_module", "loss_nqf", "test_accuracy_module", "test_accuracy_nqf")}
    max_gap = np.full(len(archs), np.nan)
    claims = []
    for i, a in enumerate(archs):
        run = run_ds[a]
        for k, v in final_values(run).items():
            vals[k][i] = v
        rel = np.abs(run["loss_nqf"] - run["loss_module"]) / run["loss_module"]
        max_gap[i] = float(rel.max())
        lm, ln = float(vals["loss_module"][i].mean()), float(vals["loss_nqf"][i].mean())
        am, an = float(vals["test_accuracy_module"][i].mean()), float(vals["test_accuracy_nqf"][i].mean())
        floor = float(theory_ds["loss_floor"].sel(arch=a))
        ok_loss = abs(ln - lm) <= tol["train_loss_rel"] * abs(lm)
        reason = (f"MISS: the module leaves its NQF ({HIGHER_ORDER[a]}); NQF floor {floor:.3g}, "
                  f"module {lm:.3g}: " + ("the module fits below the NQF's least-squares floor, so its "
                                          "weights left the small-weight regime" if lm < floor else
                                          "the nonlinearity slows the module (saturation)"))
        claims.append(Claim(f"final train loss, NQF vs module ({a})", lm, ln, tol["train_loss_rel"],
                            note=(f"mean over {seeds.size} seeds after {int(run.attrs['steps'])} {run.attrs['optimizer']} "
                                  f"steps (module loss {float(run['loss_module'].isel(step=0).mean()):.3g} -> {lm:.3g}); "
                                  f"max over t of the relative gap {max_gap[i]:.3g}; NQF floor {floor:.3g}"
                                  if ok_loss else reason)))
        ok_acc = abs(an - am) <= tol["test_accuracy_abs"]
        claims.append(Claim(f"final test accuracy, NQF vs module ({a})", am, an, tol["test_accuracy_abs"],
                            relative=False,
                            note=(f"absolute difference of the seed means; least-squares NQF "
                                  f"{float(theory_ds['ls_test_accuracy'].sel(arch=a)):.3f}" if ok_acc else reason)))
    ds = xr.Dataset(
        {k: (("arch", "seed"), v, {"units": "1", "long_name": f"final {k.replace('_', ' ')}"}) for k, v in vals.items()},
        coords={"arch": archs, "seed": seeds}, attrs={"experiment_kind": KIND})
    ds["max_rel_loss_gap"] = ("arch", max_gap, {"units": "1", "long_name": "max over steps and seeds of |L_NQF - L_module| / L_module"})
    return xr.merge([ds, claims_dataset(claims)])


def figure(theory_ds: xr.Dataset, fit_ds: xr.Dataset, run_ds: dict[str, xr.Dataset], cfg: dict,
           paths, *, font_size: float = 9, dpi: int = 150) -> None:
    """Figure 7: per architecture, train loss (top) and test accuracy (bottom) over Adam steps;
    module solid, NQF dashed, bands = min..max over seeds; the least-squares floor dotted."""
    from nqf import plotting

    archs = list(cfg["architectures"])
    colors = {"module": "C0", "nqf": "k"}
    with plotting.style(font_size, dpi):
        fig, axes = plotting.plt.subplots(2, len(archs), figsize=(3.2 * len(archs) + 0.4, 5.0), squeeze=False,
                                          sharex="col", layout="constrained")
        for i, a in enumerate(archs):
            run = run_ds[a]
            step = run["step"].values
            keep = step > 0
            for row, key in enumerate(("loss", "test_accuracy")):
                ax = axes[row, i]
                for model, line in (("module", plotting.EXPERIMENT), ("nqf", plotting.THEORY)):
                    v = run[f"{key}_{model}"].values[:, keep]
                    ax.plot(step[keep], v.mean(0), color=colors[model], **line)
                    if v.shape[0] > 1:
                        ax.fill_between(step[keep], v.min(0), v.max(0), color=colors[model], alpha=0.15, linewidth=0)
                ax.set_xscale("log")
            floor = float(theory_ds["loss_floor"].sel(arch=a))
            axes[0, i].axhline(floor, color="0.4", linestyle=":", linewidth=1.0)
            axes[0, i].set_yscale("log")
            axes[0, i].set_title(f"{TITLES[a]} (p = {run.attrs['p']}, d = {run.attrs['width']})")
            axes[1, i].axhline(float(theory_ds["ls_test_accuracy"].sel(arch=a)), color="0.4", linestyle=":",
                               linewidth=1.0)
            axes[1, i].set_xlabel(f"{cfg['optimizer']} step")
            fin = fit_ds.sel(arch=a)
            axes[1, i].set_title(f"final test accuracy: module {float(fin['test_accuracy_module'].mean()):.3f}, "
                                 f"NQF {float(fin['test_accuracy_nqf'].mean()):.3f}", fontsize=font_size - 1)
        axes[0, 0].set_ylabel("train loss (MSE)")
        axes[1, 0].set_ylabel("test accuracy")
        handles = [plotting.plt.Line2D([], [], color=colors["module"], **plotting.EXPERIMENT),
                   plotting.plt.Line2D([], [], color=colors["nqf"], **plotting.THEORY),
                   plotting.plt.Line2D([], [], color="0.4", linestyle=":", linewidth=1.0)]
        fig.legend(handles, ["module", "its NQF (same W0)", "least-squares NQF (loss floor; its test accuracy)"],
                   loc="outside lower center", ncol=3)
        data_name = ("scikit-learn 8x8 digits" if cfg["dataset"] == "digits8x8" else "MNIST (local .npz)")
        n_seeds = run_ds[archs[0]].sizes["seed"]
        fig.suptitle(f"{cfg['description']}: {data_name}; mean over {n_seeds} seeds (band: min-max); "
                     f"init N(0, {cfg['init_scale']:g}$^2$), full-batch {cfg['optimizer']} lr {cfg['lr']:g}",
                     fontsize=font_size + 1)
        plotting.save(fig, paths)
