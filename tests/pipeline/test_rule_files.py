"""The workflow's rule files: every rule records its log and its time and memory, and the files
are kept as snakefmt formats them (the Snakemake community's formatter)."""
import re
import shutil
import subprocess

import pytest

from tests.helpers import ROOT

RULE_FILES = sorted((ROOT / "workflow" / "rules").glob("*.smk"))


def rule_blocks():
    """(file, rule name, body) of every rule in the Snakefile and workflow/rules."""
    for path in [ROOT / "Snakefile", *RULE_FILES]:
        text = path.read_text()
        starts = [(m.start(), m.group(1)) for m in re.finditer(r"^rule (\w+):", text, re.M)]
        for (start, name), (end, _) in zip(starts, [*starts[1:], (len(text), "")]):
            yield path.name, name, text[start:end]


def test_every_job_rule_has_a_log_and_a_benchmark():
    """docs/workflow.md says every job records its log and its time and memory (results/benchmarks)."""
    rules = {(f, name): body for f, name, body in rule_blocks() if name != "all"}  # `all` runs no job
    assert len(rules) >= 9, rules.keys()
    missing = [f"{f}:{name} lacks {key}" for (f, name), body in rules.items()
               for key in ("log:", "benchmark:") if f"\n    {key}" not in body]
    assert not missing, missing


def test_rule_files_are_snakefmt_clean():
    exe = shutil.which("snakefmt", path=str(ROOT / ".venv" / "bin")) or shutil.which("snakefmt")
    if exe is None:
        pytest.skip("snakefmt is not installed (it is in the test extra: pip install -e '.[test]')")
    done = subprocess.run([exe, "--check", "Snakefile", "workflow/rules"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"run `snakefmt Snakefile workflow/rules`:\n{done.stderr}{done.stdout}"


def test_a_crash_in_a_job_leaves_its_traceback_in_the_rule_log(tmp_path):
    """A bug (not a user error) keeps its traceback on stderr and writes it to the job's log, which
    is what a cluster user reads first."""
    from nqf.pipeline.jobs import job

    log_path = tmp_path / "rule.log"
    with pytest.raises(ZeroDivisionError):
        with job(str(log_path), "fit"):
            1 / 0  # noqa: B018
    text = log_path.read_text()
    assert "fit failed with an unexpected error" in text
    assert "Traceback (most recent call last)" in text and "ZeroDivisionError: division by zero" in text


def test_a_user_error_in_a_job_is_one_sentence_in_the_log(tmp_path):
    from nqf.errors import ConfigError
    from nqf.pipeline.jobs import job

    log_path = tmp_path / "rule.log"
    with pytest.raises(SystemExit):
        with job(str(log_path), "fit"):
            raise ConfigError("experiments.f.eps must be > 0; got -1.")
    text = log_path.read_text()
    assert "experiments.f.eps must be > 0; got -1." in text and "Traceback" not in text


def test_rule_files_hold_rules_and_calls_only():
    """Functions live in nqf.pipeline (snakefile, housekeeping): `snakemake --lint` reports a file
    that mixes rules and functions, and a function there is tested by no test."""
    for path in [ROOT / "Snakefile", *RULE_FILES]:
        assert not re.search(r"^\s*(def|class) ", path.read_text(), re.M), path.name
    assert "config.clear()" not in "".join(p.read_text() for p in RULE_FILES)
