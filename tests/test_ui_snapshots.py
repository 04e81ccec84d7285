"""Snapshot tests of the dashboard's looks, on deterministic fake data (no clocks, no hosts).

Update after an intended change with: pytest tests/test_ui_snapshots.py --snapshot-update
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from ui_fakes import T0, FakeSource  # noqa: E402

from gpumem_tui.ui.app import GpuMemApp  # noqa: E402
from gpumem_tui.ui.themes import load_themes  # noqa: E402
from gpumem_tui.support.units import GiB, MiB  # noqa: E402

import pytest_textual_snapshot  # noqa: F401 -- installed by setup (README): missing is a failure


pytestmark = pytest.mark.usefixtures("no_user_config")  # tests/conftest.py


def app_with(source, **kwargs) -> GpuMemApp:
    # The side pane belongs to another module's looks; it has its own tests.
    return GpuMemApp(source, interval=0.05, themes=load_themes(), side_pane=False, **kwargs)


def until_time(app: GpuMemApp, t: float):
    async def run_before(pilot) -> None:
        for _ in range(400):
            if app.snapshot is not None and app.snapshot.time >= t:
                break
            await asyncio.sleep(0.02)
        app.poller.stop()  # freeze: nothing changes after this point
        await pilot.pause()

    return run_before


def test_main_screen(snap_compare):
    app = app_with(FakeSource(steps=1))
    assert snap_compare(app, terminal_size=(140, 40), run_before=until_time(app, T0))


def test_main_screen_80x24(snap_compare):
    app = app_with(FakeSource(steps=1))
    assert snap_compare(app, terminal_size=(80, 24), run_before=until_time(app, T0))


def test_nvml_unavailable(snap_compare):
    app = app_with(FakeSource(steps=1, nvml_error="NVML Shared Library Not Found"))
    assert snap_compare(app, terminal_size=(120, 32), run_before=until_time(app, T0))


def test_overlay_bands_and_phases(snap_compare):
    steps = 24
    app = app_with(FakeSource(steps=steps), select_pid=1001)

    async def run_before(pilot) -> None:
        await until_time(app, T0 + steps - 1)(pilot)
        # the user's estimate for the selected process: its bands are drawn on its chart
        components = {"parameters": 2 * GiB, "gradients": 2 * GiB, "optimizer_states": 2 * GiB + 512 * MiB}
        app.process_estimates.set_user(1001, None, None, {"components_bytes": components}, "test model")
        app._update_chart()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(140, 44), run_before=run_before)


def test_light_theme_and_help(snap_compare):
    app = app_with(FakeSource(steps=1), theme="light", readonly=True)

    async def run_before(pilot) -> None:
        await until_time(app, T0)(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_job_of_several_ranks_expanded(snap_compare, tmp_path):
    """A replayed torchrun job (tests/rank_traces.py, written by the project's recorder): its
    group row, opened with `g`, one row per rank with predicted vs measured."""
    import rank_traces
    from gpumem_tui.telemetry.replay import ReplaySource

    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    path = rank_traces.write_trace(tmp_path / "job.jsonl", steps=5)
    app = app_with(ReplaySource(path, clock=clock), readonly=True, banner="replay of job.jsonl")

    async def run_before(pilot) -> None:
        for _ in range(400):
            if app.snapshot is not None:
                clock.now = 3.5  # a fixed position: records 0-3 of 5 played, then it holds still
                if app.snapshot.time >= rank_traces.T0 + 3.6:
                    break
            await asyncio.sleep(0.02)
        app.poller.stop()
        app.table.focus()
        await pilot.press("g")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(160, 30), run_before=run_before)
