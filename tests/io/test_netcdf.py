"""NetCDF contract: CF and provenance attributes, atomic writes, clear errors on bad files."""
import os

import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from nqf.errors import ResultFileError
from nqf.io.netcdf import config_of, open_result, write_dataset


def sample():
    return xr.Dataset({"z": (("time", "mode"), np.arange(6.0).reshape(3, 2), {"units": "1"}),
                       "ok": ("mode", np.array([True, False]))},
                      coords={"time": [0.0, 1.0, 2.0], "mode": [0, 1]})


def test_roundtrip_with_attributes(tmp_path):
    path = write_dataset(sample(), tmp_path / "a" / "x.nc", title="test", config={"eps": 1e-5})
    ds = open_result(path, require=("z",))
    for key in ("Conventions", "title", "source", "history", "nqf_version", "git_commit",
                "config_json", "version_torch", "version_xarray"):
        assert key in ds.attrs
    assert config_of(ds) == {"eps": 1e-5}
    assert ds["ok"].dtype == np.int8 and list(ds["ok"].values) == [1, 0]
    assert ds["z"].encoding.get("zlib") is True
    assert [p.name for p in path.parent.iterdir()] == ["x.nc"]  # no temporary file left


@pytest.mark.parametrize("make_index", [
    lambda names: pd.Index(names, name="optimizer"),  # pandas >= 3: numpy StringDType (kind "T")
    lambda names: pd.Index(np.array(names, dtype=object), name="optimizer"),
    lambda names: pd.Index(np.array(names), name="optimizer"),
], ids=["default", "object", "fixed"])
def test_text_dimensions_are_cf_character_arrays_and_come_back_as_an_index(tmp_path, make_index):
    one = xr.Dataset({"loss": ("step", np.zeros(3))}, coords={"step": [0, 1, 2]})
    ds = xr.concat([one, one + 1.0], dim=make_index(["gd", "adam"]))
    path = write_dataset(ds, tmp_path / "x.nc", title="test")
    with netCDF4.Dataset(path) as raw:  # CF checkers read only NC_CHAR text, not variable-length strings
        assert "optimizer" not in raw.variables
        assert raw["optimizer_label"].dtype == np.dtype("S1")
    back = open_result(path)
    assert list(back.optimizer.values) == ["gd", "adam"]
    assert float(back.loss.sel(optimizer="adam", step=2)) == 1.0


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def boom(self, *a, **k):
        raise RuntimeError("disk full")
    monkeypatch.setattr(xr.Dataset, "to_netcdf", boom)
    with pytest.raises(RuntimeError):
        write_dataset(sample(), tmp_path / "y.nc", title="t")
    assert os.listdir(tmp_path) == []


def test_truncated_and_foreign_files_are_named_in_the_error(tmp_path):
    path = write_dataset(sample(), tmp_path / "t.nc", title="t")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(ResultFileError, match=r"t\.nc cannot be read.*rule 'train'"):
        open_result(path, made_by="train")
    foreign = tmp_path / "f.nc"
    sample().to_netcdf(foreign, engine="netcdf4")
    with pytest.raises(ResultFileError, match="not written by nqf"):
        open_result(foreign)
    with pytest.raises(ResultFileError, match="does not exist"):
        open_result(tmp_path / "missing.nc", made_by="data")
    good = write_dataset(sample(), tmp_path / "t2.nc", title="t")
    with pytest.raises(ResultFileError, match="lacks the variable"):
        open_result(good, require=("nothing",))


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_written_files_honour_the_umask(tmp_path, umask, mode):
    """Atomic writes go through mkstemp (mode 0600 whatever the umask); the file renamed into
    place must have the mode a plain open() gives, 0666 minus the umask, so that a collaborator
    in the group can read a shared results folder."""
    import matplotlib.pyplot as plt

    from nqf.io.atomic import current_umask
    from nqf.io.netcdf import write_text
    from nqf.plotting import save

    old = os.umask(umask)
    try:
        assert current_umask() == umask
        nc = write_dataset(sample(), tmp_path / "x.nc", title="t")
        csv = write_text(tmp_path / "s.csv", "a,b\n")
        fig, _ = plt.subplots()
        save(fig, [tmp_path / "f.png", tmp_path / "f.pdf"])
        plain = tmp_path / "plain"
        plain.write_text("x")  # what the umask gives an ordinary file here
    finally:
        os.umask(old)
    assert plain.stat().st_mode & 0o777 == mode
    for path in (nc, csv, tmp_path / "f.png", tmp_path / "f.pdf"):
        assert path.stat().st_mode & 0o777 == mode, path.name


def test_text_variables_whose_names_end_in_digits_write_without_warnings(tmp_path):
    """xarray reads a trailing number in a character dimension's name as its length: a name like
    f0_strlen made it warn (seen in every data job's stderr); the names now carry the length."""
    import warnings

    ds = xr.Dataset({"f0": ("reading", np.array(["remove", "keep"])),
                     "label2": ("reading", np.array(["α-β", "x"], dtype=object))},
                    coords={"reading": [0, 1]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = write_dataset(ds, tmp_path / "x.nc", title="test")
    with netCDF4.Dataset(path) as raw:
        assert raw["f0"].dimensions == ("reading", "f0_strlen6")
        assert raw["label2"].dimensions == ("reading", "label2_strlen5")  # α and β: 2 UTF-8 bytes each
    back = open_result(path)
    assert list(back["f0"].values) == ["remove", "keep"] and list(back["label2"].values) == ["α-β", "x"]
