"""What ``gpumem-tui compare TRACE --plot`` prints: the chart of one probed process and the
peak line of compare's result under it.

Joins :func:`.trace_series.gather` (the trace's snapshots -> curve, envelope, predicted phase
levels, all in the probe's figure) and :func:`.compare_plot.compare_plot` (the drawing). The
caller reads the trace (a list or a stream of snapshots, the same records ``compare`` read) and
passes compare's JSON result, whose ``pid`` picks the process and whose ``peaks`` give the
headline in the same figure as the chart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpumem_tui.plots.canvas import format_size
from gpumem_tui.plots.compare_plot import compare_plot
from gpumem_tui.plots.options import PlotOptions
from gpumem_tui.plots.trace_series import gather
from gpumem_tui.telemetry.model import Snapshot
from gpumem_tui.support.text import printable


def compare_chart(snapshots: Iterable[Snapshot], result: Mapping[str, Any], options: PlotOptions) -> str:
    """The chart, its legend, the peak predicted vs measured in the chart's figure, and notes.

    Args:
        snapshots: the trace's records, in order (consumed once).
        result: ``compare``'s JSON result for the same records (``pid``, ``peaks``).
        options: size and colour.

    Raises:
        ValueError: the process has no sample with a readable time (nothing to draw).
    """
    pid = int(result["pid"])
    series = gather(snapshots, pid, buckets=2 * options.width)
    title = series.title or f"pid {pid}"
    lines = [compare_plot(series.curve, series.figure, options, steps=series.steps, phases=series.phases,
                          title=title, steps_label=series.steps_label)]
    for peak in result.get("peaks") or ():
        if peak.get("figure") == series.figure:
            measured, error = peak.get("measured_bytes"), peak.get("error_percent")
            lines.append(f"peak in {series.figure}: predicted {format_size(int(peak['predicted_bytes']))}, measured "
                         + (f"{format_size(int(measured))} ({error:+.1f} %)" if measured is not None and error is not None
                            else "n/a"))
    lines.extend(f"note: {printable(note)}" for note in series.notes)
    return "\n".join(_fit(line, options.width) for text in lines for line in text.splitlines())


def _fit(line: str, width: int) -> str:
    """A plain line cut to ``width`` columns (chart lines, which carry ANSI colours, already fit)."""
    if "\x1b" in line or len(line) <= width:
        return line
    return line[: width - 1] + "…"
