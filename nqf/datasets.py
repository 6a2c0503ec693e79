"""Real image data for the odd-vs-even digit task (paper Figure 7), without any download.

Two sources, one result (:class:`DigitTask`):

* ``digits8x8``: scikit-learn's 8x8 handwritten digits (1797 images, 16 grey levels), which
  ship inside the scikit-learn package, so nothing is fetched. This is what the default runs use.
* ``mnist_npz``: the paper's MNIST (28x28), read from a local ``.npz`` file a user already has.
  Format: arrays ``x_train`` (n, 28, 28) or (n, 784), ``y_train`` (n,) digit labels 0-9,
  ``x_test``, ``y_test`` likewise (any square image size works; pixel values in any range). The
  file that ``keras.datasets.mnist`` caches (``mnist.npz``) has exactly these keys.

Targets are y = +1 for an odd digit and -1 for an even one. Inputs are standardised per pixel
with the training set's mean and standard deviation (pixels constant over the training set,
such as the corners of the 8x8 digits, become 0), then multiplied by ``input_scale``.
The train/test split (digits8x8) and the subsets (mnist_npz) are drawn from ``seed`` alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATASETS = ("digits8x8", "mnist_npz")
NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


@dataclass
class DigitTask:
    """Standardised images (n, H, W), +-1 odd/even targets and the digit labels, train and test."""

    x_train: np.ndarray
    y_train: np.ndarray
    digit_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    digit_test: np.ndarray
    source: str

    @property
    def image_shape(self) -> tuple[int, int]:
        return tuple(self.x_train.shape[1:])


def odd_even_targets(digits: np.ndarray) -> np.ndarray:
    """+1 for odd digits, -1 for even ones (float64)."""
    return np.where(np.asarray(digits) % 2 == 1, 1.0, -1.0)


def standardise(x_train: np.ndarray, x_test: np.ndarray, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Per-pixel (x - mean) / std with the training set's statistics, times ``scale``.

    Pixels with zero spread over the training set carry no information and become 0.
    """
    mean = x_train.mean(0)
    std = x_train.std(0)
    safe = np.where(std > 0, std, 1.0)
    keep = (std > 0).astype(float)
    return (scale * keep * (x_train - mean) / safe, scale * keep * (x_test - mean) / safe)


def _square_images(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 2:
        side = int(round(np.sqrt(x.shape[1])))
        if side * side != x.shape[1]:
            raise ValueError(f"{name} has {x.shape[1]} pixels per image, not a square number; store "
                             "images as (n, H, W) or (n, H*W) with H = W.")
        x = x.reshape(-1, side, side)
    if x.ndim != 3:
        raise ValueError(f"{name} must have shape (n, H, W) or (n, H*W); got {x.shape}.")
    return x


def _subset(n_avail: int, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    if n > n_avail:
        raise ValueError(f"{what} asks for {n} images but only {n_avail} are available; lower it.")
    return np.sort(rng.permutation(n_avail)[:n])


def load_digit_task(dataset: str = "digits8x8", *, n_train: int = 1200, n_test: int = 597, seed: int = 0,
                    path: str | None = None, input_scale: float = 1.0) -> DigitTask:
    """The odd-vs-even task: ``n_train`` / ``n_test`` images, split or subsampled with ``seed``.

    ``digits8x8`` splits scikit-learn's 1797 digits into disjoint train and test sets (n_train +
    n_test <= 1797). ``mnist_npz`` reads ``path`` (see the module docstring for its format) and
    draws n_train images from its training arrays and n_test from its test arrays.
    """
    rng = np.random.default_rng(seed)
    if dataset == "digits8x8":
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images, digits = bunch.images.astype(np.float64), bunch.target.astype(np.int64)
        if n_train + n_test > len(digits):
            raise ValueError(f"digits8x8 has {len(digits)} images; n_train + n_test = {n_train + n_test} "
                             "is more. Lower n_train or n_test.")
        order = rng.permutation(len(digits))
        tr, te = np.sort(order[:n_train]), np.sort(order[n_train:n_train + n_test])
        x_tr, d_tr, x_te, d_te = images[tr], digits[tr], images[te], digits[te]
        source = "scikit-learn 8x8 digits (sklearn.datasets.load_digits)"
    elif dataset == "mnist_npz":
        if not path:
            raise ValueError("dataset mnist_npz needs `path`: a local .npz with x_train, y_train, "
                             "x_test, y_test (nothing is downloaded).")
        file = Path(path).expanduser()
        if not file.is_file():
            raise ValueError(f"MNIST file {str(file)!r} does not exist; set `path` to a local .npz "
                             "with x_train, y_train, x_test, y_test.")
        with np.load(file) as npz:
            missing = [k for k in NPZ_KEYS if k not in npz]
            if missing:
                raise ValueError(f"{str(file)!r} lacks the arrays {', '.join(missing)}; it needs "
                                 f"{', '.join(NPZ_KEYS)}.")
            arrays = {k: npz[k] for k in NPZ_KEYS}
        x_all_tr, x_all_te = _square_images(arrays["x_train"], "x_train"), _square_images(arrays["x_test"], "x_test")
        d_all_tr = np.asarray(arrays["y_train"]).astype(np.int64).reshape(-1)
        d_all_te = np.asarray(arrays["y_test"]).astype(np.int64).reshape(-1)
        if len(d_all_tr) != len(x_all_tr) or len(d_all_te) != len(x_all_te):
            raise ValueError(f"{str(file)!r}: image and label counts differ.")
        tr = _subset(len(d_all_tr), n_train, rng, "n_train")
        te = _subset(len(d_all_te), n_test, rng, "n_test")
        x_tr, d_tr, x_te, d_te = x_all_tr[tr], d_all_tr[tr], x_all_te[te], d_all_te[te]
        source = f"MNIST from {file.name}"
    else:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}; got {dataset!r}.")
    x_tr, x_te = standardise(x_tr, x_te, input_scale)
    return DigitTask(x_tr, odd_even_targets(d_tr), d_tr, x_te, odd_even_targets(d_te), d_te, source)
