"""CroppedCompositor (issue 23, idle CPU) cuts a partial frame's lines only where the frame's
changed box is, and writes it with PlainChopsUpdate (Textual's text, cursor moves as strings). The terminal must show what Textual draws: every update the compositor hands
the driver is applied here to a grid of cells, as a terminal would (the rule of
``ChopsUpdate.render_segments``), and after each frame the grid must equal the whole screen
drawn afresh -- for changes at the left, at the right (the containers then begin left of the
box), across both, and for the dashboard itself, poll after poll, with its side pane; and a
chop cut to its span is written as Textual crops and renders it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.style import Style
from textual._compositor import ChopsUpdate, Compositor, LayoutUpdate
from textual.geometry import Region
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.strip import Strip
from textual.widgets import Label, Static

sys.path.insert(0, str(Path(__file__).parent))

from ui_fakes import FakeSource  # noqa: E402
from waiting import settle  # noqa: E402

from gpumem_tui.ui.app import GpuMemApp  # noqa: E402
from gpumem_tui.ui.plain_lines import CroppedCompositor, KeptScreen, KeptVertical, PlainChopsUpdate  # noqa: E402
from gpumem_tui.ui.themes import load_themes  # noqa: E402

Cell = tuple[str, Style | None]


def cells(strip: Strip) -> list[Cell]:
    """The strip's cells (the tests draw only one-cell characters)."""
    return [(char, style) for text, style, _ in strip for char in text]


class Terminal:
    """A grid of cells the compositor's updates are written to, as the driver writes them."""

    def __init__(self, strips: list[Strip]) -> None:
        self.lines = [cells(strip) for strip in strips]
        self.partial_frames = 0
        self.updates: list[Any] = []

    def write(self, update: Any) -> None:
        self.updates.append(update)
        if isinstance(update, LayoutUpdate):
            for y, strip in enumerate(update.strips, update.region.y):
                self._put(update.region.x, y, cells(Strip.join(strip)))
        elif isinstance(update, ChopsUpdate):
            self.partial_frames += 1
            for y, x1, x2 in update.spans:  # ChopsUpdate.render_segments' rule
                for end, (x, strip) in zip(update.chop_ends[y], update.chops[y].items()):
                    if strip is None or x > x2 or end <= x1:
                        continue
                    written = cells(strip)
                    if not (x2 > x >= x1 and end <= x2):
                        written = written[:min(end, x2) - x]
                    self._put(x, y, written)

    def _put(self, x: int, y: int, written: list[Cell]) -> None:
        self.lines[y][x:x + len(written)] = written


def watch(screen: Any) -> Terminal:
    """A terminal showing ``screen`` now, written to by each of its compositor's updates."""
    compositor = screen._compositor
    terminal = Terminal(compositor.render_strips())
    render_update = compositor.render_update

    def recorded(*args: Any, **kwargs: Any) -> Any:
        update = render_update(*args, **kwargs)
        if update is not None:
            terminal.write(update)
        return update

    compositor.render_update = recorded
    return terminal


def assert_writes_textuals_text(terminal: Terminal, console: Any) -> None:
    """Each partial frame is a PlainChopsUpdate, whose text for the terminal is Textual's."""
    partial = [update for update in terminal.updates if isinstance(update, ChopsUpdate)]
    assert partial and all(isinstance(update, PlainChopsUpdate) for update in partial)
    for update in partial:
        assert update.render_segments(console) == ChopsUpdate.render_segments(update, console)


def assert_shows_the_screen(terminal: Terminal, screen: Any) -> None:
    drawn = [cells(strip) for strip in screen._compositor.render_strips()]
    for y, (shown, expected) in enumerate(zip(terminal.lines, drawn)):
        assert shown == expected, f"line {y}: {''.join(c for c, _ in shown)!r} != {''.join(c for c, _ in expected)!r}"


class Board(App[None]):
    """A narrow column that changes beside a pane of many small widgets (many cuts a line)."""

    CSS = """
    #main { background: #203040; }
    #left { width: 24; }
    #pane { width: 1fr; margin-left: 2; }  /* #main shows in the gap */
    .row { height: 1; }
    .row Label { width: auto; margin-right: 1; }
    """

    def get_default_screen(self) -> KeptScreen:
        return KeptScreen(id="_default")

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            with KeptVertical(id="left"):
                yield Static("first", id="a")
                yield Static("second", id="b")
            with Vertical(id="pane"):
                for i in range(6):
                    with Horizontal(classes="row"):
                        yield Label(f"key{i}")
                        yield Label("value", id=f"v{i}")
                        yield Label("[x]")


async def test_partial_frames_show_what_textual_draws_where_they_change() -> None:
    app = Board()
    async with app.run_test(size=(60, 8)) as pilot:
        assert isinstance(app.screen._compositor, CroppedCompositor)
        await pilot.pause()
        terminal = watch(app.screen)
        steps = [
            lambda: app.query_one("#a", Static).update("changed at the left"),  # box at the left
            lambda: app.query_one("#v2", Label).update("new value"),  # box right of #main's start
            lambda: app.query_one("#v4", Label).update("v"),  # narrower: the row's cuts move
            lambda: (app.query_one("#b", Static).update("both"), app.query_one("#v0", Label).update("both")),
            lambda: app.query_one("#b", Static).update("x" * 40),  # cut at the column's edge
        ]
        for number, step in enumerate(steps):
            before = terminal.partial_frames
            step()
            await pilot.pause()
            await pilot.pause()
            assert terminal.partial_frames > before, f"step {number} drew no partial frame"
            assert_shows_the_screen(terminal, app.screen)
        assert_writes_textuals_text(terminal, app.console)


@asynccontextmanager
async def dashboard(source: FakeSource) -> AsyncIterator[tuple[GpuMemApp, Any]]:
    """The dashboard at 160 x 48 on ``source``, after its first poll, with its side pane."""
    app = GpuMemApp(source, interval=3600.0, theme="dark", themes=load_themes())
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, lambda: app.snapshot is not None and app.has_side_pane,
                     what="the first poll and the side pane")
        await pilot.pause()
        yield app, pilot


async def test_the_dashboard_shows_what_textual_draws_poll_after_poll() -> None:
    source = FakeSource()
    async with dashboard(source) as (app, pilot):
        terminal = watch(app.screen)
        for _ in range(6):
            before = terminal.partial_frames
            app.apply_snapshot(source.poll())
            await settle(pilot, lambda: terminal.partial_frames > before, what="a partial frame")
            await pilot.pause()
            assert_shows_the_screen(terminal, app.screen)
        app.table.move_cursor(3)  # a change of two rows only
        await pilot.pause()
        await pilot.pause()
        assert_shows_the_screen(terminal, app.screen)
        assert_writes_textuals_text(terminal, app.console)


def assert_same_chops(screen: Any, region: Region) -> None:
    """The chops a partial frame of the changed ``region`` writes (those overlapping its spans)
    are Textual's own (``Compositor._render_chops``), cell for cell and as long."""
    compositor = screen._compositor
    crop = region.intersection(compositor.size.region)
    spans = list(compositor._regions_to_spans([crop]))
    is_rendered_line = {y for y, _, _ in spans}.__contains__
    ours = compositor._render_chops(crop, is_rendered_line)
    textuals = Compositor._render_chops(compositor, crop, is_rendered_line)
    ends = [cuts[1:] for cuts in compositor.cuts]
    for y, x1, x2 in spans:
        for end, (x, theirs) in zip(ends[y], textuals[y].items()):
            if theirs is None or x >= x2 or end <= x1:
                continue
            mine = ours[y].get(x)
            assert mine is not None, f"{region}: no chop at ({x}, {y})"
            assert cells(mine) == cells(theirs), f"{region}: the chop at ({x}, {y}) differs"


def regions_over(width: int, height: int) -> list[Region]:
    """Changed boxes of many places and sizes: starting at, left of and inside widgets."""
    return [Region(x, y, w, h) for x in (0, 3, 22, 25, 31, width - 5) for y in (0, 2, height // 2)
            for w in (1, 7, width) for h in (1, 3, height)]


async def test_the_chops_written_are_textuals_for_any_changed_box() -> None:
    app = Board()
    async with app.run_test(size=(60, 8)) as pilot:
        await pilot.pause()
        for region in regions_over(60, 8):
            assert_same_chops(app.screen, region)


async def test_the_dashboards_chops_are_textuals_for_any_changed_box() -> None:
    async with dashboard(FakeSource()) as (app, _):
        widgets = [app.table, app.device_panel, app.status_bar, app.query_one("#side")]
        for region in [widget.region for widget in widgets] + regions_over(160, 48):
            assert_same_chops(app.screen, region)


_STYLES = [None, Style(color="red"), Style(color="#102030", bgcolor="#405060", bold=True),
           Style(link="https://example.com/a"), Style()]
_SEGMENT_TEXT = st.text(alphabet=st.sampled_from([*"ab -", "⣿", "宽", "😀", "é", "\u0301"]), max_size=6)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_SEGMENT_TEXT, st.sampled_from(_STYLES)), max_size=8), st.integers(-2, 40),
       st.sampled_from(["truecolor", "256", "standard"]))
def test_a_chop_cut_to_its_span_is_written_as_textual_crops_and_renders_it(parts, cells, color_system):
    """PlainChopsUpdate writes a chop that runs past its span as the text of
    ``strip.crop(0, cells).render(console)`` without making that Strip: the same text for
    any segments -- empty ones, wide characters cut in half, combining marks, links, no
    style -- any cut, any colour system."""
    from rich.console import Console
    from rich.segment import Segment

    from gpumem_tui.ui.plain_lines import rendered_prefix

    console = Console(color_system=color_system, force_terminal=True)
    strip = Strip([Segment(text, style) for text, style in parts])
    expected = Strip([Segment(text, style) for text, style in parts]).crop(0, cells).render(console)
    assert rendered_prefix(strip, cells, console) == expected
