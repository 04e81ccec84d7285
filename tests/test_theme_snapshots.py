"""Issue 13, "Verify": the replayed H100 trace in every theme, as a snapshot (SVG; looked at as
PNGs when made, with ``rsvg-convert``), and in each the chart's text and legend readable
(WCAG contrast >= 4.5, or the terminal's own colours; see test_chart_themes.py).

160x50 (the wide size class): the table, the chart with its bands and the estimator pane are
all on screen, so each theme's colours are seen on all of them.

The trace is replayed once for the module (tests/live_replay.py: the replay is most of the
CPU); each test switches the running dashboard to its theme, has it take a poll as it does
every interval (the widgets that keep colours resolved when their data came redraw), draws
the final frame afresh and compares it with the theme's stored SVG: the same SVGs as when each
test replayed the trace in its theme from the start.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import pytest_textual_snapshot  # noqa: F401 -- installed by setup (README): missing is a failure

from test_chart_themes import THEMES, unreadable_text  # noqa: E402
from shared_data import needs_h100_trace  # noqa: E402
from live_replay import LiveReplay, assert_svg_snapshot, draw_final_frame, screenshot, take_one_more_poll  # noqa: E402

pytestmark = needs_h100_trace  # replays it


@pytest.fixture(scope="module")
def wide_replay(h100_trace, tmp_path_factory):
    """The trace replayed once at 160x50, the app kept running for this module's tests (a
    module-scoped fixture: tests/conftest.py keeps them on one xdist worker)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUMEM_TUI_CONFIG_DIR", str(tmp_path_factory.mktemp("cfg")))  # no user config
        replay = LiveReplay((160, 50))
        try:
            yield replay
        finally:
            replay.close()


@pytest.mark.parametrize("theme", THEMES)
def test_replayed_h100_trace_in_each_theme(wide_replay, snapshot, request, theme):
    from textual.geometry import Region

    from gpumem_tui.ui.memory_chart import MemoryPlot

    async def in_theme(app, source, pilot):
        # Not painted (batch_update) until the final frame: the screen in the new theme with
        # the old data, then again after the poll, would be two frames of the whole screen.
        with app.batch_update():
            app.theme = theme
            await pilot.pause()  # the theme's variables are set after the app's own watcher
            await take_one_more_poll(app, source, pilot)
        await draw_final_frame(app, pilot)
        plot = app.query_one(MemoryPlot)
        legend = app.chart.query_one("#chart-legend")
        strips = plot.render_lines(Region(0, 0, plot.size.width, plot.size.height))
        strips += legend.render_lines(Region(0, 0, legend.size.width, legend.size.height))
        chart_text = "".join(seg.text for strip in strips for seg in strip)
        return app.theme, chart_text, unreadable_text(strips), await screenshot(app, pilot)

    shown_theme, chart_text, unreadable, svg = wide_replay.run(in_theme)
    assert "PID 1088" in chart_text
    assert assert_svg_snapshot(snapshot, request, svg)
    assert shown_theme == theme
    assert not unreadable, f"{theme}: " + "; ".join(unreadable[:5])
