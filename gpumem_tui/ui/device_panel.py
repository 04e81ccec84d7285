"""The device panel: one row per GPU, nvidia-smi style, with a memory usage bar.

A GPU that failed as a whole (``DeviceSample.error``, e.g. "GPU is lost") keeps its row with
the error in place of the figures; a single field that could not be read shows its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from rich.text import Text

from gpumem_tui.telemetry.model import DeviceSample
from gpumem_tui.ui import cells
from gpumem_tui.ui.line_table import CELL_PADDING, LineTable

BAR_WIDTH = 20
NARROW_BAR_WIDTH = 8
NARROW_WIDTH = 110  # below this many columns the bar and the name shrink to fit 80 columns
BAR_COLUMN = 3  # the usage bar's position among the columns
SHARED_CELLS_LIMIT = 1024  # most shared cells the panel keeps (DevicePanel._row); then it starts afresh


class DevicePanel(LineTable):
    """One row per GPU, in index order; the app feeds it with :meth:`show`. Row keys are
    ``str(index)``. The cursor shows only while the panel has focus: otherwise the process
    table's selection is what the chart follows, and a second highlight would mislead."""

    DEFAULT_CSS = """
    DevicePanel { height: auto; max-height: 10; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(show_cursor=False, **kwargs)
        self.devices: tuple[DeviceSample, ...] = ()
        self._shown_key: tuple[Any, ...] | None = None
        #: width of the column under the panel (the process table and the chart, beside the
        #: side pane); None: unknown. See :meth:`show`.
        self.fit_width: int | None = None
        #: a cell per (column, the fields it shows, error, field errors, bar styles, narrow, bar width)
        self._shared_cells = cells.SharedCells(SHARED_CELLS_LIMIT)

    def on_resize(self) -> None:
        if self.devices and self._shown_key and self._narrow(self.size.width) != self._shown_key[2]:
            self.show(self.devices)  # the bar, names and headers change with the width
        super().on_resize()

    def on_focus(self) -> None:
        self.show_cursor = True

    def on_blur(self) -> None:
        self.show_cursor = False

    @property
    def selected_index(self) -> int | None:
        """GPU index under the cursor."""
        if not self.devices or self.cursor_row >= len(self.devices):
            return None
        return self.devices[self.cursor_row].index

    @staticmethod
    def _narrow(width: int) -> bool:
        """True where the panel, ``width`` cells wide (0: not laid out yet), is narrow."""
        return bool(width) and width < NARROW_WIDTH

    def _bar_styles(self) -> tuple[str, str]:
        variables = self.app.theme_variables
        return variables.get("bar-used", "blue"), variables.get("bar-free", "")

    def _bar_width(self, narrow: bool) -> int:
        """The usage bar's width: :data:`BAR_WIDTH`, narrowed (down to
        :data:`NARROW_BAR_WIDTH`) so the panel's columns fit the column under it."""
        if narrow:
            return NARROW_BAR_WIDTH
        widths = self.column_widths  # as last measured, padding included
        if not self.fit_width or len(widths) <= BAR_COLUMN:
            return BAR_WIDTH
        others = sum(widths) - widths[BAR_COLUMN]
        return max(NARROW_BAR_WIDTH, min(BAR_WIDTH, self.fit_width - others - 2 * CELL_PADDING))

    def show(self, devices: tuple[DeviceSample, ...], fit_width: int | None = None) -> None:
        """Replace the rows, keeping the cursor on the same GPU. A GPU whose sample is
        unchanged keeps its cells (and its line is not drawn again).

        ``fit_width``: the width of the column under the panel (kept until given again). The
        bar narrows so the columns fit it: a frame re-renders every widget inside the box
        that bounds its dirty regions (see LineTable.set_rows), and a panel wider than the
        column under it would take the side pane's widgets into the frame of every poll.
        When the columns cannot fit, the panel repaints in a frame of its own instead."""
        if fit_width is not None:
            self.fit_width = fit_width
        devices = tuple(sorted(devices, key=_INDEX))
        used_style, free_style = self._bar_styles()
        view = self.screen_view()  # the size, looked up once (a walk to the compositor's map)
        narrow = self._narrow(view[0])
        bar_width = self._bar_width(narrow)
        key = (used_style, free_style, narrow, bar_width)
        if devices == self.devices and key == self._shown_key:
            return  # nothing on screen would change
        same_look = key == self._shown_key
        old = {str(d.index): d for d in self.devices} if same_look else {}
        self._shown_key = key
        rows = {}
        for dev in devices:
            row = str(dev.index)
            before = old.get(row)
            # _row keeps the row's very list while every cell reads the same (no sample compare here)
            rows[row] = self._row(dev, used_style, free_style, narrow, bar_width, before, self._cells.get(row))
        self.devices = devices
        headers = _headers(narrow)
        self.set_rows(headers, rows, grow_only=same_look and rows.keys() == old.keys(), view=view)
        if self._bar_width(narrow) != bar_width:
            self.show(devices)  # first measure, or the other columns changed: fit the bar again
            return
        self.defer_repaint = self.fit_width is None or sum(self.column_widths) > self.fit_width

    def _row(self, dev: DeviceSample, used_style: str, free_style: str, narrow: bool, bar_width: int,
             before: DeviceSample | None = None, shown: list[Text] | None = None) -> list[Text]:
        """The cells of ``dev``'s row. ``before`` / ``shown``: the sample the row shows now and
        its cells, drawn with the same look; a cell whose fields (:data:`_CELL_FIELDS`) are
        unchanged is kept (the same Text: the table then neither measures nor styles it again),
        and with every cell kept the row is ``shown`` itself (an unchanged row). A changed
        cell is drawn once per value and look, and shared by every GPU and poll that shows it
        (a cell is never changed once made: process_rows.decorated_cell, issue 23)."""
        keep = before is not None and shown is not None and len(shown) == len(_CELL_FIELDS) \
            and before.error == dev.error and before.field_errors == dev.field_errors
        look = (dev.error, dev.field_errors, used_style, free_style, narrow, bar_width)  # what every cell shares
        shared = self._shared_cells
        drawn = shared.drawn
        cells_ = []
        kept = 0
        for column, (fields, draw) in enumerate(zip(_CELL_FIELDS, _CELL_DRAW)):
            value = fields(dev)
            if keep and fields(before) == value:  # type: ignore[arg-type]
                cells_.append(shown[column])  # type: ignore[index]
                kept += 1
                continue
            key = (column, value, look)
            cell = drawn.get(key)
            cells_.append(cell if cell is not None else
                          shared.get(key, draw, dev, used_style, free_style, narrow, bar_width))
        return shown if kept == len(_CELL_FIELDS) else cells_  # type: ignore[return-value]


_INDEX = attrgetter("index")

#: The header cells by narrowness, made at their first use (not at import: no start-up work)
#: and then kept: a header cell, like any cell, is never changed once made.
_HEADERS: dict[bool, list[Text]] = {}


def _headers(narrow: bool) -> list[Text]:
    headers = _HEADERS.get(narrow)
    if headers is None:
        headers = _HEADERS[narrow] = [Text(label, style="bold") for label in (
            "GPU", "NAME", "MEMORY" if narrow else "MEMORY USED / TOTAL", "USAGE", "UTIL", "TEMP", "POWER")]
    return headers


def _name(dev: DeviceSample, narrow: bool) -> Text:
    name_limit = 16 if narrow else 40
    name = cells.safe(dev.name.removeprefix("NVIDIA "), limit=name_limit) if dev.name and narrow else (
        cells.safe(dev.name, limit=name_limit) if dev.name else None)
    return name if name is not None else cells.missing(dev.error and "-" or dev.reason("name"))


def _util(dev: DeviceSample) -> Text:
    if dev.error:
        return cells.missing("-")
    return cells.percent(dev.utilization_gpu_percent, dev.reason("utilization_gpu_percent"))


#: Each column's cell: how it is drawn (sample, bar styles, narrow, bar width) and the sample
#: fields it shows besides ``error`` and ``field_errors`` (a row keeps a cell while they are equal).
_CELL_DRAW: tuple[Callable[[DeviceSample, str, str, bool, int], Text], ...] = (
    lambda dev, used, free, narrow, width: Text(str(dev.index), justify="right"),
    lambda dev, used, free, narrow, width: _name(dev, narrow),
    lambda dev, used, free, narrow, width: cells.device_memory(dev, compact=bool(narrow)),
    lambda dev, used, free, narrow, width: cells.bar(cells.device_fraction(dev), width, used, free),
    lambda dev, used, free, narrow, width: _util(dev),
    lambda dev, used, free, narrow, width: cells.temperature(dev),
    lambda dev, used, free, narrow, width: cells.power(dev),
)
_CELL_FIELDS: tuple[Callable[[DeviceSample], Any], ...] = (
    attrgetter("index"),
    attrgetter("name"),
    attrgetter("memory_used_bytes", "memory_total_bytes"),
    attrgetter("memory_used_bytes", "memory_total_bytes"),
    attrgetter("utilization_gpu_percent"),
    attrgetter("temperature_c"),
    attrgetter("power_draw_w", "power_limit_w"),
)
