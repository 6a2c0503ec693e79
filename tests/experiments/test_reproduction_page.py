"""The reproduction page from synthetic fit rows: a reading that holds over fewer of the figure's
rows says how many it checks, and each note is headed by what its row is about."""
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
