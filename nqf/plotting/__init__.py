"""Figure conventions: experiment solid or markers, theory dashed, log axes where the physics is
exponential, legends that cover no data (nqf.plotting.layout), and atomic saving of PDF and PNG side by
side."""
from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backends.backend_pdf import PdfPages  # noqa: E402

from nqf.io.atomic import atomic_write  # noqa: E402
from nqf.plotting import layout as plot_layout  # noqa: E402

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


def legend(ax, *args, locations=plot_layout.LOCATIONS, **kwargs):
    """``ax.legend(*args, **kwargs)`` placed at save time at the first of ``locations`` (inside
    the axes) where it covers no data, else outside the axes to the right (nqf.plotting.layout)."""
    handles, labels = args if args else ax.get_legend_handles_labels()
    made = ax.legend(handles, labels, loc=locations[0], **kwargs)
    setattr(made, plot_layout.AUTO, tuple(locations))
    setattr(made, plot_layout.AUTO + "_args", (handles, labels, kwargs))
    return made


def finish(fig) -> None:
    """What every figure gets before it is saved: readable log ticks, then its legends placed."""
    plot_layout.tidy_log_ticks(fig)
    plot_layout.place_legends(fig)


def _pdf(path: str, pages, bboxes) -> None:
    with PdfPages(path) as pdf:
        for page, box in zip(pages, bboxes):
            pdf.savefig(page, bbox_inches=box)


def save(fig, paths, *, pdf_pages=()) -> None:
    """:func:`finish` ``fig`` and save it to each path (format from the suffix) atomically, then
    close it. ``pdf_pages``: further figures (finished the same way) that a PDF gets as its
    following pages; a PNG holds ``fig`` alone. Each file is drawn once, in the layout and
    bounding box that :func:`finish` settled (:func:`settle`)."""
    pages = (fig, *pdf_pages)
    bboxes = []
    for page in pages:
        finish(page)
        bboxes.append(settle(page))
    for path in map(Path, paths):
        if path.suffix == ".pdf" and pdf_pages:
            atomic_write(path, lambda tmp: _pdf(tmp, pages, bboxes))
        else:
            atomic_write(path, functools.partial(fig.savefig, format=path.suffix.lstrip("."), bbox_inches=bboxes[0]))
    for page in pages:
        plt.close(page)


def settle(fig):
    """Fix the layout of ``fig`` as its last draw left it, and return the box to save
    (``bbox_inches``: what ``savefig.bbox`` "tight" gives, or None where that is not set).

    ``savefig`` with a layout engine or a "tight" box draws the figure twice, once to lay it out
    and measure it and once to write it. After :func:`finish` has drawn it (constrained layout
    settled, legends placed) that first draw repeats work already done: with the layout engine
    removed (the axes keep the positions it gave them) and the box measured here once, every file
    is drawn once, which halves a figure job's drawing. The box is measured with the figure's own
    renderer at its own dpi (what ``savefig`` measures for a PNG at that dpi), padded by
    ``savefig.pad_inches``."""
    box = None
    if plt.rcParams["savefig.bbox"] == "tight":
        box = fig.get_tightbbox(fig.canvas.get_renderer()).padded(plt.rcParams["savefig.pad_inches"])
    with plt.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
        fig.set_layout_engine(None)  # None, not "none": savefig lays out again under any engine
    return box
