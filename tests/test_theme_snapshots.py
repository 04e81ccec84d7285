"""Issue 13, "Verify": the replayed H100 trace in every theme, as a snapshot (SVG; looked at as
PNGs when made, with ``rsvg-convert``), and in each the chart's text and legend readable
(WCAG contrast >= 4.5, or the terminal's own colours; see test_chart_themes.py).

160x50 (the wide size class): the table, the chart with its bands and the estimator pane are
all on screen, so each theme's colours are seen on all of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import pytest_textual_snapshot  # noqa: F401 -- installed by setup (README): missing is a failure

from test_chart_themes import THEMES, unreadable_text  # noqa: E402
from shared_data import needs_h100_trace  # noqa: E402
from test_size_snapshots import replayed_app, until_the_end  # noqa: E402

pytestmark = needs_h100_trace  # replays it


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMEM_TUI_CONFIG_DIR", str(tmp_path / "cfg"))


@pytest.mark.parametrize("theme", THEMES)
def test_replayed_h100_trace_in_each_theme(snap_compare, theme):
    from textual.geometry import Region

    from gpumem_tui.ui.memory_chart import MemoryPlot

    app, source = replayed_app()
    settle = until_the_end(app, source)
    unreadable: list[str] = []

    async def run_before(pilot) -> None:
        app.theme = theme
        await settle(pilot)
        plot = app.query_one(MemoryPlot)
        legend = app.chart.query_one("#chart-legend")
        strips = plot.render_lines(Region(0, 0, plot.size.width, plot.size.height))
        strips += legend.render_lines(Region(0, 0, legend.size.width, legend.size.height))
        assert "PID 1088" in "".join(seg.text for strip in strips for seg in strip)
        unreadable.extend(unreadable_text(strips))

    assert snap_compare(app, terminal_size=(160, 50), run_before=run_before)
    assert app.theme == theme
    assert not unreadable, f"{theme}: " + "; ".join(unreadable[:5])
