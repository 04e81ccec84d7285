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
drawn into it; a row of one colour is drawn with the blank cells between its dots in that
colour too (a blank cell shows the same: fewer colour changes to write).
"""

from __future__ import annotations

import codecs
import functools
import math
import re
from collections.abc import Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style

# Braille bit of dot (column 0-1, row 0-3) inside a cell (Unicode: dots 1,2,3,7 left; 4,5,6,8 right).
_BRAILLE_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
# Quadrant glyph for bits: 1 top-left, 2 top-right, 4 bottom-left, 8 bottom-right.
_QUADRANTS = " ▘▝▀▖▌▞▛▗▚▐▜▄▙▟█"
_MARKED = re.compile(rb"[^\x00]")  # a cell with a dot or quadrant set
_SAME_RUN = re.compile(rb"(.)\1*", re.DOTALL)  # consecutive cells of one style byte
_SAME_BYTES = bytes(range(256))  # a translation table that keeps every byte
_BLANKS = bytes([ord("_")] + [ord(" ")] * 255)  # a braille byte to "_" for a blank cell, " " for a marked one
_SPACES = [" " * length for length in range(256)]  # a gap by its length (extended for a wider plot)
_span = re.Match.span
# Segment(text, style) made in C: a NamedTuple's own __new__ is a Python function, a tenth of a row.
_segment = functools.partial(tuple.__new__, Segment)
# Characters one cell wide each in rich.cells: ASCII, box drawing, block elements, braille.
_SINGLE_CELLS = re.compile("[ -~\u2500-\u259f\u2800-\u28ff]*")
# The attributes that draw on a blank cell (a space shows only its background otherwise).
_SHOWN_ON_BLANK = ("reverse", "underline", "underline2", "strike", "overline", "frame", "encircle")
_NO_STYLE = Style()
_OVERFLOW = 255  # the style byte of cells drawn after 254 distinct styles (kept by cell)
# A cell's braille byte to its character (a decoding table): a blank cell is a space.
_BRAILLE_TEXT = " " + "".join(chr(0x2800 + bits) for bits in range(1, 256))
_SHAPES: dict[tuple[int, int, int, int, bool, int], _Shape] = {}  # see _line_cells and polyline
_SHAPES_LIMIT = 4096
_SEGMENTS: dict[Style | None, _Segments] = {}  # see _segments_in
_SEGMENTS_LIMIT = 1024


class Canvas:
    """A plot area of ``width`` x ``height`` cells (both >= 1); see the module docstring.

    A cell's style is kept as a byte, its index in the canvas's palette of the distinct
    styles drawn (equal styles share one): a row's runs of one style are then runs of one
    byte, found by a regex in C (:meth:`rows`)."""

    def __init__(self, width: int, height: int) -> None:
        self.width = max(1, int(width))
        self.height = max(1, int(height))
        size = self.width * self.height
        self._braille = bytearray(size)
        self._quads = bytearray(size)
        self._chars: dict[int, str] = {}  # whole-character marks (e.g. the total line "━")
        self._char_rows: set[int] = set()  # the rows with such a mark (a row asks, not each mark)
        self._kinds = bytearray(size)  # per cell: 0 never drawn, else its style's index in _palette
        self._palette: list[Style | None] = [None]
        self._kind_of: dict[Style | None, int] = {}  # a style -> its index in _palette
        self._overflow: dict[int, Style | None] = {}  # cell -> style, for the cells of _OVERFLOW
        self._marked_by_cells = False  # quadrants or characters drawn: their rows go cell by cell

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

    def _kind(self, style: Style | None) -> int:
        """The palette index of ``style`` (added when new); :data:`_OVERFLOW` once the
        palette is full (its cells keep their style in ``_overflow``)."""
        kind = self._kind_of.get(style)
        if kind is None:
            if len(self._palette) >= _OVERFLOW:
                return _OVERFLOW
            kind = self._kind_of[style] = len(self._palette)
            self._palette.append(style)
        return kind

    def _set_style(self, index: int, style: Style | None) -> None:
        kind = self._kinds[index] = self._kind(style)
        if kind == _OVERFLOW:
            self._overflow[index] = style

    def _style_at(self, index: int) -> Style | None:
        """The style cell ``index`` was last drawn in (None: never drawn)."""
        kind = self._kinds[index]
        return self._overflow[index] if kind == _OVERFLOW else self._palette[kind]

    def dot(self, x: int, y: int, style: Style | None) -> None:
        """Set braille dot (x, y); off-canvas dots are ignored."""
        index = self._cell(x >> 1, y >> 2)
        if index is not None:
            self._braille[index] |= _BRAILLE_BITS[y & 3][x & 1]
            self._set_style(index, style)

    def quad(self, x: int, y: int, style: Style | None) -> None:
        """Set block quadrant (x, y) of a 2 x 2 grid per cell; off-canvas ones are ignored."""
        index = self._cell(x >> 1, y >> 1)
        if index is not None:
            self._quads[index] |= 1 << ((y & 1) * 2 + (x & 1))
            self._set_style(index, style)
            self._marked_by_cells = True

    def char(self, col: int, row: int, text: str, style: Style | None) -> None:
        """Put one character in a cell (it replaces dots and quadrants there)."""
        index = self._cell(col, row)
        if index is not None:
            self._chars[index] = text
            self._char_rows.add(row)
            self._set_style(index, style)
            self._marked_by_cells = True

    def line(self, x0: float, y0: float, x1: float, y1: float, style: Style | None, quads: bool = False) -> None:
        """A straight line between two points in dot (or quadrant) coordinates: the dots
        ``round(a + (b - a) * i / steps)`` for i = 0..steps, set as :meth:`dot` (or
        :meth:`quad`) sets them (see :meth:`polyline`)."""
        self.polyline(((x0, y0), (x1, y1)), style, quads)

    def polyline(self, points: Sequence[tuple[float, float]], style: Style | None, quads: bool = False) -> None:
        """Lines (:meth:`line`) through consecutive points (dot or quadrant coordinates), a
        single point as its dot. The cells a line's shape touches, with their dots, are worked
        out once per shape (:func:`_line_cells`) and reused: a curve repeats a few shapes, and
        setting a cell at a time instead of a dot at a time is 2-4 x fewer steps."""
        if len(points) == 1:
            (self.quad if quads else self.dot)(round(points[0][0]), round(points[0][1]), style)
            return
        kind = self._kind(style)
        far = 4 * (self.dot_width + self.dot_height)  # a longer line is far off the canvas: clipped
        row_shift, phase_mask = (1, 1) if quads else (2, 3)
        width, height = self.width, self.height
        cells, kinds = (self._quads, self._kinds) if quads else (self._braille, self._kinds)
        if quads:
            self._marked_by_cells = True
        dots = [(round(x), round(y)) for x, y in points]
        for (xa, ya), (xb, yb) in zip(dots, dots[1:]):
            dx, dy = xb - xa, yb - ya
            if max(abs(dx), abs(dy)) > far or kind == _OVERFLOW:
                self._walk(xa, ya, dx, dy, min(max(abs(dx), abs(dy)), far), style, quads)
                continue
            key = (dx, dy, xa & 1, ya & phase_mask, quads, width)
            shape = _SHAPES.get(key)
            if shape is None:
                if len(_SHAPES) >= _SHAPES_LIMIT:
                    _SHAPES.clear()
                shape = _SHAPES[key] = _Shape(_line_cells(dx, dy, xa & 1, ya & phase_mask, quads), width)
            col0, row0 = xa >> 1, ya >> row_shift  # the start's cell: the shape's cell (0, 0)
            if (0 <= col0 + shape.left and col0 + shape.right < width and 0 <= row0 + shape.top
                    and row0 + shape.bottom < height):  # all on the canvas: no cell to check
                start = row0 * width + col0
                for offset, bits in shape.offsets:
                    cells[start + offset] |= bits
                    kinds[start + offset] = kind
                continue
            for dcol, drow, bits in shape.cells:
                col, row = col0 + dcol, row0 + drow
                if 0 <= col < width and 0 <= row < height:
                    index = row * width + col
                    cells[index] |= bits
                    kinds[index] = kind

    def _walk(self, xa: int, ya: int, dx: int, dy: int, steps: int, style: Style | None, quads: bool) -> None:
        """The dots of :meth:`line` one by one, for ``steps`` steps (a clipped line, or the
        styles past the palette's)."""
        put = self.quad if quads else self.dot
        for i in range(steps + 1):
            put(round(xa + dx * i / (steps or 1)), round(ya + dy * i / (steps or 1)), style)

    def rows(self, base: Style | None, lefts: Sequence[str] = (), right: str = "") -> list[list[Segment]]:
        """Every row's segments (see :meth:`row_segments`), the canvas's text and styles
        worked out once for all rows; each row between its text in ``lefts`` (by row, "" when
        short) and ``right``, both in ``base`` and joined with the row's blank ends (a plot's
        tick label and frame: fewer segments, the same cells)."""
        drawn = self._drawn(base)
        lefts = [*lefts[:self.height], *[""] * (self.height - len(lefts))]
        return [self._row(row, base, *drawn, lefts[row], right) for row in range(self.height)]

    def row_segments(self, row: int, base: Style | None) -> list[Segment]:
        """The cells of ``row`` as segments (runs of one style merged, equal styles too), blank
        cells in ``base``, a drawn cell in ``base + its style``; but where every drawn cell of
        the canvas has one style in which a blank cell looks as in ``base``
        (:func:`blank_looks_same`: a curve's colour), the blank cells between a row's first
        and last marked cell are in that style too: the row is at most three segments.

        A row of braille dots only (the usual case) is sliced from the canvas's text, decoded
        in one call; where all its drawn cells have one style it is its blank ends and the run
        between them (that one style blending), or cut at its runs of marked characters (a
        regex split, in C), else at the changes of its cells' style bytes; a row with block
        quadrants or characters goes cell by cell (:meth:`_row_by_cells`). All show the same
        cells."""
        return self._row(row, base, *self._drawn(base), "", "")

    def _drawn(self, base: Style | None) -> tuple[str, bytes, list[Style | None], bytes | None, bool, bool]:
        """(the text of every cell as braille, each cell's drawn-style byte, the styles by
        those bytes, the canvas's blanks or None, whether the blanks hold for every row,
        whether a blank cell looks the same in the drawn style as in the base) on ``base``:
        a cell of palette style ``s`` is drawn in ``base + s``, equal ones as one object with
        one byte, so that a run of one byte is one segment; 0 is the base (blank cells, and
        drawn ones that look like it), :data:`_OVERFLOW` stays. The blanks (:data:`_BLANKS`)
        come where the drawn cells have at most one style: a braille row whose drawn cells
        are all in it (none looks blank) is its marked runs and gaps."""
        drawn: list[Style | None] = [base]
        table = bytearray(_SAME_BYTES)
        for kind, style in enumerate(self._palette[1:], 1):
            combined = base + style if base is not None and style is not base and style is not None else style
            index = next((i for i, seen in enumerate(drawn) if seen is combined or seen == combined), len(drawn))
            if index == len(drawn):
                drawn.append(combined)
            table[kind] = index
        text = codecs.charmap_decode(self._braille, "strict", _BRAILLE_TEXT)[0]
        kinds = self._kinds.translate(table)
        if len(drawn) > 2 or len(self._palette) >= _OVERFLOW:
            return text, kinds, drawn, None, False, False
        if self.width >= len(_SPACES):
            _SPACES.extend(" " * length for length in range(len(_SPACES), self.width + 1))
        every_row = not self._marked_by_cells and kinds.count(0) == text.count(" ")
        blend = len(drawn) == 2 and blank_looks_same(drawn[0], drawn[1])
        return text, kinds, drawn, self._braille.translate(_BLANKS), every_row, blend

    def _row(self, row: int, base: Style | None, text: str, kinds: bytes, drawn: list[Style | None],
             blanks: bytes | None, every_row: bool, blend: bool, left: str, right: str) -> list[Segment]:
        """Row ``row`` between ``left`` and ``right`` (see :meth:`rows`), from :meth:`_drawn`."""
        width = self.width
        start = row * width
        end = start + width
        if self._marked_by_cells and (row in self._char_rows or _MARKED.search(self._quads, start, end)):
            return _frame(self._row_by_cells(row, base), left, right, base)
        if blanks is None or not (every_row or kinds.count(0, start, end) == text.count(" ", start, end)):
            if kinds.find(_OVERFLOW, start, end) >= 0:
                return _frame(self._row_by_cells(row, base), left, right, base)
            return _frame([_segment((text[first:last], drawn[kinds[first]], None))
                           for first, last in map(_span, _SAME_RUN.finditer(kinds, start, end))], left, right, base)
        if blend:
            # One style that shows a blank cell as the base does: the row is its blank ends and,
            # between its first and last marked cell, one run in that style (the gaps in it
            # look the same). Fewer segments to draw, cut, compare and write: a curve's row
            # was ~15, each a colour change in the terminal.
            first = blanks.find(32, start, end)  # b" ": a marked cell
            if first < 0:
                return [_segments_in(base)[left + _SPACES[width] + right]]
            last = blanks.rfind(32, start, end) + 1
            segments = [_segment((text[first:last], drawn[1], None))]
            if left or first > start:
                segments.insert(0, _segments_in(base)[left + _SPACES[first - start]])
            if right or last < end:
                segments.append(_segments_in(base)[_SPACES[end - last] + right])
            return segments
        # One style: the row's runs of marked cells and its gaps alternate. Both are cut by
        # str.split / bytes.split in C (a regex is ~20 x slower here), a gap from its length.
        line = text[start:end]
        marked = line.split()
        gaps = [*map(_SPACES.__getitem__, map(len, blanks[start:end].split()))]
        starts_blank, ends_blank = line[0] == " ", line[-1] == " "
        parts: list[str] = [""] * (len(marked) + len(gaps))
        parts[::2], parts[1::2] = (gaps, marked) if starts_blank else (marked, gaps)
        if starts_blank:
            parts[0] = left + parts[0]
        elif left:
            parts.insert(0, left)
        if ends_blank:
            parts[-1] += right  # the first part too in a blank row
        elif right:
            parts.append(right)
        first = base if starts_blank or left else drawn[-1]
        segments: list[Segment] = parts  # type: ignore[assignment]  # each part becomes its segment
        segments[::2] = map(_segments_in(first).__getitem__, parts[::2])
        segments[1::2] = map(_segments_in(drawn[-1] if first is base else base).__getitem__, parts[1::2])
        return segments

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
            style = self._style_at(index) if char != " " else base
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


def blank_looks_same(first: Style | None, second: Style | None) -> bool:
    """Whether a blank cell (a space) shows the same in ``first`` as in ``second`` (None: no
    style): a space shows its background and nothing of its colour, unless an attribute
    draws across the cell (reverse, underlines, strike, overline, frame, encircle) or it is
    part of a hyperlink (Rich ``Style`` attributes; a terminal draws a cell so)."""
    first, second = first or _NO_STYLE, second or _NO_STYLE
    if first.bgcolor != second.bgcolor or first.link != second.link:
        return False
    return not any(getattr(style, name) for style in (first, second) for name in _SHOWN_ON_BLANK)


class _Segments(dict):
    """Segments of one style by their text, made on first use: a plot draws the same gaps and
    curve pieces poll after poll, and a lookup is ~6 x cheaper than making a Segment."""

    def __init__(self, style: Style | None) -> None:
        super().__init__()
        self.style = style

    def __missing__(self, text: str) -> Segment:
        if len(self) >= _SEGMENTS_LIMIT:
            self.clear()
        segment = self[text] = _segment((text, self.style, None))
        return segment


def _segments_in(style: Style | None) -> _Segments:
    """The kept segments of ``style`` (equal styles share them)."""
    kept = _SEGMENTS.get(style)
    if kept is None:
        if len(_SEGMENTS) >= 16:  # the bases (themes) and curve colours drawn lately
            _SEGMENTS.clear()
        kept = _SEGMENTS[style] = _Segments(style)
    return kept


def _frame(cells: list[Segment], left: str, right: str, base: Style | None) -> list[Segment]:
    """``cells`` between ``left`` and ``right`` in ``base``, each joined with a blank end
    (a segment in the base itself) next to it."""
    if left:
        if cells and cells[0].style is base:
            cells[0] = _segment((left + cells[0].text, base, None))
        else:
            cells.insert(0, _segment((left, base, None)))
    if right:
        if cells and cells[-1].style is base:
            cells[-1] = _segment((cells[-1].text + right, base, None))
        else:
            cells.append(_segment((right, base, None)))
    return cells


class _Shape:
    """A line's cells (:func:`_line_cells`) on a canvas ``width`` cells wide: also as offsets
    from its start's cell in the canvas's arrays, with its extent (columns ``left`` to
    ``right``, rows ``top`` to ``bottom``, from the start's cell) to check at once."""

    __slots__ = ("cells", "offsets", "left", "right", "top", "bottom")

    def __init__(self, cells: tuple[tuple[int, int, int], ...], width: int) -> None:
        self.cells = cells
        self.offsets = tuple((drow * width + dcol, bits) for dcol, drow, bits in cells)
        self.left, self.right = min(dcol for dcol, _, _ in cells), max(dcol for dcol, _, _ in cells)
        self.top, self.bottom = min(drow for _, drow, _ in cells), max(drow for _, drow, _ in cells)


def _line_cells(dx: int, dy: int, x_odd: int, y_phase: int, quads: bool) -> tuple[tuple[int, int, int], ...]:
    """The cells (column, row, dot bits) that a line of ``steps`` = max(|dx|, |dy|) steps
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
    steps = max(abs(dx), abs(dy), 1)  # 0 steps: the start's dot alone
    row_shift = 1 if quads else 2
    bits_at: dict[tuple[int, int], int] = {}
    for i in range(steps + 1):
        x = round(x_odd + dx * i / steps)
        y = round(y_phase + dy * i / steps)
        cell = (x >> 1, y >> row_shift)
        bits_at[cell] = bits_at.get(cell, 0) | (
            (1 << ((y & 1) * 2 + (x & 1))) if quads else _BRAILLE_BITS[y & 3][x & 1])
    return tuple((col, row, bits) for (col, row), bits in bits_at.items())


def draw_curves(canvas: Canvas, curves: list, vlines: list, x_range: tuple[float, float],
                y_range: tuple[float, float], plot_w: int, plot_h: int) -> None:
    """Draw the memory chart's curves -- (xs, ys, style, marker) each, the marker "braille" for
    dots, "hd" for block quadrants or a character per cell -- and vertical lines (x, style) on
    ``canvas`` (``plot_w`` x ``plot_h`` cells), ``x_range`` (low, high; high > low) across it,
    ``y_range`` up it (:func:`x_position`, :func:`y_position` place values on the grid).
    Here rather than in memory_chart, which the first frame compiles: a chart draws curves only
    once it has samples."""
    (xlo, xhi), (ylo, yhi) = x_range, y_range
    for xs, ys, style, marker in curves:
        if marker == "braille" or marker == "hd":
            quads = marker == "hd"
            wide, high = (2 * plot_w, 2 * plot_h) if quads else (canvas.dot_width, canvas.dot_height)
            canvas.polyline(_grid_points(xs, ys, x_range, y_range, wide, high, canvas), style, quads=quads)
        else:  # a character marker: horizontal lines (the total)
            for x0, x1, y in zip(xs, xs[1:], ys):
                if not (math.isfinite(x0) and math.isfinite(x1) and math.isfinite(y)):
                    continue
                row = round(y_position(y, ylo, yhi, plot_h))
                first = max(round(x_position(min(x0, x1), xlo, xhi, plot_w)), 0)
                for col in range(first, min(round(x_position(max(x0, x1), xlo, xhi, plot_w)), plot_w - 1) + 1):
                    canvas.char(col, row, marker[:1] or "━", style)
    for x, style in vlines:
        if math.isfinite(x):
            column = round(x_position(x, xlo, xhi, canvas.dot_width))
            canvas.line(column, 0, column, canvas.dot_height - 1, style)


def cell_length(text: str) -> int:
    """``rich.cells.cell_len(text)``, at once for text of one-cell characters only (ASCII, box
    drawing, block elements, braille: :data:`_SINGLE_CELLS`, checked in C) such as a plot row;
    rich measures a braille row character by character."""
    return len(text) if _SINGLE_CELLS.fullmatch(text) else cell_len(text)


def x_position(x: float, low: float, high: float, cells: int) -> float:
    """Where ``x`` lands on a grid of ``cells`` columns, 0 at ``low`` and ``cells - 1`` at
    ``high`` (> ``low``): absurd inputs land far off the grid, never at inf or nan (nan at 0)."""
    return _bounded((x - low) / (high - low) * (cells - 1))


def y_position(y: float, low: float, high: float, cells: int) -> float:
    """Where ``y`` lands on a grid of ``cells`` rows, ``cells - 1`` (the bottom) at ``low`` and
    0 at ``high`` (> ``low``); bounded as :func:`x_position`."""
    return _bounded((1.0 - (y - low) / (high - low)) * (cells - 1))


def _bounded(value: float) -> float:
    return 0.0 if value != value else max(-1e9, min(1e9, value))


def _grid_points(xs: Sequence[float], ys: Sequence[float], x_range: tuple[float, float],
                 y_range: tuple[float, float], wide: int, high: int, canvas: Canvas) -> list[tuple[float, float]]:
    """The finite points of a curve as :func:`x_position` and :func:`y_position` place them on a
    ``wide`` x ``high`` grid, clamped to a few canvas sizes around it (a far-off point is not
    walked to). In bulk: each coordinate is their expression, the checks for inf and nan run
    once per curve (in C) and clamp only when one finds something."""
    (xlo, xhi), (ylo, yhi) = x_range, y_range
    isfinite = math.isfinite
    if not (all(map(isfinite, xs)) and all(map(isfinite, ys))):
        kept = [(x, y) for x, y in zip(xs, ys) if isfinite(x) and isfinite(y)]
        xs, ys = [x for x, _ in kept], [y for _, y in kept]
    x_span, y_span, x_cells, y_cells = xhi - xlo, yhi - ylo, wide - 1, high - 1
    px = [(x - xlo) / x_span * x_cells for x in xs]
    py = [(1.0 - (y - ylo) / y_span) * y_cells for y in ys]
    limit = 8 * (canvas.dot_width + canvas.dot_height)
    for values in (px, py):
        if any(map(math.isnan, values)) or (values and (min(values) < -limit or max(values) > limit)):
            values[:] = [min(max(0.0 if v != v else v, -limit), limit) for v in values]
    return list(zip(px, py))


__all__ = ["Canvas", "blank_looks_same", "cell_length", "draw_curves", "x_position", "y_position"]
