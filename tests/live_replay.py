"""The replayed H100 trace in a dashboard that stays running between tests: replay once, draw many.

Replaying the 20 s trace (~90 polls, each taken by the app) is most of a snapshot test's CPU.
:class:`LiveReplay` replays it once at one terminal size and keeps the app running on an event
loop of its own; each test then asks for the final frame (in a theme, or as it is) and compares
it with its stored SVG through :func:`assert_svg_snapshot`, which is pytest-textual-snapshot's
``snap_compare`` without the app run: the same stored file, the same SVG normalisation and the
same HTML report of mismatches.

The final frame drawn here is the frame these tests drew when each ran its own app through
``snap_compare(app, run_before=...)`` (the same 26 stored SVGs match byte for byte, in any
order of the themes): :func:`play_to_the_end` then :func:`draw_final_frame` were that
``run_before``, and :func:`screenshot` exports as ``textual._doc.take_svg_screenshot`` does
after it.
"""

from __future__ import annotations

import asyncio
import inspect
import pickle
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console
from syrupy import SnapshotAssertion

from gpumem_tui.telemetry.replay import ReplaySource
from gpumem_tui.ui.app import GpuMemApp
from gpumem_tui.ui.themes import load_themes
from pytest_textual_snapshot import PseudoApp, PseudoConsole, SVGImageExtension, node_to_report_path
from shared_data import H100_TRACE as TRACE


class StepClock:
    """A clock that moves 0.25 s at each reading."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


def replayed_app() -> tuple[GpuMemApp, ReplaySource]:
    """The dashboard on the H100 trace, paused at its start (the replay plays in
    :func:`play_to_the_end`), with the side pane and the bundled themes."""
    source = ReplaySource(TRACE, speed=1.0, clock=StepClock())
    # Paused until the pane is in: its arrival narrows the table, which then measures its
    # columns afresh; from the same moment on, every run sees the same rows.
    source.pause()
    app = GpuMemApp(source, interval=0.02, themes=load_themes(), side_pane=True)
    # The pane's tab underline slides in over 0.3 s after a timer; under load a snapshot could
    # catch it before it moved (CI saw this in 2 of 23 themes). Without animation it is set
    # on the next refresh, so every run draws the same frame.
    app.animation_level = "none"
    return app, source


async def _wait_for(condition: Callable[[], bool], what: str, seconds: float,
                    state: Callable[[], str] | None = None) -> None:
    """Wait (polling every 20 ms) until ``condition()``; AssertionError naming ``what`` (and
    ``state()``: what was seen, for a failure to be read) after ``seconds`` of event-loop
    time. The limit only catches a replay that never ends: it is far above what a loaded
    machine needs (pytest-timeout still bounds the test)."""
    for _ in range(int(seconds / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    assert condition(), what if state is None else f"{what}: {state()}"


def _replay_state(app: GpuMemApp, source: ReplaySource) -> str:
    """What :func:`play_to_the_end` waits on, as it stands (a failure's message)."""
    from gpumem_tui.ui.estimator_panel import EstimatorPanel

    shown = app.snapshot.time if app.snapshot is not None else None
    return (f"source finished={source.finished} paused={getattr(source, 'paused', None)} "
            f"last record at {source.last_time}, app shows {shown}; side pane={app.has_side_pane}; "
            f"solving={[panel.solving for panel in app.query(EstimatorPanel)]}; "
            f"poll in flight={app.poller.in_flight} for {app.poller.in_flight_seconds():.1f} s, "
            f"polls={app.poller.polls} failures={app.poller.failures} error={app.poll_error!r}")


async def play_to_the_end(app: GpuMemApp, source: ReplaySource, pilot) -> None:
    """Play the whole trace, then stop polling: the app's state is final after this."""
    from gpumem_tui.ui.estimator_panel import EstimatorPanel

    last_time = source.last_time

    def done() -> bool:
        # the app has taken the last record (the source reaching the end is not enough: the
        # poll's message may still be queued and would land after the freeze below)
        if not (source.finished and app.snapshot is not None and app.snapshot.time == last_time
                and app.has_side_pane):
            return False
        return all(not panel.solving for panel in app.query(EstimatorPanel))

    for _ in range(500):
        if app.has_side_pane and app.snapshot is not None:
            break
        await asyncio.sleep(0.02)
    await pilot.pause(0.2)
    # The screen is not painted while the replay plays (Textual's batch_update): each poll
    # is still applied, only the ~80 frames on the way are not drawn, which was most of
    # these tests' CPU. The final frame is drawn from the final state by draw_final_frame.
    with app.batch_update():
        source.resume()
        await _wait_for(done, "the replay did not reach its end", 120.0, lambda: _replay_state(app, source))
        source.pause()
        # Freeze between two polls: a result posted before the stop would still be applied
        # after it. The check and the stop run in one step of the app's loop: no poll starts
        # between them.
        await _wait_for(lambda: not app.poller.in_flight, "a poll never finished", 120.0)
        app.poller.stop()  # freeze: nothing changes after this point


async def draw_final_frame(app: GpuMemApp, pilot) -> None:
    """Draw the frame of the final state from scratch, the same whatever was drawn before."""
    app._update_status()  # the replay line says "paused" whether or not a poll came since
    # Draw the final chart from scratch: the throttle and the "nothing visible changed"
    # check (positions compared in braille dots) depend on which frames were drawn on the
    # way, which under load differs from run to run by a column.
    app.chart._drawn_key = None
    app._update_chart()
    from textual.widgets import Tabs

    for tabs in app.query(Tabs):
        # the underline is placed after a refresh; one placed before the pane's layout
        # settled sat at column 0 in some runs: place it now that the layout is final
        tabs._highlight_active(animate=False)
    await pilot.pause(0.3)
    app.clear_notifications()  # "replay finished" and friends: toasts, not the layout
    await pilot.wait_for_scheduled_animations()  # none are left with animation_level "none"; kept for safety
    await pilot.pause(0.5)


async def take_one_more_poll(app: GpuMemApp, source: ReplaySource, pilot) -> None:
    """Have the app take one poll of the paused source (its final record again, with no new
    samples), as the running dashboard does every interval. After a theme change this is what
    redraws the widgets that keep colours resolved from the theme when their data came (the
    device bars, the chart's curves); the replay already takes such polls after its end."""
    from gpumem_tui.ui.poller import SnapshotReady

    snapshot = source.poll()
    app.post_message(SnapshotReady(snapshot, 0.0))
    await _wait_for(lambda: app.snapshot is snapshot, "the app did not take the poll", 60.0)


async def screenshot(app: GpuMemApp, pilot) -> str:
    """The SVG ``textual._doc.take_svg_screenshot`` exports once its ``run_before`` is done
    (no keys pressed, no hover): the same title, simplified segments.

    After :func:`draw_final_frame` the app is frozen and idle (no poller, no animation, its
    last pause waited for every widget): one pause (each widget handles its pending messages,
    the screen updates) stands for the five steps take_svg_screenshot takes there (pause,
    animations, pause, pause, animations), which found nothing left to do and cost ~0.1 s of
    CPU per snapshot with the pane's widgets. The stored SVGs match byte for byte."""
    await pilot.pause()
    return app.export_screenshot(title=app.title, simplify=True)


class LiveReplay:
    """The H100 trace replayed to its end at ``size`` in a dashboard kept running (headless, as
    ``snap_compare`` runs it) on an event loop of its own, for tests to draw from.

    ``run(job)`` runs ``await job(app, source, pilot)`` in the app's task (inside its context,
    as ``run_before`` runs) and returns its result; an exception in the job is raised to the
    caller. ``close()`` ends the app. The loop runs only during ``run`` and ``close``; between
    them the app is frozen (its poller is stopped, animation is off).

    Raises:
        AssertionError: the replay did not reach its end (raised by the constructor).
    """

    def __init__(self, size: tuple[int, int]) -> None:
        self.app, self.source = replayed_app()
        self.size = size
        self._loop = asyncio.new_event_loop()
        self._jobs: asyncio.Queue | None = None
        self._ready = self._loop.create_future()
        self._task = self._loop.create_task(self._serve())
        self._wait(self._ready)

    async def _serve(self) -> None:
        self._jobs = asyncio.Queue()
        # notifications on, as App.run (which snap_compare uses) has them; draw_final_frame clears them
        async with self.app.run_test(size=self.size, notifications=True) as pilot:
            try:
                await play_to_the_end(self.app, self.source, pilot)
            except BaseException as exc:
                self._ready.set_exception(exc)
                return
            self._ready.set_result(None)
            while (item := await self._jobs.get()) is not None:
                job, future = item
                try:
                    future.set_result(await job(self.app, self.source, pilot))
                except Exception as exc:  # noqa: BLE001 -- the caller's test reports it
                    future.set_exception(exc)

    def _wait(self, future: asyncio.Future) -> Any:
        """Run the loop until ``future`` is done (or the app's task ended: an error then)."""
        self._loop.run_until_complete(asyncio.wait([future, self._task], return_when=asyncio.FIRST_COMPLETED))
        if not future.done():
            self._task.result()  # the app's own exception, if it died of one
            raise RuntimeError("the replayed app ended before answering")
        return future.result()

    def run(self, job: Callable[[GpuMemApp, ReplaySource, Any], Awaitable[Any]]) -> Any:
        """``await job(app, source, pilot)`` in the running app; its result."""
        assert self._jobs is not None
        future = self._loop.create_future()
        self._jobs.put_nowait((job, future))
        return self._wait(future)

    def close(self) -> None:
        """End the app and close the loop (idempotent)."""
        if self._loop.is_closed():
            return
        if not self._task.done() and self._jobs is not None:
            self._jobs.put_nowait(None)
            try:
                self._loop.run_until_complete(asyncio.wait_for(self._task, 60))
            except Exception:  # noqa: BLE001 -- a test failed already; do not hide it
                self._task.cancel()
        self._loop.close()


def assert_svg_snapshot(snapshot: SnapshotAssertion, request, svg: str) -> bool:
    """Compare ``svg`` with the test's stored SVG as ``snap_compare`` does, and record the
    result for pytest-textual-snapshot's HTML report of mismatches (written at the end of
    the session). Returns whether they match (``--snapshot-update`` stores ``svg``).

    Source: pytest_textual_snapshot.py (1.1.0), ``snap_compare.compare`` after its screenshot.
    """
    snapshot = snapshot.use_extension(SVGImageExtension)
    result = snapshot == svg
    # as snap_compare: the execution just made says whether a stored snapshot existed
    execution_index = (
        snapshot._custom_index and snapshot._execution_name_index.get(snapshot._custom_index)
    ) or snapshot.num_executions - 1
    assertion_result = snapshot.executions.get(execution_index)
    snapshot_exists = bool(execution_index in snapshot.executions and assertion_result
                           and assertion_result.final_data is not None)
    console = Console(legacy_windows=False, force_terminal=True)
    pseudo_app = PseudoApp(PseudoConsole(console.legacy_windows, console.size))
    node = request.node
    full_path, line_number, name = node.reportinfo()
    data = (result, str(snapshot), svg, pseudo_app, full_path, line_number, name,
            inspect.getdoc(node.function) or "", "", snapshot_exists)
    node_to_report_path(node).write_bytes(pickle.dumps(data))
    return result
