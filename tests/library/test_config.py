"""Config validation: defaults filled, every bad value refused with the key's path."""
import pytest

from nqf.config import ConfigError, load_schema, load_yaml, validate_config
from nqf.experiments import KINDS


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
    ({"experiments": {"f": {"eps": 1}}}, "experiments.f", "'kind' is a required property"),
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
    listed = schema["properties"]["experiments"]["additionalProperties"]["properties"]["kind"]["enum"]
    assert set(listed) == set(schema["$defs"]) == set(KINDS)


def test_every_schema_key_is_documented():
    def walk(node, path):
        for key, sub in node.get("properties", {}).items():
            if key != "kind":
                assert "description" in sub, f"{path}.{key} lacks a description"
            walk(sub, f"{path}.{key}")
    schema = load_schema()
    walk(schema, "")
    for kind, sub in schema["$defs"].items():
        walk(sub, kind)


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
