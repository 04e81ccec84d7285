"""A scrollbar that keeps the lines it drew, by what they showed (issue 23, idle CPU).

The process table re-sorts every second and keeps the charted row in sight, so its view (and
its scrollbar's thumb) moves often, back and forth over the same few positions. Textual draws
a scrollbar through its whole renderable pipeline (``ScrollBarRender`` -> Rich segments ->
``Visual.to_strips`` -> the styles cache): measured ~1.8 ms a frame for the table's 14-line
bar, the largest single widget cost of a poll. :class:`RememberingScrollBar` draws each state
once (Textual's own drawing, unchanged) and hands the same lines back when the bar is in a
state it was in before.
"""

from __future__ import annotations

from typing import Any

from textual.geometry import Region
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.strip import Strip

from gpumem_tui.ui.plain_lines import KeptLines

#: Most states a bar keeps (a thumb position, size and colours each); past it the cache
#: starts afresh. A table of N rows in a view of V has at most 8 (N - V) + 1 thumb positions
#: (Textual moves the thumb in eighths of a cell).
STATES_KEPT = 256


class StateKeptScrollBar(ScrollBar):
    """Textual's :class:`~textual.scrollbar.ScrollBar`, whose drawn lines are kept by state
    (the part of :class:`RememberingScrollBar` that asks the bar for its state).

    The state is everything Textual's drawing reads: the renderable :meth:`ScrollBar.render`
    returns (virtual size, window size, position, thickness, direction and the style made of
    the parent's scrollbar colours, hover and grab -- textual/scrollbar.py), the bar's size and
    the crop asked for, the app's theme and ANSI mode, the line filters, and the bar's
    background colours and opacity, which Textual's styles cache draws its lines on
    (textual/_styles_cache.py ``render_widget``; they follow the parent's focus tint, which the
    renderable's style does not show). Any other renderable (a custom ``renderer`` that is not
    a :class:`ScrollBarRender`) is drawn every time.
    """

    def __init__(self, vertical: bool = True, name: str | None = None, *, thickness: int = 1) -> None:
        super().__init__(vertical=vertical, name=name, thickness=thickness)
        self._drawn: dict[tuple[Any, ...], list[Strip]] = {}

    def render_lines(self, crop: Region) -> list[Strip]:
        bar = self.render()
        if type(bar) is not ScrollBarRender:
            return super().render_lines(crop)
        app = self.app
        key = (crop, self.size, bar.virtual_size, bar.window_size, bar.position, bar.thickness, bar.vertical,
               bar.style, app.theme, app.ansi_color, self.background_colors, self.opacity,
               tuple(map(id, self.get_line_filters())))
        strips = self._drawn.get(key)
        if strips is None:
            strips = super().render_lines(crop)
            if len(self._drawn) >= STATES_KEPT:
                self._drawn.clear()
            self._drawn[key] = strips
        else:
            # Textual's styles cache did not draw them: it holds no line of this state and
            # none is left to draw (as after its own drawing), so that KeptLines can keep these
            self._styles_cache.clear()
        return strips


class RememberingScrollBar(KeptLines, StateKeptScrollBar):
    """The table's scrollbar: its lines kept by state (:class:`StateKeptScrollBar`), and, while
    no line of it is marked to draw again, the lines it handed back last without asking for
    its state (:class:`~gpumem_tui.ui.plain_lines.KeptLines`; building the renderable reads
    the parent's scrollbar styles and background: ~100 000 instructions a frame, and a
    table's bar is in every frame that repaints the table). Textual marks the bar's lines on
    every change of its state (its reactives repaint it), and with none marked Textual's own
    styles cache would hand back its cached lines too."""
