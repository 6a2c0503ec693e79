"""real_data's ``screen`` run: attention readings tried cheaply, each NQF trained alone with the
module evaluated at its weights (:func:`screen_run`)."""
from __future__ import annotations

import numpy as np
import xarray as xr

from nqf.experiments.real_data.runs import (
    ATTENTION,
    ATTENTION_READINGS,
    SCREEN,
    reading_label,
    readout_vector,
)
from nqf.experiments.real_data.setup import RunSetup, accuracy, build_module
from nqf.training.loop import train


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

    from nqf.architectures.effective import (
        VANISHING_LONG_NAME,
        effective_features,
        least_squares_nqf,
        vanishing_share,
    )
    from nqf.training.quadratic import QuadraticModel

    readings = list(rc["screen"])
    per: dict[str, list] = {k: [] for k in ("loss_nqf", "loss_module", "test_accuracy_nqf", "test_accuracy_module")}
    ls = {k: [] for k in ("ls_floor", "ls_test_accuracy", "f0_rms", "vanishing")}
    grid = None
    for reading in readings:
        setup = RunSetup(data, rc, device, reading)
        module, f0 = setup.module, setup.f0[:, 0]

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
            phi = effective_features(m64.structure(x64)).numpy()
            floor, _, f_test = least_squares_nqf(phi, setup.y.cpu().double().numpy() - f0_64,
                                                 effective_features(m64.structure(xt64)).numpy(), f0t_64)
        ls["ls_floor"].append(floor)
        ls["ls_test_accuracy"].append(float(accuracy(f_test, data["y_test"].values)))
        ls["f0_rms"].append(float(np.sqrt(np.mean(f0_64 ** 2))))
        ls["vanishing"].append(vanishing_share(phi))
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
    out["nqf_vanishing_share"] = ("reading", np.array(ls["vanishing"]), {"units": "1", "long_name": VANISHING_LONG_NAME})
    out["reading"].attrs.update(long_name="attention reading screened (readout norm, head pooling, f(0), query tokens)")
    out["seed"].attrs.update(long_name="torch seed of the initial weights")
    out.attrs.update({**setup.attrs(SCREEN, ATTENTION), "screen": "NQF trained alone; module evaluated at its weights"})
    return out
