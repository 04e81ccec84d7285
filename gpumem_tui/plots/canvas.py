"""plotext set up for the CLI's plots: one figure, its size and colour, a bytes axis, a legend.

plotext (https://github.com/piccolomo/plotext, 6.x: ``plotext.figure`` is the one master
figure; ``build().string(colorless=...)`` renders it) draws the chart. Everything plotext
needs is set here so that the plot modules only say what to draw:

- :func:`new_figure` clears the master figure, fixes its size to the options' (not limited by
  the terminal: the width was already chosen) and picks the theme: ``simple`` (no colours on
  the frame, coloured signals) on a terminal, ``colorless`` otherwise;
- :func:`byte_axis` chooses MiB or GiB (binary) for the largest value and ticks at 1, 2, 2.5,
  5 x 10^k of that unit;
- :func:`legend_lines` writes the legend below the chart, wrapped to the width, because
  plotext's own legend sits inside the canvas and would hide the bars under it.

Not thread-safe: plotext's figure is module state (the CLI draws one plot per process).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import plotext

from gpumem_tui.plots.options import PlotOptions
from gpumem_tui.support.units import GiB, MiB


@dataclass(frozen=True)
class Style:
    """How one series is drawn: ``mark`` (one character, so it reads without colour) and
    ``colour`` (a plotext colour code 0-255, used only on a terminal)."""

    mark: str
    colour: int

    def marker(self, options: PlotOptions) -> Any:
        """The plotext marker for this style (its colour dropped without colour)."""
        if not options.colour:
            return plotext.marker(self.mark)
        return plotext.marker(self.mark, pixel=plotext.pixel(foreground=self.colour))

    def marker_for(self, symbol: str, options: PlotOptions) -> Any:
        """A plotext marker drawn as ``symbol`` (e.g. ``"braille"``) in this style's colour;
        ``mark`` stays its legend sample."""
        if not options.colour:
            return plotext.marker(symbol)
        return plotext.marker(symbol, pixel=plotext.pixel(foreground=self.colour))

    def sample(self, options: PlotOptions) -> str:
        """The mark as it appears in the legend (coloured on a terminal)."""
        if not options.colour:
            return self.mark
        return plotext.colorize(self.mark, plotext.pixel(foreground=self.colour)).string()


def new_figure(options: PlotOptions) -> Any:
    """plotext's master figure, cleared, sized ``options.width`` x ``options.height`` cells."""
    plotext.terminal.limit(False, False)  # the width was chosen from the terminal already
    figure = plotext.figure
    figure.clear()
    figure.plot_size(options.width, options.height)
    figure.theme("simple" if options.colour else "colorless")
    figure.legend(active=False)
    return figure


def render(figure: Any, options: PlotOptions) -> str:
    """The figure as text: ANSI colours only when ``options.colour``; no trailing spaces."""
    text = figure.build().string(colorless=not options.colour)
    return "\n".join(line.rstrip() for line in text.splitlines())


@dataclass(frozen=True)
class ByteAxis:
    """A bytes axis in one binary unit: plot ``value / factor``; ticks and their labels are in
    ``unit``; ``upper`` (in ``unit``) is the axis top."""

    unit: str
    factor: int
    upper: float
    ticks: tuple[float, ...]
    labels: tuple[str, ...]

    def scale(self, n_bytes: float) -> float:
        """``n_bytes`` in the axis unit."""
        return n_bytes / self.factor

    def title(self) -> str:
        """The axis label: the unit and what it means (binary)."""
        return f"{self.unit} (2^{20 if self.unit == 'MiB' else 30} bytes)"


def byte_axis(top_bytes: float, ticks: int = 5) -> ByteAxis:
    """An axis from 0 to at least ``top_bytes``: GiB when ``top_bytes`` >= 1 GiB, else MiB.

    The tick step is the smallest of 1, 2, 2.5, 5 x 10^k (in the unit) giving at most
    ``ticks`` steps; the top is the first tick at or above ``top_bytes``.
    """
    top_bytes = max(float(top_bytes), float(MiB))  # an empty or all-zero plot still gets a readable axis
    unit, factor = ("GiB", GiB) if top_bytes >= GiB else ("MiB", MiB)
    top = top_bytes / factor
    raw = top / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    count = max(1, math.ceil(top / step - 1e-9))
    decimals = max(0, -math.floor(math.log10(step) + 1e-9) + (1 if round(step / magnitude, 3) == 2.5 else 0))
    values = tuple(i * step for i in range(count + 1))
    return ByteAxis(unit, factor, values[-1], values, tuple(f"{v:,.{decimals}f}" for v in values))


def legend_lines(entries: Sequence[tuple[str, str]], width: int) -> list[str]:
    """``(sample, text)`` entries as ``sample text`` items (``text`` alone for an empty
    sample) separated by two spaces, wrapped to ``width`` printable columns (a sample counts
    one column, whatever ANSI codes it carries); an item longer than the width is cut."""
    lines: list[str] = []
    current, used = "", 0
    for sample, text in entries:
        item = f"{sample} {text}" if sample else text
        size = len(text) + (2 if sample else 0)
        if size > width:
            cut = text[: max(0, width - (3 if sample else 1))] + "…"
            item, size = (f"{sample} {cut}" if sample else cut), width
        if used and used + 2 + size > width:
            lines.append(current)
            current, used = "", 0
        if used:
            current, used = current + "  ", used + 2
        current, used = current + item, used + size
    if current:
        lines.append(current)
    return lines


def format_size(n_bytes: float) -> str:
    """Bytes as MiB below 1 GiB, else GiB (binary), e.g. ``"474.7 MiB"``, ``"12.34 GiB"``."""
    if abs(n_bytes) >= GiB:
        return f"{n_bytes / GiB:,.2f} GiB"
    return f"{n_bytes / MiB:,.1f} MiB"
