"""A table drawn line by line (Textual's line API), cheap to update every second.

One header line, then one line per row; rows have string keys and one Rich ``Text`` per
column. The cursor follows a row's key, not its position, so a re-sort keeps it on the same
process or GPU. Looks like Textual's DataTable (its component styles are mirrored below).

Why not DataTable: with every figure changing at 1 Hz, DataTable's per-cell Rich layout
(console options, wrapping, measuring) and row bookkeeping were most of the dashboard's idle
CPU (issue 11). Here a cell's layout is cached by its content and width, a row's line by the
cells it shows, and an update repaints only the lines of the rows that changed.
"""

from __future__ import annotations

from operator import gt
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gpumem_tui.ui.plain_lines import PlainStylesCache, drawn_scrollbar_width
from gpumem_tui.ui.scrollbars import RememberingScrollBar

#: Blank cells on each side of a cell (DataTable's default ``cell_padding``).
CELL_PADDING = 1
_PAD = Segment(" " * CELL_PADDING)
#: Most styled cells a table keeps (each a few segments); past it the cache starts afresh.
STYLED_CELLS_LIMIT = 4096


def cell_segments(cell: Text, width: int, console: Console) -> tuple[Segment, ...]:
    """``cell`` laid out in ``width`` terminal cells plus :data:`CELL_PADDING` on each side,
    before any row style: cut to ``width`` (``…`` where the Text's overflow is "ellipsis"),
    then padded by its ``justify`` (right, center, else left). One line; units: cells.

    What Rich draws for ``Padding(cell)`` in a one-line DataTable cell (``Lines.justify``,
    ``Text.truncate``), without Rich's general layout, which cost most of the CPU.
    """
    text = cell
    if text.cell_len > width:
        text = cell.copy()
        text.truncate(width, overflow=cell.overflow or "fold")
    if text.spans:
        body = list(text.render(console))
    else:  # Text.render leaves a span-less text's own style to its caller
        body = [Segment(text.plain, console.get_style(text.style) if text.style else None)]
    gap = width - text.cell_len
    if gap <= 0:
        return (_PAD, *body, _PAD)
    if text.justify == "right":
        return (_PAD, Segment(" " * gap), *body, _PAD)
    if text.justify == "center":
        left = gap // 2
        return (_PAD, Segment(" " * left), *body, Segment(" " * (gap - left)), _PAD)
    return (_PAD, *body, Segment(" " * gap), _PAD)


def merged_runs(segments: list[Segment]) -> list[Segment]:
    """``segments`` (no control segment) with each run of one style joined into one segment:
    a table row is mostly one style, and each later step of a frame (line filter, cuts, the
    terminal's escape codes) works per segment. The same cells."""
    out: list[Segment] = []
    texts: list[str] = []
    run_style: Style | None = None
    for text, style, _ in segments:
        if texts and (style is run_style or style == run_style):
            texts.append(text)
            continue
        if texts:
            out.append(Segment("".join(texts), run_style))
        texts, run_style = [text], style
    if texts:
        out.append(Segment("".join(texts), run_style))
    return out


class LineTable(ScrollView, can_focus=True):
    """A keyed table drawn with the line API (see the module doc). Subclasses feed it with
    :meth:`set_rows` and may react to :meth:`on_header_click`.

    Keys: up / down / page up / page down / home / end move the cursor; enter posts
    :class:`RowSelected`; a click moves the cursor, a click on the cursor's row selects it.
    Every cursor move to another row posts :class:`RowHighlighted`.
    """

    BINDINGS = [
        Binding("up", "cursor(-1)", "Up", show=False, id="table_up"),
        Binding("down", "cursor(1)", "Down", show=False, id="table_down"),
        Binding("pageup", "page(-1)", "Page up", show=False, id="table_page_up"),
        Binding("pagedown", "page(1)", "Page down", show=False, id="table_page_down"),
        Binding("home,ctrl+home", "cursor_to(0)", "First row", show=False, id="table_first"),
        Binding("end,ctrl+end", "cursor_to(-1)", "Last row", show=False, id="table_last"),
        Binding("enter", "select", "Details", show=False, id="table_select"),
    ]

    COMPONENT_CLASSES = {"line-table--header", "line-table--cursor", "line-table--hover"}

    #: Repaint new rows after the next screen refresh instead of in it (a frame of their
    #: own; see :meth:`set_rows` on why the size of a frame's dirty box matters).
    defer_repaint = False

    # DataTable's look (textual/widgets/_data_table.py DEFAULT_CSS), so themes style it alike
    DEFAULT_CSS = """
    LineTable {
        height: auto;
        max-height: 100%;
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .line-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .line-table--header {
                background-tint: $foreground 5%;
            }
        }
        & > .line-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .line-table--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .line-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .line-table--hover {
            background: $block-hover-background;
        }
    }
    """

    class _RowMessage(Message):
        """A message about row ``key`` of ``table`` (None: the table is empty)."""

        def __init__(self, table: LineTable, key: str | None) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> LineTable:
            return self.table

    class RowHighlighted(_RowMessage):
        """The cursor moved to another row (``key``: its row key, None when empty)."""

    class RowSelected(_RowMessage):
        """Enter, or a click on the cursor's row: the user asks for row ``key``'s details."""

    def __init__(self, show_cursor: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._styles_cache = PlainStylesCache()  # its lines skip Textual's box styling (none is set)
        self._show_cursor = show_cursor
        self._keys: list[str] = []  # row keys, in order
        self._index: dict[str, int] = {}  # row key -> its position
        #: row key -> its cells, one Text per column. A caller passes a new list when a cell
        #: changes, so that ``is`` tells a changed row.
        self._cells: dict[str, list[Text]] = {}
        self._headers: list[Text] = []
        self._widths: list[int] = []  # content width of each column, cells
        self._row_widths: dict[str, tuple[list[Text], tuple[int, ...]]] = {}  # key -> (cells, widths)
        #: a cell's width by the cell object itself (see :meth:`_cell_widths`)
        self._width_by_cell: dict[int, tuple[Text, int]] = {}
        self._even_rows = True  # at the last full measure, every row had one cell per header
        self._cursor_key: str | None = None
        self._cursor_index = 0
        self._hover_index: int | None = None
        # a cell's styled segments by content, width and look; a row's line by its cells,
        # widths and look
        # (a plain dict, emptied when full: its lookups run in C, where an LRU's bookkeeping
        # per cell and paint was a tenth of the table's drawing)
        self._styled_cells: dict[tuple[Any, ...], list[Segment]] = {}
        #: the same, by the cell object itself: a row that changed keeps most of its cells (the
        #: same Text objects), found here without reading their text and spans. The cell is
        #: kept in the value, so its id cannot be reused while the entry lives.
        self._styled_by_cell: dict[tuple[int, int, str], tuple[Text, list[Segment]]] = {}
        self._lines: dict[str, tuple[Any, ...]] = {}
        self._header_line: tuple[Any, ...] | None = None
        self._layout_generation = 0  # bumped when the header or a column width changes
        self._looks: dict[str, tuple[Style, Style]] = {}
        self._looks_key: tuple[Any, ...] = ()
        self._looks_state: tuple[Any, ...] = ()
        self._painting: tuple[int, int, int] | None = None  # (width, scroll x, y) of the paint under way

    @property
    def vertical_scrollbar(self) -> RememberingScrollBar:
        """The vertical scrollbar, created on first use (as Textual's ``Widget.vertical_scrollbar``,
        widget.py), one that keeps what it drew: the view moves back and forth as rows re-sort."""
        if self._vertical_scrollbar is None:
            self._vertical_scrollbar = RememberingScrollBar(
                vertical=True, name="vertical", thickness=self.scrollbar_size_vertical)
            self._vertical_scrollbar.display = False
            self.app._start_widget(self, self._vertical_scrollbar)
        return self._vertical_scrollbar  # type: ignore[return-value]

    # ---- state --------------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        """Rows the table holds."""
        return len(self._keys)

    @property
    def cursor_row(self) -> int:
        """Position of the cursor's row (0 when the table is empty)."""
        return self._cursor_index

    @property
    def cursor_key(self) -> str | None:
        """Key of the cursor's row, or None when the table is empty."""
        return self._cursor_key if self._keys else None

    @property
    def show_cursor(self) -> bool:
        """Whether the cursor's row is highlighted."""
        return self._show_cursor

    @show_cursor.setter
    def show_cursor(self, show: bool) -> None:
        if show != self._show_cursor:
            self._show_cursor = show
            self._refresh_row(self._cursor_index)
            if show and self._keys:  # a cursor that appears highlights its row (as DataTable's)
                self.post_message(self.RowHighlighted(self, self._cursor_key))

    @property
    def column_widths(self) -> list[int]:
        """Width of each column on screen, padding included, in cells."""
        return [w + 2 * CELL_PADDING for w in self._widths]

    def header_label(self, column: int) -> str:
        """The text of header ``column`` (a position) as drawn. Raises: IndexError."""
        return self._headers[column].plain

    def get_row(self, key: str) -> list[Text]:
        """The cells of row ``key``. Raises: KeyError."""
        return self._row_cells(key)

    def get_row_at(self, index: int) -> list[Text]:
        """The cells of the ``index``-th row. Raises: IndexError."""
        return self._row_cells(self._keys[index])

    def _row_cells(self, key: str) -> list[Text]:
        """Row ``key``'s cells as drawn; a subclass may bring them up to date here."""
        return self._cells[key]

    def _widen(self, cells: list[Text]) -> bool:
        """Widen the columns that ``cells`` do not fit; True if any did. May be called while
        drawing: the new widths show from the next frame on (scheduled here)."""
        wider = False
        for i, cell in enumerate(cells[:len(self._widths)]):
            if cell.cell_len > self._widths[i]:
                self._widths[i] = cell.cell_len
                wider = True
        if wider:
            self._layout_generation += 1
            self.call_after_refresh(self._relayout)
        return wider

    def _relayout(self) -> None:
        self._size_to_rows()
        self.refresh()

    def _size_to_rows(self) -> None:
        """The scrollable size: the columns' width, the header and every row. Set only when
        it changes: setting a reactive costs its validation and comparison even then, and
        the rows are set at every poll."""
        size = Size(sum(self.column_widths), len(self._keys) + 1)
        if size != self.virtual_size:
            self.virtual_size = size

    # ---- feeding ------------------------------------------------------------------------
    def set_rows(self, headers: list[Text], rows: dict[str, list[Text]], keep: str | None = None,
                 grow_only: bool = False, view: tuple[int, range] | None = None) -> None:
        """Show ``rows`` (key -> one Text per header, in display order) under ``headers``.

        ``keep``: put the cursor on this row and scroll it into view. Without it the cursor
        stays on its row, wherever the order moved it, and the view stays where it is (a
        re-sort every second must not scroll the table under the user's eyes); a cursor row
        that left puts the cursor on the same position. Column widths fit the widest header
        or cell; with ``grow_only`` (and the same headers) a column only widens, so figures
        that flicker between two widths do not shake the table.

        Repaints only the lines on screen that show another row or changed cells (a row's
        cells list is a new one), as one region as wide as the columns: a frame re-renders
        every widget inside the box that bounds all its dirty regions
        (``Compositor.render_partial_update``), so a full-width region would drag the side
        pane's widgets into every frame (measured: 88 widgets a frame instead of 10).

        ``view``: :meth:`screen_view` as the caller read it for these rows (nothing scrolled
        or resized since); None: read here.
        """
        old_keys, old_cells = self._keys, self._cells
        target = keep if keep is not None else self._cursor_key
        self._keys = list(rows)
        self._index = dict(zip(self._keys, range(len(self._keys))))  # in C: no loop of ours per row
        self._cells = rows
        layout_changed = self._measure(headers, grow_only)
        if target in self._index:
            self._cursor_index = self._index[target]
        else:
            self._cursor_index = min(self._cursor_index, max(len(self._keys) - 1, 0))
        self._set_cursor_key()
        if len(self._lines) > 2 * len(rows) + 64:
            self._lines = {k: v for k, v in self._lines.items() if k in rows}
        self._size_to_rows()
        if layout_changed or len(self._keys) != len(old_keys):
            self._repaint()
        else:
            view_width, shown = view if view is not None else self.screen_view()
            changed = [y for y, key in enumerate(self._keys[shown.start:shown.stop], 1)
                       if key != old_keys[shown.start + y - 1] or rows[key] is not old_cells.get(key)]
            if changed:
                width = min(view_width, sum(self.column_widths) - round(self.scroll_x))
                self._repaint(Region(0, changed[0], width, changed[-1] - changed[0] + 1))
        if keep is not None:
            self._scroll_cursor_into_view()

    def _repaint(self, *regions: Region) -> None:
        if self.defer_repaint:
            self.call_after_refresh(self.refresh, *regions)
        else:
            self.refresh(*regions)

    def _measure(self, headers: list[Text], grow_only: bool) -> bool:
        """Set the headers and column widths; True if either changed. Each row's cell
        widths are kept with its cells list, so only new or changed cells are measured.

        With ``grow_only``, the same headers and rows as long as the headers, a row whose
        cells list is the one measured last fits the widths already: only the changed rows
        are folded into them (the same widths as measuring every row, without a pass over
        all of them per column: ~0.5 ms a poll with 500 rows, issue 23)."""
        same_headers = headers is self._headers or [h.plain for h in headers] == [h.plain for h in self._headers]
        if same_headers:
            headers = self._headers  # the same list: the header line's cache stays valid
        count = len(headers)
        incremental = same_headers and grow_only and self._even_rows and len(self._widths) == count
        widths = list(self._widths) if incremental else [h.cell_len for h in headers]
        known_widths = self._row_widths
        row_widths: dict[str, tuple[list[Text], tuple[int, ...]]] = {}
        for key, cells in self._cells.items():
            known = known_widths.get(key)
            if known is not None and known[0] is cells:
                row_widths[key] = known
                continue
            measured = self._cell_widths(cells, known)
            row_widths[key] = (cells, measured)
            if incremental:
                if len(measured) != count:
                    incremental = False  # a row of another length: measure every row (below)
                elif any(map(gt, measured, widths)):  # most changed rows widen nothing
                    widths = list(map(max, widths, measured))
        self._row_widths = row_widths
        if not incremental:
            self._even_rows = all(len(w) == count for _, w in row_widths.values())
            widths = [h.cell_len for h in headers]
            for i, column in enumerate(zip(*(w for _, w in row_widths.values()))):
                if i < len(widths):
                    widths[i] = max(widths[i], max(column))
            if same_headers and grow_only:
                widths = [max(a, b) for a, b in zip(widths, self._widths)]
        changed = widths != self._widths or not same_headers
        self._widths, self._headers = widths, headers
        if changed:
            self._layout_generation += 1
        return changed

    def _cell_widths(self, cells: list[Text], known: tuple[list[Text], tuple[int, ...]] | None) -> tuple[int, ...]:
        """The width of each of ``cells`` (a changed row), in cells. ``known``: the row's cells
        and widths as measured last; a cell still there keeps its width. A new cell's width
        is found by the cell object itself when a row measured it already (the tables share
        one Text per figure: process_rows.decorated_cell, DevicePanel._row), else measured (Rich's
        ``Text.cell_len``) and remembered. Once made, a cell is never changed, so its width
        holds; the cell is kept in the value, so its id cannot be reused while the entry lives."""
        by_cell = self._width_by_cell
        if known is None or len(known[0]) != len(cells):
            known = (cells, (-1,) * len(cells))  # nothing known: every cell is looked up
        widths = []
        for cell, old, width in zip(cells, *known):
            if cell is old and width >= 0:
                widths.append(width)
                continue
            hit = by_cell.get(id(cell))
            if hit is not None and hit[0] is cell:
                widths.append(hit[1])
                continue
            width = cell_len(cell.plain)  # Text.cell_len's body, without its property call
            if len(by_cell) >= STYLED_CELLS_LIMIT:
                by_cell.clear()
            by_cell[id(cell)] = (cell, width)
            widths.append(width)
        return tuple(widths)

    # ---- drawing ------------------------------------------------------------------------
    def render_lines(self, crop: Region) -> list[Strip]:
        # The row looks follow the theme and the pseudo-classes (focus, dark, ansi); working
        # them out (a CSS style lookup each) at every paint cost more than drawing the lines.
        state = (self.app.theme, self.app.ansi_color, self.get_pseudo_class_state(), self.styles.background,
                 self.styles.color)
        if state != self._looks_state:
            self._looks_state = state
            self._set_looks()
        # the size and scroll offset looked up once per paint, not once per line (each is a
        # walk to the widget's region in the compositor)
        self._painting = (self._paint_width(), *self.scroll_offset)
        try:
            return super().render_lines(crop)
        finally:
            self._painting = None

    def _paint_width(self) -> int:
        """Width of the lines a paint draws, in cells: the content width, less the columns of
        a vertical scrollbar drawn over them (Textual draws it in front, textual/_compositor.py
        ``_arrange_root``), as wide as a line shows. :class:`PlainStylesCache` hands such a
        line on as it is; a line as wide as the widget the compositor cut in two at the
        scrollbar, a copy of the line and a hidden piece, every new line of every poll."""
        return max(self.size.width - drawn_scrollbar_width(self), 0)

    def _set_looks(self) -> None:
        base = self.rich_style
        looks = {"row": (base, Style()),
                 "header": (self.get_component_styles("line-table--header").rich_style, Style())}
        for kind in ("cursor", "hover"):
            component = self.get_component_rich_style(f"line-table--{kind}")
            # the cursor's colour wins over a cell's own, its background does not
            # (DataTable's defaults: cursor_foreground_priority "css", background "renderable")
            looks[kind] = (base + component, Style.from_color(color=component.color))
        self._looks = looks
        self._looks_key = tuple(looks.values())
        self._styled_cells.clear()
        self._styled_by_cell.clear()

    def render_line(self, y: int) -> Strip:
        if self._painting is not None:
            width, scroll_x, scroll_y = self._painting
        else:
            width = self.size.width
            scroll_x, scroll_y = self.scroll_offset
        if y == 0:
            look = "header"
            cells, key = self._headers, None
        else:
            index = scroll_y + y - 1
            if index >= len(self._keys):
                return Strip.blank(width, self.rich_style)
            key = self._keys[index]
            cells = self._row_cells(key)
            look = "row"
            if self._show_cursor:  # hover, as DataTable, only where a cursor shows
                look = "cursor" if index == self._cursor_index else "hover" if index == self._hover_index else "row"
        state = (self._layout_generation, look, self._looks_key, width, scroll_x)
        cached = self._header_line if key is None else self._lines.get(key)
        if cached is not None and cached[0] is cells and cached[1] == state:
            return cached[2]
        strip = self._draw(cells, look, width, scroll_x)
        entry = (cells, state, strip)
        if key is None:
            self._header_line = entry
        else:
            self._lines[key] = entry
        return strip

    def _draw(self, cells: list[Text], look: str, width: int, scroll_x: int) -> Strip:
        """One line: the cells laid out and styled, filled to the widget's width in the
        row's style, cut at the horizontal scroll, runs of one style joined
        (:func:`merged_runs`). A cell's styled segments are cached by what it shows, its width
        and the row's look ("55%" is drawn once, not per row)."""
        pre, post = self._looks[look]
        by_cell = self._styled_by_cell
        widths = self._widths
        segments: list[Segment] = []
        for cell, column_width in zip(cells, widths):
            known = by_cell.get((id(cell), column_width, look))
            if known is not None and known[0] is cell:
                segments.extend(known[1])
            else:
                segments.extend(self._styled_cell(cell, column_width, look, pre, post))
        total = sum(widths) + 2 * CELL_PADDING * len(widths)
        if total < width + scroll_x:
            segments.append(Segment(" " * (width + scroll_x - total), pre + post))
            total = width + scroll_x
        strip = Strip(merged_runs(segments), total)  # the length is known: Strip need not measure it
        if scroll_x or total > width:
            strip = strip.crop(scroll_x, scroll_x + width)
        return strip

    def _styled_cell(self, cell: Text, column_width: int, look: str, pre: Style, post: Style) -> list[Segment]:
        """``cell``'s segments in ``column_width`` cells and the row look ``pre`` / ``post``,
        from the cache by content or laid out; kept by the cell object too."""
        cache, by_cell = self._styled_cells, self._styled_by_cell
        key = (cell.plain, cell.style, tuple(cell.spans), cell.justify, cell.overflow, column_width, look)
        styled = cache.get(key)
        if styled is None:
            laid = cell_segments(cell, column_width, self.app.console)
            styled = list(Segment.simplify(
                Segment(text, pre + style + post if style else pre + post) for text, style, _ in laid))
            if len(cache) >= STYLED_CELLS_LIMIT:
                cache.clear()
            cache[key] = styled
        if len(by_cell) >= STYLED_CELLS_LIMIT:
            by_cell.clear()
        by_cell[(id(cell), column_width, look)] = (cell, styled)
        return styled

    # ---- cursor -------------------------------------------------------------------------
    def move_cursor(self, row: int, *, scroll: bool = True) -> None:
        """Put the cursor on row ``row`` (a position, clamped to the rows)."""
        if not self._keys:
            return
        old = self._cursor_index
        self._cursor_index = max(0, min(row, len(self._keys) - 1))
        self._set_cursor_key()
        if old != self._cursor_index:
            self._refresh_row(old)
            self._refresh_row(self._cursor_index)
        if scroll:
            self._scroll_cursor_into_view()

    def _set_cursor_key(self) -> None:
        key = self._keys[self._cursor_index] if self._keys else None
        if key != self._cursor_key:
            self._cursor_key = key
            self.post_message(self.RowHighlighted(self, key))

    def _refresh_row(self, index: int | None) -> None:
        if index is None:
            return
        y = index - round(self.scroll_y) + 1
        if 1 <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    def rows_on_screen(self) -> range:
        """Positions of the rows the view can show now, below the header (whether or not
        there are that many rows); empty before the first layout."""
        return self.screen_view()[1]

    def screen_view(self) -> tuple[int, range]:
        """(the view's width in cells, :meth:`rows_on_screen`), from one look at the size:
        Textual's ``Widget.size`` walks up to the screen and into the compositor's map at each
        use (~30 k instructions), and a poll needed it about ten times."""
        width, height = self.size
        top = round(self.scroll_y)
        return width, range(top, top + max(height - 1, 0))

    def _scroll_cursor_into_view(self, shown: range | None = None) -> None:
        """Scroll just enough to show the cursor's row; ``shown``: :meth:`rows_on_screen`
        if the caller has it (nothing scrolled or resized since)."""
        if shown is None:
            shown = self.rows_on_screen()
        if not shown or not self._keys:
            return
        if self._cursor_index < shown.start:
            self.scroll_to(y=self._cursor_index, animate=False)
        elif self._cursor_index >= shown.stop:
            self.scroll_to(y=self._cursor_index - len(shown) + 1, animate=False)

    def on_resize(self) -> None:
        self._scroll_cursor_into_view()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        """ScrollView's (textual/scroll_view.py), but a vertical scroll repaints the rows only:
        the header line stays put (:meth:`render_line` draws it at the top whatever the
        offset). The process table scrolls whenever a re-sort moves the charted row out of
        sight, at every poll for a busy box: its header was drawn and sent again each time."""
        if self.show_vertical_scrollbar:
            self.vertical_scrollbar.position = new_value
        if round(old_value) != round(new_value):
            width, height = self.size
            if height > 1:
                self.refresh(Region(0, 1, width, height - 1))

    def action_cursor(self, step: int) -> None:
        self._set_hover(None)
        self.move_cursor(self._cursor_index + step)

    def action_page(self, direction: int) -> None:
        self._set_hover(None)
        page = max(len(self.rows_on_screen()), 1)
        self.move_cursor(self._cursor_index + direction * page)

    def action_cursor_to(self, row: int) -> None:
        self._set_hover(None)
        self.move_cursor(row if row >= 0 else len(self._keys) - 1)

    def action_select(self) -> None:
        if self._keys:
            self.post_message(self.RowSelected(self, self._cursor_key))

    # ---- mouse --------------------------------------------------------------------------
    def on_header_click(self, column: int) -> None:
        """A click on header ``column`` (a position); nothing here, subclasses sort."""

    def _row_at(self, event: events.MouseEvent) -> int | None:
        """Position of the row under the mouse; -1 for the header; None for neither."""
        offset = event.get_content_offset(self)
        if offset is None:
            return None
        if offset.y == 0:
            return -1
        index = round(self.scroll_y) + offset.y - 1
        return index if index < len(self._keys) else None

    def _set_hover(self, index: int | None) -> None:
        if index != self._hover_index:
            old, self._hover_index = self._hover_index, index
            self._refresh_row(old)
            self._refresh_row(index)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        index = self._row_at(event)
        self._set_hover(index if index is not None and index >= 0 else None)

    def on_leave(self, event: events.Leave) -> None:
        self._set_hover(None)

    def on_click(self, event: events.Click) -> None:
        index = self._row_at(event)
        if index is None:
            return
        event.stop()
        if index == -1:
            offset = event.get_content_offset(self)
            x = round(self.scroll_x) + (offset.x if offset else 0)
            for column, width in enumerate(self.column_widths):
                if x < width:
                    self.on_header_click(column)
                    return
                x -= width
            return
        if index == self._cursor_index:
            self.action_select()
        else:
            self.move_cursor(index)
