"""LineTable: what it draws equals what Rich lays out, the cursor follows its row's key, and
an update repaints only the rows that changed (the point of it: the dashboard's CPU at 1 Hz)."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.padding import Padding
from rich.segment import Segment
from rich.text import Text
from textual.app import App, ComposeResult

from gpumem_tui.ui.line_table import LineTable, cell_segments

HEADERS = [Text("NAME", style="bold"), Text("N", style="bold")]


def rows(*items: tuple[str, str, str]) -> dict[str, list[Text]]:
    return {key: [Text(name), Text(n, justify="right")] for key, name, n in items}


class TableApp(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.highlighted: list[str | None] = []
        self.selected: list[str | None] = []

    def compose(self) -> ComposeResult:
        yield LineTable(id="t")

    def on_mount(self) -> None:
        self.query_one(LineTable).set_rows(HEADERS, rows(("a", "alpha", "1"), ("b", "bravo", "2"),
                                                         ("c", "charlie", "3")))

    def on_line_table_row_highlighted(self, event: LineTable.RowHighlighted) -> None:
        self.highlighted.append(event.key)

    def on_line_table_row_selected(self, event: LineTable.RowSelected) -> None:
        self.selected.append(event.key)


def screen_text(table: LineTable) -> list[str]:
    return [table.render_line(y).text.rstrip() for y in range(table.size.height)]


@pytest.mark.parametrize("cell", [
    Text("right", justify="right"),
    Text("left"),
    Text("mid", justify="center"),
    Text("a much longer text than the column", style="bold"),
    Text("cut with an ellipsis here", overflow="ellipsis"),
    Text.assemble(("[leak] ", "bold"), ("python train.py", "italic")),
    Text("宽字符 wide", justify="right"),
    Text(""),
])
def test_a_cell_is_laid_out_as_rich_lays_out_a_padded_cell(cell):
    console = Console(width=80, color_system="truecolor")
    for width in (3, 12, 20):
        expected = console.render_lines(Padding(cell, (0, 1)), console.options.update_dimensions(width + 2, 1)
                                        .update(no_wrap=True))[0]
        got = list(cell_segments(cell, width, console))
        assert Segment.get_line_length(got) == width + 2
        # the same characters in the same styles (Rich may split the segments differently)
        assert [(ch, seg.style or None) for seg in got for ch in seg.text] == \
            [(ch, seg.style or None) for seg in expected for ch in seg.text], (cell.plain, width)


async def test_the_table_shows_rows_in_order_with_fitted_columns():
    app = TableApp()
    async with app.run_test(size=(40, 8)) as pilot:
        await pilot.pause()
        table = app.query_one(LineTable)
        assert screen_text(table)[:4] == [" NAME     N", " alpha    1", " bravo    2", " charlie  3"]
        assert table.column_widths == [9, 3] and table.row_count == 3
        assert table.get_row("b")[0].plain == "bravo" and table.get_row_at(2)[0].plain == "charlie"


async def test_the_cursor_follows_its_row_through_a_reorder_and_a_removal():
    app = TableApp()
    async with app.run_test(size=(40, 8)) as pilot:
        await pilot.pause()
        table = app.query_one(LineTable)
        table.focus()
        await pilot.press("down")
        assert table.cursor_key == "b"
        table.set_rows(HEADERS, rows(("c", "charlie", "3"), ("b", "bravo", "2"), ("a", "alpha", "1")))
        assert table.cursor_key == "b" and table.cursor_row == 1
        table.set_rows(HEADERS, rows(("c", "charlie", "3"), ("a", "alpha", "1")))
        assert table.cursor_key == "a" and table.cursor_row == 1  # its row left: the same place
        await pilot.press("enter")
        await pilot.pause()
        assert app.highlighted == ["a", "b", "a"] and app.selected == ["a"]


async def test_an_update_repaints_only_the_rows_that_changed():
    app = TableApp()
    async with app.run_test(size=(40, 8)) as pilot:
        await pilot.pause()
        table = app.query_one(LineTable)
        drawn: list[str] = []
        original = table._draw

        def spy(cells, *args):  # noqa: ANN001
            drawn.append(cells[0].plain)
            return original(cells, *args)

        table._draw = spy  # type: ignore[method-assign]
        same = dict(table._cells)
        same["b"] = [Text("bravo"), Text("7", justify="right")]  # one row changed
        table.set_rows(HEADERS, same)
        await pilot.pause()
        assert drawn == ["bravo"]
        assert screen_text(table)[2] == " bravo    7"


async def test_a_new_cell_is_drawn_with_its_own_text_even_where_an_old_one_was():
    """Cells are kept drawn by their object (LineTable._draw): a cell that is replaced, even by
    one that reuses the freed object's id, shows its own text; a kept cell shows its text."""
    app = TableApp()
    async with app.run_test(size=(40, 8)) as pilot:
        await pilot.pause()
        table = app.query_one(LineTable)
        kept = table._cells["a"][0]
        for n in range(30):  # each round frees the last N cell; CPython often reuses its id
            table.set_rows(HEADERS, {"a": [kept, Text(str(n), justify="right")],
                                     "b": [Text(f"b{n}"), Text("2", justify="right")]})
            await pilot.pause()
            lines = screen_text(table)
            assert lines[1].split() == ["alpha", str(n)] and lines[2].split() == [f"b{n}", "2"], n


async def test_grow_only_keeps_a_column_wide_while_the_same_rows_stay():
    app = TableApp()
    async with app.run_test(size=(40, 8)) as pilot:
        await pilot.pause()
        table = app.query_one(LineTable)
        table.set_rows(HEADERS, rows(("a", "alpha", "1000"), ("b", "bravo", "2"), ("c", "charlie", "3")))
        assert table.column_widths[1] == 6
        table.set_rows(HEADERS, rows(("a", "alpha", "1"), ("b", "bravo", "2"), ("c", "charlie", "3")),
                       grow_only=True)
        assert table.column_widths[1] == 6  # 1000 -> 1: no jump back
        table.set_rows(HEADERS, rows(("a", "alpha", "1"), ("b", "bravo", "2")), grow_only=False)
        assert table.column_widths[1] == 3  # rows left: fitted anew


def measure_every_row(headers: list[Text], table_rows: dict[str, list[Text]], before: list[int]) -> list[int]:
    """The widths from every row, grown from ``before`` (the grow_only rule, as LineTable
    measured before it folded in only the changed rows): header, widest cell, and zip's stop at
    the shortest row."""
    widths = [h.cell_len for h in headers]
    for i, column in enumerate(zip(*([c.cell_len for c in cells] for cells in table_rows.values()))):
        if i < len(widths):
            widths[i] = max(widths[i], max(column))
    return [max(a, b) for a, b in zip(widths, before)]


async def test_grow_only_widths_fold_in_only_changed_rows_yet_equal_a_full_measure():
    """With grow_only the table measures only the rows whose cells list is new (a kept list
    fits the widths already): after every update the widths are what measuring every row
    gives, a row of another length included."""
    import random

    app = TableApp()
    async with app.run_test(size=(60, 8)) as pilot:
        await pilot.pause()
        table = app.query_one(LineTable)
        rng = random.Random(7)
        current = rows(*((k, "x" * rng.randint(1, 9), "1" * rng.randint(1, 5)) for k in "abcdef"))
        table.set_rows(HEADERS, current)
        for step in range(80):
            current = dict(current)
            changing = sorted(key for key in current if key != "a" or not 30 <= step < 50)
            for key in rng.sample(changing, rng.randint(0, 3)):  # some rows change, others are kept
                current[key] = [Text("y" * rng.randint(1, 12)), Text("2" * rng.randint(1, 8), justify="right")]
            if step in (30, 50):  # a row one cell short (kept so for 20 updates), then whole again
                current["a"] = [Text("z" * rng.randint(1, 20))] + ([] if step == 30 else [Text("3")])
            if step == 40:  # wider than any figure so far, while the short row stays
                current["b"] = [Text("w"), Text("9" * 14, justify="right")]
            expected = measure_every_row(HEADERS, current, table._widths)
            table.set_rows(HEADERS, current, grow_only=True)
            assert table._widths == expected, step
        assert table._widths[0] >= 12  # the widest name seen is kept


async def test_a_vertical_scroll_repaints_the_rows_but_not_the_header():
    """The header stays put on a vertical scroll: only the row lines are drawn again (and
    show the rows from the new offset), the header line is neither drawn nor marked dirty."""
    app = TableApp()
    async with app.run_test(size=(40, 6)) as pilot:  # header + 5 rows on screen
        table = app.query_one(LineTable)
        table.set_rows(HEADERS, rows(*((f"k{i}", f"name{i}", str(i)) for i in range(20))))
        await pilot.pause()
        assert screen_text(table)[1].split() == ["name0", "0"]
        drawn: list[int] = []
        original = table.render_line

        def spy(y: int):  # noqa: ANN202
            drawn.append(y)
            return original(y)

        table.render_line = spy  # type: ignore[method-assign]
        table.move_cursor(7)  # below the view: it scrolls by three rows
        assert table._styles_cache._dirty_lines and 0 not in table._styles_cache._dirty_lines
        await pilot.pause()
        assert round(table.scroll_y) == 3
        assert drawn and 0 not in drawn and set(range(1, 5)) <= set(drawn)
        table.render_line = original  # type: ignore[method-assign]
        lines = screen_text(table)
        assert lines[0].split() == ["NAME", "N"] and lines[1].split() == ["name3", "3"]
        assert lines[-1].split() == ["name7", "7"]
        assert [s.text.rstrip() for s in table.render_lines(table.size.region)] == lines


async def test_a_click_moves_the_cursor_and_a_second_click_selects():
    app = TableApp()
    async with app.run_test(size=(40, 8)) as pilot:
        await pilot.pause()
        table = app.query_one(LineTable)
        await pilot.click(LineTable, offset=(2, 3))  # third row
        await pilot.pause()
        assert table.cursor_key == "c" and app.selected == []
        await pilot.click(LineTable, offset=(2, 3))
        await pilot.pause()
        assert app.selected == ["c"]


async def test_a_reorder_moves_the_cursor_with_its_row_but_not_the_view():
    app = TableApp()
    async with app.run_test(size=(40, 6)) as pilot:  # header + 5 rows on screen
        await pilot.pause()
        table = app.query_one(LineTable)
        many = rows(*((f"r{i}", f"row{i}", str(i)) for i in range(30)))
        table.set_rows(HEADERS, many, keep="r2")
        await pilot.pause()
        assert table.scroll_y == 0 and table.cursor_key == "r2"
        reordered = dict(reversed(list(many.items())))  # r2 is now 28th: off screen
        table.set_rows(HEADERS, reordered)
        await pilot.pause()
        assert table.cursor_key == "r2" and table.cursor_row == 27 and table.scroll_y == 0
        table.set_rows(HEADERS, reordered, keep="r2")  # asked for: scrolled into view
        await pilot.pause()
        assert table.scroll_y > 0 and table.scroll_y <= 27 < table.scroll_y + table.size.height - 1


async def test_the_scrollbar_hands_back_what_textual_draws_for_each_state():
    """The table's vertical scrollbar keeps its lines by state (gpumem_tui.ui.scrollbars):
    moved back and forth, hovered, and under another theme, each frame is what Textual's
    ScrollBar draws for that state, and a position seen before is served from the kept lines."""
    from textual.scrollbar import ScrollBar
    from textual.widget import Widget

    from gpumem_tui.ui.scrollbars import RememberingScrollBar

    app = TableApp()
    async with app.run_test(size=(40, 12)) as pilot:
        table = app.query_one(LineTable)
        table.set_rows(HEADERS, rows(*((f"k{i}", f"row {i}", str(i)) for i in range(100))))
        await pilot.pause()
        bar = table.vertical_scrollbar
        assert isinstance(bar, RememberingScrollBar) and bar.display

        def textual_lines() -> list[list[Segment]]:
            bar.refresh()  # Textual draws the bar again, from its renderable
            return [list(strip) for strip in Widget.render_lines(bar, bar.size.region)]

        drawn: dict[tuple[int, bool, str], list[list[Segment]]] = {}
        for y, hover, theme in [(0, False, "textual-dark"), (40, False, "textual-dark"), (88, False, "textual-dark"),
                                (40, False, "textual-dark"), (40, True, "textual-dark"), (0, False, "textual-light"),
                                (0, False, "textual-dark")]:
            app.theme = theme
            table.scroll_to(y=y, animate=False)
            bar.mouse_over = hover
            await pilot.pause()
            before = len(bar._drawn)
            kept = [list(strip) for strip in bar.render_lines(bar.size.region)]
            assert kept == textual_lines()
            state = (y, hover, theme)
            if state in drawn:  # seen before: the same lines, none drawn again
                assert kept == drawn[state] and len(bar._drawn) == before
            drawn[state] = kept
        assert drawn[(0, False, "textual-dark")] != drawn[(40, False, "textual-dark")] != drawn[
            (88, False, "textual-dark")]
        assert drawn[(40, False, "textual-dark")] != drawn[(40, True, "textual-dark")]
        assert drawn[(0, False, "textual-dark")] != drawn[(0, False, "textual-light")]
        assert type(bar).render_lines is not ScrollBar.render_lines


async def test_a_shared_cell_measured_once_widens_every_column_it_lands_in():
    """A cell object measured in one row keeps its width when another row (or column) shows
    the same object (the width by cell id), and a new, wider cell still widens its column."""
    from rich.text import Text

    from gpumem_tui.ui.line_table import LineTable

    class OneTable(App[None]):
        def compose(self) -> ComposeResult:
            yield LineTable(id="t")

    app = OneTable()
    async with app.run_test(size=(80, 10)) as pilot:
        table = app.query_one(LineTable)
        shared = Text("12345678")
        headers = [Text("A"), Text("B")]
        table.set_rows(headers, {"r1": [shared, Text("x")], "r2": [Text("y"), Text("z")]})
        await pilot.pause()
        assert table._widths == [8, 1]
        table.set_rows(headers, {"r1": [shared, Text("x")], "r2": [Text("y"), shared]}, grow_only=True)
        assert table._widths == [8, 8]  # r2's second column shows the shared cell: as wide
        assert table._row_widths["r2"][1] == (1, 8)
        assert table._width_by_cell[id(shared)] == (shared, 8)  # kept with the cell: its id cannot be reused
        table.set_rows(headers, {"r1": [Text("a" * 12), Text("x")], "r2": [Text("y"), shared]}, grow_only=True)
        assert table._widths == [12, 8]
