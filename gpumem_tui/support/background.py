"""Run slow loads (reading a file a user typed) off the caller's thread; asking never blocks.

Headless (stdlib only). The estimator pane asks for a model config on every keystroke; a
path it is given may be a large file, a slow network mount, or a FIFO, so reading it on the
UI thread could freeze the dashboard (issue 13, item 18). :class:`BackgroundLoads` runs each
load once on a daemon thread and answers "pending" until it finished; ``on_done`` is then
called (from that thread) so the caller can ask again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

PENDING = "pending"
DONE = "done"
FAILED = "failed"


class BackgroundLoads:
    """Loads keyed results on daemon threads, at most ``max_results`` kept.

    Args:
        on_done: called with the key from the loading thread after each load finishes.
        max_results: finished results kept (oldest dropped first).
    """

    def __init__(self, on_done: Callable[[Hashable], None], max_results: int = 32) -> None:
        self._on_done = on_done
        self._max = max(1, int(max_results))
        self._lock = threading.Lock()
        self._results: dict[Hashable, tuple[str, Any]] = {}

    def get(self, key: Hashable, load: Callable[[], Any]) -> tuple[str, Any]:
        """``(DONE, value)``, ``(FAILED, exception)``, or ``(PENDING, None)`` after starting
        ``load()`` on a thread when this key was not asked for before. Never blocks."""
        with self._lock:
            found = self._results.get(key)
            if found is not None:
                return found
            self._results[key] = (PENDING, None)
            while len(self._results) > self._max:
                del self._results[next(iter(self._results))]
        threading.Thread(target=self._run, args=(key, load), name="gpumem-tui-load", daemon=True).start()
        return PENDING, None

    def _run(self, key: Hashable, load: Callable[[], Any]) -> None:
        try:
            result: tuple[str, Any] = (DONE, load())
        except Exception as exc:  # noqa: BLE001 - handed to the caller, who shows it
            result = (FAILED, exc)
        with self._lock:
            self._results[key] = result
        try:
            self._on_done(key)
        except Exception:  # noqa: BLE001 - e.g. the app is shutting down
            pass
