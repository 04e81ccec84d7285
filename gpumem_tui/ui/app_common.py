"""What every gpumem-tui Textual app shares: the theme files and the command palette's
Screenshot (the dashboard, :class:`gpumem_tui.ui.app.GpuMemApp`, and the fleet screen,
:class:`gpumem_tui.ui.fleet_screen.FleetApp`).

:class:`ThemedAppMixin` goes before ``App`` in the bases. The app sets ``requested_theme``
(a theme name), ``theme_set`` (a :class:`~gpumem_tui.ui.themes.ThemeSet`) and
``screenshot_dir`` (a folder or None) and calls ``_register_themes()`` from ``__init__`` and
``_show_theme_notices()`` from ``on_mount``.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path

from textual.app import App
from textual.widgets import Input

from gpumem_tui.support.text import printable
from gpumem_tui.ui.themes import APP_VARIABLES, DEFAULT_THEME, FALLBACK_THEME, ThemeSet


def is_replay(source: object) -> bool:
    """True when the source can pause, seek and change speed (a replayed trace)."""
    return all(callable(getattr(source, name, None)) for name in ("pause", "resume", "seek", "set_speed"))


#: Allocations (less deallocations) of container objects between two young-generation passes
#: once the dashboard is up (CPython's default is 700). A frame makes many short-lived objects
#: (Textual's segments, strips, styles); at 700 the young pass ran several times per poll and
#: walked objects about to die anyway. benchmarks/idle_polls.py --steady, 80 polls, run
#: alternately 4 times each on the 2-core machine (load 1.3-3.6): 15.8-16.2 ms of CPU per poll
#: with 700, 13.8-15.5 ms with 20 000. The extra garbage waiting for a pass is a few MB at most.
YOUNG_GENERATION_THRESHOLD = 20_000


def freeze_gc() -> None:
    """Collect once, then keep every object alive now out of the collector's reach
    (gc.freeze), and run young-generation passes less often (:data:`YOUNG_GENERATION_THRESHOLD`):
    see ``GpuMemApp.freeze_gc_after_start``. Changes the whole process's collector settings."""
    gc.collect()  # what is garbage now is not kept for ever
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)


def is_text_field(widget: object) -> bool:
    """True for a widget that takes typed text (an Input, or a TextArea of the side pane's
    form; TextArea is looked up only once something imported it, so it stays off start-up)."""
    text_area = getattr(sys.modules.get("textual.widgets._text_area"), "TextArea", None)
    return isinstance(widget, Input) or (text_area is not None and isinstance(widget, text_area))


class StartupGcPause:
    """Automatic garbage collection paused from compose to the first frame (with the side
    pane, to the first frame that shows it: ``DashboardScreens._mount_side_pane``).

    Mounting the dashboard allocates ~100 000 objects (widgets, styles, strips): CPython's
    generational collector (gc module docs, "threshold") ran ~10 young and one full pass over
    everything imported in that time, 40-120 ms of the start-up here (gc.callbacks timings).
    Nothing is lost by waiting: :meth:`resume` turns collection back on and the next young
    pass takes what became garbage. Only a collector that was running is paused or resumed.
    """

    def __init__(self) -> None:
        self._paused = False

    def pause(self) -> None:
        """Stop automatic collection, if it is running (gc.disable)."""
        if not self._paused and gc.isenabled():
            gc.disable()
            self._paused = True

    def resume(self) -> None:
        """Start automatic collection again if :meth:`pause` stopped it; idempotent."""
        if self._paused:
            self._paused = False
            gc.enable()


class ThemedAppMixin:
    """Theme registration with a fallback notice, and a Screenshot that says where it went."""

    requested_theme: str = DEFAULT_THEME
    theme_set: ThemeSet
    screenshot_dir: str | None = None
    _theme_notices: list[tuple[str, str]]

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """The app's own colour variables (:data:`gpumem_tui.ui.themes.APP_VARIABLES`)."""
        return dict(APP_VARIABLES)

    def _register_themes(self) -> None:
        """Register theme files and pick the theme; called from __init__ so that the first
        CSS pass already uses it (switching in on_mount re-styles every widget, ~1 s)."""
        for theme in self.theme_set.themes.values():
            self.register_theme(theme)  # type: ignore[attr-defined]
        wanted = self.requested_theme
        self._theme_notices = [(problem, "Theme file error") for problem in self.theme_set.problems]
        if wanted not in self.available_themes:  # type: ignore[attr-defined]
            fallback = DEFAULT_THEME if DEFAULT_THEME in self.available_themes else FALLBACK_THEME  # type: ignore[attr-defined]
            self._theme_notices.append((f"theme {wanted!r} could not be loaded; using {fallback!r}", "Theme"))
            wanted = fallback
        self._start_with_theme(wanted)

    def _start_with_theme(self, name: str) -> None:
        """Make ``name`` the theme before the stylesheet is first parsed.

        Assigning ``App.theme`` runs Textual's watcher (textual/app.py ``_watch_theme``), which
        queues ``refresh_css``: a second parse of every CSS source (a fresh Stylesheet, no
        parse cache) and a restyle of every widget, after the first parse -- ~8 % of the
        dashboard's start-up instructions (callgrind). Before the first parse the same effect
        is the theme's variables in the stylesheet and the watcher's classes. Only a theme of
        the start-up theme's darkness and ANSI flag goes this way: a change of either also
        rebuilds the ANSI colour filter (the watcher's ``_refresh_truecolor_filter``: which
        palette, and whether it converts at all), so it takes the watcher.
        """
        theme = self.available_themes[name]  # type: ignore[attr-defined]
        now = self.current_theme  # type: ignore[attr-defined]
        if (theme.dark, theme.ansi) != (now.dark, now.ansi):
            self.theme = name
            return
        self.set_reactive(App.theme, name)  # type: ignore[attr-defined]  # no watcher
        for old in [c for c in self.classes if c.startswith("-theme-")]:  # type: ignore[attr-defined]
            self.remove_class(old, update=False)  # type: ignore[attr-defined]
        self.add_class(f"-theme-{name}", update=False)  # type: ignore[attr-defined]
        self.stylesheet.set_variables(self.get_css_variables())  # type: ignore[attr-defined]

    def _show_theme_notices(self) -> None:
        for message, title in self._theme_notices:
            self.notify(message, title=title, severity="warning", timeout=10, markup=False)  # type: ignore[attr-defined]

    def deliver_screenshot(
        self, filename: str | None = None, path: str | None = None, time_format: str | None = None
    ) -> str | None:
        """Save an SVG screenshot and say where, or why not.

        Textual's default saves into ~/Downloads and only says "Failed to save screenshot"
        when that folder is missing (common on servers); here it goes to ``screenshot_dir``
        or the working directory, written 0600 (it shows command lines) and never over a file.
        Returns the path written, or None.
        """
        folder = Path(os.path.expanduser(path or self.screenshot_dir or os.getcwd()))
        # the title may hold a URL or host name from outside: keep only what a file name can
        title = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(self.title))[:80]  # type: ignore[attr-defined]
        name = filename or time.strftime(f"{title}_%Y-%m-%dT%H_%M_%S.svg")
        target = folder / name
        try:
            svg = self.export_screenshot()  # type: ignore[attr-defined]
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(svg)
        except OSError as exc:
            self.notify(f"screenshot not saved to {printable(str(target), 300)}: {exc.strerror or exc}",  # type: ignore[attr-defined]
                        title="Screenshot", severity="error", timeout=10, markup=False)
            return None
        self.notify(f"saved to {printable(str(target), 300)}", title="Screenshot", timeout=10, markup=False)  # type: ignore[attr-defined]
        return str(target)
