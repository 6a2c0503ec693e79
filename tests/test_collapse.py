"""Different structure matrices with equal LV coefficients collapse in rescaled time."""
import numpy as np
import pytest
import torch

import nqf
from nqf.config import validate_config
from nqf.experiments import collapse
from nqf.experiments.common import form_from_dataset, structure_dataset


def config(**over):
    return validate_config({"experiments": {"c": {"kind": "collapse", **over}}})["experiments"]["c"]


@pytest.mark.parametrize("arch", collapse.ARCHITECTURES)
def test_every_architecture_has_the_same_lv_coefficients(arch):
    cfg = config(r=[1.0, 0.5, 0.25, 0.1])
    lam, y = collapse.eigenvalues(cfg)
    lv = nqf.LotkaVolterra.from_data(nqf.DenseForm(torch.as_tensor(collapse.structure_matrices(arch, lam, 0))), y)
    assert lv.residuals["commutator"] < 1e-12
    rising = lv.r > 0
    assert np.allclose(np.sort(lv.r[rising]), np.sort([1.0, 0.5, 0.25, 0.1]), atol=1e-12)
    C_rising = lv.C[np.ix_(rising, rising)]
    assert np.allclose(C_rising, np.eye(4), atol=1e-12)
    if arch == "rectangular":  # the partner modes have r < 0: they never ignite
        assert np.allclose(np.sort(lv.r[~rising]), -np.sort([1.0, 0.5, 0.25, 0.1])[::-1], atol=1e-12)


def test_ignition_times_collapse_as_eps_falls():
    cfg = config(eps=[1e-2, 1e-4, 1e-8], seeds=2, tau_max=4.5, lr=0.02, n_record=150)
    data = collapse.make_data(cfg)
    structure, _ = structure_dataset(form_from_dataset(data), data["y"].values)
    theory = collapse.theory(structure, cfg)
    runs = {run: collapse.train_run(data, collapse.run_config(cfg, run), run, device="cpu")
            for run in collapse.runs(cfg)}
    fit = collapse.fit(structure, theory, runs, cfg)
    tau = fit["tau_star_measured"].values  # (architecture, eps, seed, mode)
    spread = (tau.max(axis=0) - tau.min(axis=0)).max(axis=(1, 2))
    # Theorem 8: the spread is |ln(c_k ratio)| / (r_k ln(1/eps)), so it halves when ln(1/eps) doubles.
    assert np.allclose(spread[1:] / spread[:-1], 0.5, atol=0.02)
    # GD follows Theorem 8 with each seed's own initial profile: O(lr) = 0.02 * r / 4 relative.
    # The rectangular model's partner modes (r < 0, coupled by C = -C_kk) start at z ~ eps and
    # shift its growth rates by up to C_kk eps / r_k: 4% for r = 0.25 at eps = 1e-2.
    rel = np.abs(tau - fit["tau_star_theorem8"].values) / fit["tau_star_theorem8"].values
    r = np.array([1.0, 0.5, 0.25])
    bound = 0.02 * r[None, :] / 4 * 1.5 + np.array([1e-2, 1e-4, 1e-8])[:, None] / r[None, :]
    assert np.all(rel.max(axis=(0, 2)) <= bound), rel.max(axis=(0, 2))
    assert np.nanmax(rel[:, 1:]) < 0.02 * 1.0 / 4 * 1.5  # eps <= 1e-4: the lr term alone
