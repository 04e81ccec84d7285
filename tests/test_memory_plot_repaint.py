"""MemoryPlot repaints only the rows a new drawing changed (issue 23: the dashboard's CPU at
1 Hz), and what it then shows is the new drawing whole."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.geometry import Region

from gpumem_tui.ui.memory_chart import MemoryPlot, render_plot

WIDTH, HEIGHT = 40, 12


def ops(ys: list[float]) -> list[tuple[str, tuple, dict]]:
    xs = [float(x) for x in range(-len(ys) + 1, 1)]
    return [
        ("plot", (xs, ys), {"color": (200, 100, 50), "marker": "braille"}),
        ("title", ("PID 1 python train.py",), {}),
        ("xlabel", ("time (s)",), {}),
        ("ylabel", ("memory (GiB)",), {}),
        ("xlim", (xs[0], 0.0), {}),
        ("xticks", ([-8.0, -4.0, 0.0], ["-8", "-4", "0"]), {}),
        ("ylim", (0.0, 10.0), {}),
        ("yticks", ([0.0, 5.0, 10.0], ["0", "5", "10"]), {}),
    ]


class PlotApp(App[None]):
    def compose(self) -> ComposeResult:
        yield MemoryPlot(id="plot")


def shown(plot: MemoryPlot) -> list[str]:
    """The rows as the widget paints them (through Textual's line cache)."""
    return [strip.text for strip in plot.render_lines(Region(0, 0, plot.size.width, plot.size.height))]


async def test_a_new_curve_repaints_only_its_rows_and_shows_the_new_drawing():
    app = PlotApp()
    async with app.run_test(size=(WIDTH, HEIGHT)) as pilot:
        plot = app.query_one(MemoryPlot)
        flat = [2.0] * 9
        plot.draw(ops(flat))
        await pilot.pause()
        assert shown(plot)  # painted once: its rows are known
        refreshed: list[tuple[Region, ...]] = []
        original = plot.refresh

        def spy(*regions, **kwargs):  # noqa: ANN002, ANN003
            refreshed.append(regions)
            return original(*regions, **kwargs)

        plot.refresh = spy  # type: ignore[method-assign]
        plot.draw(ops(flat))  # the same drawing: nothing to repaint
        assert refreshed == []
        risen = flat[:-1] + [9.0]  # the newest sample jumps: only the rows it crosses change
        plot.draw(ops(risen))
        assert len(refreshed) == 1 and refreshed[0], "only regions, not the whole plot"
        rows = sorted(region.y for region in refreshed[0])
        assert all(region.height == 1 and region.width == plot.size.width for region in refreshed[0])
        assert 0 not in rows  # the title row did not change
        assert len(rows) < plot.size.height
        await pilot.pause()
        expected = [strip.text for strip in render_plot(ops(risen), plot.size.width, plot.size.height,
                                                        plot.base_style())]
        assert shown(plot) == expected
        assert plot.plain_lines() == expected


def test_a_row_measured_as_one_string_equals_strips_own_measure():
    """memory_chart.strip measures the row once; it must cut and pad exactly as Strip does."""
    from rich.segment import Segment
    from rich.style import Style
    from textual.strip import Strip

    from gpumem_tui.ui.memory_chart import strip

    base = Style(bgcolor="black")
    red = Style(color="red")
    rows = [
        [Segment("⣀⣤", red), Segment("   ", base), Segment("┤", base)],
        [Segment("宽字符", red), Segment("abc", base)],  # wide characters: 9 cells in 6 characters
        [Segment("x" * 50, base)],
        [],
    ]
    for segments in rows:
        for width in (0, 3, 6, 9, 12, 60):
            got = strip(segments, width, base)
            want = Strip(segments).adjust_cell_length(width, base)
            assert got.cell_length == width
            assert list(got) == list(want), (segments, width)


def test_a_row_drawn_as_shown_is_the_shown_strip_and_others_are_new():
    """render_plot's ``previous``: a row with the shown row's segments is that strip (the
    plot then finds it unchanged by identity); a changed row is drawn anew; rows shown at
    another width are never taken, even where their segments are the same."""
    from rich.style import Style

    base = Style(color="white", bgcolor="black")
    flat = [2.0] * 9
    risen = flat[:-1] + [9.0]
    shown = render_plot(ops(flat), WIDTH, HEIGHT, base)
    again = render_plot(ops(flat), WIDTH, HEIGHT, base, shown)
    assert all(new is old for new, old in zip(again, shown))
    moved = render_plot(ops(risen), WIDTH, HEIGHT, base, shown)
    fresh = render_plot(ops(risen), WIDTH, HEIGHT, base)
    assert [line.text for line in moved] == [line.text for line in fresh]
    assert [list(line) for line in moved] == [list(line) for line in fresh]
    kept = [new is old for new, old in zip(moved, shown)]
    assert kept[0] and not all(kept)  # the title is the shown strip; the rows the jump crosses are not
    assert all(list(new) != list(old) for new, old, same in zip(moved, shown, kept) if not same)
    # Too narrow for more than one canvas column: a canvas row is the same 8 cells (tick
    # label, frame, 1 cell, frame) at 8 and 7 cells wide, shown whole at 8 and cut at 7.
    labels = [("yticks", ([0.0, 10.0], ["0", "10000"]), {})]
    wide = render_plot(ops(flat) + labels, 8, HEIGHT, base)
    narrow = render_plot(ops(flat) + labels, 7, HEIGHT, base, wide)
    assert all(line.cell_length == 7 for line in narrow)
    assert [list(line) for line in narrow] == [list(line) for line in render_plot(ops(flat) + labels, 7, HEIGHT, base)]
    assert not any(new is old for new, old in zip(narrow, wide))


def test_axis_commands_are_kept_per_inputs_and_follow_a_change():
    """chart_scale.axis_ops keeps its commands for recent inputs: the same axes give the
    same commands (equal to ones worked out anew), a new top or span gives new ticks."""
    from gpumem_tui.ui.chart_scale import axis_ops

    first = axis_ops("PID 1", "GiB", -30.0, 0.0, 9.72)
    assert axis_ops("PID 1", "GiB", -30.0, 0.0, 9.72) is first
    axis_ops.cache_clear()
    assert axis_ops("PID 1", "GiB", -30.0, 0.0, 9.72) == first
    higher = dict((name, args) for name, args, _ in axis_ops("PID 1", "GiB", -30.0, 0.0, 19.0))
    wider = dict((name, args) for name, args, _ in axis_ops("PID 1", "GiB", -60.0, 0.0, 9.72))
    kept = dict((name, args) for name, args, _ in first)
    assert kept["yticks"] == ([0.0, 2.0, 4.0, 6.0, 8.0], ["0", "2", "4", "6", "8"])
    assert higher["yticks"] != kept["yticks"] and higher["ylim"] == (0, 19.0)
    assert wider["xticks"] != kept["xticks"] and wider["xlim"] == (-60.0, 0.0)


async def test_the_chart_finds_its_plot_and_legend_once_composed():
    """MemoryChart.replot looks its plot and legend up once: before it is mounted nothing is
    kept (and nothing drawn), then the widgets query_one finds are kept and drawn on."""
    from gpumem_tui.ui.memory_chart import CurveSpec, MemoryChart

    class ChartApp(App[None]):
        def compose(self) -> ComposeResult:
            yield MemoryChart(id="chart")

    unmounted = MemoryChart()
    unmounted.replot()
    assert unmounted._parts is None and unmounted.redraws == 0
    app = ChartApp()
    async with app.run_test(size=(60, 16)) as pilot:
        chart = app.query_one(MemoryChart)
        chart.set_series([CurveSpec("NVML used", [(100.0, 2e9), (110.0, 3e9)])], 110.0)
        chart.replot()
        await pilot.pause()
        assert chart._parts == (app.query_one(MemoryPlot), app.query_one("#chart-legend"))
        assert "NVML used" in str(chart._parts[1].render())
        assert any("\u2801" <= char <= "\u28ff" for line in chart._parts[0].plain_lines() for char in line)
