"""The memory chart's plot commands and legend once it has samples (:meth:`gpumem_tui.ui.
memory_chart.MemoryChart.replot`): the scale, the bands and total line, the curves (coloured by
phase when the probe marked phases), the per-phase high-water envelope, the axes and the key
that tells whether anything visible changed.

A module of its own so that the dashboard's first frame, whose chart has no samples yet, does
not compile it on a first start (benchmarks/first_frame.py). Every function takes the chart
(``MemoryChart``) whose inputs it draws; values are divided by the unit's ``factor``, times are
relative to ``now`` (epoch seconds of the newest sample).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from rich.text import Text

from gpumem_tui.support.units import format_bytes
from gpumem_tui.telemetry.model import Phase, PhaseMark
from gpumem_tui.ui.chart_scale import ENVELOPE_MARKER, axis_ops, choose_unit, envelope, plot_key, thin

# The chart, its plot and curves (CurveSpec) are memory_chart's, annotated Any here: memory_chart
# imports this module. A band is memory_chart.Band: (label, cumulative bytes, colour variable).
Band = tuple[str, int, str]

TOTAL_SCALE_LIMIT = 2.5  # the total line stays on scale while total <= 2.5 x the largest value

PHASE_VARS: dict[Phase, str] = {
    Phase.INIT: "phase-init",
    Phase.FORWARD: "phase-forward",
    Phase.BACKWARD: "phase-backward",
    Phase.OPTIMIZER_STEP: "phase-optimizer-step",
}
PHASE_LABELS: dict[Phase, str] = {
    Phase.INIT: "init",
    Phase.FORWARD: "forward",
    Phase.BACKWARD: "backward",
    Phase.OPTIMIZER_STEP: "optimizer step",
}


def plot_samples(chart: Any, plot_size: Any, curves: list[Any], now: float,
                 width: int) -> tuple[list[tuple[str, tuple, dict]], Text, tuple]:
    """(plot commands, legend, key) of ``chart`` (a MemoryChart) with its visible ``curves``
    (CurveSpec, none empty) on its MemoryPlot of ``plot_size`` (a Textual Size, in cells),
    ``width`` cells of plot; sets the chart's ``envelope_runs`` and ``total_on_scale``."""
    ops: list[tuple[str, tuple, dict]] = []
    legend_text = Text()
    bands = chart.bands if chart.show_bands else []
    span, runs, peak, total_on_scale = _fit_scale(chart, curves, bands, now, width)
    total = chart.total_bytes
    unit, factor = choose_unit(peak)
    marks = chart.visible_phase_marks()
    # Until the history fills the window, span only what there is (at least 30 s, or the
    # window when it is shorter), so a fresh start does not squeeze the curve to the right.
    x_lo = -span
    x_hi = 0.0
    top = peak / factor * 1.08
    # Resolution of the key: finer than the canvas (2 dots per cell of the whole widget).
    x_dot = -x_lo / max(2 * plot_size.width, 1)
    y_dot = top / max(4 * plot_size.height, 1)
    curve_keys: list[tuple] = []
    theme = chart.app.theme_variables
    # Bands and the total first, so the measured curves are drawn over them. The legend is
    # drawn under the plot, not in a box that would hide the data.
    _plot_guides(chart, ops, curve_keys, bands=bands, total=total if total_on_scale else None, marks=marks,
                 now=now, factor=factor, x_lo=x_lo, x_hi=x_hi, x_dot=x_dot, width=width)
    for index, curve in enumerate(curves):
        pts = thin(curve.points, width)
        phased = index == 0 and bool(marks)
        if phased:
            _plot_by_phase(chart, ops, pts, now, factor)
        else:
            xs = [t - now for t, _ in pts]
            ys = [v / factor for _, v in pts]
            ops.append(("plot", (xs, ys), {"color": chart._rgb(curve.color_var), "marker": "braille"}))
        style = theme.get(curve.color_var, "") if not phased else theme.get("phase-forward", "")
        legend_text.append("⣿⣿ ", style=style)
        suffix = (" samples (coloured by phase)" if runs else " (coloured by phase)") if phased else ""
        legend_text.append(curve.label + suffix + "  ")
    for phase, points in runs:
        var = PHASE_VARS.get(phase, "curve-measured")
        ops.append(("plot", ([t - now for t, _ in points], [v / factor for _, v in points]),
                    {"color": chart._rgb(var), "marker": ENVELOPE_MARKER}))
    _legend_guides(chart, legend_text, theme, bool(runs), total, total_on_scale, bands, bool(marks))
    ops.extend(axis_ops(chart.title, unit, x_lo, x_hi, top))
    # The key: everything drawn, with positions in dots (x relative to the left edge).
    key = (plot_key(ops, curve_keys, x_lo, x_dot, y_dot), round(x_lo / x_dot), round(top / y_dot), plot_size,
           chart.app.theme)
    return ops, legend_text, key


def _fit_scale(chart: Any, curves: list[Any], bands: Sequence[Band], now: float,
               width: int) -> tuple[float, list, float, bool]:
    """(seconds spanned, envelope runs, the largest value to show, whether the total line is
    on the scale) of ``curves`` (CurveSpec); sets the chart's ``envelope_runs`` and ``total_on_scale``."""
    data_peak = max(max(v for _, v in c.points) for c in curves)
    oldest = min(c.points[0][0] for c in curves)
    span = min(chart.window, max(now - oldest, min(chart.window, 30.0)))
    runs = envelope(chart.phase_peaks, now - span, now, width) if chart.phase_peaks else []
    chart.envelope_runs = runs
    if runs:
        data_peak = max(data_peak, max(v for _, points in runs for _, v in points))
    if bands:
        data_peak = max(data_peak, max(b[1] for b in bands))
    total = chart.total_bytes
    # A 40 GiB total line would flatten a 2 GiB process curve to the axis: the total stays
    # on the plot only when it is within TOTAL_SCALE_LIMIT x the data (or `fit_total`).
    if chart.fit_total is None:
        total_on_scale = bool(total) and total <= TOTAL_SCALE_LIMIT * max(data_peak, 1)
    else:
        total_on_scale = bool(total) and chart.fit_total
    chart.total_on_scale = total_on_scale
    peak = max(data_peak, total) if total_on_scale and total else data_peak
    return span, runs, peak, total_on_scale


def _plot_guides(chart: Any, ops: list, curve_keys: list, *, bands: Sequence[Band], total: int | None,
                 marks: list[PhaseMark], now: float, factor: int, x_lo: float, x_hi: float, x_dot: float,
                 width: int) -> None:
    """The plot commands of the bands, the total (None: not on the scale) and, when few, a
    vertical line per phase start (their keys go into ``curve_keys``); values are divided
    by the unit's ``factor``, times are relative to ``now``, ``x_dot`` seconds per dot."""
    for label, value, var in bands:
        ops.append(("plot", ([x_lo, x_hi], [value / factor] * 2), {"color": chart._rgb(var), "marker": "braille"}))
    if total:
        ops.append(("plot", ([x_lo, x_hi], [total / factor] * 2), {"color": chart._rgb("line-total"), "marker": "━"}))
    if marks and len(marks) <= width // 8:
        for m in marks:
            var = PHASE_VARS.get(m.phase)
            if var:
                ops.append(("vline", (m.time - now,), {"color": chart._rgb(var)}))
                curve_keys.append(("vline", round((m.time - now) / x_dot)))


def _legend_guides(chart: Any, legend_text: Text, theme: dict[str, str], runs: bool, total: int | None,
                   total_on_scale: bool, bands: Sequence[Band], marks: bool) -> None:
    """The legend after the curves': the phase envelope, the total, the bands, the phases."""
    if runs:
        legend_text.append("▀▀ ", style=theme.get("phase-backward", ""))
        legend_text.append("peak of each phase (probe high-water mark)  ")
    if total:
        legend_text.append("━━ ", style=theme.get("line-total", ""))
        legend_text.append(f"{chart.total_label} {format_bytes(total)}")
        if total_on_scale:
            legend_text.append("  ")
        elif chart.fit_total is None:
            legend_text.append(" (above the plot; t scales to it)  ")
        else:
            legend_text.append(" (off the scale; t scales to it)  ")
    if bands:
        legend_text.append(f"\npredicted, {chart.bands_note}: " if chart.bands_note else "\npredicted: ")
    elif chart.bands_note and chart.show_bands:
        legend_text.append(f"\npredicted: {chart.bands_note}", style="italic")
    for label, value, var in bands:
        legend_text.append("── ", style=theme.get(var, ""))
        legend_text.append(f"{label} {format_bytes(value)}  ")
    if marks:
        legend_text.append("\nphases: ")
        for phase, var in PHASE_VARS.items():
            legend_text.append("━━ ", style=theme.get(var, ""))
            legend_text.append(f"{PHASE_LABELS[phase]}  ")


def _plot_by_phase(chart: Any, ops: list, pts, now, factor) -> None:  # noqa: ANN001
    """Plot one curve in segments coloured by the phase each sample fell in."""
    times = [m.time for m in chart.phase_marks]
    segments: list[tuple[str, list[tuple[float, float]]]] = []
    for t, v in pts:
        i = bisect_right(times, t) - 1
        phase = chart.phase_marks[i].phase if i >= 0 else None
        var = PHASE_VARS.get(phase, "curve-measured") if phase is not None else "curve-measured"
        if segments and segments[-1][0] == var:
            segments[-1][1].append((t, v))
        else:
            if segments:
                segments[-1][1].append((t, v))  # join segments without a gap
            segments.append((var, [(t, v)]))
    for var, seg in segments:
        ops.append(("plot", ([t - now for t, _ in seg], [v / factor for _, v in seg]),
                    {"color": chart._rgb(var), "marker": "braille"}))
