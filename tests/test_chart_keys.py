"""Chart keys on a process chart (issue 13, item 13): `t` always changes the scale, `[` zooms
below 30 s, and titles carry no "(N bytes)" note."""

from __future__ import annotations

import asyncio


import textual  # noqa: F401 -- installed by setup (README): missing is a failure

from gpumem_tui.telemetry.model import ProcessSample, ProcessType, ProbeSample, Snapshot  # noqa: E402
from gpumem_tui.ui.app import CHART_WINDOWS, GpuMemApp  # noqa: E402
from gpumem_tui.ui.memory_chart import MemoryPlot  # noqa: E402
from gpumem_tui.ui.themes import load_themes  # noqa: E402
from gpumem_tui.support.units import GiB  # noqa: E402
from ui_fakes import devices  # noqa: E402
from waiting import settle  # noqa: E402


class BigJob:
    """One process using 34 GiB of a 40 GiB GPU: the total is within the scale limit, so it is
    on the plot without `t` (the H100 trace's case: 34 of 80 GiB)."""

    def __init__(self, command: str = "python train.py") -> None:
        self.t = 0
        self.command = command

    def poll(self) -> Snapshot:
        self.t += 1
        proc = ProcessSample(77, 0, ProcessType.COMPUTE, 34 * GiB + self.t, 50.0, "alice", self.command)
        probe = ProbeSample(time=1000.0 + self.t * 0.1, pid=77, device="cuda", allocated_bytes=30 * GiB + self.t)
        return Snapshot(time=1000.0 + self.t * 0.1, devices=devices(0)[:1], processes=(proc,), probes=(probe,))

    def close(self) -> None:
        pass


def _app(source) -> GpuMemApp:
    return GpuMemApp(source, interval=0.05, themes=load_themes(), side_pane=False, select_pid=77)


async def _settle(app, pilot, cond) -> None:
    await pilot.pause()  # the first look after the app has run (the old loop paused first too)
    await settle(pilot, cond, what="the chart state the test needs")


def test_t_flips_the_total_on_a_process_chart_where_it_is_already_on_scale():
    async def run() -> None:
        app = _app(BigJob())
        async with app.run_test(size=(160, 48)) as pilot:
            # 40 GiB <= 2.5 x 34 GiB: drawn without asking
            await _settle(app, pilot, lambda: app.chart.curves and app.chart.total_bytes and app.chart.total_on_scale)
            await pilot.pause()  # the frame of that state
            top_before = app.query_one(MemoryPlot).plain_lines()
            await pilot.press("t")
            await _settle(app, pilot, lambda: "off the scale; t scales to it" in app.chart._legend_shown.plain)
            assert app.chart.fit_total is False and not app.chart.total_on_scale
            # the y axis changed
            await _settle(app, pilot, lambda: app.query_one(MemoryPlot).plain_lines() != top_before)
            await pilot.press("t")
            await _settle(app, pilot, lambda: app.chart.total_on_scale)

    asyncio.run(run())


def test_t_without_a_total_says_so():
    async def run() -> list[str]:
        class HostJob(BigJob):
            def poll(self) -> Snapshot:
                snap = super().poll()
                proc = ProcessSample(77, None, ProcessType.HOST, None, None, "alice", "python cpu.py")
                return Snapshot(time=snap.time, processes=(proc,), probes=snap.probes)

        app = _app(HostJob())
        async with app.run_test(size=(160, 48)) as pilot:
            await _settle(app, pilot, lambda: app.chart.curves)
            await pilot.press("t")
            await _settle(app, pilot, lambda: app._notifications)
            return [n.message for n in app._notifications]

    assert any("no GPU total" in m for m in asyncio.run(run()))


def test_left_bracket_zooms_to_two_seconds():
    assert min(CHART_WINDOWS) <= 2.0

    async def run() -> tuple[float, list[str]]:
        app = _app(BigJob())
        async with app.run_test(size=(160, 48)) as pilot:
            await _settle(app, pilot, lambda: app.chart.curves)
            for _ in range(len(CHART_WINDOWS)):
                await pilot.press("left_square_bracket")
            plot = app.query_one(MemoryPlot)
            # the plot is drawn again for the new window at a later poll (maybe after drawing a
            # window passed on the way): wait for an axis that starts at -2 s; the rest is below
            await settle(pilot, lambda: plot.plain_lines()[-2].split()[:1] == ["-2"],
                         what=lambda: f"a 2 s x axis; the plot's axis: {plot.plain_lines()[-2]!r}")
            return app.chart.window, plot.plain_lines()

    window, lines = asyncio.run(run())
    assert window == min(CHART_WINDOWS)
    ticks = lines[-2].split()
    assert ticks[0] == "-2" and ticks[-1] == "0" and "-1" in ticks  # a 2 s axis, not 30 s


def test_chart_title_of_a_long_command_has_no_byte_count():
    command = "python train.py " + "--flag " * 20

    async def run() -> str:
        app = _app(BigJob(command))
        async with app.run_test(size=(160, 48)) as pilot:
            await _settle(app, pilot, lambda: app.chart.curves)
            return app.chart.title

    title = asyncio.run(run())
    assert title.startswith("PID 77 (GPU 0) python train.py --flag")
    assert title.endswith("…") and "bytes)" not in title


def test_render_plot_survives_absurd_values():
    from rich.style import Style

    from gpumem_tui.ui.memory_chart import render_plot

    ops = [
        ("plot", ([-1e308, 0.0, 1e308, float("nan")], [1e308, -1e308, 5.0, 1.0]), {"color": (1, 2, 3), "marker": "braille"}),
        ("plot", ([-1e308, 1e308], [3.0, 3.0]), {"color": (1, 2, 3), "marker": "━"}),
        ("plot", ([0.0, 1e300], [1e300, 2.0]), {"color": (1, 2, 3), "marker": "hd"}),
        ("vline", (1e308,), {"color": (1, 2, 3)}),
        ("xlim", (-30.0, 0.0), {}), ("ylim", (0.0, 10.0), {}),
        ("yticks", ([0.0, 5.0, 10.0], ["0", "5", "10"]), {}), ("xticks", ([-30.0, 0.0], ["-30", "0"]), {}),
        ("title", ("t",), {}),
    ]
    lines = render_plot(ops, 60, 12, Style())
    assert len(lines) == 12 and all(line.cell_length == 60 for line in lines)
    assert "━" in "".join(line.text for line in lines)  # the finite horizontal line is drawn
