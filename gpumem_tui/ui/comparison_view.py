"""Predicted vs measured, as a table: per component and peak vs peak, naming every figure.

:class:`ComparisonView` shows a :class:`gpumem_tui.comparison.ComparisonResult`: one row per
component (or per group of components the probe measures together), with predicted,
measured, absolute error and % error, then one peak row per measured figure (torch
allocated, torch reserved, NVML used on CUDA; CPU live tensors on the CPU), and a line saying
which figure the per-component numbers are. Numbers the probe cannot give are shown as
"not measured" with the reason in the row's last column, never as zero.

Units on screen are binary (MiB = 2**20 bytes). Errors are signed, predicted - measured.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from gpumem_tui.comparison import ComparisonResult
from gpumem_tui.text import printable
from gpumem_tui.units import format_bytes

__all__ = ["ComparisonView", "format_error_percent"]

_LABELS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "optimizer_intermediates": "optimizer temporaries",
    "activations": "activations",
    "logits_and_loss": "logits & loss",
    "kv_cache": "KV cache",
    "cuda_context": "CUDA context",
    "allocator_reserve": "allocator reserve",
}
_COLUMNS = ("component", "predicted", "measured", "error", "error %", "measured as")


def _label(name: str) -> str:
    return " + ".join(_LABELS.get(part, part.replace("_", " ")) for part in name.split("+"))


_NUM_WIDTH = 12  # numbers are right-aligned by padding: DataTable cells do not justify


def _num(text: str, style: str = "") -> Text:
    return Text(text.rjust(_NUM_WIDTH), style=style)


def _mib(n: int | None) -> Text:
    return _num("—" if n is None else format_bytes(n, unit="MiB", precision=1))


def _signed_mib(n: int | None) -> Text:
    if n is None:
        return _num("—")
    return _num(("+" if n > 0 else "") + format_bytes(n, unit="MiB", precision=1))


def format_error_percent(value: float | None) -> str:
    """Signed percent with one decimal ("+4.2%", "-0.3%"), "—" when there is none."""
    if value is None:
        return "—"
    return f"{value:+.1f}%"


class ComparisonView(Vertical):
    """A DataTable of predicted vs measured (see the module docstring).

    ``update_comparison(result)`` replaces the contents; ``update_comparison(None, reason)``
    shows why there is nothing to compare (e.g. "select a probed process").
    """

    DEFAULT_CSS = """
    ComparisonView {
        height: auto;
        max-height: 100%;
    }
    ComparisonView > #cmp-figure {
        height: auto;
        color: $text-muted;
        padding: 0 1;
    }
    ComparisonView > #cmp-figure.-none {
        color: $text-warning;
    }
    ComparisonView > DataTable {
        height: auto;
        max-height: 1fr;
    }
    ComparisonView > #cmp-notes {
        height: auto;
        color: $text-muted;
        padding: 0 1;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.result: ComparisonResult | None = None

    def compose(self) -> ComposeResult:
        yield Static("no comparison yet: select a probed process", id="cmp-figure", classes="-none")
        table: DataTable[Any] = DataTable(id="cmp-table", cursor_type="row", zebra_stripes=True)
        table.tooltip = "error = predicted - measured; % of measured; MiB = 2^20 bytes"
        for name in _COLUMNS:
            table.add_column(name.rjust(_NUM_WIDTH) if name in ("predicted", "measured", "error") else
                             (name.rjust(8) if name == "error %" else name), key=name)
        yield table
        yield Static("", id="cmp-notes")

    def update_comparison(self, result: ComparisonResult | None, reason: str | None = None) -> None:
        """Show ``result`` (or clear the table and show ``reason`` when result is None)."""
        self.result = result
        table = self.query_one(DataTable)
        figure = self.query_one("#cmp-figure", Static)
        notes = self.query_one("#cmp-notes", Static)
        table.clear()
        if result is None:
            figure.update(Text(printable(reason or "no comparison yet: select a probed process", limit=500)))
            figure.add_class("-none")
            notes.update("")
            return
        figure.remove_class("-none")
        where = f"pid {result.pid}, " if result.pid is not None else ""
        figure.update(
            Text(
                f"{where}{result.device}: per component, measured = {result.measured_figure} "
                f"(probe categories at the measured peak; {result.sample_count} sample"
                f"{'' if result.sample_count == 1 else 's'}); "
                "error = predicted - measured; MiB = 2^20 B"
            )
        )
        for row in result.components:
            measured = _mib(row.measured_bytes)
            if row.measured_bytes is None:
                measured = _num("not measured", style="dim italic")
            table.add_row(
                Text(_label(row.name)),
                _mib(row.predicted_bytes),
                measured,
                _signed_mib(row.error_bytes),
                _styled_percent(row.error_percent),
                Text(printable(row.source, limit=200), style="dim"),
                key=f"c:{row.name}",
            )
        for peak in result.peaks:
            table.add_row(
                Text(f"PEAK ({peak.figure})", style="bold"),
                _mib(peak.predicted_bytes),
                _mib(peak.measured_bytes),
                _signed_mib(peak.error_bytes),
                _styled_percent(peak.error_percent),
                Text(f"{peak.figure}; predicted {peak.predicted_scope}", style="dim"),
                key=f"p:{peak.figure}",
            )
        notes.update(Text(printable("\n".join(f"note: {n}" for n in result.notes), limit=2000)))

    def cell_texts(self) -> list[list[str]]:
        """Every row's cells as plain text without the alignment padding (for tests and copy-out)."""
        table = self.query_one(DataTable)
        rows = []
        for row_key in table.rows:
            rows.append([str(cell.plain if isinstance(cell, Text) else cell).strip() for cell in table.get_row(row_key)])
        return rows


def _styled_percent(value: float | None) -> Text:
    text = format_error_percent(value)
    if value is None:
        return Text(text.rjust(8), style="dim")
    magnitude = abs(value)
    # Thresholds follow the project's accuracy targets (issue 3): <= 5 % good, <= 10 % fair.
    style = "" if magnitude <= 5 else ("bold" if magnitude <= 10 else "bold reverse")
    return Text(text.rjust(8), style=style)
