"""`python -m nqf check-config`: nqf's strict reading of a config before Snakemake reads it."""
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import time_limit

from nqf.__main__ import main

REPO = Path(__file__).resolve().parents[2]


def test_a_valid_config_lists_each_experiment_with_its_size(capsys):
    assert main(["check-config", "--configfile", str(REPO / "config/test.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "config valid: 12 experiments"
    assert all("largest run about" in line and "steps" in line for line in out[1:]) and len(out) == 13


ALIAS_BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['1'] * 9)}]\n"
                     for p, c in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg"))


@pytest.mark.parametrize("content, words", [
    (None, "Cannot read the config file"),                        # missing
    ("DIR", "Is a directory"),
    (b"\x80\x81 binary", "is not UTF-8 text"),
    ("\xff\xfea\x00:\x00".encode("latin-1"), "is not UTF-8 text"),  # UTF-16
    ("", "is empty"),
    ("- 1\n- 2\n", "mapping"),
    ("[" * 500 + "]" * 500, "it holds a list"),  # Snakemake: RecursionError
    (ALIAS_BOMB, "alias bomb"),
    ("experiments:\n  f: {kind: featurewise, eps: .nan}\n", "experiments.f.eps"),
])
def test_files_snakemake_cannot_read_are_refused_in_one_sentence(tmp_path, capsys, content, words):
    path = tmp_path / "c.yaml"
    if content == "DIR":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    assert main(["check-config", "--configfile", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Invalid configuration: ") and words in err and len(err.splitlines()) == 1
    assert "Traceback" not in err


def test_a_target_after_config_is_named_as_such(capsys):
    assert main(["check-config", "--config", "results/fits/f.nc"]) == 2
    assert "list targets before --config" in capsys.readouterr().err


def test_the_module_runs_as_a_command():
    p = subprocess.run([sys.executable, "-m", "nqf", "check-config", "--configfile", str(REPO / "config/test.yaml"),
                        "--config", "device=cpu"], capture_output=True, text=True, timeout=time_limit(120))
    assert p.returncode == 0 and p.stdout.startswith("config valid: 12 experiments"), p.stderr
