"""The config's trust boundary through the snakemake CLI (dry runs): Snakemake reads a
--configfile itself (keeping the last of two equal keys, running a YTE template); nqf reads it
again strictly and refuses before any job is planned."""
import pytest
from helpers import ROOT, snakemake

pytestmark = pytest.mark.workflow


def refusal(tmp_path, *args) -> str:
    proc = snakemake(tmp_path, "-n", *args, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Invalid configuration: " in out, out[-3000:]
    assert "Job stats" not in out and not (tmp_path / "results").exists()
    return next(line for line in out.splitlines() if line.startswith("Invalid configuration: "))


def test_a_duplicate_key_in_a_configfile_is_refused(tmp_path):
    """Snakemake's own reader would run this experiment as a samplewise one, silently."""
    cfg = tmp_path / "dup.yaml"
    cfg.write_text((ROOT / "config" / "test.yaml").read_text().replace(
        "  featurewise:\n    kind: featurewise\n", "  featurewise:\n    kind: featurewise\n    kind: samplewise\n", 1))
    line = refusal(tmp_path, "--configfile", str(cfg))
    assert f"{cfg} gives the key 'kind' twice in one mapping (lines " in line


def test_non_finite_numbers_in_json_and_config_overrides_are_refused(tmp_path):
    cfg = tmp_path / "nan.json"
    cfg.write_text('{"device": "cpu", "experiments": {"f": {"kind": "featurewise", "eps": NaN}}}')
    line = refusal(tmp_path, "--configfile", str(cfg))
    assert line.endswith("Config key 'experiments.f.eps' must be a finite number > 0 and < 1; got nan (float).")
    line = refusal(tmp_path, "--configfile", str(ROOT / "config" / "test.yaml"), "--config", "figures={font_size: inf}")
    assert line.endswith("Config key 'figures.font_size' must be a finite number >= 4 and <= 24; got inf (float).")


def test_a_yte_configfile_runs_in_snakemake_and_is_then_refused(tmp_path):
    """The fact docs/security.md states: the template's expression has run (the marker
    file exists) although nqf refused the config before planning any job."""
    marker = tmp_path / "ran"
    cfg = tmp_path / "template.yaml"
    cfg.write_text("__use_yte__: true\nexperiments:\n  f:\n    kind: featurewise\n"
                   f"    description: ?open({str(marker)!r}, 'w').write('code ran') and 'x'\n")
    line = refusal(tmp_path, "--configfile", str(cfg))
    assert "is a YTE template (__use_yte__): Snakemake evaluates its Python expressions" in line
    assert marker.read_text() == "code ran"


def test_nested_numeric_overrides_reach_the_jobs(tmp_path):
    """``--config 'experiments={featurewise: {eps: 0.002}}'``: Snakemake hands nqf the nested
    0.002 as a string; nqf types it as Snakemake types a top-level value, merges it into the
    configfile's experiment key by key, and the job is run for eps = 0.002 (its file says so)."""
    from nqf.io.netcdf import config_of, open_result

    # --config takes every word after it: the target goes first
    snakemake(tmp_path, "results/theory/featurewise.nc", "--configfile", str(ROOT / "config" / "test.yaml"),
              "--config", "experiments={featurewise: {eps: 0.002, n_record: 60}}")
    cfg = config_of(open_result(tmp_path / "results" / "theory" / "featurewise.nc"))
    assert cfg["eps"] == 0.002 and isinstance(cfg["eps"], float)
    assert cfg["n_record"] == 60 and isinstance(cfg["n_record"], int)
    assert (cfg["lr"], cfg["steps"]) == (0.02, 2000)  # the rest comes from the configfile (defaults: 0.01, 25000)
