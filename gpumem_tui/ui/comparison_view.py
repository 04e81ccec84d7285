"""Predicted vs measured, as a table: per component and peak vs peak, naming every figure.

:class:`ComparisonView` shows a :class:`gpumem_tui.analysis.comparison.ComparisonResult`: one row per
component (or per group of components the probe measures together, followed by its members
indented), with predicted, measured, % error and absolute error, then one peak row per
measured figure (torch allocated, torch reserved, NVML used on CUDA; CPU live tensors on the
CPU), and a line saying which figure the per-component numbers are; under it, when the
per-step peak rises steadily, the time-to-OOM (:mod:`gpumem_tui.analysis.forecast`). Numbers the probe cannot
give are shown as "n/m" (not measured) with the reason in the row's last column, never as 0.

The table is laid out for a side pane about 60 columns wide: short component names (the
full names and sources are in the last column and the tooltip), sizes in binary units with
the unit in every cell. Errors are signed, predicted - measured, % of measured.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from gpumem_tui.analysis.comparison import (
    FIGURE_ALLOCATED,
    FIGURE_CPU_LIVE,
    FIGURE_NVML_USED,
    FIGURE_RESERVED,
    ComparisonResult,
)
from gpumem_tui.analysis.comparison import short_label as short_label  # re-exported
from gpumem_tui.support.text import printable
from gpumem_tui.support.units import format_bytes

__all__ = ["ComparisonView", "format_error_percent", "short_label"]

_PEAK = {
    FIGURE_ALLOCATED: "PEAK allocated",
    FIGURE_RESERVED: "PEAK reserved",
    FIGURE_NVML_USED: "PEAK NVML used",
    FIGURE_CPU_LIVE: "PEAK CPU live",
}
_NUM = 9  # "121.5 MiB"; numbers are right-aligned by padding (DataTable cells do not justify)
_PCT = 7  # "+100.0%"
_COLUMNS = (
    ("component", None),
    ("predicted", _NUM),
    ("measured", _NUM),
    ("err %", _PCT),
    ("error", _NUM),
    ("measured as", None),
)


def _size(n: int | None) -> str:
    return "—" if n is None else format_bytes(n, precision=1)


def _signed(n: int | None) -> str:
    if n is None:
        return "—"
    return ("+" if n > 0 else "") + format_bytes(n, precision=1)


def format_error_percent(value: float | None) -> str:
    """Signed percent with one decimal ("+4.2%", "-0.3%"), "—" when there is none."""
    if value is None:
        return "—"
    return f"{value:+.1f}%"


def _right(text: str, width: int, style: str = "") -> Text:
    return Text(text.rjust(width), style=style)


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
    ComparisonView > #cmp-whatif {
        height: auto;
        color: $text-warning;
        text-style: bold;
        padding: 0 1;
    }
    ComparisonView > #cmp-whatif.-none {
        display: none;
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
        self.what_if: str | None = None
        self._rows: list[tuple[str, tuple[Text, ...]]] = []  # what the table shows

    def compose(self) -> ComposeResult:
        yield Static("no comparison yet: select a probed process", id="cmp-figure", classes="-none")
        yield Static("", id="cmp-whatif", classes="-none")
        table: DataTable[Any] = DataTable(id="cmp-table", cursor_type="row", zebra_stripes=True)
        table.tooltip = (
            "err % and error = predicted - measured (% of measured); sizes in binary units (MiB = 2^20 B); "
            "n/m = not measured (the last column says why); PEAK rows compare the predicted peak with "
            "exactly the parts each measured figure contains"
        )
        for name, width in _COLUMNS:
            table.add_column(name if width is None else name.rjust(width), key=name)
        yield table
        yield Static("", id="cmp-notes")

    def update_comparison(
        self, result: ComparisonResult | None, reason: str | None = None, title: str | None = None,
        what_if: str | None = None,
    ) -> None:
        """Show ``result`` (or clear the table and show ``reason`` when result is None).

        ``title`` names the estimate, e.g. "llama-3.2-1b (probe, pid 1088)" (default: the PID).
        ``what_if``: a line about the user's what-if on this process, shown apart from the
        table (the table compares the job's own estimate with what it measured).
        """
        self.result = result
        self.what_if = what_if
        line = self.query_one("#cmp-whatif", Static)
        _show(line, Text(printable(what_if or "", limit=500)))
        line.set_class(not what_if, "-none")
        figure = self.query_one("#cmp-figure", Static)
        notes = self.query_one("#cmp-notes", Static)
        if result is None:
            lines = (reason or "no comparison yet: select a probed process").split("\n")  # each line made printable
            _show(figure, Text("\n".join(printable(line, limit=500) for line in lines[:8])))
            figure.add_class("-none")
            _show(notes, Text(""))
            self._show_rows([])
            return
        figure.remove_class("-none")
        _show(figure, Text(_figure_line(result, title)))
        self._show_rows(_rows(result))
        lines = [printable(f"note: {n}", limit=500) for n in result.notes]
        outlook = result.forecast
        if outlook is not None and outlook.drift is not None:  # a steady rise: when it runs out
            lines.insert(0, printable(f"time-to-OOM: {outlook.text()}", limit=500))
        _show(notes, Text("\n".join(lines)))

    def _show_rows(self, rows: list[tuple[str, tuple[Text, ...]]]) -> None:
        """The table's rows ((key, cells) each), built again only when they changed: a poll
        of a probed job gives the same rows but for a new sample count (in the figure line)."""
        if [(key, _look(cells)) for key, cells in rows] == [(key, _look(cells)) for key, cells in self._rows]:
            return
        self._rows = rows
        table = self.query_one(DataTable)
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)

    def cell_texts(self) -> list[list[str]]:
        """Every row's cells as plain text without the alignment padding (for tests and copy-out)."""
        table = self.query_one(DataTable)
        rows = []
        for row_key in table.rows:
            rows.append([str(cell.plain if isinstance(cell, Text) else cell).strip() for cell in table.get_row(row_key)])
        return rows


def _figure_line(result: ComparisonResult, title: str | None) -> str:
    """The line over the table: whose estimate, where, which figure the components are."""
    if title:
        where = f"{printable(title, limit=80)} on {result.device}"
    else:
        where = f"pid {result.pid} on {result.device}" if result.pid is not None else result.device
    phases = ""
    if result.peak_phase:
        phases = f"; predicted peak in {result.peak_phase}"
        if result.measured_peak_phase:
            phases += f", measured components in {result.measured_peak_phase}"
    return (f"{where}: components measured as {result.measured_figure} "
            f"({result.sample_count} sample{'' if result.sample_count == 1 else 's'}){phases}. "
            "error = predicted - measured")


def _rows(result: ComparisonResult) -> list[tuple[str, tuple[Text, ...]]]:
    """(row key, cells) of the table: one row per component, then one per peak figure."""
    rows: list[tuple[str, tuple[Text, ...]]] = []
    for row in result.components:
        member = not row.is_group and any(
            other.is_group and row.name in other.components for other in result.components
        )
        label = ("  " if member else "") + short_label(row.name)
        if row.measured_bytes is None:
            measured = _right("n/m", _NUM, "dim italic")
        else:
            measured = _right(_size(row.measured_bytes), _NUM)
        rows.append((f"c:{row.name}", (
            Text(label, style="dim" if member else ""),
            _right(_size(row.predicted_bytes), _NUM),
            measured,
            _styled_percent(row.error_percent),
            _right(_signed(row.error_bytes), _NUM),
            Text(printable(f"{row.name}: {row.source}", limit=300), style="dim"),
        )))
    for peak in result.peaks:
        rows.append((f"p:{peak.figure}", (
            Text(_PEAK.get(peak.figure, f"PEAK {peak.figure}"), style="bold"),
            _right(_size(peak.predicted_bytes), _NUM, "bold"),
            _right(_size(peak.measured_bytes), _NUM, "bold"),
            _styled_percent(peak.error_percent, bold=True),
            _right(_signed(peak.error_bytes), _NUM),
            Text(f"{peak.figure}; predicted {peak.predicted_scope}", style="dim"),
        )))
    return rows


def _look(texts: tuple[Text, ...]) -> list[tuple[Any, ...]]:
    """What ``texts`` look like on screen: their characters, base styles and styled spans
    (rich's ``Text.__eq__`` leaves the base style out)."""
    return [(text.plain, str(text.style), text.spans, text.justify, text.no_wrap) for text in texts]


def _show(widget: Static, text: Text) -> None:
    """Show ``text`` in ``widget`` (height auto): nothing when it shows that already, and no
    layout of the screen (every widget placed again, ~20 ms with the pane) while its wrapped
    height at its width stays the same -- a poll of a probed job changes the figure line's
    sample count, not its height -- or while it is not laid out (width 0: in the tab not
    shown, or not mounted yet; the layout that shows it sizes it to what it holds then)."""
    old = widget.content  # what the last update gave it (a str until the first _show)
    if isinstance(old, Text) and _look((old,)) == _look((text,)):
        return
    width = widget.content_size.width
    before = widget.visual.get_height(widget.styles, width) if width else 0
    widget.update(text, layout=False)
    if width and widget.visual.get_height(widget.styles, width) != before:
        widget.refresh(layout=True)


def _styled_percent(value: float | None, bold: bool = False) -> Text:
    text = format_error_percent(value)
    if value is None:
        return _right(text, _PCT, "dim")
    magnitude = abs(value)
    # Emphasis follows the project's accuracy targets (issue 3): <= 5 % plain, <= 10 % bold,
    # beyond that reversed so it stands out without relying on colour.
    style = "" if magnitude <= 5 else ("bold" if magnitude <= 10 else "bold reverse")
    if bold and not style:
        style = "bold"
    return _right(text, _PCT, style)
