"""Paper Figure 4: sample-wise staircase (Theorem 5, Eq. 47)."""
import numpy as np

from nqf.config import validate_config
from nqf.experiments import samplewise
from nqf.experiments.common import form_from_dataset, structure_dataset


def config(**over):
    return validate_config({"experiments": {"s": {"kind": "samplewise", **over}}})["experiments"]["s"]


def prepared(cfg):
    data = samplewise.make_data(cfg)
    structure, _ = structure_dataset(form_from_dataset(data), data["y"].values)
    return data, structure


def test_data_matrices_are_mutually_orthogonal():
    data, structure = prepared(config())
    A = np.einsum("mp,pq->mpq", data["A_diag"].values, np.eye(data.sizes["param"]))
    products = np.einsum("mpq,nqr->mnpr", A, A)
    off = products[~np.eye(4, dtype=bool)]
    assert np.all(off == 0)
    assert np.allclose(structure["r"].values.reshape(4, 3), 2 * np.outer([1, .5, .25, .125], [1, 1.5, 2]))


def test_gd_ignition_times_match_the_exact_theory_within_3_percent():
    cfg = config()
    data, structure = prepared(cfg)
    theory = samplewise.theory(structure, cfg)
    run = samplewise.train_run(data, cfg, "gd", device="cpu")
    fit = samplewise.fit(structure, theory, {"gd": run}, cfg)
    err = np.abs(fit["t_star_measured"] - fit["t_star_predicted"]) / fit["t_star_predicted"]
    assert np.all(err < 0.03), err.values
    assert bool(np.all(fit["claim_passed"].values))


def test_ignition_times_approach_eq47_as_eps_falls():
    """t*_mu ln(1/eps)^-1 -> 1/zeta_mu: the relative gap shrinks like |ln(r/C)| / ln(1/eps)."""
    gaps = []
    for eps in (1e-4, 1e-8, 1e-16):
        cfg = config(eps=eps, steps=int(40 * np.log(1 / eps) / 0.005 / 13.8), lr=0.005)
        _, structure = prepared(cfg)
        theory = samplewise.theory(structure, cfg)
        gaps.append(np.abs(theory["t_star"] / theory["t_star_asymptotic"] - 1).values)
    gaps = np.array(gaps)
    assert np.all(np.diff(gaps, axis=0) < 0), gaps
    assert gaps[-1].max() < 0.6 * gaps[0].max()
