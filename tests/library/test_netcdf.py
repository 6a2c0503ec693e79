"""NetCDF contract: CF and provenance attributes, atomic writes, clear errors on bad files."""
import os

import numpy as np
import pytest
import xarray as xr

from nqf.netcdf import ResultFileError, config_of, open_result, write_dataset


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

    from nqf.netcdf import current_umask, write_text
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
