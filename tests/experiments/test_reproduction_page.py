"""The reproduction page from synthetic fit rows: a reading that holds over fewer of the figure's
rows says how many it checks, and each note is headed by what its row is about; the report's HTML
(the claims tables, the front page's verdicts) escapes every text."""
import csv
from html.parser import HTMLParser

from nqf.experiments.reproduction import Experiment, markdown


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
    from nqf.experiments.common import SUMMARY_COLUMNS, Claim, claims_dataset, summary_rows

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
    from nqf.experiments.report_html import CLAIM_COLUMNS, claims_page

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
    from nqf.experiments.report_html import verdicts_fragment

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

    from nqf.config import validate_config
    from nqf.config_files import load_workflow_config
    from nqf.experiments.reproduction import config_identity, config_sentence

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
