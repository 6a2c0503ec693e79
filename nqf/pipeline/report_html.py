"""HTML for the Snakemake report (``snakemake --report``): each experiment's checked claims as a
table the report shows inline (``results/figures/{exp}.claims.html``, beside the CSV), and the
verdicts on the report's front page (``results/reproduction_verdicts.html``, a fragment that
workflow/report/workflow.rst inserts). The pages are Jinja2 templates (nqf/templates) with
autoescaping on, so every text from a fit file or the config is escaped; the output is ASCII (other characters as character references), so it reads the same whether the
report embeds it in its front page or shows it on its own.

Config text also reaches the report through Snakemake itself, which escapes none of it:

* a job's params: the report writes them (``repr``) into a JSON object inside its
  ``<script id="results">`` element, where a description holding ``</script>`` would end the
  script and turn the rest into live HTML. Every param of a rule with report() outputs goes
  through :func:`report_param`, whose ``repr`` writes each '<' as the Python escape ``\\x3c``
  (the same value, so the same rerun trigger; the job's script gets the plain value);
* the captions (workflow/report/*.rst, Jinja, then reStructuredText through docutils, then HTML
  shown as is): config text goes in through ``.rst(key)`` of such a param (:func:`rst_text`),
  which shows it literally: no link (docutils turns ``javascript:...`` into one), no raw HTML, no
  directive.
"""
from __future__ import annotations

import functools
import math
import re
import string
import unicodedata

from nqf.experiments.contract import StageConfig
from nqf.pipeline.reproduction import (
    COUNTED,
    NOT_JUDGED,
    PAGE_STYLE,
    Experiment,
    _num,
    config_sentence,
    counted,
    figure_sections,
    is_judged,
    not_judged,
)

# The columns of a claims table: (heading, row key); the experiment is the page's title.
CLAIM_COLUMNS = (("quantity", "quantity"), ("checks", "checks"), ("reading", "reading"),
                 ("predicted", "predicted"), ("measured", "measured"), ("rel. error", "rel_error"),
                 ("tolerance", "tolerance"), ("passed", "passed"), ("tolerance source", "tolerance_source"),
                 ("paper's claim", "source"), ("note", "note"))
_NUMBERS = ("predicted", "measured", "rel_error")


@functools.cache
def _templates():
    """The page templates (nqf/templates, package data), every value autoescaped."""
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("nqf", "templates"), autoescape=True,
                              trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)


def _render(template: str, **values) -> str:
    """``template`` rendered as ASCII (other characters as character references), so that it reads
    the same whether the report embeds it in its front page or shows it on its own."""
    text = _templates().get_template(template).render(**values)
    return text.encode("ascii", "xmlcharrefreplace").decode("ascii")


def _passed(row: dict) -> bool:
    """The row's pass, from summary_rows (a bool) or read back from a claims CSV ('True'/'False')."""
    value = row["passed"]
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1")


def _cell(key: str, row: dict) -> str:
    value = row.get(key, "")
    if key in _NUMBERS:
        return _num(float(value))
    if key == "tolerance":
        # a row without a tolerance checks a bound: measured at most / at least the predicted value
        return _num(float(value)) if math.isfinite(float(value)) else "bound"
    if key == "passed":
        return "yes" if _passed(row) else "NO" if is_judged(row) else "not judged"
    return str(value) or "-"


def claims_page(exp_id: str, rows: list[dict], *, description: str = "") -> str:
    """A standalone HTML page with the table of one experiment's checked claims (rows as
    :func:`nqf.experiments.claims.summary_rows` gives them, or as csv.DictReader reads them back
    from the claims CSV); a missed row is highlighted."""
    table = [{"cells": [_cell(key, r) for _, key in CLAIM_COLUMNS],
              "state": "" if _passed(r) else "miss" if is_judged(r) else "open"} for r in rows]
    return _render("claims.html", exp_id=exp_id, description=description, style=PAGE_STYLE, rows=table,
                   headings=[h for h, _ in CLAIM_COLUMNS], passed=sum(_passed(r) for r in rows),
                   unjudged=sum(not is_judged(r) for r in rows))


def _frac(rows) -> str:
    return f"{sum(_passed(r) for r in rows)}/{len(rows)}"


def verdicts_fragment(experiments: list[Experiment], config: dict | None = None) -> str:
    """The front page's verdicts, an HTML fragment (no page around it): the config the run used
    (nqf.pipeline.reproduction.config_sentence), the totals, then one row per paper figure with
    the verdict under each experiment (reading) that ran it, then this project's own experiments."""
    from markupsafe import Markup, escape

    rows = counted([r for e in experiments for r in e.rows])
    totals = ", ".join(f"{c} {_frac([r for r in rows if r['checks'] == c])}" for c in COUNTED)
    unjudged = not_judged([r for e in experiments for r in e.rows])
    if unjudged:
        totals += f"; {len(unjudged)} rows {NOT_JUDGED}, not counted"
    sentence = None
    if config:  # its `code` and **bold** as HTML, the rest escaped
        text = re.sub(r"`(.+?)`", r"<code>\1</code>", str(escape(config_sentence(config))))
        sentence = Markup(re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text))
    sections = []
    for sec in figure_sections(experiments):
        verdicts = []
        for rd in sec["readings"]:
            verdict = rd["verdict"]
            text = f"holds ({_frac(rd['paper'])})" if verdict == "holds" else verdict
            if not rd["paper"] and not rd["paper_unjudged"]:  # a theorem's experiment: its theorem and own rows
                text += "".join(f"; {name} rows {_frac(rd[key])}" for name, key in (("theorem", "theorem"),
                                                                                 ("own", "ours")) if rd[key])
            verdicts.append({"exp_id": rd["experiment"].exp_id, "text": text, "holds": verdict == "holds"})
        sections.append({"figure": sec["figure"], "title": sec["title"], "verdicts": verdicts})
    own = []
    for e in experiments:
        if not e.figure:
            judged = [r for r in e.rows if is_judged(r)]
            missed = sum(not _passed(r) for r in judged)
            text = f"all {len(judged)} rows hold" if not missed else f"misses {missed} of {len(judged)} rows"
            if not_judged(e.rows):
                text += f"; {len(not_judged(e.rows))} rows {NOT_JUDGED}"
            own.append({"kind": e.kind, "exp_id": e.exp_id, "text": text})
    return _render("verdicts.html", config=sentence, checked=len(rows), passed=sum(_passed(r) for r in rows),
                   totals=totals, sections=sections, own_experiments=own)


# -- config text in Snakemake's own report -------------------------------------------------------

def rst_text(value) -> str:
    """``value`` as reStructuredText that shows it literally inside a paragraph of a report
    caption: every run of white space or control characters (line breaks included) as one space,
    and every ASCII punctuation mark backslash-escaped, so that no inline markup, hyperlink
    (docutils links a bare ``javascript:...``), substitution, role, directive (``.. raw:: html``,
    ``.. include::``) or list can start in it; docutils then writes '<', '>' and '&' as character
    references."""
    text = "".join(" " if unicodedata.category(ch)[0] in "CZ" else ch for ch in str(value))
    return "".join("\\" + ch if ch in string.punctuation else ch for ch in " ".join(text.split()))


class _ReportParam:
    """A rule param as Snakemake's report shows it (``repr``, in a ``<script>`` element): every '<'
    written as the Python escape ``\\x3c``, so that no ``</script>`` or ``<!--`` of config text
    ends or bends the script (the value is unchanged; eval of the repr gives it back). ``rst(key)``
    is the entry ``key`` for a caption (:func:`rst_text`)."""

    def __repr__(self) -> str:
        return super().__repr__().replace("<", "\\x3c")

    def __str__(self) -> str:
        return self.__repr__()

    def rst(self, key) -> str:
        return rst_text(dict.get(self, key, ""))


class _ReportDict(_ReportParam, dict):
    def __reduce__(self):  # the job's script gets a plain dict
        return (dict, (dict(self),))


class _ReportList(_ReportParam, list):
    def __reduce__(self):
        return (list, (list(self),))


class _ReportStageConfig(_ReportParam, StageConfig):
    """A stage's config (pickles into the job's script as the plain StageConfig)."""


def report_param(value):
    """``value`` (a dict, a list or a stage's config) as a param of a rule whose outputs are in
    Snakemake's report: the same value, whose repr holds no '<' (see :class:`_ReportParam`)."""
    if isinstance(value, StageConfig):
        return _ReportStageConfig(dict(value), value.stage)
    if isinstance(value, dict):
        return _ReportDict(value)
    if isinstance(value, list):
        return _ReportList(value)
    raise TypeError(f"a param of a rule with report() outputs must be a dict or a list (its repr is made "
                    f"safe for the report's <script> element); got a {type(value).__name__}.")
