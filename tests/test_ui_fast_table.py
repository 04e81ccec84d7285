"""IncrementalTable: per-cell render caching must never show a stale cell, and must re-render
only what changed (the point of it: the dashboard's CPU at 1 Hz)."""

from __future__ import annotations

from rich.console import Console
from rich.padding import Padding
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from gpumem_tui.ui.fast_table import IncrementalTable

ROWS = [("a", "alpha", "1"), ("b", "bravo", "2"), ("c", "charlie", "3")]


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield IncrementalTable(id="t")

    def on_mount(self) -> None:
        table = self.query_one(IncrementalTable)
        table.add_column("NAME", key="name")
        table.add_column("N", key="n")
        for key, name, n in ROWS:
            table.add_row(name, n, key=key)


def screen_text(app: App) -> list[str]:
    table = app.query_one(IncrementalTable)
    return [table.render_line(y).text for y in range(table.size.height)]


def count_renders(monkeypatch) -> list[Text]:
    """Record every data cell whose text Rich really lays out (misses of both caches)."""
    seen: list[Text] = []
    original = Console.render_lines

    def spy(self, renderable, *args, **kwargs):  # noqa: ANN001
        if isinstance(renderable, Padding):  # a data cell (headers go the stock way, Styled)
            seen.append(renderable.renderable)
        return original(self, renderable, *args, **kwargs)

    monkeypatch.setattr(Console, "render_lines", spy)
    return seen


async def test_update_renders_only_the_changed_cell_and_shows_it(monkeypatch):
    app = TableApp()
    async with app.run_test(size=(40, 8)) as pilot:
        await pilot.pause()
        assert "bravo" in "\n".join(screen_text(app))
        seen = count_renders(monkeypatch)
        table = app.query_one(IncrementalTable)
        table.update_cell("b", "n", "7")
        await pilot.pause()
        text = "\n".join(screen_text(app))
        assert " bravo    7" in text and "alpha" in text and "charlie" in text
        # only the changed cell was laid out again (cursor row and others came from the cache)
        assert [cell.plain for cell in seen] == ["7"], seen


async def test_batch_and_structure_changes_never_show_stale_cells():
    app = TableApp()
    async with app.run_test(size=(40, 8)) as pilot:
        await pilot.pause()
        table = app.query_one(IncrementalTable)
        with table.batch():
            table.update_cell("a", "name", "ALPHA")
            table.update_cell("c", "name", "CHARLIE")
        await pilot.pause()
        lines = screen_text(app)
        assert any("ALPHA" in line for line in lines) and any("CHARLIE" in line for line in lines)
        # a sort moves rows: every cell must show its own row's value at its new place
        table.sort("n", reverse=True)
        await pilot.pause()
        lines = [line for line in screen_text(app) if line.strip()]
        assert [line.split()[0] for line in lines[1:4]] == ["CHARLIE", "bravo", "ALPHA"]
        # a cleared and refilled table with the same keys shows the new values, not cached ones
        table.clear()
        for key, name, n in ROWS:
            table.add_row(name.upper() + "!", n, key=key)
        await pilot.pause()
        text = "\n".join(screen_text(app))
        assert "BRAVO!" in text and "ALPHA!" in text and "CHARLIE\n" not in text
        assert table._cell_versions == {}  # cleared with the rows: no growth under churn


async def test_cell_wider_than_its_column_widens_it():
    app = TableApp()
    async with app.run_test(size=(60, 8)) as pilot:
        await pilot.pause()
        table = app.query_one(IncrementalTable)
        table.update_cell("a", "n", "123456789012", update_width=True)
        await pilot.pause()
        assert any("123456789012" in line for line in screen_text(app))


async def test_a_sort_restyles_cells_without_laying_them_out_again(monkeypatch):
    app = TableApp()
    async with app.run_test(size=(40, 8)) as pilot:
        await pilot.pause()
        seen = count_renders(monkeypatch)
        table = app.query_one(IncrementalTable)
        table.sort("n", reverse=True)
        await pilot.pause()
        lines = [line for line in screen_text(app) if line.strip()]
        assert [line.split()[0] for line in lines[1:4]] == ["charlie", "bravo", "alpha"]
        assert seen == []  # no data cell laid out again
        # a click target names the row's new index: charlie is row 0 now
        first = table.render_line(1)
        assert {seg.style.meta.get("row") for seg in first if seg.style and seg.style.meta} == {0}


HOSTILE = [Text("12", justify="right"), Text("abc", style="bold"), "[red]x[/red]", "\x1b[31mz",
           Text("\u202eevil", style="dim"), "", Text(""), None, 3.14159, 42, Text("tab\there"),
           Text("two\nlines"), Text("a long command line that is wider than its column", style="italic")]


class MixedApp(App[None]):
    def compose(self) -> ComposeResult:
        yield IncrementalTable(id="t")

    def on_mount(self) -> None:
        table = self.query_one(IncrementalTable)
        table.add_column("FIXED", key="a", width=10)
        table.add_column("AUTO", key="b")
        for index, value in enumerate(HOSTILE):
            table.add_row(value, value, key=str(index))


async def test_reused_layouts_draw_exactly_what_datatable_draws():
    """The layout cache maps styles after Rich's layout; it must equal the stock renderer for
    every kind of cell (markup-like and control text, None, numbers, too wide, two lines),
    with and without cursor and hover, in two themes' base styles."""
    app = MixedApp()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        table = app.query_one(IncrementalTable)
        compared = 0
        for row in range(len(HOSTILE)):
            for column, spec in enumerate(table.ordered_columns):
                width = spec.get_render_width(table)
                for base in (Style(bgcolor="blue"), Style(color="red", italic=True)):
                    for cursor in (False, True):
                        for hover in (False, True):
                            ours = table._render_cell(row, column, base, width, cursor, hover)
                            stock = DataTable._render_cell(table, row, column, base, width, cursor, hover)
                            assert ours == stock, (row, column, cursor, hover)
                            compared += 1
        assert compared == len(HOSTILE) * 2 * 8


class TwinApp(App[None]):
    """The same rows in a stock DataTable and an IncrementalTable."""

    def compose(self) -> ComposeResult:
        yield DataTable(id="stock")
        yield IncrementalTable(id="ours")

    def on_mount(self) -> None:
        for table in self.query(DataTable):
            table.add_column("A", key="a")
            table.add_column("B", key="b")
            for index, value in enumerate(HOSTILE):
                text = value if isinstance(value, Text) else Text(str(value))
                table.add_row(text, Text("界" * index), key=str(index))
            table.add_row("[b]markup[/b] str", None, key="mixed")  # not all Text: the stock way


async def test_new_rows_widen_columns_as_datatable_does():
    app = TwinApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        stock, ours = app.query_one("#stock", DataTable), app.query_one("#ours", IncrementalTable)
        widths = [[c.content_width for c in t.ordered_columns] for t in (stock, ours)]
        assert widths[0] == widths[1] and widths[1][1] == 2 * (len(HOSTILE) - 1)
        assert stock.virtual_size == ours.virtual_size
