"""A small character-cell plot canvas: braille dots for curves, block quadrants for steps.

Drawing the memory chart ourselves instead of through plotext: plotext rebuilds its whole
canvas, axes and ANSI output in Python on every change (~15-30 ms a frame), which at one
frame a second was a large part of the dashboard's idle CPU. This canvas only sets dots in
a bytearray and turns rows into Rich segments directly (made into Textual ``Strip`` objects
by :func:`gpumem_tui.ui.memory_chart.strip`).

Coordinates: a plot area of ``width`` x ``height`` character cells has ``2 * width`` x
``4 * height`` braille dots (Unicode "Braille Patterns" block, U+2800 + one bit per dot: dots
1-8 numbered as in ISO/TR 11548-1) or ``2 * width`` x ``2 * height`` block quadrants (U+2596 to
U+259F and the half blocks). Dot (0, 0) is the top-left. A cell has one colour: the last one
drawn into it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style

# Braille bit of dot (column 0-1, row 0-3) inside a cell (Unicode: dots 1,2,3,7 left; 4,5,6,8 right).
_BRAILLE_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
# Quadrant glyph for bits: 1 top-left, 2 top-right, 4 bottom-left, 8 bottom-right.
_QUADRANTS = " ▘▝▀▖▌▞▛▗▚▐▜▄▙▟█"
_MARKED = re.compile(rb"[^\x00]")  # a cell with a dot or quadrant set


class Canvas:
    """A plot area of ``width`` x ``height`` cells (both >= 1); see the module docstring."""

    def __init__(self, width: int, height: int) -> None:
        self.width = max(1, int(width))
        self.height = max(1, int(height))
        size = self.width * self.height
        self._braille = bytearray(size)
        self._quads = bytearray(size)
        self._chars: dict[int, str] = {}  # whole-character marks (e.g. the total line "━")
        self._styles: list[Style | None] = [None] * size

    @property
    def dot_width(self) -> int:
        return 2 * self.width

    @property
    def dot_height(self) -> int:
        return 4 * self.height

    def _cell(self, col: int, row: int) -> int | None:
        if 0 <= col < self.width and 0 <= row < self.height:
            return row * self.width + col
        return None

    def dot(self, x: int, y: int, style: Style | None) -> None:
        """Set braille dot (x, y); off-canvas dots are ignored."""
        index = self._cell(x >> 1, y >> 2)
        if index is not None:
            self._braille[index] |= _BRAILLE_BITS[y & 3][x & 1]
            self._styles[index] = style

    def quad(self, x: int, y: int, style: Style | None) -> None:
        """Set block quadrant (x, y) of a 2 x 2 grid per cell; off-canvas ones are ignored."""
        index = self._cell(x >> 1, y >> 1)
        if index is not None:
            self._quads[index] |= 1 << ((y & 1) * 2 + (x & 1))
            self._styles[index] = style

    def char(self, col: int, row: int, text: str, style: Style | None) -> None:
        """Put one character in a cell (it replaces dots and quadrants there)."""
        index = self._cell(col, row)
        if index is not None:
            self._chars[index] = text
            self._styles[index] = style

    def line(self, x0: float, y0: float, x1: float, y1: float, style: Style | None, quads: bool = False) -> None:
        """A straight line between two points in dot (or quadrant) coordinates: the dots
        ``round(a + (b - a) * i / steps)`` for i = 0..steps, set as :meth:`dot` (or
        :meth:`quad`) sets them; the walk is inlined (a call per dot was most of its cost)."""
        xa, ya, xb, yb = round(x0), round(y0), round(x1), round(y1)
        steps = max(abs(xb - xa), abs(yb - ya))
        if steps == 0:
            (self.quad if quads else self.dot)(xa, ya, style)
            return
        limit = 4 * (self.dot_width + self.dot_height)  # a line far off the canvas: clip the walk
        if steps > limit:
            steps = limit
        width, height = self.width, self.height
        cells, styles = (self._quads, self._styles) if quads else (self._braille, self._styles)
        row_shift = 1 if quads else 2
        dx, dy = xb - xa, yb - ya
        for i in range(steps + 1):
            x = round(xa + dx * i / steps)
            y = round(ya + dy * i / steps)
            col, row = x >> 1, y >> row_shift
            if 0 <= col < width and 0 <= row < height:
                index = row * width + col
                cells[index] |= (1 << ((y & 1) * 2 + (x & 1))) if quads else _BRAILLE_BITS[y & 3][x & 1]
                styles[index] = style

    def polyline(self, points: Sequence[tuple[float, float]], style: Style | None, quads: bool = False) -> None:
        """Lines through consecutive points (dot or quadrant coordinates)."""
        if len(points) == 1:
            (self.quad if quads else self.dot)(round(points[0][0]), round(points[0][1]), style)
        for (xa, ya), (xb, yb) in zip(points, points[1:]):
            self.line(xa, ya, xb, yb, style, quads)

    def row_segments(self, row: int, base: Style | None) -> list[Segment]:
        """The cells of ``row`` as segments (runs of one style merged), blank cells in ``base``.

        Only the marked cells are visited (found by a regex over the row's bytes, in C): a
        chart row is mostly blank, and a Python step per cell was most of the chart's cost.
        """
        width = self.width
        start = row * width
        marked = {m.start() for m in _MARKED.finditer(self._braille, start, start + width)}
        marked.update(m.start() for m in _MARKED.finditer(self._quads, start, start + width))
        marked.update(i for i in self._chars if start <= i < start + width)
        out: list[Segment] = []
        text: list[str] = []
        current: Style | None = base
        position = start  # the first cell not yet in ``text`` or ``out``
        end = start + width  # a last stop: only the blank run before it is drawn
        on_base: dict[int, Style] = {}  # id(a cell's style) -> base + it: a curve has one style
        for index in [*sorted(marked), end]:
            if index > position:  # a blank run
                if current is not base and current != base and text:
                    out.append(Segment("".join(text), current))
                    text = []
                current = base
                text.append(" " * (index - position))
            if index == end:
                break
            char = self._chars.get(index)
            if char is None:
                quads = self._quads[index]
                char = _QUADRANTS[quads] if quads else chr(0x2800 + self._braille[index])
            style = self._styles[index] if char != " " else base
            if base is not None and style is not base and style is not None:
                combined = on_base.get(id(style))
                if combined is None:
                    combined = on_base[id(style)] = base + style
                style = combined
            if style is not current and style != current and text:
                out.append(Segment("".join(text), current))
                text = []
            current = style
            text.append(char)
            position = index + 1
        if text:
            out.append(Segment("".join(text), current))
        return out


__all__ = ["Canvas"]
