"""Random orthogonal matrices for designed data (the feature-wise and collapse experiments build
data matrices with prescribed Lotka-Volterra coefficients by rotating a diagonal design)."""
from __future__ import annotations

import numpy as np


def random_orthogonal(n: int, rng: np.random.Generator) -> np.ndarray:
    """Haar-random n x n orthogonal matrix: QR of a Gaussian matrix, with the signs of R's diagonal
    moved into Q so that the distribution is uniform (Mezzadri's fix)."""
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer; got {n!r}.")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator (np.random.default_rng(seed)); got a {type(rng).__name__}.")
    q, r = np.linalg.qr(rng.standard_normal((int(n), int(n))))
    return q * np.sign(np.diag(r))
