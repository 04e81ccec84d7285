"""A replay's per-process state is the trace up to the play position, whatever the seeks.

Issue: replay the H100 trace to 20 s, seek back twice and the "Predicted vs measured" pane of
PID 1088 showed a CUDA context of -7.1 GiB (-110 %) for good, where ``compare`` says 758 MiB:
the probe samples of the whole trace stayed while NVML's row came from the start. Now after
any seek, pause or speed change the figures equal ``compare`` of the trace cut at that
position (``compare_trace(..., until=position)``), in the core and in the pane.
"""

from __future__ import annotations


import pytest

from gpumem_tui.analysis.comparison import ComparisonError
from gpumem_tui.analysis.forecast import NO_LIVE_LIMIT
from gpumem_tui.analysis.process_estimate import compare_probed, compare_summary, compare_trace
from gpumem_tui.telemetry.replay import ReplaySource
from gpumem_tui.ui.comparison_view import ComparisonView
from test_ui import make_app, wait_for
from waiting import next_polls

from shared_data import H100_TRACE as TRACE  # noqa: E402
from shared_data import needs_h100_trace  # noqa: E402
PID = 1088

pytestmark = needs_h100_trace  # every test here replays it


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def expected_at(position: float, limit: int | None = None) -> dict | str:
    """``compare`` of the trace cut at ``position`` (``--limit limit``): its JSON without the
    reader's notices, or the error it gives."""
    try:
        result = compare_trace(TRACE, pid=PID, until=position, limit_bytes=limit)
    except ComparisonError as exc:
        return str(exc)
    result.pop("trace_notices")
    return result


def core_value(source: ReplaySource) -> dict | str:
    try:
        return compare_probed(source.probed, PID).to_json()
    except ComparisonError as exc:
        return str(exc)


def test_seeking_back_and_forth_keeps_the_core_state_equal_to_compare_there():
    clock = Clock()
    source = ReplaySource(TRACE, clock=clock)
    source.poll()
    clock.now = 25.0  # play to the end
    source.poll()
    assert source.finished
    full = expected_at(source.duration)
    assert core_value(source) == full
    assert full["measured"]["cuda_context"] == 758 << 20  # the figure the issue expects
    seen = set()
    for target in (10.0, 0.0, 3.05, 9.95, 15.5, 5.0, 20.0, 12.34, 0.5, 19.0, 10.0):
        source.seek(target)
        source.poll()
        assert source.position == pytest.approx(min(target, source.duration))
        value = core_value(source)
        assert value == expected_at(source.position), target
        seen.add(value if isinstance(value, str) else value["samples"])
    assert len(seen) >= 8  # the positions are different states, not one state compared many times
    assert any(isinstance(v, str) for v in seen)  # at 0 s: nothing measured yet, as compare says
    clock.now += 100.0  # and playing on to the end after all that gives the whole trace again
    source.poll()
    assert core_value(source) == full
    source.close()


async def test_the_pane_after_seeks_pauses_and_speed_changes_shows_compare_at_that_position():
    clock = Clock()
    source = ReplaySource(TRACE, clock=clock)
    app = make_app(source, side_pane=True, select_pid=PID)
    async with app.run_test(size=(200, 50)) as pilot:
        view = None

        async def settle(expected_position: float) -> None:
            """Wait for a poll at the position, then for the pane to show compare there."""
            nonlocal view
            expected_position = min(expected_position, source.duration)
            await wait_for(pilot, lambda: source.position == pytest.approx(expected_position)
                           and app.snapshot is not None and source._seek_to is None,
                           what=f"the replay to settle at {expected_position} s")
            await next_polls(pilot, app)  # a poll after the position settled: the app holds a snapshot taken there
            # the pane's time-to-OOM limit is the GPU's free memory + the job's own there:
            # compare --limit with that figure
            limit = app.live_limit(PID)
            expected = expected_at(source.position, limit)
            if any(p.pid == PID for p in app.snapshot.processes):
                app.table.select_pid(PID)
            view = view or app.query_one(ComparisonView)

            def pane_equals() -> bool:
                if app.chart_pid() != PID:
                    return False
                if isinstance(expected, str):
                    return view.result is None
                return view.result is not None and view.result.pid == PID and view.result.to_json() == expected

            await wait_for(pilot, pane_equals, what="the pane to show compare at the position")
            # the core value the pane reads is the same
            process = app.process_estimates.get(PID)
            summary = app.probed.summary(PID)
            if isinstance(expected, str):
                assert process is None or summary is None or not summary.record.sample_count
            else:
                assert compare_summary(process, summary, limit, NO_LIVE_LIMIT).to_json() == expected

        await wait_for(pilot, lambda: app.query(ComparisonView) and app.snapshot is not None, what="the pane")
        clock.now = 20.0  # play to 20 s
        await settle(20.0)
        before = view.result.row("cuda_context")
        assert before.measured_bytes == 758 << 20 and abs(view.result.headline.error_percent) < 1.0
        await pilot.press("left")
        await pilot.press("left")  # back to 0 s
        await settle(0.0)
        clock.now += 7.0
        await settle(7.0)
        await pilot.press("right")  # forward 10 s
        await settle(17.0)
        await pilot.press("left")
        await settle(7.0)
        await pilot.press("space")  # pause: time passes, the position does not
        clock.now += 5.0
        await settle(7.0)
        await pilot.press("minus")  # half speed
        await pilot.press("space")
        clock.now += 3.0
        await settle(8.5)
        await pilot.press("plus")
        await pilot.press("plus")  # double speed, to the end
        clock.now += 10.0
        await settle(source.duration)
        assert view.result.row("cuda_context").measured_bytes == 758 << 20  # as before the seeks
