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

import math
import re
from collections.abc import Callable, Sequence

from rich.segment import Segment
from rich.style import Style

# Braille bit of dot (column 0-1, row 0-3) inside a cell (Unicode: dots 1,2,3,7 left; 4,5,6,8 right).
_BRAILLE_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
# Quadrant glyph for bits: 1 top-left, 2 top-right, 4 bottom-left, 8 bottom-right.
_QUADRANTS = " ▘▝▀▖▌▞▛▗▚▐▜▄▙▟█"
_MARKED = re.compile(rb"[^\x00]")  # a cell with a dot or quadrant set
_MARKED_RUN = re.compile(rb"[^\x00]+")  # consecutive cells with dots set
# A row's braille bytes (decoded as latin-1) to its characters: a blank cell is a space.
_BRAILLE_TEXT = " " + "".join(chr(0x2800 + bits) for bits in range(1, 256))
_SHAPES: dict[tuple[int, int, int, int, bool], tuple[tuple[int, int, int], ...]] = {}  # see _line_cells
_SHAPES_LIMIT = 4096
_UNSEEN = object()


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
        # the styles cells are drawn in, by id(their style), for one base (row_segments)
        self._drawn_base: Style | None = None
        self._drawn: dict[int, Style | None] | None = None
        self._kinds: list[Style | None] = []

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
        :meth:`quad`) sets them. The cells a line's shape touches, with their dots, are worked
        out once per shape (:func:`_line_cells`) and reused: a curve repeats a few shapes, and
        setting a cell at a time instead of a dot at a time is 2-4 x fewer steps."""
        xa, ya, xb, yb = round(x0), round(y0), round(x1), round(y1)
        dx, dy = xb - xa, yb - ya
        steps = max(abs(dx), abs(dy))
        if steps == 0:
            (self.quad if quads else self.dot)(xa, ya, style)
            return
        if steps > 4 * (self.dot_width + self.dot_height):  # a line far off the canvas: clip the walk
            self._walk(xa, ya, dx, dy, 4 * (self.dot_width + self.dot_height), style, quads)
            return
        row_shift = 1 if quads else 2
        y_phase = ya & (1 if quads else 3)  # the start's dot row inside its cell
        key = (dx, dy, xa & 1, y_phase, quads)
        shape = _SHAPES.get(key)
        if shape is None:
            if len(_SHAPES) >= _SHAPES_LIMIT:
                _SHAPES.clear()
            shape = _SHAPES[key] = _line_cells(dx, dy, xa & 1, y_phase, quads)
        col0, row0 = xa >> 1, ya >> row_shift  # the start's cell: the shape's cell (0, 0)
        width, height = self.width, self.height
        cells, styles = (self._quads, self._styles) if quads else (self._braille, self._styles)
        for dcol, drow, bits in shape:
            col, row = col0 + dcol, row0 + drow
            if 0 <= col < width and 0 <= row < height:
                index = row * width + col
                cells[index] |= bits
                styles[index] = style

    def _walk(self, xa: int, ya: int, dx: int, dy: int, steps: int, style: Style | None, quads: bool) -> None:
        """The dots of :meth:`line` one by one, for ``steps`` steps (a clipped line)."""
        put = self.quad if quads else self.dot
        for i in range(steps + 1):
            put(round(xa + dx * i / steps), round(ya + dy * i / steps), style)

    def polyline(self, points: Sequence[tuple[float, float]], style: Style | None, quads: bool = False) -> None:
        """Lines through consecutive points (dot or quadrant coordinates)."""
        if len(points) == 1:
            (self.quad if quads else self.dot)(round(points[0][0]), round(points[0][1]), style)
        for (xa, ya), (xb, yb) in zip(points, points[1:]):
            self.line(xa, ya, xb, yb, style, quads)

    def row_segments(self, row: int, base: Style | None) -> list[Segment]:
        """The cells of ``row`` as segments (runs of one style merged), blank cells in ``base``.

        A row of braille dots only (the usual case) is turned into text in C (``bytes.decode``
        and ``str.translate``), and only its runs of marked cells are visited, one step per run
        of one style, each segment made as its run ends; a row with block quadrants or
        characters goes cell by cell (:meth:`_row_by_cells`). Both give the same segments."""
        width = self.width
        start = row * width
        end = start + width
        chars = self._chars
        if _MARKED.search(self._quads, start, end) or (chars and any(start <= i < end for i in chars)):
            return self._row_by_cells(row, base)
        braille, styles = self._braille, self._styles
        text = braille[start:end].decode("latin-1").translate(_BRAILLE_TEXT)
        drawn_style = self._drawn_styles(base)
        out: list[Segment] = []
        run_start, run_style = start, base  # the segment under way: its first cell and style
        position = start  # the first cell after the last marked run
        for run in _MARKED_RUN.finditer(braille, start, end):
            first, last = run.span()
            if first > position and run_style is not base:  # a blank gap before this run
                out.append(Segment(text[run_start - start:position - start], run_style))
                run_start, run_style = position, base
            run_styles = styles[first:last]
            for index in (first,) if run_styles.count(run_styles[0]) == len(run_styles) else range(first, last):
                style = styles[index]
                drawn = drawn_style.get(id(style), _UNSEEN)
                if drawn is _UNSEEN:
                    drawn = self._drawn_style(style, base)
                if drawn is not run_style:  # a new style: the run so far is one segment
                    if index > run_start:
                        out.append(Segment(text[run_start - start:index - start], run_style))
                    run_start, run_style = index, drawn
            position = last
        if position < end and run_style is not base:
            out.append(Segment(text[run_start - start:position - start], run_style))
            run_start, run_style = position, base
        out.append(Segment(text[run_start - start:], run_style))
        return out

    def _drawn_styles(self, base: Style | None) -> dict[int, Style | None]:
        """id(a cell's style) -> the style its cells are drawn in on ``base`` (see
        :meth:`_drawn_style`), kept for the whole canvas: a curve's cells share one style, so
        each row finds it here instead of adding it to ``base`` again."""
        if self._drawn_base is not base or self._drawn is None:
            self._drawn_base = base
            self._drawn = {id(base): base}
            self._kinds = [base]
        return self._drawn

    def _drawn_style(self, style: Style | None, base: Style | None) -> Style | None:
        """The style cells of ``style`` are drawn in: ``base + style``, as one object for equal
        styles (so that merging runs compares identities: equal styles are one run)."""
        combined = base + style if base is not None and style is not base and style is not None else style
        drawn = next((kind for kind in self._kinds if kind is combined or kind == combined), combined)
        if drawn is combined:
            self._kinds.append(combined)
        self._drawn[id(style)] = drawn  # the style stays alive in _styles: its id is not reused
        return drawn

    def _row_by_cells(self, row: int, base: Style | None) -> list[Segment]:
        """:meth:`row_segments` visiting each marked cell (found by a regex, in C), for a row
        with block quadrants or whole characters."""
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


def _line_cells(dx: int, dy: int, x_odd: int, y_phase: int, quads: bool) -> tuple[tuple[int, int, int], ...]:
    """The cells (column, row, dot bits) that a line of ``steps`` = max(|dx|, |dy|) > 0 steps
    from the dot (``x_odd``, ``y_phase``) -- its start's position inside its cell: x & 1 and
    y & 3 (y & 1 for ``quads``) -- sets, relative to its start's cell, with the dots of each
    cell together.

    The same for every start with that position: a dot is ``start + round(d * i / steps)`` as
    :meth:`Canvas.line` defines it, and ``round(s + f)`` equals ``s + round(f)`` for an integer
    ``s`` except at a tie (``f`` = k + 0.5, exact in floating point), where round-half-even
    looks at the parity of ``s + k``: the parity of ``x_odd`` (``y_phase`` keeps y's). A
    cell's column and row are floor divisions, the same for ``s`` and ``s & 1`` (``& 3``) up
    to a whole number of cells. (No tie is missed by adding ``s``: a fraction that is not
    k + 0.5 is at least 1 / (2 * steps) from it, far more than a rounding error.)"""
    steps = max(abs(dx), abs(dy))
    row_shift = 1 if quads else 2
    bits_at: dict[tuple[int, int], int] = {}
    for i in range(steps + 1):
        x = round(x_odd + dx * i / steps)
        y = round(y_phase + dy * i / steps)
        cell = (x >> 1, y >> row_shift)
        bits_at[cell] = bits_at.get(cell, 0) | (
            (1 << ((y & 1) * 2 + (x & 1))) if quads else _BRAILLE_BITS[y & 3][x & 1])
    return tuple((col, row, bits) for (col, row), bits in bits_at.items())


def draw_curves(canvas: Canvas, curves: list, vlines: list, dot_x: Callable[[float, int], float],
                dot_y: Callable[[float, int], float], plot_w: int, plot_h: int) -> None:
    """Draw the memory chart's curves -- (xs, ys, style, marker) each, the marker "braille" for
    dots, "hd" for block quadrants or a character per cell -- and vertical lines (x, style) on
    ``canvas`` (``plot_w`` x ``plot_h`` cells); ``dot_x`` / ``dot_y`` map a value to a position
    on a grid of that many cells. Here rather than in memory_chart, which the first frame
    compiles: a chart draws curves only once it has samples."""
    limit = 8 * (canvas.dot_width + canvas.dot_height)  # far-off points are clamped, not walked
    for xs, ys, style, marker in curves:
        if marker == "braille" or marker == "hd":
            quads = marker == "hd"
            wide, high = (2 * plot_w, 2 * plot_h) if quads else (canvas.dot_width, canvas.dot_height)
            points = [
                (min(max(dot_x(x, wide), -limit), limit), min(max(dot_y(y, high), -limit), limit))
                for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)
            ]
            canvas.polyline(points, style, quads=quads)
        else:  # a character marker: horizontal lines (the total)
            for x0, x1, y in zip(xs, xs[1:], ys):
                if not (math.isfinite(x0) and math.isfinite(x1) and math.isfinite(y)):
                    continue
                row = round(dot_y(y, plot_h))
                first = max(round(dot_x(min(x0, x1), plot_w)), 0)
                for col in range(first, min(round(dot_x(max(x0, x1), plot_w)), plot_w - 1) + 1):
                    canvas.char(col, row, marker[:1] or "━", style)
    for x, style in vlines:
        if math.isfinite(x):
            column = round(dot_x(x, canvas.dot_width))
            canvas.line(column, 0, column, canvas.dot_height - 1, style)


__all__ = ["Canvas", "draw_curves"]
