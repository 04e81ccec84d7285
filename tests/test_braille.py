"""The braille canvas (gpumem_tui.ui.braille): a line is the dots its definition names, set
one by one with ``dot`` / ``quad`` (its walk is inlined for speed, issue 23), and a row's
segments merge runs of one style drawn over the base style."""

from __future__ import annotations

from hypothesis import given, settings
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
        assert drawn.row_segments(row, base) == expected.row_segments(row, base)


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
        assert fast == canvas._row_by_cells(row, base)
        assert [s.text for s in fast] == [s.text for s in canvas._row_by_cells(row, base)]
