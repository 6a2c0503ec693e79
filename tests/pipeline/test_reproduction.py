"""The reproduction page from synthetic fit rows: a reading that holds over fewer of the figure's
rows says how many it checks, and each note is headed by what its row is about; the report's HTML
(the claims tables, the front page's verdicts) escapes every text."""
import csv
from html.parser import HTMLParser

from nqf.pipeline.reproduction import Experiment, markdown


def row(quantity, passed, note, checks="paper"):
    return {"quantity": quantity, "checks": checks, "passed": passed, "note": note, "source": "Fig. 7: 'claim'",
            "measured": 0.1, "predicted": 0.0, "tolerance": 0.05}


def test_narrower_reading_and_note_subjects():
    wide = Experiment("real_data", "real_data", "", "literal", [
        row("mlp: losses agree", False, "mlp parts at step 7"),
        row("attention: losses agree", False, "attention parts at step 28")])
    narrow = Experiment("real_data_unit_norm", "real_data", "", "unit norm", [
        row("mlp: losses agree", True, "mlp agrees to 2.7 %")])
    page = markdown([wide, narrow])
    assert "every paper row holds under `real_data_unit_norm`" in page
    assert "(`real_data_unit_norm` checks 1 of the 2 paper rows checked under some reading)" in page
    assert "* **mlp**: mlp parts at step 7" in page and "* **attention**: attention parts at step 28" in page
    assert "* **mlp**: mlp agrees to 2.7 %" in page


# -- the HTML of the snakemake report ---------------------------------------------------------------

class _Table(HTMLParser):
    """Cells of every table row (text unescaped), the tags seen, the classes of the rows."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows, self.tags, self.row_classes, self._cell = [], [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
            self.row_classes.append(dict(attrs).get("class"))
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _parse(text: str) -> _Table:
    parser = _Table()
    parser.feed(text)
    parser.close()
    return parser


def _claims_csv(tmp_path):
    """A claims CSV written as the figure rule writes it, with text that HTML must escape."""
    from nqf.experiments.claims import SUMMARY_COLUMNS, Claim, claims_dataset, summary_rows

    claims = [Claim("t* of <b>mode</b> 1 & 2", 1.0, 1.01, 0.05, note='tau "fast" < 1 </td><script>x</script>',
                    checks="paper", source="Fig. 3: 'drops' at τ = 1"),
              Claim("bound: D <= 0.01", 0.01, 0.02, 0.0, comparison="at_most", note="D ≈ 0.02")]
    rows = summary_rows("fw", claims_dataset(claims))
    path = tmp_path / "fw.claims.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=SUMMARY_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return rows, path


def test_claims_table_is_one_escaped_row_per_claim_from_the_csv(tmp_path):
    from nqf.pipeline.report_html import CLAIM_COLUMNS, claims_page

    rows, path = _claims_csv(tmp_path)
    with path.open(newline="") as f:
        read_back = list(csv.DictReader(f))
    page = claims_page("fw", read_back, description="a <i>test</i>")
    assert page == claims_page("fw", rows, description="a <i>test</i>")  # the CSV's rows read the same
    assert page.isascii() and "<script>" not in page and "<b>mode</b>" not in page
    table = _parse(page)
    assert table.tags.count("table") == 1 and "script" not in table.tags and "i" not in table.tags
    header, *body = table.rows
    assert header == [h for h, _ in CLAIM_COLUMNS]
    assert [len(r) for r in body] == [len(CLAIM_COLUMNS)] * 2
    cell = {h: [r[i] for r in body] for i, (h, _) in enumerate(CLAIM_COLUMNS)}
    assert cell["quantity"] == ["t* of <b>mode</b> 1 & 2", "bound: D <= 0.01"]  # the text, unescaped
    assert cell["note"] == ['tau "fast" < 1 </td><script>x</script>', "D ≈ 0.02"]
    assert cell["paper's claim"] == ["Fig. 3: 'drops' at τ = 1", "-"]
    assert cell["passed"] == ["yes", "NO"] and table.row_classes == [None, None, "miss"]
    assert cell["tolerance"] == ["0.05", "bound"] and cell["measured"] == ["1.01", "0.02"]
    assert "1 of 2 rows pass" in page


def test_front_page_verdicts_name_each_figure_and_reading():
    from nqf.pipeline.report_html import verdicts_fragment

    experiments = [
        Experiment("real_data", "real_data", "", "literal", [row("mlp: losses agree", False, "parts")]),
        Experiment("real_data_unit_norm", "real_data", "", "unit norm", [row("mlp: losses agree", True, "agrees")]),
        Experiment("competition", "competition", "", "", [row("t*_1 <x>", True, "", checks="theorem"),
                                                          row("t*_2", False, "", checks="ours")]),
        Experiment("spl", "samplewise_powerlaw", "", "", [row("exponent", True, "", checks="theorem")]),
    ]
    text = verdicts_fragment(experiments)
    table = _parse(text)
    assert table.tags.count("table") == 1 and "html" not in table.tags  # a fragment, not a page
    assert table.rows[1:] == [
        ["Fig. 7", "odd vs even MNIST digits, module vs NQF",
         "real_data: misses 1 of 1real_data_unit_norm: holds (1/1)"],  # one line per reading (<br>)
        ["Theorem 11", "sample-wise power law (no figure in the paper)", "spl: no paper rows; theorem rows 1/1"],
        ["this project", "competition", "competition: misses 1 of 2 rows"]]
    assert "5 checked rows, 3 pass</b> (paper 1/2, theorem 2/2, ours 0/1)" in text and text.isascii()


# -- verdicts as far as the evidence goes ----------------------------------------------------------

def _choices(tried, screened=None, open_=None):
    open_ = open_ or {"preprocessing": ["standardise", "raw"], "f0": ["keep", "remove"]}
    return {"open": open_, "tried": tried, "screened": screened or {}}


def test_verdict_lists_open_choices_tried_screened_and_not_tried():
    """A figure whose readings all miss, with a value never tried, is not 'under none': the page
    names what was not tried; once every value is tried (or screened) it says 'under none'."""
    a = Experiment("real_data", "real_data", "", "standardise", [row("mlp: agree", False, "parts early")],
                   _choices({"preprocessing": "standardise", "f0": "keep"}))
    page = markdown([a])
    assert "**Verdict: no reading run here makes every paper row hold**" in page
    assert "open choices not tried: preprocessing raw, f0 remove" in page
    assert "* `preprocessing`: standardise (`real_data`); not tried: raw" in page
    b = Experiment("real_data_raw", "real_data", "", "raw", [row("mlp: agree", False, "parts early")],
                   _choices({"preprocessing": "raw", "f0": "keep"}, screened={"f0": ["keep", "remove"]}))
    page = markdown([a, b])
    assert "**Verdict: under none of the readings of the open choices does every paper row hold**" in page
    assert "* `f0`: keep (`real_data`, `real_data_raw`); screened only: remove (`real_data_raw`)" in page
    c = Experiment("real_data_more", "real_data", "", "raw", [row("mlp: agree", False, "parts early")],
                   _choices({"preprocessing": "raw", "f0": "keep"}, screened={"f0": ["remove"]}))
    assert "screened only: remove (`real_data_raw`, `real_data_more`)" in markdown([a, b, c])
    assert "not tried:" not in page


def test_a_holding_reading_still_names_untried_values():
    a = Experiment("real_data", "real_data", "", "raw", [row("mlp: agree", True, "agrees")],
                   _choices({"preprocessing": "raw", "f0": "keep"}))
    page = markdown([a])
    assert "**Verdict: every paper row holds under `real_data`**; open choices not tried: preprocessing standardise, " \
           "f0 remove." in page


def test_rows_that_hold_by_construction_are_listed_but_not_counted():
    exp = Experiment("featurewise", "featurewise", "", "", [
        row("z matches", True, "ok"), row("Assumption 1", True, "diagonal", checks="construction"),
        row("own", False, "miss", checks="ours")])
    page = markdown([exp])
    assert "2 checked rows, 1 pass: paper 1/1, theorem 0/0, ours 0/1" in page
    assert "1 more rows hold by construction and are not counted" in page


def test_the_page_names_its_config_and_says_when_it_is_not_the_papers(tmp_path):
    """config_identity compares the validated experiments' hash with config/config.yaml's and
    config/paper.yaml's: the default and the paper's settings are named; any other config (the
    test config) is announced as not a reproduction at the paper's settings."""
    from pathlib import Path

    from nqf.pipeline.config import validate_config
    from nqf.pipeline.config_files import load_workflow_config
    from nqf.pipeline.reproduction import config_identity, config_sentence

    root = Path(__file__).resolve().parents[2]
    for files, expected in (([], "This is the default run"), ([root / "config" / "paper.yaml"], "the paper's settings"),
                            ([root / "config" / "test.yaml"], "**Not a reproduction at the paper's settings**")):
        validated = validate_config(load_workflow_config(files, {}, root / "config" / "config.yaml"))
        identity = config_identity(files, {}, validated, root)
        text = config_sentence(identity)
        assert expected in text and identity["sha256"][:16] in text
        page = markdown([], config=identity)
        assert text in page
    # an override of one experiment's value makes the default config another config
    override = {"experiments": {"featurewise": {"eps": "0.002"}}}  # as snakemake parses --config
    validated = validate_config(load_workflow_config([], override, root / "config" / "config.yaml"))
    identity = config_identity([], override, validated, root)
    assert identity["matches"] is None and "Not a reproduction" in config_sentence(identity)
    assert "experiments=" in config_sentence(identity)


# -- rows a run too short could not judge (issue 30, item 4) -----------------------------------------

def short_row(quantity, checks="paper", note="not reached: run too short (the run ends at t = 0.4, the prediction "
                                                "is t = 22.07; steps >= 1106 would reach it); GD vs Theorem 8"):
    """A row the run did not reach: passed False, judged False (as nqf.experiments.claims writes it)."""
    return {**row(quantity, False, note, checks=checks), "judged": False, "predicted": 22.07}


def test_a_figure_whose_rows_the_run_did_not_reach_is_not_judged_never_missed():
    """Not-judged rows count neither as passes nor as misses: a figure whose only reading was not
    reached says 'not judged at this run length', never 'does not hold', 'under none' or a miss, even
    when every open choice was tried; beside a reading that holds it is named as not judged; beside
    one that misses, the verdict cannot be 'under none' (the unjudged reading may yet hold)."""
    choices = _choices({"preprocessing": "raw", "f0": "keep"}, screened={"preprocessing": ["standardise"],
                                                                        "f0": ["remove"]})
    short = Experiment("fw_short", "featurewise", "", "loss mean",
                       [short_row("t*_1"), short_row("t*_2"), row("GLV agrees", True, "ok", checks="ours")], choices)
    page = markdown([short])
    verdict = next(line for line in page.splitlines() if line.startswith("**Verdict"))
    assert verdict.startswith("**Verdict: not judged at this run length**") and "2 of 2 paper rows not judged" in verdict
    assert not any(w in verdict for w in ("does not hold", "under none", "misses", "no reading"))
    assert "1 checked rows, 1 pass" in page and "2 rows were not judged" in page
    assert "| `fw_short` | loss mean | - (2 not judged) | - | 1/1 | - |" in page
    holds = Experiment("fw_long", "featurewise", "", "loss half_mean", [row("t*_1", True, "ok"), row("t*_2", True, "ok")])
    page = markdown([holds, short])
    assert ("**Verdict: every paper row holds under `fw_long`**; not judged at this run length under `fw_short` "
            "(`fw_short`: 2 of 2 paper rows not judged, e.g. not reached: run too short") in page
    miss = Experiment("fw_miss", "featurewise", "", "loss sum", [row("t*_1", False, "off"), row("t*_2", True, "ok")],
                      _choices({"preprocessing": "standardise", "f0": "remove"}))
    page = markdown([miss, short])
    verdict = next(line for line in page.splitlines() if line.startswith("**Verdict"))
    assert verdict.startswith("**Verdict: no reading judged here makes every paper row hold**"), verdict
    assert "under none" not in verdict and "not judged at this run length under `fw_short`" in verdict
    # the same miss with no unjudged reading beside it, every value tried: 'under none' (the check can fail)
    assert "**Verdict: under none of the readings" in markdown(
        [miss, Experiment("fw_b", "featurewise", "", "loss mean", [row("t*_1", False, "off")], choices)])


def test_own_experiments_and_the_report_keep_not_judged_rows_apart():
    """This project's experiments list their not-judged rows in a column of their own, not as misses;
    the report's front page and claims table say 'not judged' (also for rows read back from a CSV)."""
    from nqf.pipeline.report_html import claims_page, verdicts_fragment
    from nqf.pipeline.reproduction import counted, is_judged

    comp = Experiment("competition", "competition", "", "", [
        row("t*_1", True, "", checks="theorem"),
        short_row("t*_3", checks="theorem", note="not reached: run too short (the run ends at tau = 2, the staircase "
                                                 "puts it at tau = 2.938; tau_max >= 3.71 would reach it); GLV")])
    page = markdown([comp])
    assert ("| `competition` | competition | - | 1/1 | 0/0 | - | 1 (not reached: run too short (the run ends at "
            "tau = 2, the staircase puts it at tau = 2.938; tau_max >= 3.71 would reach it)) |") in page
    fw = Experiment("fw", "featurewise", "", "", [short_row("t*_1")])
    text = verdicts_fragment([comp, fw])
    table = _parse(text)
    assert ["Fig. 3 (left, middle)", "feature-wise saddle-to-saddle dynamics (Theorem 6)",
            "fw: not judged at this run length"] in table.rows
    assert ["this project", "competition", "competition: all 1 rows hold; 1 rows not judged at this run length"] \
        in table.rows
    assert "1 checked rows, 1 pass</b>" in text and "2 rows not judged at this run length, not counted" in text
    csv_row = {**short_row("t*_1"), "passed": "False", "judged": "False", "rel_error": "nan"}
    assert not is_judged(csv_row) and is_judged({**csv_row, "judged": "True"}) and is_judged(row("x", True, ""))
    assert counted([csv_row, row("x", False, "")]) == [row("x", False, "")]
    html = claims_page("fw", [csv_row, {**row("x", False, "miss"), "rel_error": 0.1}])
    cells = _parse(html)
    assert cells.row_classes == [None, "open", "miss"]
    assert "0 of 2 rows pass (1 not judged" in html
