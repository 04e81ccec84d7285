"""The poller's thread (issue 23): every poll runs in one long-lived daemon thread, which ends
after ``stop``; a source closed while a poll runs in it is closed by that thread once the poll
returns, never under it; the watchdog's figure counts only while the source has not answered.
(Quitting while a poll hangs: tests/test_security_nvml.py.)"""

from __future__ import annotations

import queue
import threading
from types import SimpleNamespace

from gpumem_tui.telemetry.model import Snapshot
from gpumem_tui.ui.poller import PollFailed, Poller, SnapshotReady


class _Source:
    """A fake source: each test gives its ``poll``; ``closed`` is set by ``close``."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.threads: list[threading.Thread] = []  # the thread of each poll, in order

    def poll(self) -> Snapshot:
        self.threads.append(threading.current_thread())
        return Snapshot(time=float(len(self.threads)))

    def close(self) -> None:
        self.closed.set()


def _polling(source: _Source, interval: float) -> tuple[Poller, queue.Queue]:
    """A started poller of ``source`` and the queue its messages are posted to. rearm() with
    an interval already past hands _launch to call_later, run at once here."""
    messages: queue.Queue = queue.Queue()
    app = SimpleNamespace(post_message=messages.put, call_later=lambda callback: callback())
    poller = Poller(app, source, interval)
    poller.start()
    return poller, messages


def test_the_polls_share_one_daemon_thread_that_ends_after_stop():
    class Source(_Source):
        def poll(self) -> Snapshot:
            snapshot = super().poll()
            if len(self.threads) == 2:
                raise OSError("NVML went away")  # a failed poll keeps the same thread
            return snapshot

    source = Source()
    poller, messages = _polling(source, 0.001)
    kinds = []
    for _ in range(4):
        message = messages.get(timeout=30)
        kinds.append(type(message))
        poller.rearm(message.poll_seconds)
    poller.stop()
    worker = source.threads[0]
    worker.join(timeout=30)
    assert kinds[:2] == [SnapshotReady, PollFailed] and kinds[2:] == [SnapshotReady, SnapshotReady]
    assert len(source.threads) >= 4 and all(t is worker for t in source.threads)
    assert worker.daemon and worker is not threading.current_thread()
    assert not worker.is_alive()  # stop ended it: no idle thread per app is left behind
    assert poller.polls >= 3 and poller.failures == 1


def test_a_source_closed_during_a_poll_is_closed_once_the_poll_returns():
    entered, release = threading.Event(), threading.Event()

    class Source(_Source):
        def poll(self) -> Snapshot:
            entered.set()
            release.wait(timeout=60)  # a slow NVML call
            assert not self.closed.is_set(), "closed while a poll was using it"
            return super().poll()

    source = Source()
    poller, messages = _polling(source, 1.0)
    assert entered.wait(timeout=30)
    poller.stop()
    poller.close_source()  # returns at once: the poll thread closes it later
    assert not source.closed.is_set()
    release.set()
    assert source.closed.wait(timeout=30)
    assert messages.empty()  # a result that arrives after stop is dropped


def test_a_source_closed_between_polls_is_closed_at_once():
    source = _Source()
    poller, messages = _polling(source, 1.0)
    messages.get(timeout=30)
    poller.stop()
    source.threads[0].join(timeout=30)  # the idle worker ended
    assert not source.threads[0].is_alive()
    poller.close_source()
    assert source.closed.is_set()


def test_a_poll_counts_as_stuck_only_while_the_source_has_not_answered():
    # The watchdog's "the last poll has been running for N s (NVML or /proc not answering)"
    # reads in_flight_seconds: a result already posted but not yet handled by a busy event loop
    # (a machine under load) is not a source that does not answer.
    entered, answer = threading.Semaphore(0), threading.Semaphore(0)

    class Source(_Source):
        def poll(self) -> Snapshot:
            entered.release()
            answer.acquire(timeout=60)  # each poll waits for the test to let it answer
            return super().poll()

    poller, messages = _polling(Source(), 1.0)
    assert entered.acquire(timeout=30)
    poller._started_at -= 30.0  # the source has been answering for 30 s
    assert poller.in_flight_seconds() >= 30.0
    answer.release()
    message = messages.get(timeout=30)  # answered and posted; the app has not handled it
    assert isinstance(message, SnapshotReady)
    assert poller.in_flight_seconds() == 0.0
    poller.rearm(message.poll_seconds)  # the next poll: the source has not answered it
    assert entered.acquire(timeout=30)
    poller._started_at -= 30.0
    assert poller.in_flight_seconds() >= 30.0
    poller.stop()  # a poll stopped is not waited for
    assert poller.in_flight_seconds() == 0.0
    answer.release()
