"""nqf.pipeline.results_tree.output_problem: the figures, tables and report of the DAG are checked for
their form (a file cut short or of another kind is named and moved aside before planning), and
nqf.pipeline.results_record.force_regeneration hands files moved aside to Snakemake as forced (issue 16).
The outputs of a whole run pass these checks: tests/workflow/test_reliability.py reruns a finished
tree and finds nothing to do."""
import types
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from nqf.pipeline import results_record as rr  # noqa: E402
from nqf.pipeline import results_tree as rc  # noqa: E402
from nqf.pipeline import verify  # noqa: E402


def figure(path: Path) -> bytes:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    fig.savefig(path)
    plt.close(fig)
    return path.read_bytes()


@pytest.mark.parametrize("suffix", [".png", ".pdf"])
def test_a_figure_cut_short_or_replaced_is_named(tmp_path, suffix):
    path = tmp_path / f"f{suffix}"
    data = figure(path)
    assert rc.output_problem(path) is None
    path.write_bytes(data[: len(data) // 2])
    assert "cut short" in rc.output_problem(path)
    path.write_bytes(b"\0" * len(data))
    assert "zero-filled" in rc.output_problem(path)
    path.write_bytes(b"")
    assert rc.output_problem(path) == "is empty"


def test_a_table_cut_short_is_named_whatever_the_cut(tmp_path):
    text = "experiment,claim,passed\nfw,\"t*, ratio\",True\nsw,alpha,False\n"
    path = tmp_path / "summary.csv"
    path.write_text(text)
    assert rc.output_problem(path) is None
    # a cut anywhere but at a line end leaves no final newline; a cut at a line end leaves whole
    # rows, which only the readers' checks (the rows expected) can tell from a complete table
    for n in range(1, len(text)):
        path.write_text(text[:n])
        assert (rc.output_problem(path) is None) == text[:n].endswith("\n"), n
    path.write_text("a,b\n1,2,3\n")
    assert "row 2 has 3 fields, its header 2" in rc.output_problem(path)
    path.write_bytes(b"\xff\xfe" + text.encode())
    assert "UTF-8" in rc.output_problem(path)


def test_html_and_markdown_must_end_as_written(tmp_path):
    page = tmp_path / "a.html"
    page.write_text("<!DOCTYPE html><html><body><table><tr><td>1</td></tr></table></body></html>")
    assert rc.output_problem(page) is None
    page.write_text("<!DOCTYPE html><html><body><table><tr><td>1</td>")
    assert "cut short" in rc.output_problem(page)
    md = tmp_path / "r.md"
    md.write_text("# Report\n\nAll rows hold.\n")
    assert rc.output_problem(md) is None
    md.write_text("# Report\n\nAll ro")
    assert "final newline" in rc.output_problem(md)
    assert rc.output_problem(tmp_path / "other.txt") is None  # not a suffix nqf checks


def test_set_aside_names_the_rule_and_moves_only_broken_files(tmp_path):
    good, bad = tmp_path / "ok.csv", tmp_path / "summary.csv"
    good.write_text("a,b\n1,2\n")
    bad.write_text("a,b\n1,2\n3")
    messages = rc.set_aside_outputs([(good, "figure"), (bad, "summary"), (tmp_path / "absent.csv", "summary")])
    assert len(messages) == 1 and "rule 'summary'" in messages[0] and "this run regenerates it" in messages[0]
    assert good.exists() and not bad.exists() and (tmp_path / "summary.csv.unusable").exists()


def test_made_by_lists_every_output_with_its_rule():
    exps = {"fw": {"kind": "featurewise", "eps": 1e-3}}
    made = verify.made_by(exps, Path("results"))
    assert made[Path("results/data/fw.nc")] == "data" and made[Path("results/fits/fw.nc")] == "fit"
    assert made[Path("results/figures/fw.claims.html")] == "figure"
    assert made[Path("results/figures/structure_matrices.png")] == "structure_figure"
    assert made[Path("results/summary.csv")] == "summary" and made[Path("results/reproduction.md")] == "reproduction"
    assert any(rule == "train" for rule in made.values())
    assert verify.outputs(exps, Path("results")) == list(made)


def test_force_regeneration_adds_only_files_a_rule_makes_when_the_dag_is_prepared():
    calls = []
    rule = types.SimpleNamespace(is_producer=lambda p: p.startswith("results/"))
    wf = types.SimpleNamespace(rules=[rule], dag_settings=None)
    wf._prepare_dag = lambda *a, **k: calls.append(wf.dag_settings.forcerun)
    assert rr.force_regeneration(wf, []) == [] and not calls
    rr.force_regeneration(wf, ["results/a.nc", "elsewhere/b.nc"])
    wf.dag_settings = types.SimpleNamespace(forcerun=frozenset({"rule_x"}))  # set after the Snakefile is read
    wf._prepare_dag(forceall=False)
    assert calls == [frozenset({"rule_x", "results/a.nc"})]


def test_a_summary_cut_at_a_line_end_is_told_by_its_rows(tmp_path):
    from nqf.experiments.claims import SUMMARY_COLUMNS

    header = ",".join(SUMMARY_COLUMNS) + "\n"
    blank = "," * (len(SUMMARY_COLUMNS) - 1)
    row = lambda exp: exp + blank + "\n"  # noqa: E731
    res = tmp_path / "results"
    (res / "figures").mkdir(parents=True)
    exps = {"a": {}, "b": {}}
    for exp in exps:
        (res / "figures" / f"{exp}.claims.csv").write_text(header + row(exp))
    summary = res / "summary.csv"
    summary.write_text(header + row("a") + row("b"))
    assert verify.table_problem(summary, exps, res) is None
    assert verify.table_problem(res / "figures" / "a.claims.csv", exps, res) is None
    summary.write_text(header + row("a"))  # the second half cut off at a line end
    assert "lacks the rows of experiment b" in verify.table_problem(summary, exps, res)
    summary.write_text(header + row("a") + row("b") + row("c"))
    assert "does not run (c)" in verify.table_problem(summary, exps, res)
    (res / "figures" / "a.claims.csv").write_text(header + row("b"))
    assert "another experiment (b)" in verify.table_problem(res / "figures" / "a.claims.csv", exps, res)
    summary.write_text("x,y\n1,2\n")
    assert "not nqf's claims columns" in verify.table_problem(summary, exps, res)
