"""When the dashboard dies: the full traceback goes to a file, the terminal gets one line.

Headless (stdlib + platformdirs). The report is written to
``<user cache dir>/crash-<UTC time>-<pid>-<random>.txt`` (``~/.cache/gpumem-tui`` on Linux), mode
0600 (a traceback can show command lines and paths), or to a temporary file when the cache
directory cannot be written.
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from pathlib import Path


class DashboardCrashed(RuntimeError):
    """The dashboard stopped on an unexpected error; ``str()`` is the one line to print
    (the error and where its traceback was written)."""


def crash_directory() -> Path:
    """Where crash reports go: the user cache directory of gpumem-tui."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("gpumem-tui"))


def write_crash_report(error: BaseException, directory: Path | None = None) -> Path | None:
    """Write ``error``'s full traceback to a new 0600 file; its path, or None if no file
    could be written anywhere."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    prefix = f"crash-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}-"
    try:
        where = directory if directory is not None else crash_directory()
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, raw = tempfile.mkstemp(prefix=prefix, suffix=".txt", dir=where)  # O_EXCL, 0600
    except Exception:  # noqa: BLE001 - any failure: fall back to the temporary directory
        try:
            fd, raw = tempfile.mkstemp(prefix="gpumem-tui-" + prefix, suffix=".txt")
        except OSError:
            return None
    path = Path(raw)
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
        handle.write(text)
    return path


def crash_line(error: BaseException, report: Path | None) -> str:
    """The one line shown for a crash: ``<Type>: <message> (traceback: <path>)``."""
    message = " ".join(str(error).split())[:300] or "no message"
    where = f"traceback: {report}" if report is not None else "no traceback file could be written"
    return f"the dashboard stopped on an unexpected error: {type(error).__name__}: {message} ({where})"
