"""The memory chart's scale and data reduction: pure functions over (time, bytes) points,
used when the chart has samples to draw (:meth:`gpumem_tui.ui.memory_chart.MemoryChart.replot`).

A module of its own so that the dashboard's first frame, whose chart has no samples yet, does
not compile them on a first start (benchmarks/first_frame.py). Plot commands are the
``(name, args, kwargs)`` tuples :class:`gpumem_tui.ui.memory_chart.MemoryPlot` draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from gpumem_tui.support.units import GiB, MiB
from gpumem_tui.telemetry.model import Phase, PhasePeak


def choose_unit(max_bytes: float) -> tuple[str, int]:
    """("GiB", 2**30) when the largest value is >= 2 GiB, else ("MiB", 2**20)."""
    return ("GiB", GiB) if max_bytes >= 2 * GiB else ("MiB", MiB)


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values (steps 1, 2, 2.5 or 5 x 10^k) from 0 up to ``top``."""
    if top <= 0 or not math.isfinite(top):
        return [0.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks = []
    value = 0.0
    while value <= top + 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def thin(points: Sequence[tuple[float, float]], buckets: int) -> list[tuple[float, float]]:
    """Reduce to at most ~2*buckets points, keeping each bucket's first and max point.

    The chart is at most a few hundred cells wide; plotting 3600 points costs CPU for nothing,
    while dropping a bucket's maximum would hide a peak.
    """
    if len(points) <= 2 * buckets or buckets < 1:
        return list(points)
    t0, t1 = points[0][0], points[-1][0]
    span = (t1 - t0) or 1.0
    out: list[tuple[float, float]] = []
    current = -1
    first: tuple[float, float] | None = None
    peak: tuple[float, float] | None = None
    for p in points:
        b = min(int((p[0] - t0) / span * buckets), buckets - 1)
        if b != current:
            if first is not None and peak is not None:
                out.append(first)
                if peak is not first:
                    out.append(peak)
            current, first, peak = b, p, p
        elif peak is None or p[1] > peak[1]:
            peak = p
    if first is not None and peak is not None:
        out.append(first)
        if peak is not first:
            out.append(peak)
    out.sort()
    return out


def dot_path(xs: Sequence[float], ys: Sequence[float], x_lo: float, x_dot: float, y_dot: float) -> tuple:
    """A polyline in dot coordinates with repeated dots and inner points of flat runs dropped
    (a flat curve keeps its two ends), so a curve that only moved in time compares equal."""
    out: list[tuple[int, int]] = []
    for x, y in zip(xs, ys):
        dot = (round((x - x_lo) / x_dot), round(y / y_dot))
        if out and out[-1] == dot:
            continue
        if len(out) >= 2 and out[-1][1] == dot[1] == out[-2][1]:
            out[-1] = dot  # extend the flat run
            continue
        out.append(dot)
    return tuple(out)


ENVELOPE_MARKER = "hd"  # block quadrants: unlike the samples' braille dots


def envelope(peaks: Sequence[PhasePeak], lo: float, hi: float, buckets: int) -> list[tuple[Phase, list[tuple[float, float]]]]:
    """The step-shaped envelope of per-phase high-water marks between epoch seconds ``lo`` and
    ``hi``: runs of ``(phase, [(time, bytes), ...])``, each run's points joined by lines.

    Each peak is a flat segment from its start to its end; a run starts with a vertical
    step from the previous segment's height, so the runs together draw one staircase. When
    more peaks are visible than ``buckets`` (about the plot's width), each bucket keeps its
    highest peak (and its phase), so no maximum is dropped. Raises nothing; empty input gives [].
    """
    visible = sorted((p for p in peaks if p.end >= lo and p.start <= hi), key=lambda p: (p.start, p.end))
    if not visible:
        return []
    segments: list[tuple[Phase, float, float, int]] = [(p.phase, max(p.start, lo), min(p.end, hi), p.peak_bytes)
                                                       for p in visible]
    if len(segments) > buckets > 0:
        span = (hi - lo) or 1.0
        merged: dict[int, tuple[Phase, float, float, int]] = {}
        for phase, start, end, value in segments:
            b = min(int((start - lo) / span * buckets), buckets - 1)
            old = merged.get(b)
            if old is None:
                merged[b] = (phase, start, end, value)
            else:  # widen to the bucket's extent, keep the highest peak's phase and value
                top = (phase, value) if value > old[3] else (old[0], old[3])
                merged[b] = (top[0], min(old[1], start), max(old[2], end), top[1])
        segments = [merged[b] for b in sorted(merged)]
    runs: list[tuple[Phase, list[tuple[float, float]]]] = []
    previous: float | None = None
    for phase, start, end, value in segments:
        if runs and runs[-1][0] is phase and runs[-1][1][-1][0] >= start - 1e-9:
            points = runs[-1][1]
        else:
            points = []
            runs.append((phase, points))
            if previous is not None:
                points.append((start, previous))  # the vertical step up or down
        points.append((start, value))
        points.append((end, value))
        previous = value
    return runs


@lru_cache(maxsize=64)
def axis_ops(title: str, unit: str, x_lo: float, x_hi: float, top: float) -> list[tuple[str, tuple, dict]]:
    """The plot commands for the title, the axis labels, limits and ticks (``top`` in ``unit``).

    Kept for recent inputs (a chart redraws with the same axes poll after poll): the
    list and its commands are shared, and nothing changes them (the chart and plot copy
    the list they are given, and only read the commands)."""
    ops: list[tuple[str, tuple, dict]] = []
    ops.append(("title", (title,), {}))
    ops.append(("xlabel", ("time (s, 0 = latest sample)",), {}))
    ops.append(("ylabel", (f"memory ({unit})",), {}))
    ops.append(("xlim", (x_lo, x_hi), {}))
    xticks = sorted(-t + 0.0 for t in nice_ticks(-x_lo))  # + 0.0 turns -0.0 into 0.0
    ops.append(("xticks", (xticks, [f"{t:g}" for t in xticks]), {}))
    ticks = nice_ticks(top)
    ops.append(("ylim", (0, top), {}))
    ops.append(("yticks", (ticks, [f"{t:g}" for t in ticks]), {}))
    return ops


def plot_key(ops: Sequence[tuple[str, tuple, dict]], curve_keys: list[tuple], x_lo: float, x_dot: float,
              y_dot: float) -> tuple:
    """``curve_keys`` and everything ``ops`` draw, with positions in dots (x relative to the
    left edge): equal keys draw the same plot."""
    for name, args, kwargs in ops:
        if name == "plot":
            curve_keys.append((dot_path(args[0], args[1], x_lo, x_dot, y_dot), tuple(sorted(kwargs.items()))))
        elif name not in ("vline", "xlim", "ylim"):
            curve_keys.append((name, repr(args)))
    return tuple(curve_keys)
