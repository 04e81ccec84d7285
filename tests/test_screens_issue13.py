"""Issue 13, screens that hide what they should say (items 6-10, 12, 13): each test here
fails on the code before the fix."""

from __future__ import annotations

from textual.widgets import Input

from test_ui import SIZE, FakeReplay, make_app, wait_for


async def test_replay_keys_leave_a_focused_text_field_alone():
    """Item 12: Left in a text field moves its cursor; it does not seek the replay."""
    source = FakeReplay()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("slash")
        box = app.query_one("#filter", Input)
        assert box.has_focus
        await pilot.press("8", "left", "1", "space", "plus")
        assert box.value == "1 +8"  # the cursor moved left of the 8
        assert source.seeks == [] and not source.paused and source.speed == 1.0
        await pilot.press("enter")  # back on the table: the replay keys work again
        await pilot.press("right")
        assert source.seeks == [40.0]


def _header_line(app) -> str:
    """The process table's header row as drawn (cut to the column widths)."""
    return app.table.render_line(0).text


async def test_the_sorted_column_shows_its_arrow_whichever_it_is():
    """Item 7: GPU, PID, USER, SM% and TIME headers were sized before the arrow was added,
    which cut it off; every column now shows it."""
    from gpumem_tui.ui.process_table import COLUMN_KEYS, _BY_KEY

    app = make_app()
    async with app.run_test(size=(200, 40)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.table.row_count > 0)
        table = app.table
        for key in (k for k in COLUMN_KEYS if k in table.visible_columns):
            for reverse in (True, False):
                table.set_sort(key, reverse=reverse)
                await pilot.pause()
                shown = _header_line(app)
                arrow = "▼" if reverse else "▲"
                assert f"{_BY_KEY[key].label} {arrow}" in shown, (key, shown)
                assert shown.count("▼") + shown.count("▲") == 1, shown
