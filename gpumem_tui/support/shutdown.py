"""A process that has finished its work leaves its heap to the operating system.

When a Python program ends, the interpreter's shutdown (``Py_FinalizeEx``: a full collection,
then every module cleared and a last collection of what that left) frees the objects it still
holds one by one. With torch and transformers loaded (``gpumem-tui measure``, the demo job:
~2000-2500 modules, ~350 000 objects) that took 0.9-1.9 s of CPU per process here (0.2 s
frozen), spent on memory the kernel reclaims at exit in any case. ``gc.freeze()`` (gc module
docs) moves every tracked object to the permanent generation, which no collection walks, so the
shutdown skips them: reference counting still frees what it frees, atexit handlers and
``weakref.finalize`` callbacks (temporary directories) still run, and the standard streams are
still flushed; only the destructors of objects that sit in reference cycles do not run. Call it
once the work is done, every file closed, right before the process exits -- never in a process
that goes on (the test suite runs the commands in process: :func:`gpumem_tui.cli.main` does not
call it).
"""

from __future__ import annotations

import gc


def leave_heap_to_os() -> None:
    """Freeze every tracked object (``gc.freeze``) so the interpreter's shutdown does not free
    them one by one; for the last statement of a program's entry point. Never raises."""
    gc.freeze()
