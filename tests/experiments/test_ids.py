"""Run ids name one parameter value each: values that round alike get distinct ids, a value listed
twice is refused before any job, and the ids of the shipped configs are those of earlier versions
(existing results are not retrained). Config-level only: nothing is trained here."""
import copy
import math

import numpy as np
import pytest
from helpers import ROOT, experiment_config

from nqf import experiments as E
from nqf.errors import ConfigError
from nqf.experiments.contract import hook
from nqf.experiments.ids import RUN_ID_PATTERN, exact_number
from nqf.pipeline.config import load_yaml, validate_config

CONFIGS = ("config.yaml", "test.yaml", "paper.yaml")
# Values that a fixed one-digit format (:.0e) maps to one id.
ROUND_ALIKE = ([1.0e-3, 1.2e-3], [1e-3, 1.0000001e-3], [1e-3, 1.4e-3, 9.6e-4])


def test_exact_number_is_short_for_one_digit_values_and_exact_for_the_rest():
    assert exact_number(1e-3) == "1e-03" == f"{1e-3:.0e}"
    assert exact_number(1e-16) == "1e-16"
    assert exact_number(1.2e-3) == "1.2e-03"
    assert exact_number(1.0000001e-3) == "1.0000001e-03"
    assert exact_number(2.5) == "2.5e00"  # no '+': the {run} wildcard has none
    assert exact_number(0.1 + 0.2) == "3.0000000000000004e-01"


def test_exact_number_reads_back_as_the_same_float():
    rng = np.random.default_rng(0)
    values = np.concatenate([10.0 ** rng.uniform(-300, 2, 2000), rng.uniform(0, 1, 2000)])
    for x in values:
        text = exact_number(x)
        assert float(text.replace("e", "e+") if "e-" not in text else text) == x
        assert RUN_ID_PATTERN.fullmatch("eps" + text)
    assert len({exact_number(x) for x in values}) == len(set(values.tolist()))


@pytest.mark.parametrize("eps", ROUND_ALIKE)
@pytest.mark.parametrize("kind", ["competition", "collapse"])
def test_values_that_round_alike_get_their_own_runs(kind, eps):
    """Each eps has its own id, and that id's run config trains exactly that eps."""
    exp = validate_config({"experiments": {"x": {"kind": kind, "eps": eps}}})
    E.check_config(exp)
    exp = exp["experiments"]["x"]
    runs = E.run_ids(exp)
    assert len(runs) == len(set(runs)) == len(eps) * len(exp.get("architectures", [None]))
    for run in runs:
        assert RUN_ID_PATTERN.fullmatch(run)
        assert E.run_config(exp, run)["eps"] in eps
    assert sorted({E.run_config(exp, run)["eps"] for run in runs}) == sorted(eps)


def _with(kind: str, key: str, value) -> dict:
    """A validated experiment of ``kind`` with ``key`` set past the schema (as a library caller
    or a schema without uniqueItems would hand it over)."""
    exp = experiment_config(kind, base="schema")
    exp[key] = value
    return exp


# kind -> (a list its run ids are made of, a value listed twice in it, the value as the message says it)
TWICE = {
    "competition": ("eps", [1e-3, 1e-3], "0.001"),
    "collapse": ("eps", [1e-3, 1.0e-3, 1e-6], "0.001"),
    "nqf_approximation": ("architectures", ["mlp", "mlp"], "'mlp'"),
    "deep": ("architectures", ["mlp", "mlp"], "'mlp'"),
    "init_scaling": ("architectures", ["mlp", "cnn", "mlp"], "'mlp'"),
    "teacher_student": ("architectures", ["mlp", "mlp"], "'mlp'"),
    "real_data": ("architectures", ["mlp", "mlp"], "'mlp'"),
}


def test_every_kind_with_value_derived_ids_lists_them():
    """A kind whose runs are named by config values declares the lists (RUN_ID_KEYS), so a value
    listed twice is refused by name: the kinds with a fixed set of runs have no such list."""
    fixed = {"featurewise": ["gd"], "samplewise": ["gd"], "featurewise_powerlaw": ["seeds", "crossover"],
             "samplewise_powerlaw": ["seeds"], "fourier_powerlaw": ["fourier_mlp", "nqf", "raw_mlp"]}
    for kind in E.KINDS:
        keys = hook(E.KINDS[kind], "RUN_ID_KEYS")
        if kind in fixed:
            assert not keys and E.run_ids(experiment_config(kind, base="schema")) == fixed[kind]
        else:
            assert kind in TWICE and TWICE[kind][0] in keys


@pytest.mark.parametrize("kind", sorted(TWICE))
def test_a_value_listed_twice_is_refused_as_such(kind):
    key, values, shown = TWICE[kind]
    exp = _with(kind, key, values)
    with pytest.raises(ConfigError, match=rf"^Config key '{key}' lists {shown} twice; give each value once"):
        E.run_ids(exp)
    with pytest.raises(ConfigError, match=rf"^Config key 'experiments.x.{key}': lists {shown} twice"):
        E.check_config({"experiments": {"x": exp}})


def test_the_schema_refuses_a_duplicate_eps_first():
    """Through the config file, the schema's uniqueItems refuses [1e-3, 1e-3] (and 1e-3 beside
    1.0e-3) before the run ids are made."""
    for eps in ([1e-3, 1e-3], [1e-3, 1.0e-3]):
        with pytest.raises(ConfigError, match="experiments.x.eps"):
            validate_config({"experiments": {"x": {"kind": "competition", "eps": eps}}})


def test_a_collision_the_lists_do_not_show_is_refused(monkeypatch):
    """The generic guard: two runs under one id are refused even where no list repeats a value
    (here a kind whose id format drops the digits that tell the values apart)."""
    comp = E.KINDS["competition"]
    monkeypatch.setattr(comp, "run_id", lambda eps: f"eps{eps:.0e}")
    exp = _with("competition", "eps", [1.0e-3, 1.2e-3])
    with pytest.raises(ConfigError, match=r"^Config key 'eps' gives 2 runs the same run id 'eps1e-03'"):
        E.run_ids(exp)


def test_an_id_that_is_no_safe_file_name_is_refused(monkeypatch):
    comp = E.KINDS["competition"]
    monkeypatch.setattr(comp, "run_id", lambda eps: f"eps {eps}\n")
    with pytest.raises(ConfigError, match="which is not a safe file name"):
        E.run_ids(_with("competition", "eps", [1e-3, 1e-4]))


@pytest.mark.parametrize("name", CONFIGS)
def test_shipped_configs_keep_their_run_ids(name):
    """config.yaml, test.yaml and paper.yaml pass every check, all their ids are safe file names,
    and eps-named ids are the one-digit ids of earlier versions (their results are not retrained)."""
    cfg = validate_config(load_yaml(ROOT / "config" / name))
    E.check_config(cfg)
    for exp in cfg["experiments"].values():
        runs = E.run_ids(exp)
        assert len(runs) == len(set(runs))
        assert all(RUN_ID_PATTERN.fullmatch(r) for r in runs)
        if exp["kind"] == "competition":
            assert runs == [f"eps{e:.0e}" for e in exp["eps"]]
        if exp["kind"] == "collapse":
            assert runs == [f"{a}_eps{e:.0e}" for a in exp["architectures"] for e in exp["eps"]]


def test_seed_blocks_of_distinct_seeds_have_distinct_ids():
    exp = experiment_config("teacher_student", base="schema", architectures=["mlp"], seeds=[0, 1, 2, 3, 4],
                            seeds_per_job=2)
    assert E.run_ids(exp) == ["mlp.seeds-0-1", "mlp.seeds-2-3", "mlp.seeds-4"]
    twice = copy.deepcopy(exp)
    twice["seeds"] = [0, 1, 0]
    with pytest.raises(ConfigError, match=r"^Config key 'seeds' lists 0 twice"):
        E.run_ids(twice)


def test_seeds_per_job_on_a_kind_that_batches_its_seeds_is_refused():
    exp = experiment_config("featurewise")
    exp["seeds_per_job"] = 2
    with pytest.raises(ConfigError, match=r"^Config key 'experiments.x.seeds_per_job': applies to kinds deep"):
        E.check_config({"experiments": {"x": exp}})


def test_exact_number_refuses_a_non_finite_value():
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="finite"):
            exact_number(bad)
