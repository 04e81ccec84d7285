"""The poller's thread (issue 23): every poll runs in one long-lived daemon thread, which ends
after ``stop``; a source closed while a poll runs in it is closed by that thread once the poll
returns, never under it. (Quitting while a poll hangs: tests/test_security_nvml.py.)"""

from __future__ import annotations

import queue
import threading
from types import SimpleNamespace

from gpumem_tui.telemetry.model import Snapshot
from gpumem_tui.ui.poller import PollFailed, Poller, SnapshotReady


def _app(messages: queue.Queue) -> SimpleNamespace:
    # rearm() with a 1 ms interval is always due: it hands _launch to call_later, run at once
    return SimpleNamespace(post_message=messages.put, call_later=lambda callback: callback())


def test_the_polls_share_one_daemon_thread_that_ends_after_stop():
    threads: list[threading.Thread] = []

    class Source:
        def poll(self) -> Snapshot:
            threads.append(threading.current_thread())
            if len(threads) == 2:
                raise OSError("NVML went away")  # a failed poll keeps the same thread
            return Snapshot(time=float(len(threads)))

        def close(self) -> None:
            pass

    messages: queue.Queue = queue.Queue()
    poller = Poller(_app(messages), Source(), 0.001)
    poller.start()
    kinds = []
    for _ in range(4):
        message = messages.get(timeout=30)
        kinds.append(type(message))
        poller.rearm(message.poll_seconds)
    poller.stop()
    worker = threads[0]
    worker.join(timeout=30)
    assert kinds[:2] == [SnapshotReady, PollFailed] and kinds[2:] == [SnapshotReady, SnapshotReady]
    assert len(threads) >= 4 and all(t is worker for t in threads)
    assert worker.daemon and worker is not threading.current_thread()
    assert not worker.is_alive()  # stop ended it: no idle thread per app is left behind
    assert poller.polls >= 3 and poller.failures == 1


def test_a_source_closed_during_a_poll_is_closed_once_the_poll_returns():
    entered, release, closed = threading.Event(), threading.Event(), threading.Event()

    class Source:
        def poll(self) -> Snapshot:
            entered.set()
            release.wait(timeout=60)  # a slow NVML call
            assert not closed.is_set(), "closed while a poll was using it"
            return Snapshot(time=1.0)

        def close(self) -> None:
            closed.set()

    messages: queue.Queue = queue.Queue()
    poller = Poller(_app(messages), Source(), 1.0)
    poller.start()
    assert entered.wait(timeout=30)
    poller.stop()
    poller.close_source()  # returns at once: the poll thread closes it later
    assert not closed.is_set()
    release.set()
    assert closed.wait(timeout=30)
    assert messages.empty()  # a result that arrives after stop is dropped


def test_a_source_closed_between_polls_is_closed_at_once():
    closed = threading.Event()
    threads: list[threading.Thread] = []

    class Source:
        def poll(self) -> Snapshot:
            threads.append(threading.current_thread())
            return Snapshot(time=1.0)

        def close(self) -> None:
            closed.set()

    messages: queue.Queue = queue.Queue()
    poller = Poller(_app(messages), Source(), 1.0)
    poller.start()
    messages.get(timeout=30)
    poller.stop()
    threads[0].join(timeout=30)  # the idle worker ended
    assert not threads[0].is_alive()
    poller.close_source()
    assert closed.is_set()


def test_a_poll_counts_as_stuck_only_while_the_source_has_not_answered():
    # The watchdog's "the last poll has been running for N s (NVML or /proc not answering)"
    # reads in_flight_seconds: a result already posted but not yet handled by a busy event loop
    # (a machine under load) is not a source that does not answer.
    entered, release = threading.Event(), threading.Event()

    class Source:
        def poll(self) -> Snapshot:
            entered.set()
            release.wait(timeout=60)
            return Snapshot(time=1.0)

        def close(self) -> None:
            pass

    messages: queue.Queue = queue.Queue()
    poller = Poller(_app(messages), Source(), 1.0)
    poller.start()
    assert entered.wait(timeout=30)
    poller._started_at -= 30.0  # the source has been answering for 30 s
    assert poller.in_flight_seconds() >= 30.0
    release.set()
    message = messages.get(timeout=30)  # answered and posted; the app has not handled it
    assert isinstance(message, SnapshotReady)
    assert poller.in_flight_seconds() == 0.0
    poller.rearm(message.poll_seconds)  # the next poll (the source answers at once now)
    poller._started_at -= 30.0
    poller.stop()  # a poll stopped is not waited for, answered or not
    assert poller.in_flight_seconds() == 0.0
