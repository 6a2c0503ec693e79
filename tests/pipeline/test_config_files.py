"""Reading config files (nqf.pipeline.config_files): what the workflow runs is what the file says, once.

Duplicate keys (YAML: file and lines; JSON: key path), a YTE template, an alias bomb, an empty,
huge, non-UTF-8 or non-mapping file are each refused in one sentence; the workflow's config is
nqf's own reading of every --configfile with the --config overrides on top."""
import json
import time
import tracemalloc

import pytest
from helpers import ROOT, time_limit

from nqf.errors import ConfigError
from nqf.pipeline.config import load_workflow_config, load_yaml, validate_config
from nqf.pipeline.config_files import MAX_BYTES, read_config_file
from nqf.pipeline.config_values import MAX_NODES


def refused(tmp_path, text, name="c.yaml", mode="w") -> str:
    path = tmp_path / name
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ConfigError) as info:
        validate_config(read_config_file(path))
    msg = str(info.value)
    assert msg.count("\n") == 0 and len(msg) < 400, msg  # one sentence, a value summarised
    return msg


@pytest.mark.parametrize("text, words", [
    ("experiments:\n  f:\n    kind: featurewise\n    eps: 1.0e-3\n    kind: samplewise\n",
     ["key 'kind' twice", "lines 3 and 5, under 'experiments.f')"]),
    ("device: cpu\nexperiments:\n  f: {kind: featurewise}\ndevice: auto\n", ["key 'device' twice", "lines 1 and 4)"]),
    ("experiments:\n  f: {kind: featurewise}\n  f: {kind: collapse}\n", ["key 'f' twice", "lines 2 and 3, under 'experiments')"]),
    ("experiments:\n  f:\n    kind: featurewise\n    tolerances: {safety_factor: 2, safety_factor: 9}\n",
     ["key 'safety_factor' twice", "lines 4 and 4, under 'experiments.f.tolerances')"]),
    ("experiments:\n  f:\n    kind: featurewise\n    eps: 1.0e-3\n    'eps': 2.0e-3\n", ["key 'eps' twice"]),
    # through an alias: the path is the first one that reaches the mapping
    ("x: &a {lr: 1, lr: 2}\nexperiments:\n  f: {kind: featurewise, opts: *a}\n", ["key 'lr' twice", "under 'x')"]),
])
def test_duplicate_yaml_keys_are_refused_with_the_file_and_lines(tmp_path, text, words):
    msg = refused(tmp_path, text)
    assert str(tmp_path / "c.yaml") in msg and all(w in msg for w in words), msg


def test_a_yaml_merge_key_may_still_be_overridden(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("base: &b {kind: featurewise, eps: 1.0e-3}\n"
                    "experiments:\n  f:\n    <<: *b\n    eps: 2.0e-3\n")
    assert read_config_file(path)["experiments"]["f"] == {"kind": "featurewise", "eps": 2.0e-3}


@pytest.mark.parametrize("data, key", [
    ('{"experiments": {"f": {"kind": "featurewise", "eps": 0.001, "eps": 0.002}}}', "experiments.f.eps"),
    ('{"device": "cpu", "device": "cuda", "experiments": {"f": {"kind": "featurewise"}}}', "device"),
    ('{"experiments": {"f": {"kind": "featurewise"}, "f": {"kind": "collapse"}}}', "experiments.f"),
])
def test_duplicate_json_keys_are_refused_with_the_key_path(tmp_path, data, key):
    msg = refused(tmp_path, data, name="c.json")
    assert msg.startswith(f"Config key '{key}' is given twice") and "JSON config file" in msg, msg


@pytest.mark.parametrize("text, key, got", [
    ("experiments:\n  f: {kind: featurewise, eps: .nan}\n", "experiments.f.eps", "nan"),
    ("experiments:\n  f: {kind: featurewise, eps: .NaN}\n", "experiments.f.eps", "nan"),
    ("experiments:\n  f: {kind: featurewise, lr: .inf}\n", "experiments.f.lr", "inf"),
    ("experiments:\n  f: {kind: featurewise, r: [1.0, -.inf]}\n", "experiments.f.r.1", "-inf"),
    ("experiments:\n  f: {kind: featurewise, eps: 1e999}\n", "experiments.f.eps", "inf"),  # a YAML 1.1 string
    ("experiments:\n  f: {kind: featurewise, eps: 1.0e+999}\n", "experiments.f.eps", "inf"),  # a YAML float
    ("experiments:\n  f: {kind: featurewise, tolerances: {safety_factor: .inf}}\n",
     "experiments.f.tolerances.safety_factor", "inf"),
    ("figures: {font_size: .nan}\nexperiments:\n  f: {kind: featurewise}\n", "figures.font_size", "nan"),
    ('{"experiments": {"f": {"kind": "featurewise", "eps": NaN}}}', "experiments.f.eps", "nan"),
    ('{"experiments": {"f": {"kind": "collapse", "eps": [0.001, Infinity]}}}', "experiments.f.eps.1", "inf"),
    ('{"figures": {"dpi": -Infinity}, "experiments": {"f": {"kind": "featurewise"}}}', "figures.dpi", "-inf"),
])
def test_nan_and_inf_in_a_file_are_refused_naming_the_key(tmp_path, text, key, got):
    msg = refused(tmp_path, text, name="c.json" if text.startswith("{") else "c.yaml")
    assert msg.startswith(f"Config key '{key}' must be a finite ") and f"got {got} (float)" in msg, msg


@pytest.mark.parametrize("content, words", [
    ("", "is empty"),
    ("# only a comment\n", "is empty"),
    ("- a\n- b\n", "must hold a mapping of keys to values; it holds a list"),
    ("just text\n", "it holds a str"),
    ("experiments: [\n", "is not valid YAML"),
    ("a: 1\n---\nb: 2\n", "is not valid YAML: expected a single document"),
    ("experiments: !!python/object/apply:os.system ['echo pwned']\n", "is not valid YAML"),
    ("experiments: !!python/name:os.system\n", "is not valid YAML"),
    ("? [a, b]\n: 1\n", "is not valid YAML"),  # an unhashable key
    ("x: " + "9" * 5000 + "\n", "holds a value nqf cannot read"),  # past Python's int-string limit
    ("x: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("".join(" " * i + "a:\n" for i in range(1500)), "is not valid YAML"),  # libyaml's depth limit
    ("[" * 10**5 + "]" * 10**5, "nested too deeply"),  # JSON
    ("__use_yte__: true\nexperiments:\n  f: {kind: featurewise}\n", "is a YTE template"),
    ('{"__use_yte__": false, "experiments": {}}', "is a YTE template"),
])
def test_files_that_are_no_config_are_refused_in_one_sentence(tmp_path, content, words):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        read_config_file(path)
    msg = str(info.value)
    assert words in msg and str(path) in msg and msg.count("\n") == 0, msg


def test_a_non_utf8_file_is_refused_naming_the_byte(tmp_path):
    msg = refused(tmp_path, b"experiments:\n  f: {kind: featurewise, description: caf\xe9}\n", mode="wb")
    assert "is not UTF-8 text (byte 0xe9 at offset 54)" in msg


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes("\ufeffexperiments:\n  f: {kind: featurewise}\n".encode("utf-8"))
    assert validate_config(read_config_file(path))["experiments"]["f"]["kind"] == "featurewise"


def test_a_huge_file_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("experiments:\n  f: {kind: featurewise}\ndescription: '" + "x" * MAX_BYTES + "'\n")
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"is larger than 2 MB"):
        read_config_file(path)
    assert time.perf_counter() - t0 < time_limit(0.5)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"Cannot read the config file .*nope.yaml: No such file"):
        read_config_file(tmp_path / "nope.yaml")


def bomb(levels=9, width=9, mapping=False) -> str:
    """The 'billion laughs': each level lists the previous one ``width`` times, by alias."""
    def level(i, item):
        if mapping:
            return "{" + ", ".join(f"k{j}: {item}" for j in range(width)) + "}"
        return "[" + ", ".join([item] * width) + "]"
    lines = [f"l0: &l0 {level(0, 'lol')}"]
    lines += [f"l{i}: &l{i} {level(i, f'*l{i - 1}')}" for i in range(1, levels)]
    return "\n".join(lines) + f"\nexperiments:\n  f:\n    kind: featurewise\n    description: *l{levels - 1}\n"


@pytest.mark.parametrize("mapping", [False, True], ids=["lists", "mappings"])
def test_an_alias_bomb_is_refused_fast_in_little_memory(tmp_path, mapping):
    """9 levels of 9 aliases: 9^9 = 387 million values in under 1 kB of YAML."""
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(mapping=mapping))
    assert path.stat().st_size < 1000
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ConfigError) as info:
            read_config_file(path)
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"holds more than {MAX_NODES:,} values once its YAML aliases are expanded" in str(info.value)
    assert seconds < time_limit(1.0) and peak < 20e6, (seconds, peak)


def test_an_alias_bomb_read_by_snakemake_is_refused_by_validation(tmp_path):
    """Snakemake's own reader builds the shared structure (a list bomb is cheap for it);
    validate_config refuses it before deepcopy, repr or jsonschema could walk it whole."""
    from snakemake.common.configfile import load_configfile

    path = tmp_path / "bomb.yaml"
    path.write_text(bomb())
    config = load_configfile(str(path))
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ConfigError, match="once its YAML aliases are expanded"):
            validate_config(config)
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seconds < time_limit(1.0) and peak < 20e6, (seconds, peak)


def test_a_yaml_structure_that_contains_itself_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("experiments:\n  f: {kind: featurewise, r: &r [1.0, *r]}\n")
    with pytest.raises(ConfigError, match=r"c.yaml has a YAML alias inside its own anchor \(line 2\)"):
        read_config_file(path)
    r = [1.0]
    r.append(r)  # as Snakemake's own reader builds it
    with pytest.raises(ConfigError, match=r"Config key 'experiments.f.r.1' contains itself"):
        validate_config({"experiments": {"f": {"kind": "featurewise", "r": r}}})


def test_a_config_with_too_many_values_is_refused_before_it_is_built(tmp_path, monkeypatch):
    """The bound counts YAML nodes before PyYAML's constructor runs (and plain values after)."""
    monkeypatch.setattr("nqf.pipeline.config_values.MAX_NODES", 1000)
    path = tmp_path / "c.yaml"
    path.write_text("experiments:\n  f: {kind: featurewise}\nr: [" + "1, " * 1000 + "]\n")
    with pytest.raises(ConfigError, match=r"c.yaml holds more than 1,000 values"):
        read_config_file(path)
    with pytest.raises(ConfigError, match=r"^The config holds more than 1,000 values"):
        validate_config({"experiments": {"f": {"kind": "featurewise", "r": [1.0] * 1000}}})


def test_a_few_aliases_are_fine_and_no_part_stays_shared(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("experiments:\n  a: {kind: featurewise, r: &r [1.0, 0.5]}\n  b: {kind: featurewise, r: *r}\n")
    cfg = validate_config(read_config_file(path))["experiments"]
    assert cfg["a"]["r"] == cfg["b"]["r"] == [1.0, 0.5] and cfg["a"]["r"] is not cfg["b"]["r"]


def write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else data)
    return str(path)


def test_workflow_config_merges_files_in_order_then_the_overrides(tmp_path):
    one = write(tmp_path, "one.yaml", "device: cpu\nexperiments:\n  f: {kind: featurewise, eps: 1.0e-3}\n")
    two = write(tmp_path, "two.json", {"experiments": {"f": {"lr": 0.02}}})
    raw = load_workflow_config([one, two], {"on_divergence": "record"}, ROOT / "config" / "config.yaml")
    assert raw == {"device": "cpu", "on_divergence": "record",
                   "experiments": {"f": {"kind": "featurewise", "eps": 1.0e-3, "lr": 0.02}}}


def test_workflow_config_without_files_is_the_default_with_the_overrides():
    raw = load_workflow_config([], {"device": "cpu"}, ROOT / "config" / "config.yaml")
    default = load_yaml(ROOT / "config" / "config.yaml")
    assert raw == {**default, "device": "cpu"}


@pytest.mark.parametrize("overrides, key", [
    ({"device": float("nan")}, "device"),  # snakemake --config device=nan (parsed by float())
    ({"figures": {"font_size": float("inf")}}, "figures.font_size"),
    ({"experiments": {"f": {"kind": "featurewise", "eps": "1e999"}}}, "experiments.f.eps"),
    ({"experiments": {"f": {"kind": "featurewise", "eps": "nan"}}}, "experiments.f.eps"),
])
def test_non_finite_overrides_are_refused_naming_the_key(overrides, key):
    raw = load_workflow_config([], overrides, ROOT / "config" / "config.yaml")
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    assert str(info.value).startswith(f"Config key '{key}' must be "), str(info.value)


def test_a_duplicate_key_in_any_configfile_stops_the_workflow_config(tmp_path):
    good = write(tmp_path, "good.yaml", "experiments:\n  f: {kind: featurewise}\n")
    bad = write(tmp_path, "bad.yaml", "device: cpu\ndevice: cuda\n")
    with pytest.raises(ConfigError, match=r"bad.yaml gives the key 'device' twice"):
        load_workflow_config([good, bad], {}, ROOT / "config" / "config.yaml")


def test_nested_override_values_are_typed_as_snakemake_types_top_level_ones():
    """Snakemake's --config gives every scalar inside {...} as a string (YAML base loader);
    nqf types it with int, float, True/False (Snakemake's own order for a top-level value)."""
    from nqf.pipeline.config_files import typed_overrides

    given = {"device": "cpu", "seeds_per_job": 2,
             "experiments": {"f": {"eps": "0.002", "steps": "300", "r": ["1", "0.5e0"], "description": "a run",
                                   "shuffle": "True", "tag": "1e-3x", "lr": "-1.5E-2"}}}
    typed = typed_overrides(given)
    f = typed["experiments"]["f"]
    assert f == {"eps": 0.002, "steps": 300, "r": [1, 0.5], "description": "a run", "shuffle": True,
                 "tag": "1e-3x", "lr": -0.015}
    assert type(f["steps"]) is int and type(f["eps"]) is float
    assert typed["device"] == "cpu" and given["experiments"]["f"]["eps"] == "0.002"  # input unchanged


def test_overrides_of_an_experiment_merge_into_the_default_config():
    """Without --configfile, ``--config experiments={...}`` changes keys of the default's
    experiments; it does not replace the default's list of experiments."""
    default = load_yaml(ROOT / "config" / "config.yaml")
    exp = next(iter(default["experiments"]))
    raw = load_workflow_config([], {"experiments": {exp: {"description": "changed"}}}, ROOT / "config" / "config.yaml")
    assert set(raw["experiments"]) == set(default["experiments"])
    assert raw["experiments"][exp] == {**default["experiments"][exp], "description": "changed"}
    validate_config(raw)


@pytest.mark.parametrize("text, shown, reading", [
    ("data_seed: 017", "017 at line 4", "the octal number 15"),
    ("data_seed: -010", "-010 at line 4", "the octal number -8"),
    ("steps: 3:20", "3:20 at line 4", "the base-60 number 200"),
    ("eps: 1:30.5", "1:30.5 at line 4", "the base-60 number 90.5"),
    ("steps: !!int 017", "017 at line 4", "the octal number 15"),
    ("r: [1.0, 1:00]", "1:00 at line 4", "the base-60 number 60"),
])
def test_a_number_yaml_11_reads_as_another_is_refused_with_its_line(tmp_path, text, shown, reading):
    """PyYAML (and Snakemake) follow YAML 1.1: seeds 010 and 011 would silently be 8 and 9."""
    msg = refused(tmp_path, f"experiments:\n  f:\n    kind: featurewise\n    {text}\n")
    assert f"c.yaml writes {shown}, which YAML 1.1 reads as {reading} " in msg, msg


@pytest.mark.parametrize("text, key, value", [
    ("data_seed: 0x1F", "data_seed", 31), ("steps: 2_000", "steps", 2000), ("data_seed: 00", "data_seed", 0),
    ("r: [01, 0.5]", "r", [1, 0.5]), ("description: '017'", "description", "017"),
    ("description: 3:20pm", "description", "3:20pm"), ("eps: 0.5e-3", "eps", 5e-4),
])
def test_numbers_that_read_as_they_show_are_accepted(tmp_path, text, key, value):
    path = tmp_path / "c.yaml"
    path.write_text(f"experiments:\n  f:\n    kind: featurewise\n    {text}\n")
    assert read_config_file(path)["experiments"]["f"][key] == value


# -- config/README.md (the workflow catalog's configuration page) against the schema ------------

def _readme_kind_keys(text: str) -> dict[str, set[str]]:
    """kind -> the keys its row of config/README.md's kinds table (section "The kinds") names,
    asides in parentheses left out."""
    import re

    rows = {}
    for line in text.split("### The kinds", 1)[1].split("\n## ", 1)[0].splitlines():
        match = re.match(r"^\| `(\w+)` \| [^|]+ \| ([^|]+) \|$", line)
        if match:
            rows[match.group(1)] = set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", match.group(2))))
    return rows


def test_config_readme_names_every_top_level_key_and_every_key_of_every_kind():
    from nqf.pipeline.config import kind_names, load_schema

    schema = load_schema()
    text = (ROOT / "config" / "README.md").read_text()
    missing = [key for key in schema["properties"] if f"| `{key}` |" not in text]
    missing += [f"figures.{key}" for key in schema["properties"]["figures"]["properties"] if f"`{key}`" not in text]
    missing += [f"config/{p.name}" for p in (ROOT / "config").glob("*.yaml") if f"`config/{p.name}`" not in text]
    assert not missing, f"config/README.md does not describe {missing}"
    kinds = kind_names(schema)
    rows = _readme_kind_keys(text)
    assert sorted(rows) == sorted(kinds), "config/README.md's kinds table has one row per kind of the schema"
    for kind in kinds:
        keys = set(schema["$defs"][kind]["properties"]) - {"kind"}
        assert rows[kind] == keys, (f"config/README.md's row of {kind}: missing {sorted(keys - rows[kind])}, "
                                    f"not in the schema {sorted(rows[kind] - keys)}")


def test_an_alias_bomb_in_a_config_override_is_refused_before_it_is_typed():
    """Found by audit/config_audit.py: Snakemake's --config parser keeps YAML aliases shared, and
    typing the nested strings walked all 9^9 leaves (still running after 45 s)."""
    import time

    from snakemake.cli import parse_config

    from nqf.pipeline.config_files import typed_overrides

    levels = ["&a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    overrides = parse_config([f"experiments={{f: {{description: [{', '.join(levels)}]}}}}"])
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"^The --config value holds more than 250,000 values once its YAML "
                                          r"aliases are expanded"):
        typed_overrides(overrides)
    assert time.monotonic() - start < time_limit(5)
