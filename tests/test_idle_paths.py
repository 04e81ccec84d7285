"""What the idle-CPU shortcuts of issue 23 rely on: a table row drawn as few segments shows the
same cells, the memory plot's lines are ones Textual's ANSIToTruecolor filter leaves unchanged
(so the plot may skip it), the plot's base style is one object per theme, and the status line
is built again only when what it shows changed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.filter import ANSIToTruecolor, DimFilter
from textual.geometry import Region

sys.path.insert(0, str(Path(__file__).parent))

from test_memory_plot_repaint import PlotApp  # noqa: E402 -- one MemoryPlot in an app
from ui_fakes import FakeSource  # noqa: E402
from waiting import settle  # noqa: E402

from gpumem_tui.ui import status_line  # noqa: E402
from gpumem_tui.ui.app import GpuMemApp  # noqa: E402
from gpumem_tui.ui.line_table import LineTable, merged_runs  # noqa: E402
from gpumem_tui.ui.memory_chart import MemoryPlot, render_plot  # noqa: E402
from gpumem_tui.ui.themes import load_themes  # noqa: E402


def test_merged_runs_joins_only_neighbours_of_one_style():
    bold, same_bold, red = Style(bold=True), Style(bold=True), Style(color="red")
    segments = [Segment("a", bold), Segment("b", same_bold), Segment("c", red), Segment("d", None),
                Segment("e", None), Segment("f", bold)]
    assert merged_runs(segments) == [Segment("ab", bold), Segment("c", red), Segment("de", None), Segment("f", bold)]
    assert merged_runs([]) == []


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LineTable(id="t")


async def test_a_table_row_of_one_look_is_one_segment_with_the_cells_text():
    app = TableApp()
    async with app.run_test(size=(40, 6)) as pilot:
        table = app.query_one(LineTable)
        table.set_rows([Text("NAME", style="bold"), Text("N", style="bold")],
                       {"a": [Text("alpha"), Text("1", justify="right")],
                        "b": [Text("bravo", style="italic"), Text("22", justify="right")]})
        await pilot.pause()
        plain, styled = table.render_line(1), table.render_line(2)
        assert plain.text.rstrip() == " alpha   1" and len(list(plain)) == 1
        assert styled.text.rstrip() == " bravo  22"
        segments = list(styled)
        assert [s.text for s in segments if s.style is not None and s.style.italic] == ["bravo"]
        assert all(a.style != b.style for a, b in zip(segments, segments[1:]))  # runs of one style are one


def plot_ops(color: object) -> list[tuple[str, tuple, dict]]:
    xs = [float(x) for x in range(-8, 1)]
    ys = [1.0, 3.0, 9.0, 2.0, 2.0, 8.0, 0.5, 4.0, 9.5]
    return [
        ("plot", (xs, [5.0] * 9), {"color": (120, 200, 90), "marker": "braille"}),
        ("plot", (xs, ys), {"color": color, "marker": "braille"}),
        ("plot", ([-8.0, 0.0], [9.0, 9.0]), {"color": (240, 80, 80), "marker": "━"}),
        ("plot", (xs[:3], [6.0, 7.0, 6.5]), {"color": (90, 90, 240), "marker": "hd"}),
        ("vline", (-4.0,), {"color": (200, 200, 0)}),
        ("title", ("PID 1 python train.py",), {}),
        ("xlabel", ("time (s)",), {}),
        ("ylabel", ("memory (GiB)",), {}),
        ("xlim", (-8.0, 0.0), {}),
        ("xticks", ([-8.0, -4.0, 0.0], ["-8", "-4", "0"]), {}),
        ("ylim", (0.0, 10.0), {}),
        ("yticks", ([0.0, 5.0, 10.0], ["0", "5", "10"]), {}),
    ]


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light", "ansi-dark"])
@pytest.mark.parametrize("color", [(200, 100, 50), "default"])
async def test_the_plot_draws_nothing_that_ansi_to_truecolor_changes(theme, color):
    """MemoryPlot.get_line_filters leaves ANSIToTruecolor out: the plot's lines must be ones it
    would hand back unchanged (RGB colours or none, never dim), in every kind of theme."""
    app = PlotApp()
    async with app.run_test(size=(50, 16)) as pilot:
        app.theme = theme
        await pilot.pause()
        plot = app.query_one(MemoryPlot)
        plot.draw(plot_ops(color))
        await pilot.pause()
        to_truecolor = ANSIToTruecolor(app.ansi_theme)
        background = plot.background_colors[1]
        rows = plot.render_lines(Region(0, 0, plot.size.width, plot.size.height))
        assert any(len(list(row)) > 3 for row in rows)  # curves in several colours were drawn
        for row in rows:
            assert to_truecolor.apply(list(row), background) == list(row)


async def test_the_plot_keeps_every_line_filter_but_ansi_to_truecolor(monkeypatch):
    app = PlotApp()
    async with app.run_test(size=(50, 16)):
        plot = app.query_one(MemoryPlot)
        dim, to_truecolor = DimFilter(), ANSIToTruecolor(app.ansi_theme)
        monkeypatch.setattr(app, "get_line_filters", lambda: [to_truecolor, dim])
        assert plot.get_line_filters() == [dim]


async def test_the_plot_base_style_is_one_object_per_theme_and_follows_it():
    app = PlotApp()
    async with app.run_test(size=(50, 16)) as pilot:
        app.theme = "textual-dark"
        await pilot.pause()
        plot = app.query_one(MemoryPlot)
        dark = plot.base_style()
        assert plot.base_style() is dark
        app.theme = "textual-light"
        await pilot.pause()
        light = plot.base_style()
        assert light != dark and plot.base_style() is light


def test_a_canvas_row_joins_its_blank_ends_with_the_frame():
    flat = [("plot", ([-8.0, 0.0], [2.0, 2.0]), {"color": (200, 100, 50), "marker": "braille"}),
            *(op for op in plot_ops((200, 100, 50)) if op[0] not in ("plot", "vline"))]
    rows = render_plot(flat, 50, 16, Style(color="white", bgcolor="black"))
    texts = [row.text for row in rows]
    blank = [row for row, text in zip(rows, texts) if "│" in text and text.strip(" 0123456789│┤") == ""]
    assert len(blank) > 5 and all(len(list(row)) == 1 for row in blank)  # label, canvas, frame: one segment
    curve = [row for row, text in zip(rows, texts) if "⠉" in text or "⣀" in text or "⠒" in text or "⠤" in text]
    assert len(curve) == 1 and len(list(curve[0])) == 3  # the line between its blank ends
    for row in rows:
        segments = list(row)
        assert row.cell_length == 50
        assert all(a.style is not b.style for a, b in zip(segments, segments[1:]))


async def test_the_status_line_is_built_again_only_when_what_it_shows_changed(monkeypatch):
    app = GpuMemApp(FakeSource(), interval=0.2, themes=load_themes(), side_pane=False)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, lambda: app.snapshot is not None, what="a snapshot")
        app.poller.stop()
        await settle(pilot, lambda: not app.poller.in_flight, what="the last poll handled")
        built: list[tuple] = []
        original = status_line.status_from

        def counting(*inputs):  # noqa: ANN002, ANN202
            built.append(inputs)
            return original(*inputs)

        monkeypatch.setattr(status_line, "status_from", counting)
        app._update_status()
        app._update_status()
        assert built == []  # nothing it shows changed since the last poll
        app.poll_error = "NVML timed out"
        app._update_status()
        assert len(built) == 1
        assert "poll failed: NVML timed out" in str(app.status_bar.render())
        assert str(app.status_bar.render()) == app.status_text().plain
