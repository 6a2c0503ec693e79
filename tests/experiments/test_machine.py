"""Refusals that used to come late, with a traceback, after other jobs had run, made before any
job starts (check_config): a CUDA device this machine lacks, competition's lam and y that do not
fit together, runs far beyond the machine's memory or step budget. Config-level only."""
import re

import pytest
import torch
from helpers import ROOT

from nqf import experiments as E
from nqf.errors import ConfigError
from nqf.experiments import machine
from nqf.pipeline.config import validate_config


def _checked(exp: dict, **top):
    cfg = validate_config({"experiments": {"x": exp}, **top})
    E.check_config(cfg)
    return cfg


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_refused_where_the_jobs_run():
    with pytest.raises(ConfigError, match=r"^Config key 'device' is 'cuda' but torch sees no CUDA device on this "
                                          r"machine; use auto \(CUDA where present, else the CPU\) or cpu\.$"):
        _checked({"kind": "featurewise"}, device="cuda")
    # jobs submitted to a cluster: the node that runs them checks (it re-parses the Snakefile)
    cfg = validate_config({"experiments": {"x": {"kind": "featurewise"}}, "device": "cuda"})
    E.check_config(cfg, jobs_run_here=False)
    _checked({"kind": "featurewise"}, device="auto")


def test_the_executor_comes_from_the_command_line_or_the_profile():
    assert machine.cluster_executor(["snakemake", "--executor", "slurm"], ROOT) == "slurm"
    assert machine.cluster_executor(["snakemake", "-e", "slurm"], ROOT) == "slurm"
    assert machine.cluster_executor(["snakemake", "--executor=local"], ROOT) is None
    assert machine.cluster_executor(["snakemake", "--workflow-profile", str(ROOT / "profiles" / "slurm")], ROOT) == "slurm"
    assert machine.cluster_executor(["snakemake", "--cores", "2"], ROOT) is None  # profiles/default: local
    assert machine.cluster_executor(["snakemake", "-e", "dryrun"], ROOT) is None


def test_competition_lam_rows_must_be_one_rectangle_with_a_row_per_target():
    with pytest.raises(ConfigError, match=r"^Config key 'experiments.x.lam': rows must all have the same length "
                                          r"\(one eigenvalue per mode\); row 0 has 3 entries, row 2 has 2\.$"):
        _checked({"kind": "competition", "lam": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0]]})
    with pytest.raises(ConfigError, match=r"^Config key 'experiments.x.lam': has 3 rows but y has 2 targets"):
        _checked({"kind": "competition", "y": [1.0, 0.5]})
    _checked({"kind": "competition"})


def test_a_run_far_beyond_the_memory_is_refused_with_its_size():
    """featurewise with 4096 modes records M = 4096^2 x n_record float64 numbers."""
    with pytest.raises(ConfigError, match=r"^Config key 'experiments.x.n_record': experiment x would hold 26.8 TB "
                                          r"in one run \(4096 modes: M of 4096x4096 at 100000 recorded steps, "
                                          r"float64\); this machine has .*B \(set NQF_MAX_MEMORY_GB"):
        _checked({"kind": "featurewise", "r": [1.0] * 4096, "n_record": 100000})


@pytest.mark.parametrize("exp, key", [
    ({"kind": "competition", "lam": [[1.0] * 1024] * 3, "n_record": 100000}, "n_record"),
    ({"kind": "collapse", "r": [1.0] * 256, "n_record": 100000, "seeds": list(range(64))}, "n_record"),
    ({"kind": "samplewise", "y": [1.0] * 1024, "entries": [1.0] * 64}, "entries"),
    ({"kind": "samplewise_powerlaw", "m": 100000, "entries": [1.0] * 16}, "m"),
    ({"kind": "featurewise_powerlaw", "m": 100000}, "m"),
    # the module kinds (issue 16, second pass): these were accepted and started their data jobs
    ({"kind": "nqf_approximation", "architectures": ["mlp"], "n_samples": 1000000, "singular_values": [1.0],
      "sizes": {"mlp": {"D": 4096, "width": 4096}}}, "n_samples"),
    ({"kind": "nqf_approximation", "architectures": ["mha"], "singular_values": [1.0],
      "sizes": {"mha": {"D": 4096, "d_k": 4096, "d_v": 4096, "seq_len": 4096, "width": 4096}}}, "sizes.mha"),
    ({"kind": "nqf_approximation", "architectures": ["qk_head"], "singular_values": [1.0], "record_M_max_p": 10 ** 9,
      "n_record": 100000, "sizes": {"qk_head": {"D": 64, "d_k": 64, "width": 1}}}, "n_record"),
    ({"kind": "teacher_student", "architectures": ["qk_head"], "batch_size": 1000000,
      "sizes": {"qk_head": {"D": 4096, "seq_len": 4096}}}, "batch_size"),
    ({"kind": "deep", "architectures": ["mlp"], "n_train": 10000000, "sizes": {"mlp": {"dims": [4096] * 8 + [1]}}},
     "n_train"),
    ({"kind": "deep", "architectures": ["attention"], "sizes": {"attention": {"D": 4096, "hidden": 4096}}},
     "sizes.attention"),
    ({"kind": "fourier_powerlaw", "P": 4096, "M": 65536, "seeds": list(range(512))}, "M"),
    ({"kind": "fourier_powerlaw", "seeds": list(range(4096)), "n_record": 100000}, "n_record"),
    ({"kind": "fourier_powerlaw", "raw_width": 65536, "M": 65536, "raw_seeds": list(range(1024))}, "raw_width"),
])
def test_each_kind_estimate_refuses_its_absurd_sizes(exp, key):
    """Measured against a 64 GB machine, whatever runs the tests."""
    cfg = validate_config({"experiments": {"x": exp}})["experiments"]["x"]
    problems = machine.resource_problems("x", cfg, E.kind_of(cfg), limit=64e9)
    assert problems and problems[0][0] == key and "would hold" in problems[0][1]


@pytest.mark.parametrize("kind, row", [
    ("collapse", "p x p"),  # a row is one M(0) of p x p, p = 2K with the rectangular model
    ("featurewise_powerlaw", None), ("samplewise_powerlaw", None), ("init_scaling", None),
])
def test_a_large_seed_value_is_a_large_draw(kind, row):
    """These kinds draw max(seeds) + 1 rows from one generator (seed s is row s), so the one seed
    10^9 costs a billion rows: the estimate counts them, and names seeds when they dominate."""
    cfg = validate_config({"experiments": {"x": {"kind": kind, "seeds": [0, 1]}}})["experiments"]["x"]
    small = machine.estimate(E.kind_of(cfg), cfg)
    big = machine.estimate(E.kind_of(cfg), {**cfg, "seeds": [0, 10 ** 9]})
    drawn, _ = machine.seed_draw(cfg, 1)
    assert drawn == 8 * 2  # rows 0 and 1 of one value each
    assert big["bytes"] - small["bytes"] >= 8 * (10 ** 9 - 1)  # at least one float64 per extra row
    if row == "p x p":
        p = len(cfg["r"]) * (2 if "rectangular" in cfg["architectures"] else 1)
        assert big["bytes"] - small["bytes"] == 8 * (10 ** 9 - 1) * p * p
    problems = machine.resource_problems("x", {**cfg, "seeds": [0, 10 ** 9]}, E.kind_of(cfg), limit=4e9)
    assert problems and problems[0][0] == "seeds" and "max(seeds) + 1 = 1000000001 rows" in problems[0][1]


def test_seed_values_stay_within_what_every_generator_takes():
    for key, value in (("seeds", [2 ** 32]), ("data_seed", 2 ** 64)):
        path = f"experiments.x.{key}" + (".0" if key == "seeds" else "")
        with pytest.raises(ConfigError, match=rf"^Config key '{path}' must be >= 0 and <= 4294967295; got "):
            validate_config({"experiments": {"x": {"kind": "collapse", key: value}}})
    validate_config({"experiments": {"x": {"kind": "collapse", "seeds": [2 ** 32 - 1], "data_seed": 2 ** 32 - 1}}})


def test_steps_that_follow_from_a_tiny_lr_are_refused():
    with pytest.raises(ConfigError, match=r"^Config key 'experiments.x.lr': experiment x would train 1.66e\+11 steps "
                                          r"in one run \(tau_max ln\(1/eps\) / \(c lr\) at eps 1e-16, lr 1e-09\)"):
        _checked({"kind": "competition", "lr": 1e-9})


def test_the_memory_limit_can_be_set(monkeypatch):
    monkeypatch.setenv(machine.MEMORY_ENV, "0.000001")  # 1 kB
    with pytest.raises(ConfigError, match="this machine has 1 kB"):
        _checked({"kind": "featurewise"})
    monkeypatch.delenv(machine.MEMORY_ENV)
    _checked({"kind": "featurewise"})


def test_every_kind_has_an_estimate_of_the_default_size():
    for kind in E.KINDS:
        cfg = validate_config({"experiments": {"x": {"kind": kind}}})["experiments"]["x"]
        est = machine.estimate(E.kind_of(cfg), cfg)
        assert est["bytes"] > 0 and est["steps"] >= 1 and est["what"]


@pytest.mark.parametrize("exp, bound", [
    ({"kind": "featurewise", "lr": 2.1}, "2"),  # C = I, r_1 = 1: the Hessian at saturation has eigenvalue 1
    ({"kind": "collapse", "lr": 3.0}, "2"),
    ({"kind": "competition", "lr": 1.0}, "0.75"),
    # per sample a rank-one Hessian block, eigenvalue (8/m) sum_k lambda_k^2 z_k at the flow's end
    # point (zeta_1 = 4 at eps -> 0): lr 1.0 diverged in the train job after the data job ran
    ({"kind": "samplewise", "lr": 0.6}, "0.5037"),
    ({"kind": "samplewise_powerlaw", "lr": 1.0, "zeta1": 4.0}, "0.5007"),
    ({"kind": "featurewise_powerlaw", "lr": 2.0}, "2"),  # r_1 = 1; the schema's maximum is 2
])
def test_an_lr_beyond_gd_stability_is_refused(exp, bound):
    """Where C and the end point follow from the config, an lr at which GD cannot settle (it
    oscillates: featurewise at lr 2.1 ends in a 2-cycle of mode 1) is refused before any job."""
    with pytest.raises(ConfigError, match=rf"^Config key 'experiments.x.lr': is {exp['lr']:g}, a flow step c lr = "
                                          rf"{exp['lr']:g} \(loss mean\) at or above {bound}, the largest at which "
                                          rf"gradient descent can settle at the minimum .*; use lr below {bound}\.$"):
        _checked(exp)
    _checked({**exp, "lr": 0.9 * float(bound)})


def test_the_stability_bound_is_in_the_units_of_the_loss_convention():
    with pytest.raises(ConfigError, match=r"is 0.5, a flow step c lr = 1.5 \(loss sum\) .* use lr below 0.25\.$"):
        _checked({"kind": "competition", "lr": 0.5, "loss": "sum"})


@pytest.mark.parametrize("exp, key", [
    ({"kind": "competition", "eps": [1e-3, 5e-324]}, "eps.1"),  # was an OverflowError in the size estimate
    ({"kind": "featurewise", "eps": 1e-310}, "eps"),
    ({"kind": "featurewise_powerlaw", "crossover_eps": [1e-2, 2e-308]}, "crossover_eps.1"),
    ({"kind": "teacher_student", "eps": 1e-320}, "eps"),
])
def test_a_subnormal_eps_is_refused_before_any_job(exp, key):
    with pytest.raises(ConfigError, match=rf"^Config key 'experiments.x.{re.escape(key)}': .* is below 2.225e-308, "
                                          r"the smallest normal float64 number"):
        _checked(exp)
    lowest = {**exp, key.split(".")[0]: ([*exp[key.split(".")[0]][:-1], 2.2250738585072014e-308]
                                          if "." in key else 2.2250738585072014e-308)}
    assert E.eps_check(validate_config({"experiments": {"x": lowest}})["experiments"]["x"]) == []


def test_singular_values_are_listed_from_largest_to_smallest():
    """D divides the k-th largest learned singular value's gap by s_k: an ascending list would
    scale every D by the wrong s_k."""
    exp = {"kind": "nqf_approximation", "architectures": ["mlp"], "sizes": {"mlp": {"D": 10, "width": 8}}}
    with pytest.raises(ConfigError, match=r"^Config key 'experiments.x.singular_values': must be listed from largest "
                                          r"to smallest \(s_1 >= s_2 >= ...\).*; got \[0.25, 0.5, 1.0\]\.$"):
        _checked({**exp, "singular_values": [0.25, 0.5, 1.0]})
    _checked({**exp, "singular_values": [1.0, 0.5, 0.5]})  # equal values are a valid teacher


def test_a_data_path_with_a_dataset_that_ignores_it_is_refused(tmp_path):
    """path without dataset: mnist_npz used to train on the bundled MNIST, silently."""
    with pytest.raises(ConfigError, match=r"^Config key 'experiments.x.path': is read only with dataset mnist_npz, "
                                          r"and dataset is mnist5k, whose images would be trained on instead"):
        _checked({"kind": "real_data", "path": str(tmp_path / "mine.npz")})
    _checked({"kind": "real_data", "dataset": "digits8x8", "path": None, "n_train": 100, "n_test": 20,
              "architectures": ["mlp"]})


@pytest.mark.parametrize("kind, m", [("featurewise_powerlaw", 1000), ("samplewise_powerlaw", 500), ("samplewise", 4)])
def test_the_default_lr_under_the_sum_convention_is_refused(kind, m):
    """loss: sum multiplies the flow step by m: the default lr would diverge (or oscillate) in the
    train job; the sentence gives the lr to use."""
    lr = {"samplewise": 0.2}.get(kind, 0.1)
    with pytest.raises(ConfigError, match=rf"^Config key 'experiments.x.lr': is {lr:g}, a flow step c lr = "
                                          rf"{m * lr:.4g} \(loss sum\) at or above .*; use lr below "):
        _checked({"kind": kind, "loss": "sum", "lr": lr})
    _checked({"kind": kind, "loss": "sum", "lr": 0.1 / m})


def test_sample_block_curvature_is_the_dense_hessian_eigenvalue():
    """nqf.theory.stability.sample_block_curvature (O(m K)) against max_stable_lr on the dense p x p
    problem at the flow's end point z_k = z0_k exp(lambda_k u), sum_k lambda_k z_k = y."""
    import numpy as np
    from scipy.optimize import brentq

    from nqf.theory.stability import max_stable_lr, sample_block_curvature

    rng = np.random.default_rng(0)
    lam, y, z0 = rng.uniform(0.1, 3, (4, 3)), rng.uniform(0.1, 2, 4), 10.0 ** rng.uniform(-9, -1, (4, 3))
    z = np.concatenate([z0[i] * np.exp(lam[i] * brentq(
        lambda u: np.logaddexp.reduce(np.log(lam[i] * z0[i]) + lam[i] * u) - np.log(y[i]), -1e3, 1e3, xtol=1e-14))
        for i in range(4)])
    L = np.zeros((4, 12))
    for i in range(4):
        L[i, 3 * i:3 * i + 3] = lam[i]
    dense = max_stable_lr(8 / 4 * L.T @ L, z)
    assert np.isclose(2 / sample_block_curvature(lam, y, z0).max(), dense, rtol=1e-9)
    zeta = 8 / 4 * lam.max(axis=1) * y
    assert np.all(sample_block_curvature(lam, y, z0) <= zeta)  # below zeta_mu, its eps -> 0 limit


def test_a_module_far_beyond_the_memory_is_refused_before_it_is_built():
    """nqf_approximation's check builds each module (and its teacher): a 550 GB MHA used to be
    allocated there, at parse time (a torch allocation error, or the machine's memory exhausted).
    The size estimate builds on torch's meta device, and runs first."""
    huge = {"kind": "nqf_approximation", "architectures": ["mha"], "singular_values": [1.0],
            "sizes": {"mha": {"D": 4096, "d_k": 4096, "d_v": 4096, "seq_len": 16, "width": 4096}}}
    with pytest.raises(ConfigError, match=r"^Config key 'experiments.x.sizes.mha': experiment x would hold .* TB in "
                                          r"one run \(mha: 600 inputs of 69632 values, 6 replicas of W of "):
        _checked(huge)


def test_module_kind_estimates_grow_with_their_sizes():
    """Each size key a module kind has raises its estimate (a floor, in bytes)."""
    def est(exp):
        cfg = validate_config({"experiments": {"x": exp}})["experiments"]["x"]
        return machine.estimate(E.kind_of(cfg), cfg)["bytes"]

    cases = [({"kind": "nqf_approximation", "architectures": ["mlp"]}, ("n_samples", 1200), ("seeds", [0, 1, 2, 3])),
             ({"kind": "teacher_student", "architectures": ["mlp"]}, ("n_probe", 512), ("batch_size", 1024)),
             ({"kind": "deep", "architectures": ["mlp"]}, ("n_train", 400), ("n_test", 2000)),
             ({"kind": "fourier_powerlaw"}, ("P", 100), ("n_record", 800))]
    for base, *grown in cases:
        for key, value in grown:
            assert est({**base, key: value}) > est(base), (base["kind"], key)


def test_a_deep_mlp_with_an_odd_number_of_layers_is_refused_before_any_job():
    """The 2-layer NQF pairs the layers: dims of even length made the data job fail."""
    with pytest.raises(ConfigError, match=r"^Config key 'experiments.x.sizes.mlp': the mlp model cannot be built: "
                                          r"DeepMLP needs an even number of weight layers"):
        _checked({"kind": "deep", "architectures": ["mlp"], "sizes": {"mlp": {"dims": [8, 16, 16, 1]}}})
    _checked({"kind": "deep", "architectures": ["mlp"], "sizes": {"mlp": {"dims": [8, 16, 1]}}})
