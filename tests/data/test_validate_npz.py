"""real_data's mnist_npz: check-config estimates the memory of a local .npz from its arrays' headers
(shape and dtype), not from the file's compressed size (issue 30: a header of (1000000, 28, 28)
compressed to 764 kB was estimated at 2.8 MB, and the data job then failed allocating 5.84 GiB
as 'a bug in nqf')."""
import io
import zipfile

import numpy as np
import pytest

from nqf.errors import ConfigError
from nqf.experiments import KINDS, check_config, machine
from nqf.pipeline.config import validate_config


def header_only_npz(path, shapes: dict, dtype=np.uint8):
    """An .npz whose members are .npy headers claiming ``shapes`` with no data after them: what
    check-config reads of a file (its headers), in a few hundred bytes on disk."""
    with zipfile.ZipFile(path, "w") as archive:
        for key, shape in shapes.items():
            buf = io.BytesIO()
            np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                       "fortran_order": False, "shape": shape})
            archive.writestr(f"{key}.npy", buf.getvalue())
    return path


MILLION = {"x_train": (1_000_000, 28, 28), "y_train": (1_000_000,), "x_test": (10_000, 28, 28), "y_test": (10_000,)}


def _config(path, **over):
    exp = {"kind": "real_data", "dataset": "mnist_npz", "path": str(path), "n_train": 100, "n_test": 50, **over}
    return validate_config({"device": "cpu", "experiments": {"rd": exp}})


def test_the_estimate_comes_from_the_headers_not_the_compressed_size(tmp_path):
    small = header_only_npz(tmp_path / "million.npz", MILLION)
    assert small.stat().st_size < 2000
    est = machine.estimate(KINDS["real_data"], _config(small)["experiments"]["rd"])
    # x_train alone is 784 MB as uint8; the labels, the test arrays and the kept images add a little
    assert 0.80e9 < est["bytes"] < 0.82e9 and est["key"] == "path"
    assert "x_train of shape (1000000, 28, 28), uint8" in est["what"]
    wide = header_only_npz(tmp_path / "float.npz", MILLION, dtype=np.float64)
    est = machine.estimate(KINDS["real_data"], _config(wide)["experiments"]["rd"])
    assert est["bytes"] > 6.3e9  # the 5.84 GiB the data job failed to allocate, and the rest


def test_a_file_too_large_for_the_machine_is_refused_naming_the_array(tmp_path, monkeypatch):
    path = header_only_npz(tmp_path / "million.npz", MILLION, dtype=np.float64)
    monkeypatch.setenv(machine.MEMORY_ENV, "4")  # 4 GB = 3.73 GiB
    with pytest.raises(ConfigError) as refused:
        check_config(_config(path))
    message = str(refused.value)
    assert message.startswith("Config key 'experiments.rd.path': x_train in million.npz has shape "
                              "(1000000, 28, 28) (float64) by its header")
    assert "reads the file's arrays whole, 5.91 GiB, and with the 150 images it keeps needs 5.92 GiB" in message
    assert "more than the 3.73 GiB available here" in message
    assert "point path to an .npz with fewer images (this experiment uses 150 of them)" in message
    monkeypatch.setenv(machine.MEMORY_ENV, "64")
    check_config(_config(path))  # fits a machine of 64 GB


def test_the_loader_converts_only_the_images_it_keeps(tmp_path):
    """The data job holds the file's arrays in their own dtype and float64 copies of the images it
    keeps only, never a float64 copy of the whole file (the 5.84 GiB of the issue): here 1.6 MB
    of uint8 images, whose float64 copy would be 12.5 MB."""
    import tracemalloc

    from nqf.data.datasets import load_digit_task

    g = np.random.default_rng(0)
    x_train = g.integers(0, 256, (2000, 28, 28)).astype(np.uint8)
    np.savez(tmp_path / "m.npz", x_train=x_train, y_train=np.arange(2000) % 10,
             x_test=g.integers(0, 256, (500, 784)).astype(np.uint8), y_test=np.arange(500) % 10)
    tracemalloc.start()
    try:
        task = load_digit_task("mnist_npz", n_train=30, n_test=10, seed=0, path=str(tmp_path / "m.npz"),
                               preprocessing="raw")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5e6, peak
    expect = x_train[np.random.default_rng(0).permutation(2000)[:30]] / float(x_train.max())
    assert task.x_train.dtype == np.float64 and np.array_equal(task.x_train, expect)
