"""The frame's share of plain lines (issue 23): PlainStylesCache skips ANSIToTruecolor for a
line it leaves unchanged, and a LineTable under a vertical scrollbar draws its lines only as
wide as they show. Either way the screen is the one Textual draws: compared here, terminal
line by terminal line, with a table drawn by Textual's own StylesCache at the widget's full
width, for tables where the short cuts apply and where they must not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._styles_cache import StylesCache
from textual.app import App, ComposeResult
from textual.color import Color
from textual.filter import ANSIToTruecolor
from textual.strip import Strip
from textual.widget import Widget

sys.path.insert(0, str(Path(__file__).parent))

from ui_fakes import FakeSource  # noqa: E402
from waiting import settle  # noqa: E402

from gpumem_tui.ui.app import GpuMemApp  # noqa: E402
from gpumem_tui.ui.line_table import LineTable  # noqa: E402
from gpumem_tui.ui.plain_lines import KeptLines, PlainStylesCache, same_after_truecolor  # noqa: E402
from gpumem_tui.ui.themes import load_themes  # noqa: E402

HEADERS = [Text("NAME", style="bold"), Text("N", justify="right"), Text("NOTE")]
#: cell styles: RGB only (the filter leaves those lines alone), and ANSI / dim ones (it does not)
LOOKS = ["", "#ff8800", "bold #00ff00 on #202040", "red", "dim #ff0000", "dim", "on blue", "color(100)"]


def table_rows(count: int, shift: int = 0, wide: bool = False) -> dict[str, list[Text]]:
    note = "a note long enough to need a horizontal scroll " * 2 if wide else "note"
    return {f"r{i}": [Text(f"row {i}", style=LOOKS[(i + shift) % len(LOOKS)]),
                      Text(str(i * 7 + shift), justify="right"), Text(note, style=LOOKS[(i * 3) % len(LOOKS)])]
            for i in range(count)}


class ReferenceTable(LineTable):
    """The same table drawn Textual's way: Textual's StylesCache, lines as wide as the widget."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._styles_cache = StylesCache()

    def _paint_width(self) -> int:
        return self.size.width


class TableApp(App[None]):
    def __init__(self, table: LineTable, css: str, count: int, wide: bool) -> None:
        super().__init__()
        self.table, self.css, self.count, self.wide = table, css, count, wide

    def compose(self) -> ComposeResult:
        self.table.set_styles("height: 8; width: 30;" + self.css)
        yield self.table

    def on_mount(self) -> None:
        self.table.set_rows(HEADERS, table_rows(self.count, wide=self.wide))


CASES = [  # (table CSS, rows, wide notes); with 20 rows in 8 lines a vertical scrollbar shows
    ("", 20, False),
    ("scrollbar-size-vertical: 1;", 20, False),
    ("border-top: solid red; border-bottom: tall blue;", 20, False),
    ("overflow-x: auto;", 20, True),  # both scrollbars and their corner
    ("scrollbar-visibility: hidden;", 20, False),  # no scrollbar drawn: full lines
    ("scrollbar-gutter: stable;", 3, False),  # the gutter without a scrollbar: full lines
    ("", 3, False),  # no scrollbar
    ("padding: 0 1;", 20, False),  # not a plain widget: Textual's own way
]


async def terminal_lines(table: LineTable, css: str, count: int, wide: bool) -> list[list[str]]:
    """The screen as the terminal gets it, after each of: the first paint, new figures,
    a scroll down and right, a cursor move, the focus."""
    app = TableApp(table, css, count, wide)
    frames: list[list[str]] = []
    async with app.run_test(size=(40, 12)) as pilot:
        steps = [lambda: None,
                 lambda: table.set_rows(HEADERS, table_rows(count, shift=3, wide=wide)),
                 lambda: table.scroll_to(x=5, y=4, animate=False),
                 lambda: table.move_cursor(6),
                 table.focus]
        for step in steps:
            step()
            await pilot.pause()
            await pilot.pause()
            frames.append([strip.render(app.console) for strip in app.screen._compositor.render_strips()])
    return frames


@pytest.mark.parametrize(("css", "count", "wide"), CASES)
async def test_a_table_draws_the_screen_textual_draws(css: str, count: int, wide: bool) -> None:
    ours = await terminal_lines(LineTable(), css, count, wide)
    textuals = await terminal_lines(ReferenceTable(), css, count, wide)
    assert ours == textuals


async def test_lines_under_a_scrollbar_stop_where_it_starts() -> None:
    """The short cut applies where the scrollbar is drawn, and only there."""
    widths = {}
    for css, count in (("", 20), ("scrollbar-visibility: hidden;", 20), ("scrollbar-gutter: stable;", 3)):
        table = LineTable()
        app = TableApp(table, css, count, False)
        async with app.run_test(size=(40, 12)) as pilot:
            await pilot.pause()
            lines = table.render_lines(table.region.size.region)
            widths[css] = {strip.cell_length for strip in lines}
            assert table.size.width == 30
    assert widths == {"": {30 - 2}, "scrollbar-visibility: hidden;": {30}, "scrollbar-gutter: stable;": {30}}


@pytest.mark.parametrize("style", [None, Style(color="#ff8800"), Style(bgcolor="#101010", bold=True),
                                   Style(color="red"), Style(bgcolor="blue"), Style(color="color(100)"), Style(color="#ff0000", dim=True),
                                   Style(dim=True), Style(color="default"), Style.parse("bright_white on #000000")])
def test_same_after_truecolor_is_the_filters_own_answer(style: Style | None) -> None:
    truecolor = ANSIToTruecolor(App().ansi_theme_dark)
    background = Color(30, 30, 40)
    segments = [Segment("abc", style), Segment("def", Style(color="#123456"))]
    unchanged = truecolor.apply(segments, background) == segments
    assert same_after_truecolor(Strip(segments), truecolor, background) is unchanged
    with_control = [Segment("x", None, [(1,)])]  # a control code: the filter drops it
    assert not same_after_truecolor(Strip(with_control), truecolor, background)


async def test_the_filter_is_skipped_only_for_lines_it_leaves_alone() -> None:
    """An RGB-only line comes out as the line drawn; a line with an ANSI colour or dim text
    comes out filtered (another strip), both equal to Textual's."""
    table = LineTable()
    app = TableApp(table, "", 20, False)
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.pause()
        cache = table._styles_cache
        assert isinstance(cache, PlainStylesCache)
        region = table.region.size.region
        table.refresh()
        drawn = table.render_lines(region)
        raw = [cache._cache[y] for y in region.line_range]
        truecolor = next(f for f in app.get_line_filters() if isinstance(f, ANSIToTruecolor))
        background = table.background_colors[1]
        kinds = set()
        for line, handed in zip(raw, drawn):
            same = same_after_truecolor(line, truecolor, background)
            kinds.add(same)
            assert (handed is line) is same
            assert handed == line.apply_filter(truecolor, background)
        assert kinds == {True, False}  # both kinds of line were on screen


async def test_the_status_line_hands_back_its_line_until_it_changes() -> None:
    """The dashboard's status line (a child of the screen, so in every frame) is kept: the
    same strips while it shows the same, Textual's drawing of the new text once it changes."""
    app = GpuMemApp(FakeSource(), interval=0.2, themes=load_themes(), side_pane=False)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, lambda: app.snapshot is not None, what="a snapshot")
        app.poller.stop()
        await settle(pilot, lambda: not app.poller.in_flight, what="the last poll handled")
        bar = app.status_bar
        assert isinstance(bar, KeptLines)
        region = bar.region.size.region
        first = bar.render_lines(region)
        assert bar.render_lines(region) is first
        app.poll_error = "NVML timed out"
        app._update_status()
        await pilot.pause()
        second = bar.render_lines(region)
        assert "poll failed: NVML timed out" in second[0].text and second is not first
        bar.refresh()
        assert second == Widget.render_lines(bar, region)  # what Textual draws for it


async def test_the_scrollbar_keeps_its_lines_until_its_state_changes() -> None:
    """The table's scrollbar hands back the list it handed back last while nothing marked it
    (also after a state served from its kept states), and what Textual draws once it moved."""
    from gpumem_tui.ui.scrollbars import RememberingScrollBar

    table = LineTable()
    app = TableApp(table, "", 40, False)
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.pause()
        bar = table.vertical_scrollbar
        assert isinstance(bar, RememberingScrollBar) and bar.display
        region = bar.size.region

        def textuals() -> list[Strip]:
            bar.refresh()
            return Widget.render_lines(bar, region)

        asked: list[object] = []
        own_render = bar.render

        def render() -> object:
            asked.append(None)
            return own_render()

        bar.render = render  # type: ignore[method-assign]
        for y in (0, 10, 0, 10):  # new states, then states seen before
            table.scroll_to(y=y, animate=False)
            await pilot.pause()
            drawn = bar.render_lines(region)
            asked.clear()
            assert bar.render_lines(region) is drawn  # nothing changed: the same list,
            assert asked == []  # handed back without asking the bar for its state
            assert drawn == textuals()
        table.scroll_to(y=0, animate=False)
        await pilot.pause()
        assert bar.render_lines(region) != drawn  # moved: drawn for the new position


async def test_table_lines_join_runs_of_one_style() -> None:
    """_draw joins neighbours of one style as it lays the cells out (merged_runs' rule): no two
    neighbouring segments of a drawn line share a style, whatever the cells' own styles."""
    from gpumem_tui.ui.line_table import merged_runs

    table = LineTable()
    app = TableApp(table, "", 20, False)
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.pause()
        lines = [table.render_line(y) for y in range(table.size.height)]
        assert any(len(line) > 1 for line in lines) and any(len(line) == 1 for line in lines)
        for line in lines:
            segments = list(line)
            assert merged_runs(segments) == segments
            assert sum(len(text) for text, _, _ in segments) == line.cell_length


class FocusApp(App[None]):
    """A long table (so a scrollbar shows) and an input to take the focus from it."""

    def compose(self) -> ComposeResult:
        from textual.widgets import Input

        self.table = LineTable()
        self.table.set_styles("height: 8; width: 30;")
        yield self.table
        yield Input(id="other")

    def on_mount(self) -> None:
        self.table.set_rows(HEADERS, table_rows(40))


async def test_the_scrollbar_follows_its_tables_focus_tint() -> None:
    """The bar's lines are drawn on its background, which follows the table's focus tint (the
    renderable's style does not change): after a blur and a focus the bar shows what Textual's
    ScrollBar draws, not the lines kept from the other focus state."""
    from textual.scroll_view import ScrollView

    app = FocusApp()
    async with app.run_test(size=(40, 14)) as pilot:
        await pilot.pause()
        table = app.table
        bar = table.vertical_scrollbar
        region = bar.size.region
        shown = []
        for target in (table, app.query_one("#other"), table):
            target.focus()
            await pilot.pause()
            await pilot.pause()
            kept = bar.render_lines(region)
            bar.refresh()
            assert kept == Widget.render_lines(bar, region)
            shown.append(kept)
        assert shown[0] != shown[1] and shown[0] == shown[2]  # the tint did change
        assert type(table).vertical_scrollbar is not ScrollView.vertical_scrollbar
