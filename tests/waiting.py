"""Waiting on a condition in tests, never on a fixed sleep (issue 23).

A test that sleeps for a while and then asserts what happened passes or fails by the machine's
load: the suite runs under pytest-xdist (``-n 3``) on a loaded 2-core machine, where "0.2 s is
plenty" stops being true. These helpers poll the condition itself instead. The timeout is a hang
guard, not a speed check: it is generous (``HANG_TIMEOUT``) and, when it runs out, the test fails
with a message naming what never happened.

- :func:`wait_until`: plain code (threads, child processes, files, sockets).
- :func:`settle`: a Textual app under ``run_test``; the app's timers and messages run between
  looks, and the condition must still hold after a ``pilot.pause`` (every pending message
  handled, the screen updated) for it to count.
- :func:`wait_async`: asyncio code without a pilot (or once the app has exited, when
  ``pilot.pause`` has no screen to wait for).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, TypeVar

T = TypeVar("T")

HANG_TIMEOUT = 120.0  # seconds; a hang guard only: a working test is done long before this
POLL = 0.02  # seconds between looks; short, so waiting adds little to a fast test


def _describe(what: str | Callable[[], str]) -> str:
    return what() if callable(what) else what


def _look(predicate: Callable[[], T], ignore: tuple[type[BaseException], ...]) -> T | None:
    try:
        return predicate()
    except ignore:
        return None


def wait_until(predicate: Callable[[], T], *, what: str | Callable[[], str], timeout: float = HANG_TIMEOUT,
               poll: float = POLL, ignore: tuple[type[BaseException], ...] = ()) -> T:
    """Call ``predicate`` every ``poll`` s until it returns something truthy; return that.

    ``ignore``: exceptions that count as "not yet" (a port not listening, a file half-written).
    ``what``: the awaited event in words (or a callable giving them, read at the timeout, to
    show the state the test saw). Raises AssertionError naming it after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = _look(predicate, ignore)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {_describe(what)}: it never happened")
        time.sleep(poll)


async def settle(pilot: Any, predicate: Callable[[], T], *, what: str | Callable[[], str],
                 timeout: float = HANG_TIMEOUT, poll: float = POLL) -> T:
    """:func:`wait_until` for a Textual app under ``run_test``: the app runs between looks (its
    timers fire, its messages are handled), and a truthy look counts once it holds again after
    a ``pilot.pause(poll)`` -- the look these waits always ended on.

    Between looks the event loop only sleeps: a ``pilot.pause`` makes every widget handle a
    message and the screen update (measured ~18 ms of CPU per pause with the side pane mounted,
    ~4 ms without, against ~1 ms for the sleep), so pausing at every look made a wait cost
    nearly as much CPU as its wall time. The pause comes once the condition is seen, or once
    a look raises (the app may be mid-mount between pauses): the look after the pause decides,
    and what it raises goes to the caller as before."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    value = predicate()
    if value:
        return value
    while True:
        if loop.time() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {_describe(what)}: it never happened")
        await asyncio.sleep(poll)
        if _glimpse(predicate):
            await pilot.pause(poll)
            value = predicate()
            if value:
                return value


def _glimpse(predicate: Callable[[], Any]) -> bool:
    """A look between pauses: True when it is worth a settled look (truthy, or it raised)."""
    try:
        return bool(predicate())
    except Exception:  # noqa: BLE001 -- the settled look raises it again if it still holds
        return True


async def wait_async(predicate: Callable[[], T], *, what: str | Callable[[], str],
                     timeout: float = HANG_TIMEOUT, poll: float = POLL) -> T:
    """:func:`wait_until` inside an event loop: other tasks run between looks."""
    return await _wait_between(asyncio.sleep, predicate, what, timeout, poll)


async def _wait_between(pause: Callable[[float], Any], predicate: Callable[[], T],
                        what: str | Callable[[], str], timeout: float, poll: float) -> T:
    """Look at ``predicate`` every ``poll`` s, awaiting ``pause(poll)`` between looks."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {_describe(what)}: it never happened")
        await pause(poll)


async def next_polls(pilot: Any, app: Any, count: int = 2, timeout: float = HANG_TIMEOUT) -> None:
    """Wait until the dashboard ``app`` has taken ``count`` more snapshots (each poll gives a new
    Snapshot object and polls never overlap, so after two, the app holds one that was polled
    after this call began, whatever poll was in flight then)."""
    for _ in range(count):
        seen = app.snapshot
        await settle(pilot, lambda: app.snapshot is not seen, what="the dashboard's next poll", timeout=timeout)
