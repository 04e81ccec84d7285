"""Less of Textual's per-line work in each frame (issue 23, idle CPU): a shorter way through
its line styling for widgets with no box styles, and the same lines handed back by widgets
that did not change.

Textual styles every line a widget draws again (``textual/_styles_cache.py``,
``StylesCache.render_line``): it reads the widget's border, outline, padding, tint, opacity and
hatch for each line and builds the line through several steps. With none of them set -- the
process table, the chart's plot; only a top or bottom border, as the device panel's, which
are lines of their own -- all that comes out for a content line is the content line fitted to
the content width in the widget's inner background, as a strip of the widget's width. That is ~40 us a line
of Textual's work; the table and the plot draw ~30 lines a poll.

:class:`PlainStylesCache` is Textual's ``StylesCache`` that checks once per paint whether the
widget is such a plain one and then draws its lines that shorter way (the same strips:
``StylesCache.render_line``'s content branch, path C, with nothing to add); any box style
sends every line through Textual's own code. Its caching of lines, line filters and crop stay
Textual's (``StylesCache.render``).

A frame draws again every widget whose container overlaps the frame's changed box
(``Compositor._get_renders``): the screen, the containers and the footer, ~50 us each to hand
back lines they drew before (a cache lookup and a filter lookup per line). :class:`KeptLines`
hands back the list it returned last while the widget has no line to draw again, the crop,
its size, the theme and the line filters are the same.
"""

from __future__ import annotations

from typing import Any

from textual._styles_cache import StylesCache
from textual.containers import Horizontal, Vertical
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import Footer


class PlainStylesCache(StylesCache):
    """Textual's styles cache with the plain-widget path (see the module doc). A widget uses
    it by replacing its ``_styles_cache`` when it is built."""

    def __init__(self) -> None:
        super().__init__()
        #: during a paint of a plain widget: (inner rich style, content width, content height,
        #: first and end line of the content: the lines between a top and a bottom border)
        self._plain: tuple[Any, int, int, int, int] | None = None

    def render(self, styles: Any, size: Any, base_background: Any, background: Any, render_content_line: Any,
               filters: Any, border_title: Any, border_subtitle: Any, content_size: Any = None,
               padding: Any = None, crop: Any = None, opacity: float = 1.0, **kwargs: Any) -> list[Strip]:
        """``StylesCache.render``, whose lines take the short way when nothing but the
        background applies to them (the conditions of ``StylesCache.render_line``'s steps)."""
        content = size if content_size is None else content_size
        spacing = styles.padding if padding is None else padding
        (top, _), (right, _), (bottom, _), (left, _) = styles.border
        if (opacity == 1.0 and not any(spacing) and not left and not right and styles.text_opacity == 1.0
                and not styles.tint.a and not any(edge for edge, _ in styles.outline)
                and not (styles.has_rule("hatch") and styles.hatch != "none")):
            inner = self.get_inner_outer(base_background, background)[0]
            # a top or bottom border (the device panel's) is a line of its own, drawn by Textual
            self._plain = (inner.rich_style, content.width, content.height, 1 if top else 0,
                           size.height - 1 if bottom else size.height)
        try:
            return super().render(styles, size, base_background, background, render_content_line, filters,
                                  border_title, border_subtitle, content_size=content_size, padding=padding,
                                  crop=crop, opacity=opacity, **kwargs)
        finally:
            self._plain = None

    def render_line(self, styles: Any, y: int, size: Any, content_size: Any, padding: Any, base_background: Any,
                    background: Any, render_content_line: Any, *args: Any) -> Strip:
        plain = self._plain
        if plain is None or not plain[3] <= y < plain[4]:
            return super().render_line(styles, y, size, content_size, padding, base_background, background,
                                       render_content_line, *args)
        inner, content_width, content_height, first, _ = plain
        if y - first < content_height:
            line = render_content_line(y - first).adjust_cell_length(content_width, inner)
        else:
            line = Strip.blank(content_width, inner)
        if line.cell_length == size.width:
            # Textual's last step, Strip(line, size.width), would copy it unchanged. The line
            # itself is kept instead: one strip less per line, and a line the widget hands back
            # again (a header redrawn by a scroll) finds its filtered and divided strips cached
            return line
        return Strip(line, size.width)  # Textual's last step: the line's segments at the widget's width


class KeptLines:
    """Mixin for a widget (before its Textual class in the bases): :meth:`render_lines` hands
    back the strips it returned last while nothing they depend on changed -- no line of the
    widget marked to draw again (Textual marks them on every refresh, and clears its line cache
    only with all lines marked, textual/widget.py ``_set_dirty``), the same crop and size, the
    same theme, ANSI mode and line filters (textual/_styles_cache.py ``render_widget``)."""

    _kept_lines: tuple[tuple[Any, ...], list[Strip]] | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        app = self.app  # type: ignore[attr-defined]
        key = (crop, self._size, app.theme, app.ansi_color, tuple(map(id, self.get_line_filters())))  # type: ignore[attr-defined]
        kept = self._kept_lines
        if kept is not None and kept[0] == key and not self._styles_cache._dirty_lines:  # type: ignore[attr-defined]
            return kept[1]
        strips = super().render_lines(crop)  # type: ignore[misc]
        self._kept_lines = (key, strips)
        return strips


class KeptScreen(KeptLines, Screen):
    """Textual's Screen with :class:`KeptLines` (its background behind every widget)."""


class KeptHorizontal(KeptLines, Horizontal):
    """Textual's Horizontal with :class:`KeptLines`."""


class KeptVertical(KeptLines, Vertical):
    """Textual's Vertical with :class:`KeptLines`."""


class KeptFooter(KeptLines, Footer):
    """Textual's Footer with :class:`KeptLines` (its keys are widgets of their own)."""
