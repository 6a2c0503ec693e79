"""Figure: the block pattern of A(x) for every architecture, side by side."""
from __future__ import annotations

import math
import textwrap
from typing import Iterable, Sequence

import numpy as np
import torch

from nqf.plotting import plt, save, style


def _draw(ax, A: np.ndarray, blocks: list[tuple[str, int]], title: str, cmap) -> object:
    scale = float(np.abs(A).max())
    image = ax.imshow(A / scale if scale > 0 else A, cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
    edges = np.cumsum([0] + [n for _, n in blocks])
    for e in edges[1:-1]:
        ax.axhline(e - 0.5, color="0.25", linewidth=0.6)
        ax.axvline(e - 0.5, color="0.25", linewidth=0.6)
    centres = [(a + b - 1) / 2 for a, b in zip(edges[:-1], edges[1:])]
    labels = [name for name, _ in blocks]
    ax.set_xticks(centres, labels)
    ax.set_yticks(centres, labels)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(True)
        ax.spines[side].set_linewidth(0.6)
    ax.set_title(title, pad=14)
    if scale == 0:
        ax.text(0.5, 0.5, "A = 0", transform=ax.transAxes, ha="center", va="center", fontsize=11)
    return image


def plot_structure_matrices(paths: Iterable, x_seed: int = 0, names: Sequence[str] | None = None,
                            font_size: float = 9, dpi: int = 150) -> None:
    """Draw A(x) (output c = 1, one random input drawn with ``x_seed``) for each architecture.

    Dense A at the registry's small default sizes, each panel scaled by its own max |A| and drawn
    on a diverging colormap centred at 0; lines mark the parameter blocks of a unit (e.g. Q, K,
    V, v for attention). Defaults to the nonlinear modules; pass ``names`` for others.
    Saves to every path in ``paths`` (format from the suffix); ``font_size`` and ``dpi`` go to
    nqf.plotting.style.
    """
    from nqf.architectures.registry import ARCHITECTURES, MODULES

    names = list(MODULES if names is None else names)
    unknown = [n for n in names if n not in ARCHITECTURES]
    if unknown:
        raise ValueError(f"unknown architectures {unknown}; choose from {sorted(ARCHITECTURES)}.")
    ncols = min(len(names), max(3, math.ceil(math.sqrt(len(names)))))
    nrows = math.ceil(len(names) / ncols)
    cmap = plt.get_cmap("RdBu_r")
    with style(font_size=font_size, dpi=dpi):
        fig, axes = plt.subplots(nrows, ncols, figsize=(2.6 * ncols + 0.8, 2.9 * nrows), squeeze=False,
                                 layout="constrained")
        image = None
        for ax, name in zip(axes.flat, names):
            spec = ARCHITECTURES[name]
            module = spec.build()
            x = module.sample_inputs(1, torch.Generator().manual_seed(x_seed))
            A = module.structure(x).dense()[0].numpy()
            title = textwrap.fill(spec.title, 28) + f"\n{spec.reference}, p = {module.p}"
            image = _draw(ax, A, module.blocks(), title, cmap)
        for ax in list(axes.flat)[len(names):]:
            ax.set_visible(False)
        cbar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.5, pad=0.02)
        cbar.set_label("A(x) / max |A(x)|  (output c = 1)")
        save(fig, paths)
