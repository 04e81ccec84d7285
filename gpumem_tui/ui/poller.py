"""Poll a TelemetrySource in a worker thread and post each Snapshot to the app.

Threads do I/O, handlers change state: the worker only calls ``source.poll()`` and posts an
immutable :class:`SnapshotReady` (or :class:`PollFailed`) message; it never touches a widget.
The next poll is armed by the app's handler (:meth:`Poller.rearm`) only after the last one
finished and was handled, so a slow NVML call or a busy UI never stacks polls up. The poll
interval is measured start to start: a poll that took 0.3 s of a 1 s interval is followed by a
0.7 s pause.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from textual.message import Message
from textual.worker import Worker, get_current_worker

from gpumem_tui.telemetry.model import Snapshot, TelemetrySource

if TYPE_CHECKING:
    from textual.app import App
    from textual.timer import Timer


class SnapshotReady(Message):
    """A poll finished: ``snapshot`` (frozen) and how long ``poll()`` took, in seconds."""

    def __init__(self, snapshot: Snapshot, poll_seconds: float) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.poll_seconds = poll_seconds


class PollFailed(Message):
    """``poll()`` raised: ``error`` is one line ("TypeName: message") for the status line."""

    def __init__(self, error: str, poll_seconds: float) -> None:
        super().__init__()
        self.error = error
        self.poll_seconds = poll_seconds


class Poller:
    """Owns the polling schedule of one source for one app.

    Args:
        app: the app that receives the messages and whose timers schedule polls.
        source: any TelemetrySource; ``poll()`` may block and may raise.
        interval: seconds between the starts of two polls (> 0).
    """

    def __init__(self, app: App, source: TelemetrySource, interval: float) -> None:
        if not interval > 0:
            raise ValueError("interval must be > 0 seconds")
        self.app = app
        self.source = source
        self.interval = interval
        self.polls = 0
        self.failures = 0
        self._timer: Timer | None = None
        self._worker: Worker | None = None
        self._stopped = False
        self._in_flight = False
        self._started_at: float | None = None

    def start(self) -> None:
        """Start polling now."""
        self._stopped = False
        self._launch()

    def stop(self) -> None:
        """Stop scheduling polls (a poll in flight finishes and its result is dropped)."""
        self._stopped = True
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self._worker is not None:
            self._worker.cancel()

    def poll_now(self) -> None:
        """Poll immediately unless one is in flight (e.g. after seeking a replay)."""
        if self._stopped or self._in_flight:
            return
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._launch()

    def in_flight_seconds(self) -> float:
        """How long the current poll has been running (0 when none is)."""
        if not self._in_flight or self._started_at is None:
            return 0.0
        return time.monotonic() - self._started_at

    def rearm(self, poll_seconds: float) -> None:
        """Called by the app after handling a result: schedule the next poll.

        The delay counts from the start of the poll just handled (``poll_seconds`` is used only
        when that start is unknown), so the time spent waiting for and handling the result
        does not stretch the interval: at 10 Hz a 20 ms handler would otherwise make it 8 Hz.
        """
        self._in_flight = False
        if self._stopped:
            return
        if self._started_at is not None:
            delay = self.interval - (time.monotonic() - self._started_at)
        else:
            delay = self.interval - poll_seconds
        if delay <= 0.001:
            self.app.call_later(self._launch)  # a zero-delay Timer divides by zero in Textual
        else:
            self._timer = self.app.set_timer(delay, self._launch, name="poll")

    def _launch(self) -> None:
        self._timer = None
        if self._stopped or self._in_flight:
            return
        self._in_flight = True
        self._started_at = time.monotonic()
        self._worker = self.app.run_worker(
            self._poll_once,
            name="poll",
            group="poller",
            thread=True,
            exclusive=True,
            exit_on_error=False,
        )

    def _poll_once(self) -> None:
        worker = get_current_worker()
        started = time.perf_counter()
        message: Message
        try:
            snapshot = self.source.poll()
        except Exception as exc:  # noqa: BLE001 -- any failure must become a visible status
            self.failures += 1
            text = " ".join(str(exc).split()) or "no message"
            message = PollFailed(f"{type(exc).__name__}: {text}", time.perf_counter() - started)
        else:
            self.polls += 1
            message = SnapshotReady(snapshot, time.perf_counter() - started)
        if not worker.is_cancelled and not self._stopped:
            self.app.post_message(message)
        else:
            self._in_flight = False
