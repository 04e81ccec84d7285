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
sends every line through Textual's own code. Its caching of lines, line filters and crop are
Textual's (``StylesCache.render``'s loop), with two cuts that leave the screen as it was:
a line that Textual's ANSIToTruecolor filter would give back unchanged (only RGB colours, no
dim text: the tables' lines) skips it, a copy less per new line; and a line under a vertical
scrollbar is handed on as wide as it shows (the widget draws it so: LineTable), which the
compositor then takes whole instead of cutting it in two at the scrollbar.

A frame draws again every widget whose container overlaps the frame's changed box
(``Compositor._get_renders``): the screen, the containers and the footer, ~50 us each to hand
back lines they drew before (a cache lookup and a filter lookup per line). :class:`KeptLines`
hands back the list it returned last while the widget has no line to draw again, the crop,
its size, the theme and the line filters are the same. :class:`CroppedCompositor` then cuts
those lines only where the frame's changed box is, not at every widget edge of the line.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.color import ColorSystem
from textual._ansi_theme import DEFAULT_TERMINAL_THEME
from textual._compositor import ChopsUpdate, Compositor
from textual._styles_cache import StylesCache
from textual.color import Color
from textual.containers import Horizontal, Vertical
from textual.filter import ANSIToTruecolor, LineFilter
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import Footer, Static

if TYPE_CHECKING:
    from textual.widget import Widget


def same_after_truecolor(strip: Strip, truecolor: ANSIToTruecolor, background: Color) -> bool:
    """Whether ``truecolor`` hands back ``strip``'s own segments: it rebuilds every segment as
    ``Segment(text, truecolor_style(style, background), None)`` (textual/filter.py
    ``ANSIToTruecolor.apply``), which equals the segment when it has no control code and its
    style comes back equal -- no colour without an RGB triplet, no dim text with a colour.
    Asked of the filter's own ``truecolor_style``, so the answer is its own."""
    convert = truecolor.truecolor_style
    rich_background = background.rich_color
    for _, style, control in strip:
        if control is not None:
            return False
        if style is not None and (converted := convert(style, rich_background)) is not style and converted != style:
            return False
    return True


def drawn_scrollbar_width(widget: Widget) -> int:
    """The columns of ``widget``'s vertical scrollbar where the compositor draws one over the
    right of its lines (textual/_compositor.py ``_arrange_root``: shown and visible), else 0."""
    if widget.show_vertical_scrollbar and widget.styles.scrollbar_visibility == "visible":
        return widget.scrollbar_size_vertical
    return 0


class PlainStylesCache(StylesCache):
    """Textual's styles cache with the plain-widget path (see the module doc). A widget uses
    it by replacing its ``_styles_cache`` when it is built."""

    def __init__(self) -> None:
        super().__init__()
        #: during a paint of a plain widget: (inner rich style, content width, content height,
        #: first and end line of the content: the lines between a top and a bottom border,
        #: whether the columns right of the content are the vertical scrollbar's)
        self._plain: tuple[Any, int, int, int, int, bool] | None = None
        #: during a paint: the width of the widget's vertical scrollbar where one is drawn, else 0
        self._scrollbar_width = 0
        #: lines (by y) whose cached strip comes out of ANSIToTruecolor as it went in, for the
        #: filter and background in ``_truecolor_for``
        self._truecolor_same: set[int] = set()
        self._truecolor_for: tuple[Any, Any] | None = None

    def clear(self) -> None:
        super().clear()
        self._truecolor_same.clear()

    def render_widget(self, widget: Widget, crop: Region) -> list[Strip]:
        """``StylesCache.render_widget``, told the width of the widget's vertical scrollbar
        where one is drawn over the columns right of the content (:func:`drawn_scrollbar_width`)."""
        self._scrollbar_width = drawn_scrollbar_width(widget)
        try:
            return super().render_widget(widget, crop)
        finally:
            self._scrollbar_width = 0

    def render(self, styles: Any, size: Any, base_background: Any, background: Any, render_content_line: Any,
               filters: Any, border_title: Any, border_subtitle: Any, content_size: Any = None,
               padding: Any = None, crop: Any = None, opacity: float = 1.0, **kwargs: Any) -> list[Strip]:
        """``StylesCache.render``, whose lines take the short way when nothing but the
        background applies to them (the conditions of ``StylesCache.render_line``'s steps)."""
        content = size if content_size is None else content_size
        spacing = styles.padding if padding is None else padding
        (top, _), (right, _), (bottom, _), (left, _) = styles.border
        if not (opacity == 1.0 and not any(spacing) and not left and not right and styles.text_opacity == 1.0
                and not styles.tint.a and not any(edge for edge, _ in styles.outline)
                and not (styles.has_rule("hatch") and styles.hatch != "none")):
            return super().render(styles, size, base_background, background, render_content_line, filters,
                                  border_title, border_subtitle, content_size=content_size, padding=padding,
                                  crop=crop, opacity=opacity, **kwargs)
        inner = self.get_inner_outer(base_background, background)[0]
        # a top or bottom border (the device panel's) is a line of its own, drawn by Textual;
        # a vertical scrollbar covers the last columns of every content line (no side border
        # or padding here): the line is drawn without them
        covered = 0 < self._scrollbar_width < content.width
        line_width = content.width - self._scrollbar_width if covered else content.width
        self._plain = (inner.rich_style, line_width, content.height, 1 if top else 0,
                       size.height - 1 if bottom else size.height, covered)
        try:
            return self._render_plain(styles, size, content, spacing, base_background, background,
                                      render_content_line, filters, (border_title, border_subtitle, opacity,
                                      kwargs.get("ansi_theme", DEFAULT_TERMINAL_THEME),
                                      kwargs.get("native_ansi", False)), crop)
        finally:
            self._plain = None

    def _render_plain(self, styles: Any, size: Any, content: Any, padding: Any, base_background: Any,
                      background: Color, render_content_line: Any, filters: Sequence[LineFilter],
                      rest: tuple[Any, ...], crop: Region | None) -> list[Strip]:
        """``StylesCache.render``'s loop (textual/_styles_cache.py): each line from the cache
        or drawn, then filtered, then cropped -- except that a line ANSIToTruecolor would
        hand back unchanged (:func:`same_after_truecolor`, asked once when the line is drawn)
        skips it: a copy of the line less (~20 new table lines a poll) and no lookup of its
        filtered copy at each frame. Only the first filter is skipped so (Textual puts it
        first): a later one would see the output of those before it."""
        if crop is None:
            crop = size.region
        width = size.width
        if width != self._width:
            self.clear()
            self._width = width
        truecolor = filters[0] if filters and type(filters[0]) is ANSIToTruecolor else None
        if (truecolor, background) != self._truecolor_for:
            self._truecolor_same.clear()
            self._truecolor_for = (truecolor, background)
        same, cache, dirty = self._truecolor_same, self._cache, self._dirty_lines
        strips: list[Strip] = []
        for y in crop.line_range:
            strip = None if y in dirty else cache.get(y)
            if strip is None:
                strip = self.render_line(styles, y, size, content, padding, base_background, background,
                                         render_content_line, *rest)
                cache[y] = strip
                if truecolor is not None and same_after_truecolor(strip, truecolor, background):
                    same.add(y)
                else:
                    same.discard(y)
            for line_filter in filters:
                if line_filter is not truecolor or y not in same:
                    strip = strip.apply_filter(line_filter, background)
            strips.append(strip)
        dirty.difference_update(crop.line_range)
        if crop.column_span != (0, width):
            x1, x2 = crop.column_span
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def render_line(self, styles: Any, y: int, size: Any, content_size: Any, padding: Any, base_background: Any,
                    background: Any, render_content_line: Any, *args: Any) -> Strip:
        plain = self._plain
        if plain is None or not plain[3] <= y < plain[4]:
            return super().render_line(styles, y, size, content_size, padding, base_background, background,
                                       render_content_line, *args)
        inner, line_width, content_height, first, _, covered = plain
        if y - first < content_height:
            line = render_content_line(y - first).adjust_cell_length(line_width, inner)
        else:
            line = Strip.blank(line_width, inner)
        if covered or line.cell_length == size.width:
            # Textual's last step, Strip(line, size.width), would copy it unchanged. The line
            # itself is kept instead: one strip less per line, and a line the widget hands
            # back again (a header redrawn by a scroll) finds its filtered and divided strips
            # cached. A line under a vertical scrollbar stops where the scrollbar starts: the
            # compositor cut Textual's full line there (a copy of the line and a piece the
            # scrollbar hid); this one it hands on whole, the same cells on screen
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


class CroppedCompositor(Compositor):
    """Textual's compositor, whose partial frames cut each line only where the frame's
    changed box is.

    A partial frame (``Compositor.render_partial_update``) draws the widgets in the box that
    bounds the changed regions and cuts each of their lines at every widget edge on that
    line (``Compositor._render_chops``): the screen, ``#main`` and the side pane span the
    whole width, so a table row beside the side pane's form was cut at its ~18 edges, three
    times over, though only the chops within the box are written
    (``ChopsUpdate.render_segments`` skips the others). Here a line is cut only at the edges
    of the chops that overlap the box's columns, and a widget is asked for its lines only
    where a chop in the box is still empty on a drawn line: the chops written are the same
    strips (tests/test_cropped_compositor.py compares them with Textual's). The frame is
    written to the terminal by :class:`PlainChopsUpdate`."""

    def render_partial_update(self) -> ChopsUpdate | None:
        """Textual's partial frame, written to the terminal by :class:`PlainChopsUpdate`."""
        update = super().render_partial_update()
        return None if update is None else PlainChopsUpdate(update.chops, update.spans, update.chop_ends)

    def _render_chops(self, crop: Region, is_rendered_line: Callable[[int], bool]) -> list[dict[int, Strip | None]]:
        cuts = self.cuts
        # ChopsUpdate.render_segments reads the chops of the drawn lines only
        chops: list[dict[int, Strip | None]] = [dict.fromkeys(line_cuts[:-1]) if is_rendered_line(y) else {}
                                                for y, line_cuts in enumerate(cuts)]
        left, right = crop.x, crop.right
        # per drawn line, the chops in the box still empty: the widgets come front first
        # (Compositor.visible_widgets), so one behind a line's filled chops draws nothing there
        empty: dict[int, int] = {}
        for y in crop.line_range:
            if is_rendered_line(y):
                empty[y] = bisect_left(cuts[y], right) - bisect_right(cuts[y], left) + 1
        for widget, (region, clip) in self.visible_widgets.items():
            if region.x >= right or region.x + region.width <= left:
                continue  # wholly right or left of the box (the side pane's ~90, beside a table row)
            render_region = region.intersection(clip)
            first_cut, last_cut = render_region.column_span
            start, end = max(first_cut, left), min(last_cut, right)
            if start >= end:
                continue
            lines = [y for y in render_region.line_range if empty.get(y)]
            if not lines:
                continue  # all its drawn lines are filled by widgets in front: not asked to draw
            # the lines as Compositor._get_renders asks the widget for them
            if clip.contains_region(region):
                strips, first = widget.render_lines(Region(0, 0, region.width, region.height)), region.y
            else:
                strips = widget.render_lines(render_region.translate(-region.offset))
                first = render_region.y
            render_x = render_region.x
            for y in lines:
                line_cuts = cuts[y]
                # the chops that overlap [start, end): from the last cut at or left of start
                # to the first cut at or right of end (each chop ends at the next cut)
                lo = bisect_right(line_cuts, start) - 1
                kept = line_cuts[lo:bisect_left(line_cuts, end) + 1]
                line = strips[y - first]
                if kept[0] == render_x:
                    pieces = line.divide([cut - render_x for cut in kept[1:]])
                else:  # the widget begins left of the box: its first piece is not written
                    pieces = line.divide([cut - render_x for cut in kept])[1:]
                chops_line = chops[y]
                for cut, piece in zip(kept, pieces):
                    if chops_line[cut] is None:
                        chops_line[cut] = piece
                        empty[y] -= 1
        return chops


def rendered_prefix(strip: Strip, cells: int, console: Any) -> str:
    """``strip.crop(0, cells).render(console)`` (Textual's Strip.crop and Strip.render:
    the same text, segment by segment), without the cropped Strip, which Textual makes with
    its seven caches for each chop a partial frame writes in part: a device panel row is as
    wide as the screen, the region it refreshes only as wide as its columns."""
    if cells >= strip.cell_length:
        return strip.render(console)
    if cells <= 0:
        return ""
    color_system = console._color_system or ColorSystem.TRUECOLOR
    render = Strip.render_style
    out: list[str] = []
    position = 0
    for segment in strip:
        length = cell_len(segment.text)
        if not out and length == 0:
            continue  # Strip.crop drops the empty segments before its first cell
        end = position + length
        if end >= cells:
            segment = segment.split_cells(cells - position)[0]
        text, style, _ = segment
        out.append(text if style is None else render(style, text, color_system=color_system))
        if end >= cells:
            break
        position = end
    return "".join(out)


class PlainChopsUpdate(ChopsUpdate):
    """Textual's partial frame, whose text for the terminal (:meth:`render_segments`) is the one
    Textual writes (textual/_compositor.py ``ChopsUpdate.render_segments``), with each cursor
    move made as its string, ``ESC [ row ; column H`` (rich/control.py ``CONTROL_CODES_FORMAT``
    for ``CURSOR_MOVE_TO``), instead of a rich ``Control`` object made per chop written (~45 a
    frame)."""

    def render_segments(self, console: Any) -> str:
        sequences: list[str] = []
        append = sequences.append
        chops, chop_ends = self.chops, self.chop_ends
        last_y = self.spans[-1][0]
        for y, x1, x2 in self.spans:
            for end, (x, strip) in zip(chop_ends[y], chops[y].items()):
                if x > x2:
                    break  # the chops come in the order of their cuts: none further is in the span
                if strip is None or end <= x1:
                    continue
                append(f"\x1b[{y + 1};{x + 1}H")
                if x2 > x >= x1 and end <= x2:
                    append(strip.render(console))
                else:  # the chop runs past the span: cut to it
                    append(rendered_prefix(strip, min(end, x2) - x, console))
            if y != last_y:
                append("\n")
        return "".join(sequences)


class KeptScreen(KeptLines, Screen):
    """Textual's Screen with :class:`KeptLines` (its background behind every widget) and the
    :class:`CroppedCompositor`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._compositor = CroppedCompositor()


class KeptHorizontal(KeptLines, Horizontal):
    """Textual's Horizontal with :class:`KeptLines`."""


class KeptVertical(KeptLines, Vertical):
    """Textual's Vertical with :class:`KeptLines`."""


class KeptStatic(KeptLines, Static):
    """Textual's Static with :class:`KeptLines`: the status lines, children of the screen, so
    in every frame; Textual's way through its visual and styles cache cost ~190 000
    instructions a frame to hand back the unchanged line."""


class KeptFooter(KeptLines, Footer):
    """Textual's Footer with :class:`KeptLines` (its keys are widgets of their own)."""
