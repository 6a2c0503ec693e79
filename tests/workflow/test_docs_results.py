"""The blocks of README.md and docs/ that need the snakemake CLI or a finished run
(docs/development.md, "Documentation and its tests"; the other blocks: tests/package/test_docs_code.py):

* `results` blocks run as written, each page's in order in one fresh interpreter, in the directory
  of the finished config/test.yaml run the workflow tests share (conftest.py's `finished`);
* docs/results.md's table of what `open_runs` gives per kind on config/test.yaml holds there;
* `dry-run` blocks: each snakemake command runs with `-n` in an empty folder, plans its jobs and
  trains nothing.
"""
import json
import re
import subprocess
import sys

import pytest
from docs_blocks import ROOT, all_blocks, commands, program
from helpers import time_limit

pytestmark = pytest.mark.workflow
BLOCKS = all_blocks()


def test_results_blocks_run_on_a_finished_run(finished, tmp_path):
    """nqf's, xarray's and numpy's warnings are errors."""
    by_page = {}
    for block in (b for b in BLOCKS if b.treatment == "results"):
        by_page.setdefault(block.page, []).append(block.substituted())
    assert by_page
    script = tmp_path / "results_blocks.py"
    script.write_text("import matplotlib\nmatplotlib.use('Agg')\n"
                      f"pages = {json.dumps(by_page)}\n"
                      "for page, codes in pages.items():\n"
                      "    exec(compile('\\n'.join(codes), page, 'exec'), {'__name__': '__main__'})\n")
    flags = ["-W", "error::UserWarning", "-W", "error::FutureWarning", "-W", "error::RuntimeWarning"]
    proc = subprocess.run([sys.executable, *flags, str(script)], capture_output=True, text=True, timeout=time_limit(300),
                          cwd=finished[0])
    assert proc.returncode == 0, proc.stderr[-3000:]


def _dims(text: str) -> dict[str, int]:
    """'run 2 (eps), seed 1, record 200' -> {'run': 2, 'seed': 1, 'record': 200}."""
    return {name: int(size) for name, size in
            (part.split()[:2] for part in re.sub(r"\([^)]*\)", "", text).split(","))}


def test_open_runs_table_holds_on_the_finished_run(finished):
    """Each row of docs/results.md's table: its call, in the finished run's directory, gives
    exactly the dimensions the row names."""
    rows = re.findall(r"^\| `(\w+)` \| `(open_runs\([^|`]+\))` \| ([^|]+?) \|$",
                      (ROOT / "docs" / "results.md").read_text(), flags=re.M)
    assert len(rows) >= 10
    code = ("import json\nfrom nqf.io.runs import open_runs\n"
            f"calls = {json.dumps([call for _, call, _ in rows])}\n"
            "print(json.dumps([dict(eval(call).sizes) for call in calls]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=time_limit(300),
                          cwd=finished[0])
    assert proc.returncode == 0, proc.stderr[-3000:]
    measured = json.loads(proc.stdout.splitlines()[-1])
    wrong = [f"{exp}: {call} gives {sizes}, the table says {dims}"
             for (exp, call, dims), sizes in zip(rows, measured, strict=True) if sizes != _dims(dims)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.treatment == "dry-run"], ids=lambda b: b.name)
def test_dry_run_blocks_plan_their_jobs(block, tmp_path):
    for words in commands(block.substituted()):
        _, prog, args = program(words)
        assert prog == "snakemake", block.name
        # -n and the empty folder go right after the program: --config takes every word after it
        cmd = [sys.executable, "-m", "snakemake", "-n", "--directory", str(tmp_path), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=time_limit(600), cwd=ROOT)
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{block.name}: {' '.join(words)}\n{text[-3000:]}"
        assert "This was a dry-run" in text and re.search(r"^total\s+\d+$", text, flags=re.M), text[-2000:]
        assert not (tmp_path / "results").exists(), "a dry run wrote results"
