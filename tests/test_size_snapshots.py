"""Issue 13 item 10: the replayed H100 trace at each size class (160x50 wide, 120x40 medium,
80x24 narrow), with the estimator pane where it fits. Looked at as PNGs (rsvg-convert) when
they were made; update after an intended change with ``--snapshot-update`` and look again.

The replay is driven by a clock that moves a fixed step per reading, so the curves, the
table and the pane are the same on every run whatever the machine's speed. It is replayed
once per size for the module (tests/live_replay.py): the snapshot at a size and the
assertions about what that size shows look at the same running dashboard.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpumem_tui.ui.app import size_class  # noqa: E402

import pytest_textual_snapshot  # noqa: F401 -- installed by setup (README): missing is a failure

from shared_data import needs_h100_trace  # noqa: E402
from live_replay import LiveReplay, assert_svg_snapshot, draw_final_frame, screenshot  # noqa: E402

pytestmark = needs_h100_trace  # every test here replays it

SIZES = {"wide": (160, 50), "medium": (120, 40), "narrow": (80, 24)}


@pytest.fixture(scope="module")
def replay_at(h100_trace, tmp_path_factory):
    """``replay_at(size)``: the trace replayed to its end at ``size`` (once per size for the
    module; the app kept running for the module's tests, which tests/conftest.py therefore
    keeps on one xdist worker)."""
    replays: dict[tuple[int, int], LiveReplay] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUMEM_TUI_CONFIG_DIR", str(tmp_path_factory.mktemp("cfg")))  # no user config

        def replay_at(size: tuple[int, int]) -> LiveReplay:
            if size not in replays:
                replays[size] = LiveReplay(size)
            return replays[size]

        try:
            yield replay_at
        finally:
            for replay in replays.values():
                replay.close()


@pytest.mark.parametrize("size", SIZES.values(), ids=[f"{name}-{w}x{h}" for name, (w, h) in SIZES.items()])
def test_replayed_h100_trace_at_each_size_class(replay_at, snapshot, request, size):
    async def final_frame(app, source, pilot):
        await draw_final_frame(app, pilot)
        return await screenshot(app, pilot)

    assert assert_svg_snapshot(snapshot, request, replay_at(size).run(final_frame))


@pytest.mark.parametrize("wanted", SIZES)
def test_each_size_class_shows_what_matters(replay_at, wanted):
    """What the snapshots show, asserted: the pane beside the chart only when wide; otherwise
    the status line says `e` opens it; the chart keeps enough rows for its 0 tick; the
    replay line is not cut."""
    width, height = SIZES[wanted]

    async def check(app, source, pilot):
        await draw_final_frame(app, pilot)
        assert size_class(width) == wanted == app.size_class
        assert app.has_class(f"-size-{wanted}")
        side = app.query_one("#side")
        status = app.status_text().plain
        if wanted == "wide":
            assert side.display and "e: estimator" not in status
        else:
            assert not side.display and "e: estimator" in status
        assert len(status) <= width - 2
        assert len(app.replay_text().plain) <= width - 2
        plot_rows = app.chart.query_one("#chart-plot").plain_lines()
        ticks = [line.split("┤")[0].strip() for line in plot_rows if "┤" in line]
        assert "0" in ticks, (wanted, ticks)
        assert app.chart.size.height >= 11

    replay_at((width, height)).run(check)
