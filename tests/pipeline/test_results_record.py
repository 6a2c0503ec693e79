"""nqf.pipeline.results_record: a results file whose bytes change while its mtime stays is found and moved
aside; one whose mtime changed, or that did not change, is left alone."""
import os
from pathlib import Path

from nqf.pipeline import results_record as rr


def tree(tmp_path: Path) -> tuple[Path, Path]:
    res = Path("results")
    (res / "fits").mkdir(parents=True)
    (res / "logs").mkdir()
    (res / "fits" / "a.nc").write_bytes(b"one" * 100)
    (res / "summary.csv").write_text("claim,passed\nx,True\n")
    (res / "logs" / "x.log").write_text("log")
    return res, tmp_path / rr.RECORD


def keep_mtime_write(path: Path, data: bytes) -> None:
    st = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_change_behind_the_mtime_is_found_and_set_aside(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res, record = tree(tmp_path)
    assert rr.update(res) == 2  # logs are not recorded
    assert sorted(rr.load()) == ["results/fits/a.nc", "results/summary.csv"]
    assert rr.changed_behind_mtime(res) == []
    keep_mtime_write(res / "summary.csv", b"claim,passed\nx,False\n")  # same size, same mtime
    keep_mtime_write(res / "fits" / "a.nc", b"two" * 100)
    changed = sorted(rr.changed_behind_mtime(res))
    assert changed == [res / "fits" / "a.nc", res / "summary.csv"]
    messages = rr.set_aside_changed(changed)
    assert len(messages) == 2 and all("while its mtime stayed the same" in m and "moved aside" in m for m in messages)
    assert (res / "summary.csv.unusable").exists() and not (res / "summary.csv").exists()


def test_newer_files_and_touched_copies_with_the_same_bytes_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res, _ = tree(tmp_path)
    rr.update(res)
    (res / "fits" / "a.nc").write_bytes(b"new" * 100)  # a new mtime: Snakemake's business
    keep_mtime_write(res / "summary.csv", (res / "summary.csv").read_bytes())  # new ctime, same bytes
    assert rr.changed_behind_mtime(res) == []
    assert rr.update(res) == 2 and rr.update(res) == 0  # hashed again only when times changed


def test_an_unreadable_record_starts_a_new_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res, record = tree(tmp_path)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("{not json")
    assert rr.load() == {} and rr.changed_behind_mtime(res) == []
    assert rr.update(res) == 2 and len(rr.load()) == 2
