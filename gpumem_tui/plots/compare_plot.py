"""``gpumem-tui compare TRACE --plot``: the measured curve, the per-step envelope and the
predicted phase levels of one probed job, over time.

Takes plain values (no trace reading, no estimator): the measured curve as ``(time, bytes)``
points, each step's peak as a :class:`Level` over the step's span, and each phase's predicted
peak as a :class:`Level` over the spans where that phase ran. The caller says which figure the
curve is (``NVML used``, ``torch reserved``, ``torch allocated`` or ``CPU live tensors``,
:mod:`gpumem_tui.analysis.comparison`): the prediction drawn must be the one comparable with it.

Times are seconds on any one clock (epoch seconds in a trace); the x axis counts from the
earliest of them, in s, min or h. The curve is reduced to the lowest and highest point of each
of ``4 x width`` time buckets before drawing (plotext draws a braille cell per half column and
two per row, so nothing visible is lost, and a day-long trace costs no more than a minute's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpumem_tui.plots.canvas import Style, byte_axis, format_size, legend_lines, new_figure, render
from gpumem_tui.plots.options import PlotOptions
from gpumem_tui.support.text import printable

CURVE_STYLE = Style("⣿", 12)  # the legend's sample of the braille curve
STEP_STYLE = Style("^", 9)
#: predicted phase levels, by phase name; any other phase gets OTHER_PHASE_STYLE
PHASE_STYLES = {
    "forward": Style("-", 10), "backward": Style("=", 13), "optimizer_step": Style("~", 11),
    "prefill": Style("-", 10), "decode": Style("=", 13),
}
OTHER_PHASE_STYLE = Style(".", 14)
_FRAME_ROWS = 5  # title, frame top and bottom, tick labels, axis labels


@dataclass(frozen=True)
class Level:
    """``value_bytes`` held from ``start`` to ``end`` (seconds, the curve's clock; ``start``
    and ``end`` None: the whole plot), named ``label`` (a step number or a phase name)."""

    value_bytes: int
    label: str
    start: float | None = None
    end: float | None = None


def _time_unit(span_s: float) -> tuple[str, float]:
    if span_s < 600:
        return "s", 1.0
    if span_s < 10 * 3600:
        return "min", 60.0
    return "h", 3600.0


def reduce_curve(points: Sequence[tuple[float, int]], buckets: int) -> list[tuple[float, int]]:
    """``points`` (sorted by time here) with at most two per time bucket: the lowest and the
    highest, in time order, so a peak or a dip narrower than a bucket still shows. Points
    with a non-finite time are dropped; fewer than ``2 * buckets`` points come back as given."""
    ordered = sorted((t, int(b)) for t, b in points if math.isfinite(t))
    if len(ordered) <= 2 * buckets:
        return ordered
    first, last = ordered[0][0], ordered[-1][0]
    width = (last - first) / buckets or 1.0
    groups: dict[int, list[tuple[float, int]]] = {}
    for t, b in ordered:
        groups.setdefault(min(int((t - first) / width), buckets - 1), []).append((t, b))
    out: list[tuple[float, int]] = []
    for group in groups.values():
        low, high = min(group, key=lambda p: p[1]), max(group, key=lambda p: p[1])
        out.extend(sorted({low, high}))
    return out


def compare_plot(curve: Sequence[tuple[float, int]], figure_name: str, options: PlotOptions, *,
                 steps: Sequence[Level] = (), phases: Sequence[Level] = (), title: str = "",
                 steps_label: str = "per-step peak") -> str:
    """The chart and its legend as text, every line at most ``options.width`` columns.

    Args:
        curve: measured ``(time s, bytes)`` points of the process.
        figure_name: which figure ``curve`` is, e.g. ``"torch reserved"`` (shown as given,
            made printable).
        options: size and colour (:func:`gpumem_tui.plots.options.plot_options`).
        steps: one :class:`Level` per step: its peak over its span (the per-step envelope).
        phases: the predicted peak of each phase over the spans where it ran; a phase whose
            spans are unknown comes as one :class:`Level` without ``start``/``end``.
        title: the job (e.g. ``"pid 4242 on cuda:0, gpt2"``); made printable.
        steps_label: what ``steps`` are, for the legend (e.g. ``"per-step highest sample"``
            when they come from the samples rather than the probe's high-water marks).

    Raises:
        ValueError: ``curve`` has no point with a finite time (nothing to draw).
    """
    points = reduce_curve(curve, 4 * options.width)
    if not points:
        raise ValueError("no measured samples to plot")
    times = [t for t, _ in points] + [t for lv in (*steps, *phases) for t in (lv.start, lv.end)
                                       if t is not None and math.isfinite(t)]
    origin, end = min(times), max(times)
    unit, seconds = _time_unit(end - origin)
    x_end = max((end - origin) / seconds, 1.0)  # at least one unit: a lone sample gets a readable axis
    top = max([b for _, b in points] + [lv.value_bytes for lv in (*steps, *phases)])
    rows = max(1, options.height - _FRAME_ROWS)
    axis = byte_axis(top * (1 + 1 / rows))
    figure = new_figure(options)

    def x(t: float | None, default: float) -> float:
        return default if t is None else (t - origin) / seconds

    for level in phases:
        style = PHASE_STYLES.get(level.label, OTHER_PHASE_STYLE)
        y = axis.scale(level.value_bytes)
        figure.draw(figure.segment((x(level.start, 0.0), x(level.end, x_end)), (y, y), marker=style.marker(options)))
    for level in steps:
        y = axis.scale(level.value_bytes)
        figure.draw(figure.segment((x(level.start, 0.0), x(level.end, x_end)), (y, y),
                                   marker=STEP_STYLE.marker(options)))
    # the measured curve last: it is what was seen, drawn over the levels it crosses
    figure.draw(figure.signal([x(t, 0.0) for t, _ in points], [axis.scale(b) for _, b in points],
                              marker=CURVE_STYLE.marker_for("braille", options)).lines())
    figure.ruler("y").lim(0, axis.upper)
    figure.ruler("y").ticks(list(axis.ticks), labels=list(axis.labels))
    figure.ruler("x").lim(0, x_end)
    figure.label(axis.unit, axis="y")
    figure.label(f"time ({unit})", axis="x")
    shown = printable(figure_name, 40)
    head = printable(title, 80)
    full = f"{head + ': ' if head else ''}measured {shown} vs predicted"
    figure.title(full if len(full) <= options.width else full[: options.width - 1] + "…")
    return "\n".join([render(figure, options), *legend_lines(_legend(points, shown, (steps_label, steps), phases, options),
                                                             options.width)])


def _legend(points, figure_name: str, labelled_steps: tuple[str, Sequence[Level]], phases: Sequence[Level],  # type: ignore[no-untyped-def]
            options: PlotOptions) -> list[tuple[str, str]]:
    entries = [(CURVE_STYLE.sample(options), f"measured {figure_name}, max {format_size(max(b for _, b in points))}")]
    steps_label, steps = labelled_steps
    if steps:
        entries.append((STEP_STYLE.sample(options), f"{printable(steps_label, 40)} of {len(steps)} steps, max "
                                                     f"{format_size(max(s.value_bytes for s in steps))}"))
    seen: dict[str, int] = {}
    for level in phases:  # one entry per phase: its predicted peak (the highest if it varies)
        seen[level.label] = max(seen.get(level.label, 0), level.value_bytes)
    for name, value in seen.items():
        style = PHASE_STYLES.get(name, OTHER_PHASE_STYLE)
        entries.append((style.sample(options), f"predicted {printable(name.replace('_', ' '), 30)} {format_size(value)}"))
    entries.append(("", "(MiB/GiB binary: 2^20/2^30 bytes)"))
    return entries
