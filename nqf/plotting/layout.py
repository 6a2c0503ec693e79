"""Figure layout checks and fixes that need the drawn figure (nqf.plotting.save runs them before
saving): legends placed where they cover no data, and log-axis ticks that stay readable.

A legend made with :func:`nqf.plotting.legend` is tried at each of its candidate locations inside
its axes, in order, and goes to the first where :func:`legend_overlaps` finds no data under it;
where every one covers data it goes outside the axes, below its tick labels and axis label, in
as many columns as fit the axes' width (constrained layout makes room).
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib import transforms
from matplotlib.collections import Collection, PathCollection
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation, LogLocator, NullFormatter

LOCATIONS = ("upper right", "upper left", "lower left", "lower right", "center right", "center left",
             "upper center", "lower center")
AUTO = "_nqf_locations"  # attribute of a legend that :func:`place_legends` places
MAX_LOG_LABELS = 5  # at most this many labelled ticks on a log axis


def _renderer(fig):
    return fig.canvas.get_renderer()


def _marker_pad(line: Line2D) -> float:
    """Half the marker size in display pixels (0 without markers)."""
    if line.get_marker() in (None, "None", "none", "", " "):
        return 0.0
    return 0.5 * line.get_markersize() * line.get_figure().dpi / 72.0


def _covers_line(line: Line2D, box) -> bool:
    if not line.get_visible() or len(line.get_xdata()) == 0:
        return False
    path = line.get_transform().transform_path(line.get_path())
    drawn = line.get_linestyle() not in ("None", "none", "", " ")
    if drawn and path.intersects_bbox(box, filled=False):
        return True
    pad = _marker_pad(line)
    if pad == 0.0:
        return False
    xy = path.vertices
    xy = xy[np.all(np.isfinite(xy), axis=1)]
    return bool(np.any((xy[:, 0] >= box.x0 - pad) & (xy[:, 0] <= box.x1 + pad)
                       & (xy[:, 1] >= box.y0 - pad) & (xy[:, 1] <= box.y1 + pad)))


def _covers_collection(coll: Collection, box) -> bool:
    if not coll.get_visible():
        return False
    if isinstance(coll, PathCollection) and len(coll.get_offsets()):  # scatter markers
        xy = coll.get_offset_transform().transform(np.asarray(coll.get_offsets(), float))
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        return bool(np.any((xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)))
    transform = coll.get_transform()
    return any(transform.transform_path(p).intersects_bbox(box, filled=True) for p in coll.get_paths())


def legend_overlaps(ax, legend=None) -> list[str]:
    """What the axes legend (or ``legend``, e.g. a figure legend) covers among ``ax``'s data: its
    lines (line and markers, reference lines included), bands and scatter, and its texts; the
    names of the covered artists (their labels or kinds), empty if none. Shaded backgrounds
    (axvspan patches) do not count. Needs a drawn figure."""
    legend = legend if legend is not None else ax.get_legend()
    if legend is None or not legend.get_visible():
        return []
    renderer = _renderer(ax.get_figure())
    box = legend.get_window_extent(renderer)
    axes_box = ax.get_window_extent(renderer)
    if not box.overlaps(axes_box):
        return []
    found = [line.get_label() for line in ax.get_lines() if _covers_line(line, box)]
    found += [f"band {c.get_label()}" for c in ax.collections if _covers_collection(c, box)]
    found += [f"text '{t.get_text()}'" for t in ax.texts
              if t.get_visible() and t.get_text() and t.get_window_extent(renderer).overlaps(box)]
    return found


def _below(ax, legend):
    """The legend remade outside ``ax``, centred under its tick labels and x label, with as many
    columns as fit the axes' width."""
    renderer = _renderer(ax.get_figure())
    handles, labels, kwargs = getattr(legend, AUTO + "_args")
    box, tight = ax.get_window_extent(renderer), ax.get_tightbbox(renderer, for_layout_only=True)
    widest = max(legend.get_window_extent(renderer).width, 1.0)
    per_column = widest / max(legend._ncols, 1)
    ncols = int(max(1, min(len(labels), box.width // per_column)))
    # anchored a fixed distance in points under the axes: constrained layout then shrinks the axes
    # without moving the legend onto the axis label
    drop = (box.y0 - tight.y0) / ax.get_figure().dpi + 0.03
    anchor = transforms.offset_copy(ax.transAxes, fig=ax.get_figure(), y=-drop, units="inches")
    below = ax.legend(handles, labels, **{**kwargs, "ncols": ncols, "loc": "upper center",
                                          "bbox_to_anchor": (0.5, 0.0), "bbox_transform": anchor})
    setattr(below, AUTO, ())
    setattr(below, AUTO + "_below", True)
    return below


def _place(ax, legend) -> None:
    for loc in getattr(legend, AUTO):
        legend.set_loc(loc)
        if not legend_overlaps(ax, legend):
            return
    _below(ax, legend)


def place_legends(fig) -> None:
    """Put every legend made by nqf.plotting.legend at its first free candidate location (else
    below its axes, outside). Draws the figure first (constrained layout settles); where a legend
    went below its axes the layout changes (the axes shrink), so the figure is drawn again and
    the legends still inside are placed anew, until none moves (at most 3 rounds)."""
    axes = [ax for ax in fig.get_axes() if ax.get_legend() is not None and hasattr(ax.get_legend(), AUTO)]
    for _ in range(3):
        fig.draw_without_rendering()
        inside = [ax for ax in axes if not getattr(ax.get_legend(), AUTO + "_below", False)]
        for ax in inside:
            _place(ax, ax.get_legend())
        if all(not getattr(ax.get_legend(), AUTO + "_below", False) for ax in inside):
            return
    fig.draw_without_rendering()


# a narrow log axis's ticks are written as plain numbers inside this range ("0.3", "2", "500"),
# in scientific notation outside it ("$3 \\times 10^{-5}$")
PLAIN_LABELS = (1e-3, 1e4)


def _narrow_log_label(value: float, _pos=None) -> str:
    """The label of a tick of a log axis spanning under two powers of ten."""
    if not (value > 0 and math.isfinite(value)):
        return ""
    if PLAIN_LABELS[0] <= value < PLAIN_LABELS[1]:
        return f"{float(f'{value:.3g}'):g}"  # three digits, never in e-notation here
    exponent = math.floor(math.log10(value))
    mantissa = float(f"{value / 10 ** exponent:.3g}")
    if mantissa >= 10:  # 9.9995 rounded up
        mantissa, exponent = mantissa / 10, exponent + 1
    if mantissa == 1:
        return f"$\\mathdefault{{10^{{{exponent}}}}}$"
    return f"$\\mathdefault{{{mantissa:g}\\times10^{{{exponent}}}}}$"


def tidy_log_ticks(fig) -> None:
    """Every log axis of ``fig``: at most MAX_LOG_LABELS labelled ticks, minor ticks unlabelled.
    An axis with two or more powers of ten in view is labelled at powers of ten only (every n-th
    where there are many); a narrower one at 1, 2 and 5 times a power of ten (1, 2, 3, 5 where it
    spans under a decade, 1-6 and 8 under half a decade), as plain numbers between 1e-3 and 1e4
    ("0.3", "2") and in scientific notation outside ("$3 \\times 10^{-5}$")."""
    for ax in fig.get_axes():
        for axis, limits in ((ax.xaxis, ax.get_xlim), (ax.yaxis, ax.get_ylim)):
            if axis.get_scale() != "log":
                continue
            lo, hi = sorted(limits())
            if not (lo > 0 and math.isfinite(hi)):
                continue
            decades = math.log10(hi / lo)
            powers = math.floor(math.log10(hi)) - math.ceil(math.log10(lo)) + 1  # powers of ten in view
            if powers >= 2:
                stride = math.ceil(powers / MAX_LOG_LABELS)  # label every stride-th power of ten
                axis.set_major_locator(LogLocator(base=10.0 ** stride, numticks=MAX_LOG_LABELS + 2))
                axis.set_major_formatter(LogFormatterSciNotation(base=10.0, labelOnlyBase=True))
                axis.set_minor_locator(LogLocator(base=10.0, subs=np.arange(1, 10) * 1.0, numticks=100))
                axis.set_minor_formatter(NullFormatter())
                continue
            else:
                subs = ((1.0, 2.0, 5.0) if decades >= 1.0 else (1.0, 2.0, 3.0, 5.0) if decades >= 0.5
                        else (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0))
                axis.set_major_locator(LogLocator(base=10.0, subs=subs, numticks=MAX_LOG_LABELS + 1))
                axis.set_major_formatter(FuncFormatter(_narrow_log_label))
            axis.set_minor_locator(LogLocator(base=10.0, subs=np.arange(2, 10) * 1.0, numticks=12))
            axis.set_minor_formatter(NullFormatter())
