"""The garbage collector paused while a large set of modules is imported, and what they
defined moved out of its reach afterwards.

Importing the dashboard (Textual, Rich, the UI modules) creates ~150 000 objects that live as
long as the process: modules, classes, functions, constants. CPython's generational collector
(gc module docs, "threshold") runs a young pass every 700 allocations and full passes over
every tracked object as they pile up, so it walked those objects again and again while they
were still being created: ~40 M instructions of the dashboard's start-up (benchmarks/
first_frame.py, callgrind), for no garbage worth the name. :class:`ImportsOutOfCollector` pauses
it for the imports and then freezes what exists (``gc.freeze``: the permanent generation,
which no pass walks); a later pass only sees what is allocated afterwards. Frozen objects
are still freed by reference counting; only a reference cycle among them would stay, and
module-level objects live until exit in any case. Standard library only: this runs before
Textual is imported.
"""

from __future__ import annotations

import gc
from types import TracebackType


class ImportsOutOfCollector:
    """Context manager: automatic collection off inside (if it was on), then ``gc.freeze()``
    and collection back on as it was. Never raises; an import error inside propagates."""

    def __init__(self) -> None:
        self._was_enabled = False

    def __enter__(self) -> ImportsOutOfCollector:
        self._was_enabled = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        gc.freeze()
        if self._was_enabled:
            gc.enable()
