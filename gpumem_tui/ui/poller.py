"""Poll a TelemetrySource in a worker thread and post each Snapshot to the app.

Threads do I/O, handlers change state: the worker only calls ``source.poll()`` and posts an
immutable :class:`SnapshotReady` (or :class:`PollFailed`) message; it never touches a widget.
The next poll is armed by the app's handler (:meth:`Poller.rearm`) only after the last one
finished and was handled, so a slow NVML call or a busy UI never stacks polls up. The poll
interval is measured start to start: a poll that took 0.3 s of a 1 s interval is followed by a
0.7 s pause.

Quitting never waits on a poll (issue 13, item 19): the polls run in one long-lived daemon
thread of the poller's own, not in Textual's worker pool (whose executor threads are joined
when the event loop and the interpreter shut down, so one NVML call that never returns kept
``q`` and Ctrl-C from exiting). A poll still running at quit is abandoned; :meth:`Poller.close_source`
closes the source only once no poll is using it. The thread is started by the first poll and
then waits for the next one on an event (issue 23: a thread started per poll cost more CPU
than handing a poll to a waiting one).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from textual.message import Message

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
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._close_pending = False
        self._stopped = False
        self._in_flight = False
        self._polling = False  # the worker is inside poll() (read under _lock)
        self._started_at: float | None = None
        self._answered = False  # the source's poll() of the poll in flight has returned
        self._wake = threading.Event()  # set: the worker runs one poll

    def start(self) -> None:
        """Start polling now; after :meth:`stop` it does nothing (the app may start it after
        its first frame, by which time a quick quit may have stopped it)."""
        self._launch()

    def stop(self) -> None:
        """Stop scheduling polls (a poll in flight finishes and its result is dropped)."""
        self._stopped = True
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        with self._lock:
            if self._thread is not None:
                self._wake.set()  # the idle worker ends (a running poll finishes first)

    def close_source(self) -> None:
        """Close the source now, or -- when a poll is still running in it (a hung NVML
        call) -- by the poll thread once that poll returns, so the caller never waits."""
        with self._lock:
            if self._thread is not None and (self._polling or self._wake.is_set()):  # the worker is busy
                self._close_pending = True
                return
        self.source.close()

    def poll_now(self) -> None:
        """Poll immediately unless one is in flight (e.g. after seeking a replay)."""
        if self._stopped or self._in_flight:
            return
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._launch()

    @property
    def in_flight(self) -> bool:
        """A poll was launched and its result is not handled yet (:meth:`rearm` not called)."""
        return self._in_flight

    def in_flight_seconds(self) -> float:
        """How long the source has been answering the current poll, in seconds (0 when no poll
        is in flight or its ``poll()`` has returned: a result waiting for a busy UI to handle it
        is not a source that does not answer; after :meth:`stop` no result is waited for)."""
        if self._stopped or not self._in_flight or self._answered or self._started_at is None:
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
        self._answered = False
        self._started_at = time.monotonic()
        with self._lock:
            self._wake.set()
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="gpumem-tui-poll", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        """The poll thread: one poll each time :meth:`_launch` wakes it, until :meth:`stop`
        (a daemon thread: an exit never joins it, even while a poll hangs). A close asked
        for while it was busy is done here, once the source is no longer in use."""
        while True:
            self._wake.wait()
            with self._lock:
                self._wake.clear()
                stopping = self._stopped
                self._polling = not stopping
            try:
                if not stopping:
                    self._poll_and_post()
            finally:
                with self._lock:
                    self._polling = False
                    close = self._close_pending
                    self._close_pending = False
                if close:
                    try:
                        self.source.close()
                    except Exception:  # noqa: BLE001 - the app is gone; nothing to report to
                        pass
            if stopping:
                return

    def _poll_and_post(self) -> None:
        started = time.perf_counter()
        message: Message
        try:
            snapshot = self.source.poll()
        except Exception as exc:  # noqa: BLE001 -- any failure must become a visible status
            self._answered = True
            self.failures += 1
            text = " ".join(str(exc).split()) or "no message"
            message = PollFailed(f"{type(exc).__name__}: {text}", time.perf_counter() - started)
        else:
            self._answered = True
            self.polls += 1
            message = SnapshotReady(snapshot, time.perf_counter() - started)
        if not self._stopped:
            self.app.post_message(message)  # thread-safe in Textual
        else:
            self._in_flight = False
