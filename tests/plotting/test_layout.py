"""nqf.plotting.layout, run by nqf.plotting.save: legends placed off the data, readable log ticks,
and a PDF's further pages."""
import re

import numpy as np
import pytest

from nqf import plotting
from nqf.plotting import layout as plot_layout


def _axes():
    fig, ax = plotting.plt.subplots(figsize=(4, 3), layout="constrained")
    return fig, ax


def test_a_line_crossing_the_legend_counts_though_no_vertex_lies_inside():
    fig, ax = _axes()
    ax.plot([0, 1], [1, 0], label="diagonal")  # two vertices, both at the corners
    ax.plot([0.5], [0.5], marker="o", linestyle="none", label="point")
    legend = ax.legend(loc="center")
    fig.draw_without_rendering()
    assert plot_layout.legend_overlaps(ax, legend) == ["diagonal", "point"]
    legend.set_loc("upper right")
    assert plot_layout.legend_overlaps(ax, legend) == []
    plotting.plt.close(fig)


def test_the_legend_goes_where_it_covers_no_data():
    fig, ax = _axes()
    x = np.linspace(0, 1, 50)
    ax.plot(x, 1 - x, label="falling")  # covers upper left and lower right corners' diagonal
    ax.fill_between(x, 0, 0.3 * (1 - x), alpha=0.3, label="band")  # the lower left
    plotting.legend(ax, locations=("upper left", "lower left", "upper right"))
    plotting.finish(fig)
    renderer = fig.canvas.get_renderer()
    box, frame = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert box.x0 > frame.x0 + frame.width / 2 and box.y0 > frame.y0 + frame.height / 2  # upper right, the first free
    assert plot_layout.legend_overlaps(ax) == []
    plotting.plt.close(fig)


def test_a_legend_with_no_free_place_inside_goes_below_the_axes():
    fig, ax = _axes()
    rng = np.random.default_rng(0)
    ax.plot(rng.uniform(size=400), rng.uniform(size=400), "o", markersize=3, label="everywhere")
    ax.set_xlabel("x label")
    plotting.legend(ax)
    plotting.finish(fig)
    renderer = fig.canvas.get_renderer()
    legend_box = ax.get_legend().get_window_extent(renderer)
    assert legend_box.y1 <= ax.xaxis.label.get_window_extent(renderer).y0 + 1  # under the axis label
    assert plot_layout.legend_overlaps(ax) == []
    plotting.plt.close(fig)


def _labels(axis):
    """The labels of the major ticks in view, and the minor formatter."""
    lo, hi = sorted(axis.get_view_interval())
    ticks = [t for t in axis.get_major_ticks() if lo * (1 - 1e-9) <= t.get_loc() <= hi * (1 + 1e-9)]
    return [t.label1.get_text() for t in ticks if t.label1.get_text()], axis.get_minor_formatter()


@pytest.mark.parametrize("lo, hi", [(0.3, 0.9), (0.47, 1.0), (0.25, 1.0), (0.4, 4.0), (0.2, 1.5)])
def test_a_log_axis_spanning_under_two_powers_of_ten_gets_a_few_labels(lo, hi):
    fig, ax = _axes()
    ax.plot([1, 2], [lo, hi])
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    plotting.finish(fig)
    fig.draw_without_rendering()
    labels, minor = _labels(ax.yaxis)
    assert 2 <= len(labels) <= plot_layout.MAX_LOG_LABELS, labels
    assert minor(0.35) == "" and minor(3.5) == ""
    plotting.plt.close(fig)


@pytest.mark.parametrize("lo, hi, expected", [
    (0.3, 0.9, ["0.3", "0.5"]),
    (2.0, 40.0, ["2", "5", "10", "20"]),
    (600.0, 4000.0, ["1000", "2000"]),
    (3e-6, 9e-6, ["$\\mathdefault{3\\times10^{-6}}$", "$\\mathdefault{5\\times10^{-6}}$"]),
])
def test_a_narrow_log_axis_reads_as_plain_numbers_where_they_are_short(lo, hi, expected):
    """No '3x10^0' on an axis from 0.3 to 0.9: plain numbers between 1e-3 and 1e4, scientific
    notation outside."""
    fig, ax = _axes()
    ax.plot([1, 2], [lo, hi])
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    plotting.finish(fig)
    fig.draw_without_rendering()
    labels, _ = _labels(ax.yaxis)
    assert all(e in labels for e in expected), labels
    plotting.plt.close(fig)


@pytest.mark.parametrize("lo", [1e-18, 1e-5, 3e-6, 1e-4])
def test_a_wide_log_axis_is_labelled_at_powers_of_ten_only(lo):
    fig, ax = _axes()
    ax.plot([1, 2], [lo, 1.5])
    ax.set_yscale("log")
    plotting.finish(fig)
    fig.draw_without_rendering()
    labels, _ = _labels(ax.yaxis)
    assert 2 <= len(labels) <= plot_layout.MAX_LOG_LABELS, labels
    assert all("10^" in label for label in labels), labels
    assert all("times" not in label for label in labels), labels
    plotting.plt.close(fig)


def test_the_pdf_gets_the_further_pages_and_the_png_the_main_page(tmp_path):
    with plotting.style(9, 50):
        pages = []
        for n in range(3):
            fig, ax = plotting.plt.subplots(figsize=(2 if n == 0 else 6, 3))  # the main page is narrow
            ax.plot([0, 1], [0, n])
            pages.append(fig)
        plotting.save(pages[0], [tmp_path / "f.pdf", tmp_path / "f.png"], pdf_pages=pages[1:])
    assert re.search(rb"/Count 3\b", (tmp_path / "f.pdf").read_bytes())
    from PIL import Image
    assert Image.open(tmp_path / "f.png").size[0] < 4 * 50  # the main page alone


def _legend_figure():
    fig, axes = plotting.plt.subplots(1, 2, figsize=(5, 2.4), layout="constrained")
    for k, ax in enumerate(axes):
        x = np.linspace(1, 100, 50)
        ax.plot(x, x ** -(k + 1), label="experiment")
        ax.plot(x, 2 * x ** -(k + 1), "--", label="theory")
        ax.set(xscale="log", yscale="log", xlabel="step $t$", ylabel="loss")
        plotting.legend(ax)
    fig.suptitle("a title")
    return fig


def test_save_draws_each_file_once_after_the_layout_settles(tmp_path, monkeypatch):
    """savefig under constrained layout and the "tight" box draws a figure twice (lay out, then
    write); save lets finish's draw settle the layout, so each file is drawn once more only."""
    from matplotlib.figure import Figure

    draws = []
    real = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: (draws.append(1), real(self, renderer))[1])
    with plotting.style(9, 60):
        fig = _legend_figure()
        plotting.finish(fig)
        settling = len(draws)
        plotting.save(fig, [tmp_path / "f.pdf", tmp_path / "f.png"])
    assert settling >= 1
    assert len(draws) - settling == settling + 2  # save's own finish, then one draw per file
    assert fig.get_layout_engine() is None


def test_a_settled_figure_is_saved_as_savefig_would_save_it(tmp_path):
    """The same figure saved by save and by savefig's own layout and "tight" box: images of the
    same size and axes at the same places, to within the 2 pixels by which a second run of
    constrained layout may move them."""
    from PIL import Image

    dpi = 80
    with plotting.style(9, dpi):
        ours = _legend_figure()
        plotting.save(ours, [tmp_path / "ours.png"])
        theirs = _legend_figure()
        plotting.finish(theirs)
        theirs.savefig(tmp_path / "theirs.png")
    a, b = (Image.open(tmp_path / f"{name}.png").size for name in ("ours", "theirs"))
    assert abs(a[0] - b[0]) <= 2 and abs(a[1] - b[1]) <= 2, (a, b)
    size = np.array(ours.get_size_inches()).repeat(2) * dpi  # pixels per unit of x0, x1, y0, y1
    for ax_ours, ax_theirs in zip(ours.axes, theirs.axes):
        p, q = (np.array(ax.get_position().extents)[[0, 2, 1, 3]] for ax in (ax_ours, ax_theirs))
        assert np.all(np.abs(p - q) * size <= 2), (p, q)
    plotting.plt.close(theirs)
