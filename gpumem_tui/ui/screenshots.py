"""The command palette's Screenshot for the dashboard: where it goes and what it says."""

from __future__ import annotations

import os
import time as _time
from pathlib import Path
from typing import Any

from gpumem_tui.text import printable


def save_screenshot(app: Any, filename: str | None = None, path: str | None = None) -> str | None:
    """Save an SVG screenshot and say where, or why not.

    Textual's default saves into ~/Downloads and only says "Failed to save screenshot"
    when that folder is missing (common on servers); here it goes to ``screenshot_dir``
    or the working directory, written 0600 (it shows command lines) and never over a file.
    Returns the path written, or None.
    """
    folder = Path(os.path.expanduser(path or app.screenshot_dir or os.getcwd()))
    name = filename or _time.strftime(f"{app.title}_%Y-%m-%dT%H_%M_%S.svg")
    target = folder / name
    try:
        svg = app.export_screenshot()
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(svg)
    except OSError as exc:
        app.notify(f"screenshot not saved to {printable(str(target), 300)}: {exc.strerror or exc}",
                   title="Screenshot", severity="error", timeout=10, markup=False)
        return None
    app.notify(f"saved to {printable(str(target), 300)}", title="Screenshot", timeout=10, markup=False)
    return str(target)

