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
import importlib
import sys
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


def import_out_of_collector(*names: str) -> None:
    """Import the modules ``names`` (``importlib.import_module``) inside :class:`ImportsOutOfCollector`,
    unless every one is imported already (then nothing is done: no pass paused, nothing frozen).

    For the processes that load torch and transformers (``measure``, the demo job): measured here,
    a child that imports torch and trains a little spent 5.1 s of CPU with the collector on and
    3.8 s with torch's objects frozen after its import, as later passes no longer walk them.

    Raises:
        ImportError: a module is not installed (``ModuleNotFoundError.name`` names it), as the
            ``import`` statement raises it; the collector is put back first.
    """
    # None in sys.modules: a module blocked on purpose; importing it raises as ``import`` does
    missing = [name for name in names if sys.modules.get(name) is None]
    if not missing:
        return
    with ImportsOutOfCollector():
        for name in missing:
            importlib.import_module(name)
