"""The device panel: one row per GPU, nvidia-smi style, with a memory usage bar.

A GPU that failed as a whole (``DeviceSample.error``, e.g. "GPU is lost") keeps its row with
the error in place of the figures; a single field that could not be read shows its reason.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from gpumem_tui.telemetry.model import DeviceSample
from gpumem_tui.ui import cells
from gpumem_tui.ui.fast_table import IncrementalTable, content_width

BAR_WIDTH = 20
NARROW_BAR_WIDTH = 8
NARROW_WIDTH = 110  # below this many columns the bar and the name shrink to fit 80 columns


class DevicePanel(IncrementalTable):
    """DataTable of GPUs; the app feeds it with :meth:`show`. Row keys are ``str(index)``."""

    DEFAULT_CSS = """
    DevicePanel { height: auto; max-height: 10; }
    """
    defer_repaint = True  # full width: repaint in a frame of its own (see IncrementalTable)

    def __init__(self, **kwargs: Any) -> None:
        # The cursor shows only while the panel has focus: otherwise the process table's
        # selection is what the chart follows, and a second highlight would mislead.
        super().__init__(cursor_type="row", show_cursor=False, **kwargs)
        self.devices: tuple[DeviceSample, ...] = ()
        self._last: dict[str, list[Text]] = {}
        self._narrow: bool | None = None
        self._shown_key: tuple[Any, ...] | None = None

    def on_mount(self) -> None:
        self._add_columns(False)

    def _add_columns(self, narrow: bool) -> None:
        self.clear(columns=True)
        for key, label in (
            ("index", "GPU"), ("name", "NAME"), ("memory", "MEMORY" if narrow else "MEMORY USED / TOTAL"),
            ("bar", "USAGE"), ("util", "UTIL"), ("temp", "TEMP"), ("power", "POWER"),
        ):
            self.add_column(Text(label, style="bold"), key=key)

    def on_resize(self) -> None:
        narrow = self.size.width < NARROW_WIDTH
        if narrow != self._narrow:
            self._narrow = narrow
            self._add_columns(narrow)
            devices, self.devices = self.devices, ()
            if devices:
                self.show(devices)  # column widths change: rebuild the rows

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

    def _bar_styles(self) -> tuple[str, str]:
        variables = self.app.theme_variables
        return variables.get("bar-used", "blue"), variables.get("bar-free", "")

    def show(self, devices: tuple[DeviceSample, ...]) -> None:
        """Replace the rows, keeping the cursor on the same GPU index.

        When the same GPUs are listed as before, only changed cells are updated (no
        clear()/add_row(), which would re-measure and re-layout every second).
        """
        keep = self.selected_index
        devices = tuple(sorted(devices, key=lambda d: d.index))
        used_style, free_style = self._bar_styles()
        key = (used_style, free_style, self.size.width)
        if devices == self.devices and key == self._shown_key and self.row_count == len(devices):
            return  # nothing on screen would change
        self._shown_key = key
        rows = {str(dev.index): self._cells(dev, used_style, free_style) for dev in devices}
        same = [str(d.index) for d in self.devices] == list(rows) and self.row_count == len(rows)
        self.devices = devices
        if same:
            with self.batch():
                self._update_rows(rows)
            self._last = rows
            return
        self._last = rows
        self.clear()
        target = 0
        for row, (key, cells_) in enumerate(rows.items()):
            if devices[row].index == keep:
                target = row
            self.add_row(*cells_, key=key)
        if self.devices:
            self.move_cursor(row=target, animate=False)

    def _update_rows(self, rows: dict[str, list[Text]]) -> None:
        """Update only the cells that differ from the ones shown."""
        for key, cells_ in rows.items():
            old = self._last.get(key)
            for index, cell in enumerate(cells_):
                if old is None or old[index] != cell:
                    column = self.ordered_columns[index]
                    self.update_cell(key, column.key, cell, update_width=cell.cell_len > content_width(column))

    def _cells(self, dev: DeviceSample, used_style: str, free_style: str) -> list[Text]:
        narrow = self.size.width and self.size.width < NARROW_WIDTH
        name_limit = 16 if narrow else 40
        name = cells.safe(dev.name.removeprefix("NVIDIA "), limit=name_limit) if dev.name and narrow else (
            cells.safe(dev.name, limit=name_limit) if dev.name else None)
        name = name if name is not None else cells.missing(dev.error and "-" or dev.reason("name"))
        util = (
            cells.missing("-") if dev.error
            else cells.percent(dev.utilization_gpu_percent, dev.reason("utilization_gpu_percent"))
        )
        return [
            Text(str(dev.index), justify="right"),
            name,
            cells.device_memory(dev, compact=bool(narrow)),
            cells.bar(cells.device_fraction(dev), NARROW_BAR_WIDTH if narrow else BAR_WIDTH, used_style, free_style),
            util,
            cells.temperature(dev),
            cells.power(dev),
        ]
