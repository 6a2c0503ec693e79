"""Config validation: defaults filled, every bad value refused with the key's path."""
import re

import numpy as np
import pytest

from nqf.errors import ConfigError
from nqf.experiments import KINDS
from nqf.pipeline.config import RENAMED, kind_names, load_schema, load_yaml, resolve, validate_config
from nqf.pipeline.config_values import describe, key_path


def exp(**keys):
    return {"experiments": {"featurewise": {"kind": "featurewise", **keys}}}


def test_defaults_are_filled_from_the_schema():
    cfg = validate_config(exp())
    f = cfg["experiments"]["featurewise"]
    assert f["eps"] == 1e-5 and f["lr"] == 0.01 and f["tolerances"]["safety_factor"] == 3 and f["loss"] == "mean"
    assert cfg["device"] == "auto" and cfg["figures"]["dpi"] == 150


def test_yaml11_scientific_notation_is_read_as_a_number():
    assert validate_config(exp(eps="1e-5"))["experiments"]["featurewise"]["eps"] == 1e-5


@pytest.mark.parametrize("config, key, words", [
    (exp(eps=-1e-3), "experiments.featurewise.eps", "must be > 0"),
    (exp(eps=0), "experiments.featurewise.eps", "must be > 0"),
    (exp(eps="small"), "experiments.featurewise.eps", "must be of type number"),
    (exp(steps=10.5), "experiments.featurewise.steps", "must be of type integer"),
    (exp(epss=1e-3), "experiments.featurewise.epss", "did you mean 'eps'"),
    (exp(r=[1.0, -0.5]), "experiments.featurewise.r.1", "must be > 0"),
    (exp(tolerances={"z_err": 1}), "experiments.featurewise.tolerances.z_err", "Unknown config key"),
    ({"experiments": {"f": {"kind": "featurwise"}}}, "experiments.f.kind", "must be one of featurewise"),
    ({"experiments": {"f": {"eps": 1}}}, "experiments.f", "missing the required key 'kind'"),
    ({"experiments": {"../evil": {"kind": "featurewise"}}}, "experiments", "must start with a letter"),
    ({"experiments": {}}, "experiments", "at least 1"),
    ({"experiments": {"structure_matrices": {"kind": "featurewise"}}}, "experiments", "reserved"),
    ({"experimnts": {}}, "experimnts", "did you mean 'experiments'"),
    ({**exp(), "device": "gpu"}, "device", "must be one of auto, cpu, cuda"),
    ({**exp(), "on_divergence": "ignore"}, "on_divergence", "must be one of stop, record"),
    ({"experiments": {"a": {"kind": "nqf_approximation", "architectures": ["resnet"]}}},
     "experiments.a.architectures.0", "must be one of mlp"),
    ({"experiments": {"a": {"kind": "nqf_approximation", "optimizers": ["sgd"]}}},
     "experiments.a.optimizers.0", "must be one of gd, momentum, adam"),
    ({"experiments": {"a/b": {"kind": "featurewise"}}}, "experiments", "must start with a letter"),
    ({"experiments": {"a": {"kind": "real_data", "dataset": "cifar"}}}, "experiments.a.dataset", "must be one of"),
])
def test_bad_values_are_refused_naming_the_key(config, key, words):
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    msg = str(info.value)
    assert f"'{key}'" in msg and words in msg
    assert msg.count("\n") == 0  # one sentence, no traceback-like dump


def test_schema_kinds_match_the_implemented_kinds():
    schema = load_schema()
    listed = kind_names(schema)
    assert set(listed) == set(KINDS) and set(listed) <= set(schema["$defs"])


def test_every_schema_key_is_documented():
    """Every key has a description, its own or that of the shared part it references."""
    schema = load_schema()

    def walk(node, path):
        node = resolve(node, schema)
        for key, sub in node.get("properties", {}).items():
            if key != "kind":
                assert "description" in resolve(sub, schema), f"{path}.{key} lacks a description"
            walk(sub, f"{path}.{key}")
    walk(schema, "")
    for kind in kind_names(schema):
        walk(schema["$defs"][kind], kind)


def test_every_reference_resolves():
    """Every $ref in the schema points at a definition (jsonschema would only fail on use)."""
    schema = load_schema()
    refs = []

    def collect(node):
        if isinstance(node, dict):
            if "$ref" in node:
                refs.append(node)
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)
    collect(schema)
    assert len(refs) > 100  # the shared parts are referenced, not copied
    for node in refs:
        assert resolve(node, schema).get("type") or resolve(node, schema).get("enum"), node["$ref"]


def test_defaults_behind_a_reference_are_filled():
    """Shared parts ($defs/loss, dtype, n_boot, init_seed, tolerances, safety_factor) give their
    defaults; a kind's own default beside the reference wins (real_data's safety factor 2)."""
    cfg = validate_config({"experiments": {
        "p": {"kind": "samplewise_powerlaw"}, "r": {"kind": "real_data"}, "d": {"kind": "deep"}}})["experiments"]
    p, r, d = cfg["p"], cfg["r"], cfg["d"]
    assert p["loss"] == "mean" and p["dtype"] == "float64" and p["n_boot"] == 2000 and p["init_seed"] == 0
    assert p["tolerances"] == {"safety_factor": 3} and p["seeds"] == list(range(8)) and p["eps"] == 1e-9
    assert p["description"] == "sample-wise power law (Theorem 11)"
    assert r["tolerances"]["safety_factor"] == 2 and r["eps"] == 0.01 and r["sizes"]["mlp"]["width"] == 20
    assert r["seeds_per_job"] == "all" and d["momentum"] == 0.9 and d["lr"]["mlp"]["gd"] == 0.05
    assert d["init_variance"] == {"mlp": [0.05, 0.5], "attention": [0.1, 1.0]}


@pytest.mark.parametrize("kind, key, value, words", [
    ("samplewise_powerlaw", "eps", 0, "must be > 0 and < 1"),
    ("samplewise_powerlaw", "eps", "1e-5", None),  # YAML 1.1 number behind a reference
    ("collapse", "eps", [1e-3, 2.0], "must be > 0 and < 1"),
    ("collapse", "seeds", [0, -1], "must be >= 0"),
    ("collapse", "seeds", [], "must list 1 to 4096 items; got 0"),
    ("teacher_student", "eps", -1.0, "must be > 0"),
    ("nqf_approximation", "eps", [0.01], "must list 2 to 8 items; got 1"),
    ("real_data", "dtype", "float16", "must be one of float64, float32"),
    ("deep", "seeds_per_job", "some", "must be an integer >= 1 or 'all'"),
    ("featurewise", "lr", 20.0, "must be <= 10"),
    ("featurewise", "tolerances", {"safety_factor": 0}, "must be > 0"),
])
def test_values_behind_a_reference_are_checked_naming_the_key(kind, key, value, words):
    config = {"experiments": {"x": {"kind": kind, key: value}}}
    if words is None:
        assert validate_config(config)["experiments"]["x"][key] == float(value)
        return
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    msg = str(info.value)
    assert f"'experiments.x.{key}" in msg and words in msg and msg.count("\n") == 0


@pytest.mark.parametrize("kind, old, value, new", [
    ("real_data", "init_scale", 0.01, "eps"),
    ("nqf_approximation", "init_scales", [0.01, 0.2], "eps"),
    ("teacher_student", "init_std", 1e-3, "eps"),
    ("deep", "init_variances", {"mlp": [0.05, 0.5]}, "init_variance"),
])
def test_old_spellings_are_refused_with_the_new_name(kind, old, value, new):
    with pytest.raises(ConfigError) as info:
        validate_config({"experiments": {"x": {"kind": kind, old: value}}})
    msg = str(info.value)
    assert msg == (f"Config key 'experiments.x.{old}' was renamed: use '{new}' ({RENAMED[old][1]}).")
    assert msg.count("\n") == 0


@pytest.mark.parametrize("kind, n, listed", [
    ("collapse", 4, "[0, 1, 2, 3]"),
    ("featurewise_powerlaw", 8, "[0, 1, 2, 3, 4, 5, 6, 7]"),
    ("samplewise_powerlaw", 6, "[0, 1, 2, 3, 4, 5]"),
    ("init_scaling", 256, "[0, 1, ..., 255]"),
    ("init_scaling", 0, "[]"),
    ("teacher_student", 5, "[0, 1, 2, 3, 4]"),
])
def test_an_integer_seed_count_is_refused_with_the_list(kind, n, listed):
    with pytest.raises(ConfigError) as info:
        validate_config({"experiments": {"x": {"kind": kind, "seeds": n}}})
    assert str(info.value) == (f"Config key 'experiments.x.seeds' is a list of integer seeds now, not a count: "
                               f"use seeds: {listed} for the same {n} seeds.")


def test_a_seed_list_gives_the_seeds_of_the_old_count():
    """seeds: n drew seeds 0..n-1 of one generator; the list [0, ..., n-1] draws the same weights,
    and each seed keeps its weights when others are left out (the s-th draw of the stream)."""
    from nqf.experiments.powerlaw import seeded_init

    z0 = [1e-6, 1e-7, 1e-8]
    full = seeded_init(z0, range(5), 4, 3)
    assert full.shape == (5, 3, 4)
    assert np.array_equal(seeded_init(z0, [1, 3], 4, 3), full[[1, 3]])
    rng = np.random.default_rng(3)  # the old integer-count draw
    assert np.array_equal(full, rng.standard_normal((5, 3, 4)) * np.sqrt(np.asarray(z0) / 4)[None, :, None])


def test_shipped_configs_are_valid():
    for name in ("config", "test"):
        validate_config(load_yaml(f"config/{name}.yaml"))


def test_yaml_with_python_tags_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("experiments: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(bad)


def approximation(**keys):
    base = {"kind": "nqf_approximation", "architectures": ["mlp"], "n_outputs": 4,
            "singular_values": [1.0, 0.5], "sizes": {"mlp": {"D": 10, "width": 8}}}
    return {"experiments": {"approx": {**base, **keys}}}


@pytest.mark.parametrize("keys, key, words", [
    ({"singular_values": [1.0, 0.5, 0.25, 0.1, 0.05]}, "experiments.approx.singular_values",
     "no rank-5 teacher fits the mlp module"),
    ({"sizes": {"mlp": {"D": 10, "width": 2}}}, "experiments.approx.singular_values",
     "needs at least 3 units"),
    ({"sizes": {"mlp": {"D": 2, "width": 8}}}, "experiments.approx.singular_values", "no rank-3 teacher"),
])
def test_inconsistent_sizes_are_refused_before_any_job(keys, key, words):
    """A teacher rank above the width, the outputs or the inputs: refused by check_config."""
    from nqf.experiments import check_config

    cfg = approximation(**keys)
    if "singular_values" not in keys:
        cfg["experiments"]["approx"]["singular_values"] = [1.0, 0.5, 0.25]
    with pytest.raises(ConfigError) as info:
        check_config(validate_config(cfg))
    msg = str(info.value)
    assert f"'{key}'" in msg and words in msg and msg.count("\n") == 0


def test_consistent_sizes_pass_check_config():
    from nqf.experiments import check_config

    check_config(validate_config(approximation()))
    check_config(validate_config(load_yaml("config/config.yaml")))


# -- finite numbers, keys, ids and short messages (issue 16) ---------------------------------------

def numeric_leaves(node, schema, path=()):
    """(key path, whether a string is allowed there too) for every place the schema takes a
    number, found by walking the resolved schema, so that a new key is covered without a new test."""
    node = resolve(node, schema)
    types = node.get("type", [])
    types = set([types] if isinstance(types, str) else types)
    if {"number", "integer"} & types:
        yield path, "string" in types
    for key, sub in node.get("properties", {}).items():
        yield from numeric_leaves(sub, schema, path + (key,))
    if isinstance(node.get("items"), dict):
        yield from numeric_leaves(node["items"], schema, path + (0,))


def placed(path, value):
    """``value`` at ``path`` (keys and list index 0) of a fresh structure."""
    for key in reversed(path):
        value = [value] if key == 0 else {key: value}
    return value


NON_FINITE = [float("nan"), float("inf"), float("-inf"), 10**400, "1e999"]


@pytest.mark.parametrize("kind", [None, *KINDS])
def test_every_number_in_the_schema_refuses_nan_and_inf(kind):
    """NaN passes every JSON-schema range check and inf every one-sided one; the validator refuses
    both (and integers beyond the float range, and '1e999', read as inf) at every numeric key."""
    schema = load_schema()
    if kind is None:  # the global keys
        leaves = [(p, s) for p, s in numeric_leaves({k: v for k, v in schema.items() if k != "$defs"}, schema)
                  if p[0] != "experiments"]
    else:
        leaves = list(numeric_leaves(schema["$defs"][kind], schema))
    assert leaves
    for path, takes_string in leaves:
        for bad in NON_FINITE[:-1] if takes_string else NON_FINITE:  # a string there: its pattern speaks
            if kind is None:
                config = {**placed(path, bad), "experiments": {"x": {"kind": "featurewise"}}}
                key = key_path(path)
            else:
                config = {"experiments": {"x": {"kind": kind, **placed(path, bad)}}}
                key = key_path(("experiments", "x") + path)
            with pytest.raises(ConfigError) as info:
                validate_config(config)
            msg = str(info.value)
            assert msg.startswith(f"Config key '{key}' must be a finite "), (path, bad, msg)
            assert msg.count("\n") == 0 and len(msg) < 300, msg


@pytest.mark.parametrize("value, got", [
    (float("nan"), "nan (float)"), ("inf", "'inf' (str)"), (True, "True (bool)"), ("0.5", "'0.5' (str)"),
    (None, "None (NoneType)"), ([1e-3], "[0.001] (list)"),
])
def test_a_number_key_names_what_it_got(value, got):
    with pytest.raises(ConfigError) as info:
        validate_config(exp(eps=value))
    msg = str(info.value)
    assert msg.startswith("Config key 'experiments.featurewise.eps' must be ") and msg.endswith(f"got {got}.")
    assert "> 0 and < 1" in msg or "of type number" in msg


@pytest.mark.parametrize("config, words", [
    ({"experiments": {"a\n": {"kind": "featurewise"}}}, "The name 'a\\n' (str) under 'experiments' is not allowed"),
    ({"experiments": {"a\r": {"kind": "featurewise"}}}, "The name 'a\\r' (str)"),
    ({"experiments": {"a b": {"kind": "featurewise"}}}, "The name 'a b' (str)"),
    ({"experiments": {"é": {"kind": "featurewise"}}}, "The name 'é' (str)"),
    ({"experiments": {"a" * 65: {"kind": "featurewise"}}}, "(at most 64 characters)"),
    ({"experiments": {"a" * 10**5: {"kind": "featurewise"}}}, "(str of 100000 characters)"),
    ({"experiments": {1: {"kind": "featurewise"}}}, "The key 1 (int) under 'experiments' must be a string"),
    ({"experiments": {True: {"kind": "featurewise"}}}, "The key True (bool) under 'experiments' must be a string"),
    ({"experiments": {None: {"kind": "featurewise"}}}, "The key None (NoneType) under 'experiments'"),
    ({"experiments": {"x": {"kind": "featurewise", "tolerances": {1: 2}}}},
     "The key 1 (int) under 'experiments.x.tolerances' must be a string"),
    ({1.5: 2, "experiments": {"x": {"kind": "featurewise"}}}, "The key 1.5 (float) under '<top level>'"),
    ({"experiments": {"x": {"kind": "deep", "seeds_per_job": "all\n"}}},
     "'experiments.x.seeds_per_job' must be an integer >= 1 or 'all'; got 'all\\n' (str)"),
    ({"experiments": {"x": {"kind": "featurewise", "eps\n": 1}}}, "Unknown config key 'experiments.x.'eps\\n''"),
], ids=lambda v: None if isinstance(v, dict) else repr(v)[:40])
def test_ids_and_keys_are_checked_to_the_true_end(config, words):
    """'$' in a JSON-schema pattern lets a trailing newline through in Python; an integer id (YAML
    '1:') gave a TypeError. Both are one sentence now, with the name shown escaped."""
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    msg = str(info.value)
    assert words in msg and msg.count("\n") == 0 and len(msg) < 400, msg
    assert "letters, digits and '_'" in msg or "must be" in msg or "allowed there are" in msg


@pytest.mark.parametrize("value, shown", [
    ("x" * 10**6, "'xxxxxxxxx"),
    (list(range(10**5)), "[0, 1, 2, 3"),
    ({f"k{i}": i for i in range(10**4)}, "{'k0': 0, 'k1': 1"),
    ([[[[[[[[[[1]]]]]]]]]] * 1000, "[[[[[[[[[[1]]]]]]]]], [[[[[[[[["),
    (10**5000, "<an integer of about 5001 digits>"),
], ids=["long-string", "long-list", "big-mapping", "nested-lists", "huge-int"])
def test_messages_summarise_a_value_instead_of_printing_it_whole(value, shown):
    with pytest.raises(ConfigError) as info:
        validate_config(exp(C_diag=value))
    msg = str(info.value)
    assert msg.startswith("Config key 'experiments.featurewise.C_diag' must be ") and shown in msg
    assert len(msg) < 250 and msg.count("\n") == 0, msg


def test_describe_caps_the_length_and_counts_the_items():
    assert describe(1e-3) == "0.001 (float)"
    assert describe("x" * 1000) == "'" + "x" * 79 + "... (str of 1000 characters)"
    assert describe(list(range(1000))).endswith("... (list of 1000 items)")
    assert len(describe(list(range(1000)))) < 120
    shared = [1, 2]
    for _ in range(60):  # 2^60 leaves, built cheaply by sharing: described without walking them
        shared = [shared, shared]
    assert describe(shared).endswith("... (list of 2 items)")


def test_a_config_is_copied_not_shared_with_the_caller():
    r = [1.0, 0.5]
    cfg = validate_config({"experiments": {"a": {"kind": "featurewise", "r": r},
                                           "b": {"kind": "featurewise", "r": r}}})["experiments"]
    assert cfg["a"]["r"] == cfg["b"]["r"] == r and cfg["a"]["r"] is not cfg["b"]["r"] is not r


@pytest.mark.parametrize("ids, words", [
    (("featurewise", "FeatureWise"), "The names 'featurewise' and 'FeatureWise' under 'experiments' differ in case only"),
    (("Summary",), "The name 'Summary' under 'experiments' spells the reserved output name 'summary' in other case"),
])
def test_ids_that_share_files_on_a_case_insensitive_file_system_are_refused(ids, words):
    """Ids name files (results/fits/<id>.nc): macOS and Windows file systems ignore case."""
    with pytest.raises(ConfigError, match="^" + re.escape(words)):
        validate_config({"experiments": {i: {"kind": "featurewise"} for i in ids}})


# -- audit of the config boundary (issue 16, second pass) ------------------------------------------

@pytest.mark.parametrize("kind, key, value, expected", [
    ("featurewise", "steps", 2000.0, 2000),  # YAML `steps: 2000.0` or `2.0e+3`
    ("featurewise", "steps", "2e3", 2000),  # YAML 1.1 reads `2e3` as a string
    ("featurewise", "n_record", 120.0, 120),
    ("collapse", "seeds", [0.0, 1.0], [0, 1]),
    ("teacher_student", "seeds_per_job", 1.0, 1),  # was a TypeError in range() before any job
    ("real_data", "n_train", {"mlp": 100.0, "cnn": 50.0}, {"mlp": 100, "cnn": 50}),
    ("fourier_powerlaw", "steps", [100.0, 200.0, 300.0], [100, 200, 300]),
])
def test_an_integer_written_as_a_float_is_read_as_an_integer(kind, key, value, expected):
    """JSON Schema's `integer` takes 2000.0; range(), generators and run ids do not: the config
    hands the jobs an int."""
    got = validate_config({"experiments": {"x": {"kind": kind, key: value}}})["experiments"]["x"][key]
    assert got == expected and type(got) is type(expected)
    if isinstance(got, list):
        assert all(type(v) is int for v in got)
    if isinstance(got, dict):
        assert all(type(v) is int for v in got.values())
    assert type(validate_config({**exp(), "figures": {"dpi": 60.0}})["figures"]["dpi"]) is int


@pytest.mark.parametrize("value, words", [
    (2.5, "must be of type integer; got 2.5 (float)"),
    ("2.5e0", "must be of type integer; got '2.5e0' (str)"),
    (1e300, "must be >= 1 and <= 100000000; got 1e+300 (float)"),
    (True, "must be of type integer; got True (bool)"),
])
def test_a_float_that_is_no_integer_is_still_refused(value, words):
    with pytest.raises(ConfigError, match=re.escape(f"'experiments.featurewise.steps' {words}")):
        validate_config(exp(steps=value))


def test_seeds_per_job_written_as_a_float_makes_blocks():
    from nqf import experiments as E

    cfg = validate_config({"experiments": {"t": {"kind": "teacher_student", "architectures": ["mlp"],
                                                 "seeds": [0, 1, 2], "seeds_per_job": 2.0}}})
    E.check_config(cfg)
    assert E.run_ids(cfg["experiments"]["t"]) == ["mlp.seeds-0-1", "mlp.seeds-2"]


@pytest.mark.parametrize("exp_id, words", [
    ("a" * 64, "ends in 'a' repeated 64 times, which Snakemake refuses in a wildcard"),
    ("run_" + "x" * 20, "ends in 'x' repeated 20 times"),
    ("sweep" + "_1" * 20, "ends in '_1' repeated 20 times"),
    ("con", "is a device name on Windows"),
    ("NUL", "is a device name on Windows"),
    ("com7", "is a device name on Windows"),
])
def test_ids_that_snakemake_or_a_file_system_cannot_take_are_refused(exp_id, words):
    """Snakemake stops the DAG on a wildcard value ending in a part repeated 20 times or more
    (PeriodicWildcardError, after parsing; 'a' * 64 passed the id pattern); Windows has no file
    con.nc. Both are refused with the id."""
    from snakemake.io import PeriodicityDetector

    with pytest.raises(ConfigError, match=rf"^The name '{exp_id}' under 'experiments' {re.escape(words)}"):
        validate_config({"experiments": {exp_id: {"kind": "featurewise"}}})
    assert (PeriodicityDetector().is_periodic(exp_id) is not None) == ("repeated" in words)


@pytest.mark.parametrize("exp_id", ["a" * 19, "run_" + "ab" * 19, "console", "com10", "lpt", "x" * 19 + "y"])
def test_ids_near_those_limits_are_accepted(exp_id):
    from snakemake.io import PeriodicityDetector

    assert PeriodicityDetector().is_periodic(exp_id) is None
    assert exp_id in validate_config({"experiments": {exp_id: {"kind": "featurewise"}}})["experiments"]


@pytest.mark.parametrize("kind, key, value, path", [
    # two equal variances made a duplicated MultiIndex, an unstack error in the train job
    ("deep", "init_variance", {"mlp": [0.5, 0.5]}, "experiments.x.init_variance.mlp"),
    # the same crossover replica twice counted twice in the slope against ln(1/eps)
    ("featurewise_powerlaw", "crossover_eps", [1e-2, 1e-4, 1e-2], "experiments.x.crossover_eps"),
])
def test_lists_of_replicas_must_hold_distinct_values(kind, key, value, path):
    with pytest.raises(ConfigError, match=rf"^Config key '{re.escape(path)}' must list distinct values; got "):
        validate_config({"experiments": {"x": {"kind": kind, key: value}}})


@pytest.mark.parametrize("description, words", [
    # matplotlib's mathtext raised ValueError in the figure job, after every other job had run
    ("a $\\frac$ b", "does not parse"),
    ("costs $5 a run", "odd number of '$'"),
])
def test_a_description_whose_title_math_fails_is_refused(description, words):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with pytest.raises(ConfigError, match=r"^Config key 'experiments\.x\.description' is shown in figure titles") as err:
        validate_config({"experiments": {"x": {"kind": "featurewise", "description": description}}})
    assert words in str(err.value) and "\n" not in str(err.value)
    if words == "does not parse":  # what the figure job met
        fig = plt.figure()
        fig.suptitle(description)
        with pytest.raises(ValueError):
            fig.canvas.draw()
        plt.close(fig)


@pytest.mark.parametrize("description", ["plain text", "a $\\epsilon$ sweep", "price \\$5"])
def test_descriptions_with_valid_math_or_escaped_dollars_are_accepted(description):
    cfg = validate_config({"experiments": {"x": {"kind": "featurewise", "description": description}}})
    assert cfg["experiments"]["x"]["description"] == description


def test_text_that_is_not_valid_unicode_is_refused_naming_the_key(tmp_path):
    # JSON's "\ud800" (a lone surrogate) read fine and then failed every UTF-8 write of the run
    path = tmp_path / "c.json"
    path.write_text('{"experiments": {"x": {"kind": "featurewise", "description": "a\\ud800b"}}}')
    with pytest.raises(ConfigError, match=r"^Config key 'experiments\.x\.description' holds text that is not valid "
                                          r"Unicode \(the code point 0xd800, a lone surrogate, at character 1\)"):
        validate_config(load_yaml(path))


@pytest.mark.parametrize("kind, keys, key", [("samplewise_powerlaw", {"gamma1": 1e100}, "gamma1"),
                                             ("samplewise_powerlaw", {"beta0": 1e100}, "beta0")])
def test_a_value_that_makes_a_kinds_check_non_finite_is_refused_in_a_sentence(kind, keys, key):
    """Found by audit/config_audit.py: such values passed the schema (no upper bound) and the kind's
    check raised a ValueError from its derived arrays, a traceback at parse time. The sentence
    names the experiment's most extreme number."""
    from nqf import experiments

    cfg = validate_config({"device": "cpu", "experiments": {"e": {"kind": kind, **keys}}})
    with pytest.raises(ConfigError, match=rf"^Config key 'experiments\.e\.{key}': 1e\+100 makes the {kind} "
                                          r"problem non-computable \(ValueError: "):
        experiments.check_config(cfg)


@pytest.mark.parametrize("exp, key, words", [
    ({"kind": "competition", "lam": [[1e300, 0.0], [0.0, 1.0]], "y": [1.0, 0.5]}, "lam.0.0", "at most 1e+150"),
    ({"kind": "featurewise", "C_diag": -2e151}, "C_diag", "at most 1e+150"),
    ({"kind": "featurewise", "tolerances": {"safety_factor": 101}}, "tolerances.safety_factor", "<= 100"),
    ({"kind": "fourier_powerlaw", "tolerances": {"corrected_rel_error": 1.0}}, "tolerances.corrected_rel_error",
     "< 1 (a relative error of 100 %"),
])
def test_numbers_beyond_their_natural_bound_are_refused_by_the_schema(exp, key, words):
    """Reals beyond 1e150 (their square overflows float64, and nqf squares data, rates and scales)
    and tolerances that would test nothing (a safety factor above 100, a relative error of 100 %)."""
    with pytest.raises(ConfigError, match=rf"^Config key 'experiments\.e\.{re.escape(key)}' must be .*{re.escape(words)}"):
        validate_config({"device": "cpu", "experiments": {"e": exp}})


def test_the_largest_allowed_magnitude_is_accepted_by_the_schema():
    """The bound is inclusive: 1e150 itself passes the schema (the kind's own checks may still refuse)."""
    validate_config({"device": "cpu", "experiments": {"e": {"kind": "featurewise", "tolerances": {"safety_factor": 100}}}})
    from nqf.pipeline.config import MAGNITUDE_MAX
    assert not __import__("nqf.pipeline.config", fromlist=["_too_large"])._too_large(MAGNITUDE_MAX)


@pytest.mark.parametrize("text, code", [("a\x00b", "0x00"), ("red \x1b[31m", "0x1b"), ("x\x7f", "0x7f")])
def test_control_characters_in_text_are_refused_naming_the_key(text, code):
    """NUL ends a NetCDF attribute string (the rest of a description would be lost) and ESC
    rewrites the terminal that shows a log; tabs and line breaks stay allowed."""
    with pytest.raises(ConfigError, match=rf"^Config key 'experiments\.featurewise\.description' holds the control "
                                          rf"character {code} at character"):
        validate_config(exp(description=text))
    assert validate_config(exp(description="a\tb\nc"))["experiments"]["featurewise"]["description"] == "a\tb\nc"


def test_init_scaling_modules_must_be_among_its_architectures():
    from nqf import experiments

    cfg = validate_config({"device": "cpu", "experiments": {"e": {"kind": "init_scaling", "architectures": ["mlp"],
                                                                    "modules": ["mlp", "qk_head"]}}})
    with pytest.raises(ConfigError, match=r"^Config key 'experiments\.e\.modules': lists 'qk_head', not among "):
        experiments.check_config(cfg)


def test_teacher_student_min_agree_steps_beyond_a_runs_steps_is_refused():
    """The claim needs the parting at or after step min_agree_steps: with fewer steps it never holds."""
    from nqf import experiments

    cfg = validate_config({"device": "cpu", "experiments": {"e": {"kind": "teacher_student",
                                                                    "tolerances": {"min_agree_steps": 10**20}}}})
    with pytest.raises(ConfigError, match=r"^Config key 'experiments\.e\.tolerances\.min_agree_steps': is "
                                          r"100000000000000000000, more than the \d+ steps of the \w+ run"):
        experiments.check_config(cfg)


def test_the_workflow_schema_file_is_current_and_holds_every_shipped_config():
    # workflow/schemas/config.schema.yaml is generated (python -m nqf schema); Snakemake validates
    # every config with it after nqf's own reading (nqf.pipeline.snakefile.validated_config)
    import copy

    from helpers import ROOT
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    from nqf.pipeline.config_schema_file import WORKFLOW_SCHEMA, standalone_schema_text

    path = ROOT / WORKFLOW_SCHEMA
    assert path.read_text() == standalone_schema_text(), \
        "workflow/schemas/config.schema.yaml is stale: python -m nqf schema > workflow/schemas/config.schema.yaml"
    # JSON (Snakemake parses it with json first), and the same schema to a YAML 1.1 reader (PyYAML)
    import json

    import yaml

    assert json.loads(path.read_text()) == yaml.safe_load(path.read_text())
    for name in ("config.yaml", "paper.yaml", "test.yaml"):
        validate(copy.deepcopy(validate_config(load_yaml(ROOT / "config" / name))), str(path), set_default=False)
    # a kind's own key is checked against its kind's section, not only the shared keys
    bad = validate_config(exp())
    bad["experiments"]["featurewise"]["steps"] = "many"
    with pytest.raises(WorkflowError, match="'many' is not of type 'integer'"):
        validate(bad, str(path), set_default=False)
    bad["experiments"]["featurewise"] = {"kind": "featurewise", "r": [1.0], "unknown_key": 1}
    with pytest.raises(WorkflowError, match="unknown_key"):
        validate(bad, str(path), set_default=False)
