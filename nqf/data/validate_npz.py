"""A cheap look at a local MNIST .npz before any job starts (real_data's dataset mnist_npz): the
file exists and is readable, is a zip of .npy arrays, has x_train, y_train, x_test, y_test, and
their shapes fit together and hold the images the config asks for. Only the arrays' headers are
read (not the pixels), so a bad path or file is refused in one sentence at config time instead
of in the data job. The same headers give the memory the data job needs to load the file
(:func:`npz_arrays`, real_data's estimate): an array's shape and dtype, not the file's compressed
size, which says nothing of it (a million blank images compress to under a megabyte).
"""
from __future__ import annotations

import math
import os
import zipfile
from pathlib import Path

import numpy as np

from nqf.data.datasets import NPZ_KEYS


def _header(archive: zipfile.ZipFile, key: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of the array ``key`` of an .npz, from its .npy header alone."""
    with archive.open(f"{key}.npy") as fh:
        version = np.lib.format.read_magic(fh)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(fh)
    return tuple(shape), dtype


def npz_arrays(path) -> dict[str, tuple[tuple[int, ...], np.dtype]] | None:
    """Shape and dtype of each array of an MNIST .npz (x_train, y_train, x_test, y_test), from
    their .npy headers alone (however large the arrays, nothing of them is read or allocated);
    None where the file cannot be read so (:func:`npz_problems` says why)."""
    try:
        with zipfile.ZipFile(Path(str(path)).expanduser()) as archive:
            return {k: _header(archive, k) for k in NPZ_KEYS}
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, TypeError):
        return None


def array_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """Bytes of an array of ``shape`` and ``dtype`` in memory (what np.load allocates for it)."""
    return math.prod(shape) * np.dtype(dtype).itemsize


def image_shape(shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(H, W) of images stored as (n, H, W) or (n, H*W) with H = W, else None."""
    if len(shape) == 3:
        return shape[1], shape[2]
    if len(shape) == 2:
        side = math.isqrt(shape[1])
        return (side, side) if side * side == shape[1] else None
    return None


def npz_problems(path, n_train: int, n_test: int) -> tuple[list[tuple[str, str]], tuple[int, int] | None]:
    """((key, sentence) pairs, image shape) for the .npz at ``path``; the shape is None where the
    file could not be read."""
    file = Path(str(path)).expanduser()
    what = "x_train, y_train, x_test, y_test"
    if not file.exists():
        return [("path", f"{str(file)!r} does not exist; set path to a local MNIST .npz ({what}).")], None
    if not file.is_file() or not os.access(file, os.R_OK):
        return [("path", f"{str(file)!r} is not a readable file; set path to a local MNIST .npz ({what}).")], None
    try:
        with zipfile.ZipFile(file) as archive:
            names = set(archive.namelist())
            missing = [k for k in NPZ_KEYS if f"{k}.npy" not in names]
            if missing:
                return [("path", f"{str(file)!r} lacks the arrays {', '.join(missing)}; an MNIST .npz holds "
                                 f"{what}.")], None
            shapes = {k: _header(archive, k)[0] for k in NPZ_KEYS}
    except (zipfile.BadZipFile, OSError, ValueError, KeyError) as exc:
        return [("path", f"{str(file)!r} is not an .npz file of arrays ({type(exc).__name__}); set path to "
                         f"a local MNIST .npz ({what}).")], None
    for split, n_wanted in (("train", n_train), ("test", n_test)):
        x, y = shapes[f"x_{split}"], shapes[f"y_{split}"]
        if image_shape(x) is None:
            return [("path", f"x_{split} in {file.name} has shape {x}; it must be (n, H, W) or (n, H*W) "
                             "with square images.")], None
        if len(y) != 1 or y[0] != x[0]:
            return [("path", f"y_{split} in {file.name} has shape {y} for {x[0]} images in x_{split}; it "
                             "must hold one digit label per image.")], None
        if n_wanted > x[0]:
            return [(f"n_{split}", f"asks for {n_wanted} images but x_{split} in {file.name} has {x[0]}; "
                                   f"lower n_{split}.")], None
    train, test = image_shape(shapes["x_train"]), image_shape(shapes["x_test"])
    if train != test:
        return [("path", f"{file.name} has {train[0]}x{train[1]} training images but {test[0]}x{test[1]} "
                         "test images; both must have one size.")], None
    return [], train
