"""The dashboard on a replayed trace of a job of several ranks (issue 21): one group row,
expanded and collapsed by its key, Enter or a click; one row per rank with predicted vs
measured; a one-line notice for bad rank claims. The trace is written with the project's
recorder (tests/rank_traces.py) and played by the real ReplaySource."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import rank_traces  # noqa: E402
from rank_traces import MiB, Rank  # noqa: E402
from waiting import wait_async  # noqa: E402

from gpumem_tui.telemetry.replay import ReplaySource  # noqa: E402
from gpumem_tui.ui.app import GpuMemApp  # noqa: E402
from gpumem_tui.ui.job_rows import JobRow, job_summary  # noqa: E402
from gpumem_tui.ui.themes import load_themes  # noqa: E402


pytestmark = pytest.mark.usefixtures("no_user_config")  # tests/conftest.py


class Clock:
    """The replay's clock: 0 at the start, then where the test puts it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def replay_app(path: Path, clock: Clock) -> GpuMemApp:
    return GpuMemApp(ReplaySource(path, clock=clock), interval=0.05, themes=load_themes(), side_pane=False,
                     readonly=True, banner=f"replay of {path.name}")


async def played_and_stopped(app: GpuMemApp, clock: Clock, pilot) -> None:
    """Let the replay play (position 10 s) until the record at ``T0 + 3.6`` was applied, then
    stop polling: the screen holds still for the assertions."""
    def reached() -> bool:
        if app.snapshot is None:
            return False
        clock.now = 10.0
        return app.snapshot.time >= rank_traces.T0 + 3.6

    await wait_async(reached, what="the replay to apply its record at T0 + 3.6 s")
    app.poller.stop()
    await pilot.pause()


def _rows(app: GpuMemApp) -> list[str]:
    return [("job " if isinstance(e, JobRow) else f"{e.pid}") for e in app.table.entries]


def _command_cell(app: GpuMemApp, index: int) -> str:
    table = app.table
    return table.get_row_at(index)[table.visible_columns.index("command")].plain


def test_a_replayed_job_is_one_group_row_that_opens_into_its_ranks(tmp_path):
    path = rank_traces.write_trace(tmp_path / "job.jsonl")
    clock = Clock()
    app = replay_app(path, clock)

    async def run() -> None:
        async with app.run_test(size=(200, 40)) as pilot:
            await played_and_stopped(app, clock, pilot)
            table = app.table
            assert _rows(app) == ["job ", "3001"]  # three ranks, one row; the other process as before
            [group] = [e for e in table.entries if isinstance(e, JobRow)]
            job = group.job
            assert [r.pid for r in job.ranks] == [2001, 2002, 2003]
            nvml = [r.nvml_used for r in rank_traces.default_ranks()]
            assert job.imbalance == pytest.approx(max(nvml) / min(nvml))
            row = _command_cell(app, 0)
            assert row == f"▸ {job_summary(job)}"
            assert f"imbalance {max(nvml) / min(nvml):.2f}×" in row and "3/3 ranks" in row
            assert table.selected is None and table.selected_job == job  # nothing to signal as one
            assert "g" in app.active_bindings and app.active_bindings["g"].enabled  # in the footer
            assert any(ident == "toggle_job" for *_, ident in app.help_rows())

            table.focus()
            await pilot.press("g")
            await pilot.pause()
            assert _rows(app) == ["job ", "2001", "2002", "2003", "3001"]
            for index, rank in enumerate(job.ranks, start=1):
                cell = _command_cell(app, index)
                assert cell.startswith(f"  rank {rank.rank} · ") and cell.endswith("python train.py --local-rank "
                                                                                     f"{rank.rank}")
            assert "pred" in _command_cell(app, 1) and "torch allocated" in _command_cell(app, 1)
            assert "not probed" in _command_cell(app, 3) and "NVML used" in _command_cell(app, 3)

            await pilot.press("down")  # a rank row is a process again: it can be selected and charted
            await pilot.pause()
            assert table.selected is not None and table.selected.pid == 2001
            assert app.chart_target == ("proc", 2001)

            await pilot.press("up", "enter")  # Enter on the group row collapses it
            await pilot.pause()
            assert _rows(app) == ["job ", "3001"]
            await pilot.click("#processes", offset=(5, 1))  # a click on the group row opens it at once
            await pilot.pause()
            assert _rows(app) == ["job ", "2001", "2002", "2003", "3001"]
            assert len(app.screen_stack) == 1  # no detail screen for a group row

    asyncio.run(run())


def test_bad_rank_claims_show_the_group_with_a_one_line_notice(tmp_path):
    ranks = [Rank(11, 0, 0, 2300 * MiB, 2900 * MiB), Rank(12, 0, 1, 2400 * MiB, 3000 * MiB, world_size=4),
             Rank(13, 5, 2, 0, 2800 * MiB, probed=False)]
    path = rank_traces.write_trace(tmp_path / "bad.jsonl", ranks)
    clock = Clock()
    app = replay_app(path, clock)

    async def run() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            await played_and_stopped(app, clock, pilot)
            assert _rows(app) == ["job ", "3001"]
            assert _command_cell(app, 0).startswith("▸ ⚠ imbalance ")
            notices = [n.message for n in app._notifications if "claimed by" in n.message]
            assert len(notices) == 1 and "\n" not in notices[0]
            assert "world size (3, 4)" in notices[0] and "rank 5 >= world size 3 (pid 13)" in notices[0]

    asyncio.run(run())


def test_without_jobs_the_table_and_its_keys_are_as_before(tmp_path):
    ranks = [Rank(2001, 0, 0, 2300 * MiB, 2900 * MiB, world_size=1)]  # a launch of one process
    path = rank_traces.write_trace(tmp_path / "one.jsonl", ranks)
    clock = Clock()
    app = replay_app(path, clock)

    async def run() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            await played_and_stopped(app, clock, pilot)
            assert _rows(app) == ["2001", "3001"]
            assert not app.table.jobs_shown
            assert all(ident != "toggle_job" for *_, ident in app.help_rows())
            assert "g" not in app.active_bindings or not app.active_bindings["g"].enabled
            assert _command_cell(app, 0) == "python train.py --local-rank 0"

    asyncio.run(run())


def test_the_filter_finds_a_rank_by_its_job_id():
    from gpumem_tui.telemetry.launch import RankLaunch
    from gpumem_tui.telemetry.model import ProcessSample, ProcessType
    from gpumem_tui.ui.process_table import ProcessFilter

    rank = ProcessSample(7, 0, ProcessType.COMPUTE, command="python train.py",
                         launch=RankLaunch("run-7f3a", 0, 2, 0, "env"))
    other = ProcessSample(8, 0, ProcessType.COMPUTE, command="python serve.py")
    query = ProcessFilter.parse("RUN-7F3A")
    assert query.matches(rank) and not query.matches(other)
