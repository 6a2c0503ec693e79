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


def test_every_job_rule_declares_its_software_threads_and_resources():
    """The catalog's conventions: a conda environment per rule (workflow/envs/nqf.yaml), threads,
    and mem_mb and runtime from nqf's estimates (nqf.pipeline.resources; tests/pipeline/test_resources.py)."""
    rules = {(f, name): body for f, name, body in rule_blocks() if name != "all"}
    for (f, name), body in rules.items():
        assert '\n    conda:\n        "../envs/nqf.yaml"' in body, f"{f}:{name}"
        assert "\n    threads: 1" in body, f"{f}:{name}"
        assert f'mem_mb=NQF.resources.mem_mb("{name}")' in body, f"{f}:{name}"
        assert f'runtime=NQF.resources.runtime("{name}")' in body, f"{f}:{name}"


@pytest.mark.workflow
def test_snakemake_lint_finds_nothing(tmp_path):
    import sys

    done = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
                           str(tmp_path), "--lint"], capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "Congratulations, your workflow is in a good condition!" in out, out[-3000:]
    assert "Lints for" not in out, out[-3000:]


def test_the_conda_environment_holds_the_librarys_dependencies():
    """workflow/envs/nqf.yaml lists what pyproject.toml's `dependencies` list (conda's names:
    pytorch for torch, matplotlib-base for matplotlib), with the same lower bounds."""
    import tomllib

    import yaml

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    env = yaml.safe_load((ROOT / "workflow" / "envs" / "nqf.yaml").read_text())["dependencies"]
    conda_name = {"torch": "pytorch", "matplotlib": "matplotlib-base"}

    def split(spec):
        name, bound = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", spec).groups()
        return name.lower(), bound

    want = {conda_name.get(n, n): b for n, b in map(split, deps)}
    have = dict(split(s) for s in env if not s.startswith("python"))
    assert have == want


def test_a_job_without_nqf_installed_imports_it_from_the_checkout(tmp_path):
    """A job in the conda environment (no nqf in it) imports nqf from the workflow's checkout
    (workflow/scripts/_checkout.py): run in an interpreter that cannot see the installed nqf."""
    import sys

    # -S: no site-packages (and no editable-install finder), as in an environment without nqf
    script = (f"import sys, importlib.util; assert importlib.util.find_spec('nqf') is None\n"
              f"sys.path.append({str(ROOT / 'workflow' / 'scripts')!r})\n"
              f"from _checkout import ensure_nqf; ensure_nqf({str(ROOT / 'workflow' / 'scripts')!r})\n"
              f"import importlib.util; print(importlib.util.find_spec('nqf').origin)\n")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(ROOT / "nqf" / "__init__.py")
