"""The one-page view of a reproduction: each paper figure with its claim, verdict, numbers and
conditions, written from the fit files (``results/reproduction.md`` and ``.html``).

A summary row (nqf.experiments.claims.Claim) says what it checks: a claim of the paper (its
figure and sentence), a theorem checked against training, or this project's own claim, and the
reading it ran under (loss convention, preprocessing). Several experiments of one kind are
several readings of the same figure; this page puts them side by side, so a paper claim that
holds under one reading and not another says so, with both measurements.
"""
from __future__ import annotations

import hashlib
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import xarray as xr

from nqf.experiments import KINDS
from nqf.experiments.claims import summary_rows
from nqf.experiments.contract import PaperFigure, hook


def paper_figure(kind: str) -> PaperFigure | None:
    """The paper figure a kind reproduces (its ``PAPER_FIGURE``); None for this project's own
    experiments and for a kind this checkout does not know."""
    return hook(KINDS[kind], "PAPER_FIGURE") if kind in KINDS else None


# The style of the standalone HTML pages of the report (this page, the claims tables).
PAGE_STYLE = ("body{font-family:sans-serif;max-width:72em;margin:2em auto;line-height:1.4}"
              "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #bbb;padding:3px 6px;"
              "font-size:90%;vertical-align:top}blockquote{color:#444;border-left:3px solid #bbb;margin:0.3em 0;"
              "padding-left:0.8em}")


@dataclass
class Experiment:
    """One experiment's rows and how it ran."""

    exp_id: str
    kind: str
    description: str
    reading: str
    rows: list = field(default_factory=list)
    # what it tried of the open choices (nqf.experiments.reading_choices): open, tried, screened
    choices: dict = field(default_factory=dict)

    @property
    def figure(self) -> str | None:
        paper = paper_figure(self.kind)
        return paper.label if paper else None


def collect(fits: dict[str, xr.Dataset], configs: dict[str, dict]) -> list[Experiment]:
    """Experiments with their summary rows; ``configs`` maps an experiment id to its kind,
    description and reading (strings from the workflow config)."""
    out = []
    for exp_id in sorted(fits):
        cfg = configs.get(exp_id, {})
        kind = str(cfg.get("kind", fits[exp_id].attrs.get("experiment_kind", "")))
        out.append(Experiment(exp_id, kind, str(cfg.get("description", "")), str(cfg.get("reading", "")),
                              summary_rows(exp_id, fits[exp_id]), dict(cfg.get("choices", {}))))
    return out


# What a row of each checks value counts as: a claim of the paper, a theorem, this project's own;
# a row that holds by construction is listed but never counted as a check, and neither is a row the
# run could not judge (judged False: not reached because the run is too short, or a tolerance off
# the scale; nqf.experiments.claims.NOT_REACHED).
COUNTED = ("paper", "theorem", "ours")
# A figure's verdict under a reading whose paper rows the run did not reach.
NOT_JUDGED = "not judged at this run length"


def is_judged(row) -> bool:
    """The row's ``judged`` (True for rows of fit files written before it existed); a claims CSV
    read back gives the text 'True'/'False'."""
    value = row.get("judged", True)
    return value if isinstance(value, bool) else str(value).strip().lower() not in ("false", "0")


def counted(rows) -> list:
    """The rows that count as checks: not those that hold by construction, nor those the run
    could not judge (:func:`not_judged`)."""
    return [r for r in rows if r["checks"] != "construction" and is_judged(r)]


def not_judged(rows) -> list:
    """The rows (other than by construction) the run could not judge: neither passed nor missed."""
    return [r for r in rows if r["checks"] != "construction" and not is_judged(r)]


def coverage(experiments: list[Experiment]) -> list[dict]:
    """Per open choice of these experiments (one paper figure's): the values tried side by side
    (with the experiments that ran them), those only screened, and those no experiment tried."""
    keys: list[str] = []
    for exp in experiments:
        keys += [k for k in exp.choices.get("open", {}) if k not in keys]
    out = []
    for key in keys:
        values: list[str] = []
        tried: dict[str, list[str]] = {}
        screened: dict[str, list[str]] = {}
        for exp in experiments:
            values += [v for v in exp.choices.get("open", {}).get(key, []) if v not in values]
            if key in exp.choices.get("tried", {}):
                tried.setdefault(exp.choices["tried"][key], []).append(exp.exp_id)
            for v in exp.choices.get("screened", {}).get(key, []):
                screened.setdefault(v, []).append(exp.exp_id)
        screened = {v: e for v, e in screened.items() if v not in tried}
        untried = [v for v in values if v not in tried and v not in screened]
        out.append({"key": key, "tried": tried, "screened": screened, "untried": untried})
    return out


def config_identity(configfiles, overrides, validated: dict, root: str | Path) -> dict:
    """Which config a run used: its files (or the default), its --config overrides, a hash of
    its validated experiments (sha256 of their canonical JSON), and whether they are those of
    config/config.yaml (the default size) or config/paper.yaml (the paper's sizes)."""
    from nqf.pipeline.config import validate_config
    from nqf.pipeline.config_files import load_workflow_config

    root = Path(root)

    def digest(cfg: dict) -> str:
        return hashlib.sha256(json.dumps(cfg.get("experiments", {}), sort_keys=True, default=str).encode()).hexdigest()

    mine = digest(validated)
    matches = None
    for name in ("config.yaml", "paper.yaml"):
        path = root / "config" / name
        try:
            if path.is_file() and digest(validate_config(load_workflow_config([path], {}, path))) == mine:
                matches = f"config/{name}"
                break
        except Exception:  # a broken reference file says nothing about this run's config
            continue
    files = [str(f) for f in configfiles] or ["config/config.yaml (the default)"]
    return {"files": files, "overrides": {str(k): str(v) for k, v in dict(overrides or {}).items()},
            "sha256": mine, "matches": matches}


def config_sentence(identity: dict) -> str:
    """One paragraph: the config, its hash, and what its verdicts can be taken for."""
    files = ", ".join(f"`{f}`" for f in identity["files"])
    over = ("; overrides " + ", ".join(f"`{k}={v}`" for k, v in identity["overrides"].items())
            if identity.get("overrides") else "")
    head = f"Config: {files}{over} (sha256 of its validated experiments `{identity['sha256'][:16]}`). "
    if identity.get("matches") == "config/paper.yaml":
        return head + "These are the paper's settings (config/paper.yaml), where the paper states them."
    if identity.get("matches") == "config/config.yaml":
        return head + ("This is the default run (config/config.yaml): the whole reproduction at a size a 2-core "
                       "laptop finishes in minutes; where it is smaller than the paper's, the rows say so, and "
                       "config/paper.yaml runs the paper's sizes.")
    return head + ("**Not a reproduction at the paper's settings**: this config is neither config/config.yaml nor "
                   "config/paper.yaml, so its verdicts hold for its own sizes only.")


def _num(v: float) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.4g}"


def _verdict(rows, unjudged=()) -> str:
    """'holds', 'misses 1 of 3' over the judged ``rows``; with rows the run could not judge
    (``unjudged``) and no judged miss, 'not judged at this run length' (never a miss)."""
    failed = [r for r in rows if not r["passed"]]
    if failed:
        return f"misses {len(failed)} of {len(rows)}" + (f" judged; {len(unjudged)} not judged" if unjudged else "")
    if unjudged:
        return NOT_JUDGED
    return "holds" if rows else "no rows"


def _first_sentence(note: str, limit: int = 260) -> str:
    note = note.strip()
    return note if len(note) <= limit else note[:limit].rsplit(" ", 1)[0] + " ..."


def figure_sections(experiments: list[Experiment]) -> list[dict]:
    """Per paper figure: its title, the paper's claims (sources), and per experiment (reading) the
    paper rows with their verdicts, plus the theorem and own rows counted."""
    by_fig: dict[str, list[Experiment]] = {}
    for exp in experiments:
        if exp.figure:
            by_fig.setdefault(exp.figure, []).append(exp)
    sections = []
    for fig in sorted(by_fig, key=lambda f: paper_figure(by_fig[f][0].kind).order):
        exps = by_fig[fig]
        title = paper_figure(exps[0].kind).title
        readings = []
        for exp in exps:
            judged = [r for r in exp.rows if is_judged(r)]
            paper = [r for r in judged if r["checks"] == "paper"]
            theorem = [r for r in judged if r["checks"] == "theorem"]
            ours = [r for r in judged if r["checks"] == "ours"]
            unjudged = not_judged(exp.rows)
            paper_unjudged = [r for r in unjudged if r["checks"] == "paper"]
            readings.append({"experiment": exp, "paper": paper, "theorem": theorem, "ours": ours,
                             "construction": [r for r in exp.rows if r["checks"] == "construction"],
                             "unjudged": unjudged, "paper_unjudged": paper_unjudged,
                             "verdict": (_verdict(paper, paper_unjudged) if paper or paper_unjudged
                                         else "no paper rows")})
        holds = [r["experiment"].exp_id for r in readings if r["paper"] and r["verdict"] == "holds"]
        sources = sorted({r["source"] for rd in readings for r in rd["paper"] + rd["paper_unjudged"]
                          if r["source"]})
        sections.append({"figure": fig, "title": title, "readings": readings, "holds_under": holds,
                         "sources": sources, "coverage": coverage(exps)})
    return sections


def _is_screen(row) -> bool:
    return str(row["source"]).startswith("screen")


def _subject_of_screen(row) -> str:
    """'readout_norm standard, heads sum, f0 remove, query all' of a screen row's quantity."""
    return str(row["quantity"]).removeprefix("screen ").split(":", 1)[0]


def _subject(quantity: str) -> str:
    """What a row is about, to head its note: the part before the first colon ("mlp" of
    "mlp: train losses agree ..."), else the quantity itself (shortened)."""
    head = quantity.split(":", 1)[0].strip()
    return f"**{head if ':' in quantity else _first_sentence(quantity, 80)}**"


def _latest(rows):
    """The row with the latest prediction (the one a longer run reaches last), else the first."""
    def key(r):
        try:
            v = float(r.get("predicted", math.nan))
        except (TypeError, ValueError):  # a claims CSV read back: an empty cell
            return -math.inf
        return v if math.isfinite(v) else -math.inf
    return max(rows, key=key)


def _reason(r) -> str:
    """Why a row was not judged: the head of its note up to the close of its first parenthesis
    ("not reached: run too short (the run ends at t = 40, ...; steps >= 34822 would reach it)",
    nqf.experiments.claims.run_too_short), else up to its first '; '."""
    note = str(r["note"]).strip()
    depth, opened = 0, False
    for i, ch in enumerate(note):
        if ch == "(":
            depth, opened = depth + 1, True
        elif ch == ")" and depth:
            depth -= 1
            if not depth:
                return note[:i + 1]
        elif ch == ";" and not depth and not opened:
            return note[:i]
    return note


def _miss_text(r) -> str:
    crit = f"tolerance {_num(r['tolerance'])}" if math.isfinite(r["tolerance"]) else "bound"
    return f"{r['quantity']}: measured {_num(r['measured'])} vs {_num(r['predicted'])} ({crit})"


def markdown(experiments: list[Experiment], *, header: str = "", notes_per_reading: int = 3,
             config: dict | None = None) -> str:
    """The reproduction page as Markdown: per paper figure, the paper's sentences, a table of the
    readings with their verdicts and misses, the verdict across readings, and the numbers (the
    notes of the paper rows: every missed row's, and a few others); then this project's
    experiments in one table."""
    every = [r for e in experiments for r in e.rows]
    rows = counted(every)
    count = {c: [r for r in rows if r["checks"] == c] for c in COUNTED}
    lines = ["# Reproduction of *Neural Quadratic Forms* (arXiv 2608.13335)", ""]
    if header:
        lines += [header, ""]
    if config:
        lines += [config_sentence(config), ""]
    unjudged = not_judged(every)
    built = len(every) - len(rows) - len(unjudged)
    lines += [f"{len(rows)} checked rows, {sum(r['passed'] for r in rows)} pass: "
              + ", ".join(f"{c} {sum(r['passed'] for r in rs)}/{len(rs)}" for c, rs in count.items())
              + " (paper = a claim of the paper, theorem = a theorem checked against training, ours = this "
                "project's own claim)"
              + (f"; {built} more rows hold by construction and are not counted" if built else "")
              + (f"; {len(unjudged)} rows were not judged (the run did not reach what they measure: "
                 f"{NOT_JUDGED}, neither a pass nor a miss) and are not counted" if unjudged else "")
              + ". A reading is one choice of what the paper leaves unstated (input scale, readout, loss "
                "convention, preprocessing); each ran as its own experiment, and a screen covers more "
                "readings cheaply where a kind has one. Every row, with its tolerance and the tolerance's "
                "source, is in `summary.csv`.", ""]
    for sec in figure_sections(experiments):
        lines += [f"## {sec['figure']}: {sec['title']}", ""]
        lines += [f"> {src}" for src in sec["sources"]]
        if sec["sources"]:
            lines.append("")
        lines += ["| experiment | reading | paper rows holding | theorem rows | own rows | misses of paper rows |",
                  "|---|---|---|---|---|---|"]
        for rd in sec["readings"]:
            exp = rd["experiment"]
            bad = [_miss_text(r) for r in rd["paper"] if not r["passed"]]
            frac = lambda rs: f"{sum(r['passed'] for r in rs)}/{len(rs)}" if rs else "-"  # noqa: E731
            open_ = (f" ({len(rd['paper_unjudged'])} not judged)" if rd["paper_unjudged"] else "")
            lines.append(f"| `{exp.exp_id}` | {exp.reading or '-'} | {frac(rd['paper'])}{open_} | "
                         f"{frac(rd['theorem'])} | {frac(rd['ours'])} | {'; '.join(bad) or '-'} |")
        lines.append("")
        full = [rd["experiment"].exp_id for rd in sec["readings"] if rd["paper"] and rd["verdict"] == "holds"]
        # a reading with a judged miss; one whose paper rows the run did not all reach and that
        # misses none of those it judged is not judged at this length (never a miss)
        partial = [rd for rd in sec["readings"] if any(not r["passed"] for r in rd["paper"])]
        short = [rd for rd in sec["readings"] if rd["verdict"] == NOT_JUDGED]
        short_text = "; ".join(
            f"`{rd['experiment'].exp_id}`: {len(rd['paper_unjudged'])} of {len(rd['paper']) + len(rd['paper_unjudged'])} "
            f"paper rows not judged, e.g. " + _first_sentence(_reason(_latest(rd["paper_unjudged"])), 200)
            for rd in short)
        held = ", ".join(f"`{e}`" for e in full)
        missed = ", ".join("`" + rd["experiment"].exp_id + "`" for rd in partial)
        # a reading that ran fewer of the figure's rows (e.g. fewer architectures) says so
        checked = {r["quantity"] for rd in sec["readings"] for r in rd["paper"]}
        narrower = "".join(
            f" (`{rd['experiment'].exp_id}` checks {len(rd['paper'])} of the {len(checked)} paper rows "
            f"checked under some reading)" for rd in sec["readings"]
            if rd["experiment"].exp_id in full and {r["quantity"] for r in rd["paper"]} < checked)
        untried = [(c["key"], v) for c in sec["coverage"] for v in c["untried"]]
        not_tried = ("; open choices not tried: " + ", ".join(f"{k} {v}" for k, v in untried)) if untried else ""
        shorts = (f"; {NOT_JUDGED} under " + ", ".join(f"`{rd['experiment'].exp_id}`" for rd in short)
                  + f" ({short_text})") if short else ""
        if full:
            lines.append(f"**Verdict: every paper row holds under {held}**{narrower}"
                         + (f"; under {missed} some miss (table)" if partial else "") + f"{shorts}{not_tried}.")
        elif partial:
            counts = "; ".join("`" + rd["experiment"].exp_id + "`: " + f"{sum(r['passed'] for r in rd['paper'])} of "
                               f"{len(rd['paper'])} hold"
                               + (f" ({len(rd['paper_unjudged'])} more not judged)" if rd["paper_unjudged"] else "")
                               for rd in partial)
            if short:
                # a reading the run did not judge may yet hold: never 'under none' while one is open
                lines.append(f"**Verdict: no reading judged here makes every paper row hold**; {counts}{shorts}"
                             f"{not_tried}.")
            elif untried:
                lines.append(f"**Verdict: no reading run here makes every paper row hold**; {counts}{not_tried}.")
            else:
                lines.append(f"**Verdict: under none of the readings of the open choices does every paper row "
                             f"hold** (every listed value was tried or screened); {counts}.")
        elif short:
            lines.append(f"**Verdict: {NOT_JUDGED}**: the runs stop before what the paper's rows measure, so they "
                         f"neither hold nor miss; {short_text}{not_tried}.")
        lines.append("")
        if sec["coverage"]:
            lines.append("Open choices (what the paper does not state; each value run side by side, only screened, "
                         "or not tried):")
            for c in sec["coverage"]:
                parts = [f"{v} ({', '.join(f'`{e}`' for e in exps)})" for v, exps in c["tried"].items()]
                if c["screened"]:
                    parts.append("screened only: " + ", ".join(f"{v} ({', '.join(f'`{x}`' for x in e)})"
                                                               for v, e in c["screened"].items()))
                if c["untried"]:
                    parts.append("not tried: " + ", ".join(c["untried"]))
                lines.append(f"* `{c['key']}`: " + "; ".join(parts))
            lines.append("")
        screens = [(rd["experiment"].exp_id, r) for rd in sec["readings"] for r in rd["ours"] if _is_screen(r)]
        if screens:
            passed = [f"{_subject_of_screen(r)} (`{e}`)" for e, r in screens if r["passed"]]
            lines.append(f"Screened readings (this project's screen, not the paper's comparison: the NQF trained "
                         f"alone, the module at its weights): {len(passed)} of {len(screens)} agree until the NQF "
                         f"has learned" + (": " + "; ".join(passed) if passed else "") + ".")
            lines.append("")
        for rd in sec["readings"]:
            notes, seen = [], set()
            for r in ([r for r in rd["paper"] if not r["passed"]] + rd["paper_unjudged"]
                      + [r for r in rd["paper"] if r["passed"]]):
                # one note per subject (the first is a miss where there is one) and per text
                text, subject = _first_sentence(r["note"], 420), _subject(r["quantity"])
                if text and text not in seen and subject not in seen:
                    seen.update((text, subject))
                    notes.append(f"{subject}: {text}")
            misses = sum(not r["passed"] for r in rd["paper"]) + min(len(rd["paper_unjudged"]), 1)
            shown = notes[:max(notes_per_reading, misses)]
            if shown:
                lines.append(f"Numbers, `{rd['experiment'].exp_id}`:")
                lines += [f"* {n}" for n in shown]
                lines.append("")
        other = [r for rd in sec["readings"] for r in rd["theorem"] + rd["ours"] if not r["passed"] and not _is_screen(r)]
        if other:
            lines.append("Theorem and own rows that miss: " + "; ".join(
                f"{_miss_text(r)} ({_first_sentence(r['note'], 200)})" for r in other) + ".")
            lines.append("")
        open_rows = [r for rd in sec["readings"] for r in rd["unjudged"] if r["checks"] != "paper"]
        if open_rows:
            lines.append(f"Theorem and own rows not judged ({NOT_JUDGED}): " + "; ".join(
                f"{r['quantity']} ({_first_sentence(_reason(r), 200)})" for r in open_rows) + ".")
            lines.append("")
    own = [e for e in experiments if not e.figure]
    if own:
        lines += ["## This project's experiments (not in the paper)", "",
                  "| experiment | kind | reading | theorem rows | own rows | misses | not judged |",
                  "|---|---|---|---|---|---|---|"]
        for e in own:
            judged = counted(e.rows)
            th = [r for r in judged if r["checks"] == "theorem"]
            ours = [r for r in judged if r["checks"] == "ours"]
            bad = [_miss_text(r) for r in judged if not r["passed"]]
            open_rows = not_judged(e.rows)
            why = (f"{len(open_rows)} ({_first_sentence(_reason(_latest(open_rows)), 160)})" if open_rows else "-")
            lines.append(f"| `{e.exp_id}` | {e.kind} | {e.reading or '-'} | {sum(r['passed'] for r in th)}/{len(th)} | "
                         f"{sum(r['passed'] for r in ours)}/{len(ours)} | {'; '.join(bad) or '-'} | {why} |")
        lines.append("")
    return "\n".join(lines)


def html_page(markdown_text: str) -> str:
    """A self-contained HTML rendering of :func:`markdown`'s output (headings, quotes, tables,
    bold, code), for the snakemake report; no Markdown library needed for this subset."""
    import re

    def inline(text: str) -> str:
        text = html.escape(text)
        text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
        text = re.sub(r"\*(.+?)\*", r"<i>\1</i>", text)
        return re.sub(r"`(.+?)`", r"<code>\1</code>", text)

    out, table = [], []

    def flush():
        if table:
            head, *body = [row for row in table if not set(row.replace("|", "").strip()) <= {"-"}]
            cells = lambda row: [c.strip() for c in row.strip().strip("|").split("|")]  # noqa: E731
            out.append("<table><tr>" + "".join(f"<th>{inline(c)}</th>" for c in cells(head)) + "</tr>")
            out.extend("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in cells(r)) + "</tr>" for r in body)
            out.append("</table>")
            table.clear()

    for line in markdown_text.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        level = len(line) - len(line.lstrip("#"))
        if 0 < level <= 6 and line[level:level + 1] == " ":
            out.append(f"<h{level}>{inline(line[level + 1:])}</h{level}>")
        elif line.startswith("> "):
            out.append(f"<blockquote>{inline(line[2:])}</blockquote>")
        elif line.strip():
            out.append(f"<p>{inline(line)}</p>")
    flush()
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>nqf reproduction</title>"
            f"<style>{PAGE_STYLE}</style></head><body>" + "\n".join(out) + "</body></html>")
