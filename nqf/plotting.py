"""Figure conventions: experiment solid or markers, theory dashed, log axes where the physics is
exponential, and atomic saving of PDF and PNG side by side."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nqf.netcdf import temporary_beside  # noqa: E402

THEORY = {"linestyle": "--", "linewidth": 1.2}
EXPERIMENT = {"linestyle": "-", "linewidth": 1.6}
MARKERS = {"linestyle": "none", "marker": "o", "markersize": 3.2, "markerfacecolor": "none"}
IGNITION = {"linestyle": (0, (4, 3)), "linewidth": 0.8, "alpha": 0.7}


@contextlib.contextmanager
def style(font_size: float = 9, dpi: int = 150):
    """Matplotlib settings shared by every nqf figure."""
    rc = {
        "font.size": font_size, "axes.titlesize": font_size + 1, "axes.labelsize": font_size,
        "legend.fontsize": font_size - 1, "xtick.labelsize": font_size - 1,
        "ytick.labelsize": font_size - 1, "savefig.dpi": dpi, "figure.dpi": dpi,
        "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
        "pdf.fonttype": 42, "savefig.bbox": "tight",
    }
    with plt.rc_context(rc):
        yield


def mode_colors(n: int):
    """n distinguishable colours (viridis without its pale end)."""
    cmap = plt.get_cmap("viridis")
    return [cmap(0.9 * i / max(n - 1, 1)) for i in range(n)]


def save(fig, paths) -> None:
    """Save ``fig`` to each path (format from the suffix) atomically, then close it."""
    for path in map(Path, paths):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temporary_beside(path)  # named for the sweep of dead writers' leftovers, umask honoured
        os.close(fd)
        try:
            fig.savefig(tmp, format=path.suffix.lstrip("."))
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
    plt.close(fig)
