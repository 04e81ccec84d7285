"""The device panel: one row per GPU, nvidia-smi style, with a memory usage bar.

A GPU that failed as a whole (``DeviceSample.error``, e.g. "GPU is lost") keeps its row with
the error in place of the figures; a single field that could not be read shows its reason.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from gpumem_tui.telemetry.model import DeviceSample
from gpumem_tui.ui import cells

BAR_WIDTH = 20


class DevicePanel(DataTable):
    """DataTable of GPUs; the app feeds it with :meth:`show`. Row keys are ``str(index)``."""

    DEFAULT_CSS = """
    DevicePanel { height: auto; max-height: 10; }
    """

    def __init__(self, **kwargs: Any) -> None:
        # The cursor shows only while the panel has focus: otherwise the process table's
        # selection is what the chart follows, and a second highlight would mislead.
        super().__init__(cursor_type="row", show_cursor=False, **kwargs)
        self.devices: tuple[DeviceSample, ...] = ()

    def on_mount(self) -> None:
        for key, label in (
            ("index", "GPU"), ("name", "NAME"), ("memory", "MEMORY USED / TOTAL"),
            ("bar", "USAGE"), ("util", "UTIL"), ("temp", "TEMP"), ("power", "POWER"),
        ):
            self.add_column(Text(label, style="bold"), key=key)

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
        """Replace the rows, keeping the cursor on the same GPU index."""
        keep = self.selected_index
        self.devices = tuple(sorted(devices, key=lambda d: d.index))
        used_style, free_style = self._bar_styles()
        self.clear()
        target = 0
        for row, dev in enumerate(self.devices):
            if dev.index == keep:
                target = row
            name = cells.safe(dev.name, limit=40) if dev.name else cells.missing(dev.error and "-" or dev.reason("name"))
            util = (
                cells.missing("-") if dev.error
                else cells.percent(dev.utilization_gpu_percent, dev.reason("utilization_gpu_percent"))
            )
            self.add_row(
                Text(str(dev.index), justify="right"),
                name,
                cells.device_memory(dev),
                cells.bar(cells.device_fraction(dev), BAR_WIDTH, used_style, free_style),
                util,
                cells.temperature(dev),
                cells.power(dev),
                key=str(dev.index),
            )
        if self.devices:
            self.move_cursor(row=target, animate=False)
