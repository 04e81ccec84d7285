"""IncrementalTable: per-cell render caching must never show a stale cell, and must re-render
only what changed (the point of it: the dashboard's CPU at 1 Hz)."""

from __future__ import annotations

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


def count_renders(monkeypatch) -> list[tuple[int, int]]:
    """Record every cell that DataTable really renders (cache misses of both caches)."""
    seen: list[tuple[int, int]] = []
    original = DataTable._render_cell

    def spy(self, row_index, column_index, *args, **kwargs):  # noqa: ANN001
        key_count = len(self._cell_render_cache)
        lines = original(self, row_index, column_index, *args, **kwargs)
        if len(self._cell_render_cache) > key_count and row_index >= 0:
            seen.append((row_index, column_index))
        return lines

    monkeypatch.setattr(DataTable, "_render_cell", spy)
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
        # only the changed cell was rendered again (cursor row and others came from the cache)
        assert seen == [(1, 1)], seen


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
