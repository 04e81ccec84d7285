"""The braille canvas (gpumem_tui.ui.braille): a line is the dots its definition names, set
one by one with ``dot`` / ``quad`` (its walk is inlined for speed, issue 23), and a row's
segments merge runs of one style drawn over the base style; a blank cell may be drawn in a
style where it looks as in the base (a row of one colour is then at most three segments)."""

from __future__ import annotations

import math

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rich.segment import Segment
from rich.style import Style

from gpumem_tui.ui.braille import Canvas

RED, BLUE = Style(color="red"), Style(color="blue")
BASE = Style(color="white", bgcolor="black")
coordinate = st.floats(min_value=-40, max_value=120, allow_nan=False)


def _by_dots(canvas: Canvas, x0: float, y0: float, x1: float, y1: float, style: Style | None, quads: bool) -> None:
    """The line's definition: dots round(a + (b - a) * i / steps), i = 0..steps, each set alone."""
    put = canvas.quad if quads else canvas.dot
    xa, ya, xb, yb = round(x0), round(y0), round(x1), round(y1)
    steps = min(max(abs(xb - xa), abs(yb - ya)), 4 * (canvas.dot_width + canvas.dot_height))
    for i in range(steps + 1):
        put(round(xa + (xb - xa) * i / steps) if steps else xa, round(ya + (yb - ya) * i / steps) if steps else ya,
            style)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 30), st.integers(1, 10),
       st.lists(st.tuples(coordinate, coordinate, coordinate, coordinate, st.sampled_from([RED, BLUE, None]),
                          st.booleans()), max_size=6),
       st.sampled_from([BASE, None]))
def test_lines_set_the_dots_of_their_definition(width, height, lines, base):
    drawn, expected = Canvas(width, height), Canvas(width, height)
    for x0, y0, x1, y1, style, quads in lines:
        drawn.line(x0, y0, x1, y1, style, quads)
        _by_dots(expected, x0, y0, x1, y1, style, quads)
    for row in range(height):
        _check_row(drawn.row_segments(row, base), _expand(expected.row_segments(row, base)))


def test_a_row_merges_runs_of_one_style_over_the_base():
    canvas = Canvas(6, 1)
    canvas.line(0, 0, 3, 0, RED)  # cells 0-1, red
    canvas.dot(8, 0, BLUE)  # cell 4, blue
    assert canvas.row_segments(0, BASE) == [
        Segment("⠉⠉", BASE + RED), Segment("  ", BASE), Segment("⠁", BASE + BLUE), Segment(" ", BASE)]
    assert canvas.row_segments(0, None) == [
        Segment("⠉⠉", RED), Segment("  ", None), Segment("⠁", BLUE), Segment(" ", None)]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 30), st.integers(1, 6),
       st.lists(st.tuples(coordinate, coordinate, coordinate, coordinate,
                          st.sampled_from([RED, BLUE, Style(color="red"), BASE, None])), max_size=8),
       st.sampled_from([BASE, None]))
def test_a_braille_row_is_the_row_drawn_cell_by_cell(width, height, lines, base):
    """row_segments' fast path (braille only: text by translate, runs of marked cells) gives
    the segments of the cell-by-cell walk, equal styles (not only identical ones) merged."""
    canvas = Canvas(width, height)
    for x0, y0, x1, y1, style in lines:
        canvas.line(x0, y0, x1, y1, style)
    for row in range(height):
        fast = canvas.row_segments(row, base)
        _check_row(fast, _expand(canvas._row_by_cells(row, base)))


class _Cells:
    """A reference canvas: each cell's dots (or quadrants, or character) and the style last
    drawn in it, set one at a time (what Canvas keeps in bulk)."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.braille: dict[int, int] = {}
        self.quads: dict[int, int] = {}
        self.chars: dict[int, str] = {}
        self.styles: dict[int, Style | None] = {}
        self.dot_width, self.dot_height = 2 * width, 4 * height

    def _put(self, store: dict, col: int, row: int, value: int, style: Style | None) -> None:
        if 0 <= col < self.width and 0 <= row < self.height:
            index = row * self.width + col
            store[index] = store.get(index, 0) | value
            self.styles[index] = style

    def dot(self, x: int, y: int, style: Style | None) -> None:
        # Unicode braille: dots 1, 2, 3, 7 down the left column, 4, 5, 6, 8 down the right
        self._put(self.braille, x >> 1, y >> 2, ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))[y & 3][x & 1],
                  style)

    def quad(self, x: int, y: int, style: Style | None) -> None:
        self._put(self.quads, x >> 1, y >> 1, 1 << ((y & 1) * 2 + (x & 1)), style)

    def char(self, col: int, row: int, text: str, style: Style | None) -> None:
        if 0 <= col < self.width and 0 <= row < self.height:
            self.chars[row * self.width + col] = text
            self.styles[row * self.width + col] = style

    def cells(self, row: int, base: Style | None) -> list[tuple[str, Style | None]]:
        """(character, style drawn in) of each cell of ``row``: a blank one in ``base``."""
        out = []
        for index in range(row * self.width, (row + 1) * self.width):
            char = self.chars.get(index) or (" ▘▝▀▖▌▞▛▗▚▐▜▄▙▟█"[self.quads[index]] if self.quads.get(index)
                                             else chr(0x2800 + self.braille[index]) if self.braille.get(index) else " ")
            style = self.styles.get(index) if char != " " else base
            out.append((char, base + style if base is not None and style is not None else style))
        return out


def _expand(segments: list[Segment]) -> list[tuple[str, Style | None]]:
    return [(char, segment.style) for segment in segments for char in segment.text]


def _blank_look(style: Style | None) -> tuple:
    """What a terminal shows of a space in ``style``: its background, and the attributes
    that draw across a cell (reverse swaps in the colour); a hyperlink."""
    style = style or Style()
    lines = ("reverse", "underline", "underline2", "strike", "overline", "frame", "encircle")
    return (style.bgcolor, style.link, *(bool(getattr(style, name)) for name in lines),
            style.color if style.reverse else None)


def _check_row(segments: list[Segment], expected: list[tuple[str, Style | None]]) -> None:
    """The segments show the expected cells (equal styles; a space in a style that shows it
    the same), as maximal runs of one style."""
    assert [char for char, _ in _expand(segments)] == [char for char, _ in expected]
    for (char, got), (_, want) in zip(_expand(segments), expected):
        assert got == want or (char == " " and _blank_look(got) == _blank_look(want)), (char, got, want)
    assert all(segment.text for segment in segments)
    assert all(a.style != b.style for a, b in zip(segments, segments[1:]))


STYLES = [RED, BLUE, Style(color="red"), BASE, None]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 24), st.integers(1, 6),
       st.lists(st.tuples(st.sampled_from(["line", "quads", "char", "dot"]), coordinate, coordinate, coordinate,
                          coordinate, st.sampled_from(STYLES)), max_size=8),
       st.sampled_from([BASE, None]), st.sampled_from(["", " │", "10┤"]), st.sampled_from(["", "│"]))
def test_rows_show_each_cell_as_drawn_between_their_ends(width, height, marks, base, left, right):
    """Canvas.rows (every path: one style by a split, several by style bytes, quadrants and
    characters cell by cell) against a canvas set one dot at a time: each cell's character
    and style, runs of one style merged, the row's ends joined with its blank ends."""
    canvas, expected = Canvas(width, height), _Cells(width, height)
    for kind, x0, y0, x1, y1, style in marks:
        if kind == "char":
            for target in (canvas, expected):
                target.char(int(x0) % width, int(y0) % height, "━", style)
        elif kind == "dot":
            for target in (canvas, expected):
                target.dot(int(x0), int(y0), style)
        else:
            canvas.line(x0, y0, x1, y1, style, quads=kind == "quads")
            _by_dots(expected, x0, y0, x1, y1, style, kind == "quads")
    rows = canvas.rows(base, [left] * height, right)
    for row, segments in enumerate(rows):
        ends = [(char, base) for char in left], [(char, base) for char in right]
        _check_row(segments, ends[0] + expected.cells(row, base) + ends[1])
        _check_row(canvas.row_segments(row, base), expected.cells(row, base))


def test_styles_past_the_palette_are_kept_by_cell():
    """A canvas keeps a cell's style as a byte: past 254 distinct styles, each further
    style's cells keep it by cell and their rows still show it."""
    canvas, expected = Canvas(40, 20), _Cells(40, 20)
    styles = [Style(color=f"#{i:06x}") for i in range(300)]
    for i, style in enumerate(styles):
        x, y = (i * 3) % 80, (i * 7) % 80
        canvas.line(x, y, x + 5, y + 2, style)
        _by_dots(expected, x, y, x + 5, y + 2, style, False)
    assert len(canvas._palette) == 255  # None and 254 styles: the rest went by cell
    for row, segments in enumerate(canvas.rows(BASE, ["│"] * 20, "│")):
        _check_row(segments, [("│", BASE)] + expected.cells(row, BASE) + [("│", BASE)])


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from([*"a -~│┤━", "⣿", "⠁", "▟", "宽", "é", "\u0301", "\u200b", "😀"]), max_size=40))
def test_cell_length_is_rich_cell_len(text):
    """The quick measure of a plot row (one cell a character when all are of the one-cell
    ranges) is rich's, wide and zero-width characters included."""
    from rich.cells import cell_len

    from gpumem_tui.ui.braille import cell_length

    assert cell_length(text) == cell_len(text)


finite_or_not = st.one_of(st.floats(min_value=-1e12, max_value=1e12), st.sampled_from([1e308, -1e308]),
                          st.sampled_from([float("inf"), float("-inf"), float("nan")]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(finite_or_not, finite_or_not), max_size=12),
       st.tuples(st.floats(-1e9, 1e9), st.floats(1e-9, 1e9)), st.tuples(st.floats(-1e9, 1e9), st.floats(1e-9, 1e9)),
       st.integers(1, 40), st.integers(1, 12))
def test_curve_points_land_where_x_and_y_position_put_each(points, x_axis, y_axis, width, height):
    """draw_curves places a curve's points in bulk: each finite point where x_position and
    y_position put it alone, clamped to 8 canvas sizes (inf and nan points dropped)."""
    from gpumem_tui.ui.braille import _grid_points, x_position, y_position

    canvas = Canvas(width, height)
    x_range = (x_axis[0], x_axis[0] + x_axis[1])
    y_range = (y_axis[0], y_axis[0] + y_axis[1])
    assume(x_range[1] > x_range[0] and y_range[1] > y_range[0])
    limit = 8 * (canvas.dot_width + canvas.dot_height)
    expected = [(min(max(x_position(x, *x_range, canvas.dot_width), -limit), limit),
                 min(max(y_position(y, *y_range, canvas.dot_height), -limit), limit))
                for x, y in points if math.isfinite(x) and math.isfinite(y)]
    got = _grid_points([x for x, _ in points], [y for _, y in points], x_range, y_range, canvas.dot_width,
                       canvas.dot_height, canvas)
    assert got == expected


def test_a_dot_that_looks_blank_beside_a_character_keeps_the_base():
    """The one-style rows: a canvas-wide count must not let a character's cell (no braille
    dot, a style) make up for a braille dot drawn in the base's own look in another row."""
    canvas, expected = Canvas(4, 2), _Cells(4, 2)
    for target in (canvas, expected):
        target.char(0, 0, "━", RED)
        target.dot(2, 4, BASE)  # row 1: a dot drawn in the base style
    for row, segments in enumerate(canvas.rows(BASE, ["│"] * 2, "│")):
        _check_row(segments, [("│", BASE)] + expected.cells(row, BASE) + [("│", BASE)])


def test_a_gap_wider_than_the_kept_spaces():
    """A plot wider than the kept gap strings (256) has its long gaps too."""
    canvas, expected = Canvas(700, 2), _Cells(700, 2)
    for target in (canvas, expected):
        target.dot(1200, 1, RED)
    for row, segments in enumerate(canvas.rows(BASE, [" │"] * 2, "│")):
        _check_row(segments, [(" ", BASE), ("│", BASE)] + expected.cells(row, BASE) + [("│", BASE)])


def test_kept_segments_follow_the_style_and_survive_their_limit(monkeypatch):
    """One-style rows take their segments from those kept by style and text: the same row on
    another base (a theme change) shows that base, and past the limit (kept ones cleared)
    rows are still right."""
    from gpumem_tui.ui import braille

    other = Style(color="black", bgcolor="white")
    for base in (BASE, other, BASE):
        canvas, expected = Canvas(12, 2), _Cells(12, 2)
        for target in (canvas, expected):
            target.dot(5, 1, RED)
        for row, segments in enumerate(canvas.rows(base, ["│"] * 2, "│")):
            _check_row(segments, [("│", base)] + expected.cells(row, base) + [("│", base)])
    monkeypatch.setattr(braille, "_SEGMENTS_LIMIT", 3)
    monkeypatch.setattr(braille, "_SEGMENTS", {})
    for width in range(4, 12):
        canvas, expected = Canvas(width, 1), _Cells(width, 1)
        for target in (canvas, expected):
            target.dot(width, 0, BLUE)
        _check_row(canvas.rows(BASE, ["│"], "│")[0], [("│", BASE)] + expected.cells(0, BASE) + [("│", BASE)])
        assert all(len(kept) <= 3 for kept in braille._SEGMENTS.values())


def test_a_row_of_one_colour_is_its_blank_ends_and_one_run():
    """One curve colour over the base: a row is the blank end before its first dot, one run
    in the colour to its last dot (the gaps look blank in it too), the blank end after. A
    style that shows on a blank cell (a background, reverse, an underline) keeps its gaps in
    the base."""
    canvas = Canvas(10, 1)
    canvas.dot(4, 0, RED)  # cell 2
    canvas.dot(13, 0, RED)  # cell 6
    assert canvas.rows(BASE, ["1┤"], "│")[0] == [
        Segment("1┤  ", BASE), Segment("⠁   ⠈", BASE + RED), Segment("   │", BASE)]
    assert canvas.row_segments(0, None) == [Segment("  ", None), Segment("⠁   ⠈", RED), Segment("   ", None)]
    blank_row = Canvas(4, 2)
    blank_row.dot(0, 0, RED)
    assert blank_row.rows(BASE, ["", "0┤"], "│")[1] == [Segment("0┤    │", BASE)]
    for shows in (Style(color="red", bgcolor="blue"), Style(color="red", underline=True), Style(color="red", reverse=True)):
        canvas = Canvas(10, 1)
        canvas.dot(4, 0, shows)
        canvas.dot(13, 0, shows)
        assert [segment.text for segment in canvas.row_segments(0, BASE)] == ["  ", "⠁", "   ", "⠈", "   "]
