"""Config text never becomes live HTML (issue 30): not in the pages nqf writes (claims tables,
reproduction page, the front page's verdicts), nor in Snakemake's report, which writes a job's
params unescaped into a <script> element and renders captions (Jinja, reStructuredText, HTML)
without escaping what they insert."""
import json
import pickle
import re
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import helpers

from nqf.experiments import stage_config
from nqf.pipeline.config import validate_config
from nqf.pipeline.report_html import claims_page, report_param, rst_text, verdicts_fragment
from nqf.pipeline.reproduction import Experiment, html_page, markdown

HOSTILE = "</script><img src=x onerror=alert(1)>"
# more ways into a caption: a bare javascript: link, a directive on a line of its own, an include
HOSTILE_RST = (HOSTILE + " see javascript:alert(2) and `x <javascript:alert(3)>`_\n\n.. raw:: html\n\n"
               "   <b>raw</b>\n\n.. include:: /etc/passwd\n")
REPORT = helpers.ROOT / "workflow" / "report"


class Tags(HTMLParser):
    """The start tags of a page and the text of each <script> element."""

    def __init__(self, text):
        super().__init__()
        self.tags, self.scripts, self._in_script = [], [], False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def _row(**over):
    row = {"experiment": "fw", "quantity": "t*", "checks": "paper", "source": "Fig. 3", "reading": "loss mean",
           "predicted": 1.0, "measured": 1.01, "rel_error": 0.01, "tolerance": 0.05, "tolerance_source": "budget",
           "passed": True, "note": ""}
    return {**row, **over}


def test_a_hostile_description_is_text_in_every_page_nqf_writes():
    identity = {"files": [f"configs/{HOSTILE}.yaml"], "overrides": {"experiments": HOSTILE},
                "sha256": "0" * 64, "matches": None}
    experiments = [Experiment("fw", "featurewise", HOSTILE, f"loss mean; {HOSTILE}", [_row(note=HOSTILE)])]
    pages = {"claims": claims_page("fw", [_row(note=HOSTILE)], description=HOSTILE),
             "reproduction": html_page(markdown(experiments, config=identity)),
             "verdicts": verdicts_fragment(experiments, config=identity)}
    for name, page in pages.items():
        assert "</script><img" not in page and "<img" not in page and "<script" not in page, name
        assert "img" not in Tags(page).tags, name
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in pages["claims"]


def test_rst_text_shows_any_text_literally_in_a_caption():
    from docutils.core import publish_parts

    for text in (HOSTILE_RST, "a *b* |c| [1]_ d_ :math:`x` 1. e\\", "plain words"):
        body = publish_parts(f"Experiment (kind): {rst_text(text)}. After.", writer="html",
                             settings_overrides={"report_level": 5})["body"]
        assert Tags(body).tags == ["p"], (text, body)  # one paragraph: no link, emphasis, include
        shown = re.sub(r"<[^>]+>", "", body)
        import html

        assert html.unescape(shown).strip() == f"Experiment (kind): {' '.join(text.split())}. After."


def _params(**values):
    from snakemake.iocontainers import Params

    params = Params()
    for name, value in values.items():
        params.append(value)
        params._add_name(name)
    return params


def test_a_hostile_description_stays_text_in_snakemakes_report():
    """The figure rule's params as workflow/rules/figures.smk makes them (report_params wraps
    report_param), rendered as Snakemake 9 renders a result: the caption workflow/report/figure.rst
    (Jinja with Snakemake's settings, then docutils), and the JSON of results with the caption and
    the params (snakemake.logging.format_dict), inside the report's <script id="results">."""
    from docutils.core import publish_parts
    from jinja2 import Environment
    from snakemake.iocontainers import Namedlist
    from snakemake.logging import format_dict
    from snakemake.report.html_reporter.data.results import render_results
    from snakemake.script import Snakemake

    cfg = validate_config({"experiments": {"fw": {"kind": "featurewise", "description": HOSTILE_RST}}})
    exp = cfg["experiments"]["fw"]
    params = _params(cfg=report_param(stage_config(exp, "figure")), style=report_param(cfg["figures"]))
    wildcards = Namedlist(fromdict={"exp": "fw"})
    snakemake = Snakemake(Namedlist(), Namedlist(fromdict={"png": "results/figures/fw.png"}), params, wildcards,
                          1, Namedlist(), Namedlist(), cfg, "figure", None)
    links = "".join(f"\n.. _{name}: javascript:app.showResultInfo('{name}')\n"
                    for name in ("fw.pdf", "fw.png", "fw.claims.html", "fw.claims.csv"))
    env = Environment(trim_blocks=True, lstrip_blocks=True)
    caption = publish_parts(env.from_string((REPORT / "figure.rst").read_text() + links).render(snakemake=snakemake),
                            writer="html")["body"]
    assert "system-message" not in caption and "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in caption
    assert "<img" not in caption and "<b>raw</b>" not in caption and "root:" not in caption
    assert not re.search(r"href=\"javascript:alert", caption)
    # a FileRecord's fields as Snakemake fills them (params: format_dict, then its own replaces)
    result = SimpleNamespace(path=Path("results/figures/fw.png"), name="fw.png", filename="fw.png", labels=None,
                             size=1, caption=caption, mime="image/png", id="x", wildcards="exp=fw",
                             job=SimpleNamespace(rule=SimpleNamespace(name="figure")),
                             params=format_dict(params).replace("\n", r"\n").replace('"', r"\""))
    page = f'<script id="results">\nvar results = {render_results({"fw": {"fw": [result]}}, False)};\n</script>'
    assert "</script><img" not in page and page.lower().count("</script") == 1
    parsed = Tags(page)
    assert parsed.tags == ["script"]
    results = json.loads(re.search(r"var results = (\{.*\});", parsed.scripts[0], re.S).group(1))
    shown = results["results/figures/fw.png"]["job_properties"]["params"]
    assert "\\x3c/script>\\x3cimg src=x" in shown  # the same text, as a Python escape
    # the job's script gets the value itself, as a plain StageConfig; the rerun trigger (repr) reads back
    assert pickle.loads(pickle.dumps(params.cfg))["description"] == HOSTILE_RST
    assert type(pickle.loads(pickle.dumps(params.cfg))).__name__ == "StageConfig"
    assert eval(repr(params.cfg)) == dict(stage_config(exp, "figure"))
    plain = validate_config({"experiments": {"fw": {"kind": "featurewise"}}})["experiments"]["fw"]
    assert repr(report_param(stage_config(plain, "figure"))) == repr(stage_config(plain, "figure"))


def test_every_param_of_a_report_rule_is_made_safe_and_captions_insert_config_text_through_rst():
    rules = helpers.ROOT / "workflow" / "rules"
    for smk in sorted(rules.glob("*.smk")):
        for block in re.split(r"\n(?=rule |checkpoint )", smk.read_text()):
            if "report(" not in block or "params:" not in block:
                continue
            section = block.split("params:", 1)[1].split("\n    script:", 1)[0].split("\n    shell:", 1)[0]
            values = re.findall(r"^        (\w+)=(.*)$", section, re.M)
            assert values and all(v.startswith("report_params(") for _, v in values), (smk.name, block[:60], values)
    # what a caption may insert unescaped: ids (letters, digits, '_'), kinds and the device (enums),
    # file names made of those, and lengths; any other config text through .rst(key)
    constrained = {'snakemake.wildcards.exp', 'snakemake.params.cfg.kind', 'snakemake.output.png.split("/")[-1]',
                   'snakemake.config["experiments"] | length', 'exp["kind"]', 'snakemake.config.get("device", "auto")',
                   'name', 'verdicts[0].path'}
    for caption in sorted(REPORT.glob("*.rst")):
        for expr in re.findall(r"\{\{(.*?)\}\}", caption.read_text(), re.S):
            expr = expr.strip()
            assert expr in constrained or re.fullmatch(r"snakemake\.params\.\w+\.rst\(\"\w+\"\)", expr) or \
                expr.startswith(("item(", "category(", '"," if')), (caption.name, expr)
