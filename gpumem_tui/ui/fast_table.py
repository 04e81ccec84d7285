"""A DataTable whose rendered cells survive updates of other cells.

Textual's DataTable keys its cell-render cache on a table-wide update counter, so changing one
cell re-renders every visible cell (Rich layout of each: most of the dashboard's CPU at 1 Hz),
and ``update_cell`` repaints the whole widget. :class:`IncrementalTable` instead keys data
cells on a per-cell version plus a "structure" generation (every change other than
``update_cell``: rows added/cleared, sort, resize, columns) and repaints only the changed row.

It relies on DataTable internals (``_update_count``, ``_data``, ``_row_locations``, ...,
checked with textual 8.2); if they are missing it falls back to the stock behaviour.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.cells import cell_len
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Region
from textual.widgets import DataTable
from textual.widgets._data_table import default_cell_formatter
from textual.widgets.data_table import CellDoesNotExist, CellKey, ColumnKey, RowKey

_EMPTY = Text(no_wrap=True, end="")
_INTERNALS = ("_update_count", "_data", "_row_locations", "_column_locations", "_cell_render_cache",
              "_updated_cells", "_require_update_dimensions", "_show_hover_cursor", "_refresh_region",
              "_row_label_column_width", "_get_styles_to_render_cell", "cell_padding")


def content_width(column: Any) -> int:
    """Cells a column's content may take now: an auto-width column's ``width`` is only its
    label's, so comparing a cell with it would re-measure the whole column on every update."""
    return column.content_width if getattr(column, "auto_width", False) else column.width


class IncrementalTable(DataTable):
    """DataTable with per-cell render caching and row-only repaints (see module doc)."""

    #: Repaint updated rows after the next screen refresh instead of in it. For a full-width
    #: table above narrower widgets: the compositor re-renders every widget inside the box that
    #: bounds all dirty regions of a frame, so a full-width row repainted in the same frame as
    #: the process table would drag the whole side pane into that frame.
    defer_repaint = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending_rows: set[RowKey] = set()
        self._batching = 0
        # row -> column -> version (nested by row: removing a row must not scan every cell)
        self._cell_versions: dict[RowKey, dict[ColumnKey, int]] = {}
        self._cell_bumps = 0  # how many _update_count increments came from update_cell
        # row -> column -> (value, width, lines): the cell's text laid out by Rich, before the
        # row/cursor styles. Survives sorts and other rows' changes: a reorder only restyles.
        self._layouts: dict[RowKey, dict[ColumnKey, tuple[Any, int, list[list[Segment]]]]] = {}
        # The same layouts by what they show (text, styles, width): a value that moved to
        # another row, or an equal one made anew at the next poll ("1.0 GiB"), is not laid out
        # again.
        self._shared_layouts: LRUCache[Any, list[list[Segment]]] = LRUCache(4096)
        self._incremental = all(hasattr(self, name) for name in _INTERNALS)

    def update_cell(
        self,
        row_key: RowKey | str,
        column_key: ColumnKey | str,
        value: Any,
        *,
        update_width: bool = False,
    ) -> None:
        """As DataTable.update_cell; repaints only this row unless the column must widen."""
        if not self._incremental:
            super().update_cell(row_key, column_key, value, update_width=update_width)
            return
        if isinstance(row_key, str):
            row_key = RowKey(row_key)
        if isinstance(column_key, str):
            column_key = ColumnKey(column_key)
        if row_key not in self._row_locations or column_key not in self._column_locations:
            raise CellDoesNotExist(f"No cell exists for row_key={row_key!r}, column_key={column_key!r}.")
        self._data[row_key][column_key] = value
        self._update_count += 1
        self._cell_bumps += 1
        versions = self._cell_versions.setdefault(row_key, {})
        versions[column_key] = versions.get(column_key, 0) + 1
        self._layouts.get(row_key, {}).pop(column_key, None)  # the value may be changed in place
        if update_width:
            self._updated_cells.add(CellKey(row_key, column_key))
            self._require_update_dimensions = True
            self.refresh()
        elif self.defer_repaint:
            if not self._pending_rows:
                self.call_after_refresh(self._flush_rows)
            self._pending_rows.add(row_key)
        else:
            self._pending_rows.add(row_key)
            if not self._batching:
                self._flush_rows()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Collect the rows changed by ``update_cell`` calls inside and repaint them once."""
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching and not self.defer_repaint:
                self._flush_rows()

    def _flush_rows(self) -> None:
        """Repaint the pending rows (one pass over the rows, not one per changed cell)."""
        rows, self._pending_rows = self._pending_rows, set()
        if not rows:
            return
        y = self.header_height if self.show_header else 0
        width = sum(column.get_render_width(self) for column in self.columns.values())
        width = max(self.size.width, width + self._row_label_column_width)
        for row in self.ordered_rows:
            if row.key in rows:
                self._refresh_region(Region(0, y, width, row.height))
            y += row.height

    def clear(self, columns: bool = False) -> Any:
        self._cell_versions = {}
        self._layouts = {}
        return super().clear(columns)

    def remove_row(self, row_key: RowKey | str) -> None:
        key = RowKey(row_key) if isinstance(row_key, str) else row_key
        self._cell_versions.pop(key, None)
        self._layouts.pop(key, None)
        super().remove_row(row_key)

    def _update_dimensions(self, new_rows: Any) -> None:
        """Widen the columns for new rows as DataTable does, measuring Text cells directly:
        DataTable measures every cell through Rich (a ConsoleOptions each), which made adding
        the 500 rows of a big box cost ~0.25 s."""
        if not self._incremental:
            super()._update_dimensions(new_rows)
            return
        rest = []
        columns = self.ordered_columns
        for row_key in new_rows:
            row = self.rows.get(row_key)
            if row is None or row_key not in self._row_locations:
                continue  # removed before this idle pass
            values = self._data.get(row_key, {})
            if row.label is not None or row.auto_height or not all(
                    isinstance(values.get(column.key), Text) for column in columns):
                rest.append(row_key)
                continue
            for column in columns:
                # Text.__rich_measure__'s maximum, what DataTable uses
                width = max(map(cell_len, values[column.key].plain.splitlines()), default=0)
                if width > column.content_width:
                    column.content_width = width
        super()._update_dimensions(rest)  # the others, and the virtual size

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Any,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> Any:
        if not self._incremental or row_index < 0 or column_index < 0:
            # header and row labels: rare, and their labels change without a counter
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        key = (
            "incremental",
            row_key,
            column_key,
            row_index,  # the cell's meta (click target) names its row index
            width,
            self._cell_versions.get(row_key, {}).get(column_key, 0),
            self._update_count - self._cell_bumps,  # structure generation
            base_style,
            cursor,
            hover,
            self._show_hover_cursor,
            self._pseudo_class_state,
        )
        cache = self._cell_render_cache
        lines = cache.get(key)
        if lines is None:
            lines = self._render_data_cell(row_key, column_key, row_index, column_index, base_style, width,
                                           cursor, hover)
            cache[key] = lines
        return lines

    def _render_data_cell(
        self,
        row_key: RowKey,
        column_key: ColumnKey,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool,
        hover: bool,
    ) -> list[list[Segment]]:
        """What DataTable._render_cell draws for a one-line data cell, with the Rich layout
        of its value reused while the value (the same object) and the width stay.

        Same result as the stock renderer (tests compare them): the stock one renders
        ``Styled(Padding(cell), pre, post)``, and Styled only maps each segment's style,
        so laying out ``Padding(cell)`` once and mapping the styles after is equal.
        """
        row = self.rows.get(row_key)
        if row is None or row.height != 1 or row_index < self.fixed_rows or column_index < self.fixed_columns:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        value = self._data[row_key].get(column_key)
        row_layouts = self._layouts.setdefault(row_key, {})
        layout = row_layouts.get(column_key)
        if layout is not None and layout[0] is value and layout[1] == width:
            plain = layout[2]
        else:
            plain = self._layout(value, width)
            row_layouts[column_key] = (value, width, plain)
        component_style, post_style = self._get_styles_to_render_cell(
            False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
            self.cursor_foreground_priority == "css", self.cursor_background_priority == "css",
        )
        pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
        return [list(Segment.apply_style(line, pre_style, post_style)) for line in plain]

    def _layout(self, value: Any, width: int) -> list[list[Segment]]:
        """Rich's layout of a cell value in ``width`` cells, padded, before any row style;
        shared by every cell that shows the same thing."""
        key: Any = None
        if isinstance(value, Text):
            key = (value.plain, value.style, tuple(value.spans), value.justify, value.overflow, value.no_wrap,
                   value.end, value.tab_size, width, self.cell_padding)
        elif isinstance(value, (str, int, float)) or value is None:
            key = (type(value), value, width, self.cell_padding)
        if key is not None:
            try:
                plain = self._shared_layouts.get(key)
            except TypeError:  # a style or value that cannot be hashed: lay it out every time
                key = plain = None
            if plain is not None:
                return plain
        options = self.app.console_options.update_dimensions(width, 1).update(no_wrap=True)
        # as DataTable._get_row_renderables formats a cell (None and "" draw nothing)
        content = _EMPTY if value is None else default_cell_formatter(value, wrap=False, height=1) or _EMPTY
        plain = self.app.console.render_lines(Padding(content, (0, self.cell_padding)), options)
        if key is not None:
            self._shared_layouts[key] = plain
        return plain
