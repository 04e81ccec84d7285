"""The Textual fleet screen: draws :class:`~gpumem_tui.fleet.query.FleetState`, nothing more.

Refreshes run in a thread worker (HTTP blocks); after a failure the next refresh waits the
poller's back-off (``FleetState.retry_in``) and the notice line says what went wrong while
the last good rows stay on screen. Keys: ``s`` next sort column, ``/`` filter (substring of
instance, hostname or biggest command), ``enter`` a host's GPUs, processes and memory history
(``query_range``), ``r`` refresh now, ``q`` quit.
"""

from __future__ import annotations

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Sparkline, Static

from gpumem_tui.fleet.query import FleetPoller, FleetState, HostRow, PrometheusError
from gpumem_tui.units import format_bytes

SORTS = {
    "instance": lambda h: h.instance,
    "memory used": lambda h: -(h.used_bytes or 0),
    "utilization": lambda h: -(h.utilization or 0),
    "GPUs": lambda h: -len(h.gpus),
}


def _bytes(v: float | None) -> str:
    return "-" if v is None else format_bytes(int(v))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def _probe_text(h: HostRow) -> str:
    parts = []
    for p in h.probes[:2]:
        parts.append(f"{p.pid}: {_bytes(p.measured_bytes)} / pred {_bytes(p.predicted_bytes)}")
    return "; ".join(parts) or "-"


class HostScreen(Screen):
    """One host: GPU table, process table and each GPU's memory-used history."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "back")]

    def __init__(self, poller: FleetPoller, host: HostRow) -> None:
        super().__init__()
        self.poller, self.host = poller, host

    def compose(self) -> ComposeResult:
        yield Static(f"{self.host.instance} {self.host.hostname}".strip(), id="host-title")
        yield DataTable(id="gpus", cursor_type="row")
        yield DataTable(id="procs", cursor_type="row")
        yield VerticalScroll(Static("loading memory history ...", id="history-note"), id="history")
        yield Footer()

    def on_mount(self) -> None:
        gpus = self.query_one("#gpus", DataTable)
        gpus.add_columns("GPU", "NAME", "USED", "TOTAL", "UTIL", "SOURCE")
        for g in self.host.gpus:
            gpus.add_row(g.gpu, g.name, _bytes(g.used_bytes), _bytes(g.total_bytes), _pct(g.utilization), g.source)
        procs = self.query_one("#procs", DataTable)
        procs.add_columns("GPU", "PID", "USER", "USED", "PRED PEAK", "COMMAND")
        predicted = {p.pid: p.predicted_bytes for p in self.host.probes}
        for p in self.host.processes:
            procs.add_row(p.gpu, p.pid, p.user, _bytes(p.used_bytes), _bytes(predicted.get(p.pid)), p.command)
        self.load_history()

    @work(thread=True, exclusive=True)
    def load_history(self) -> None:
        try:
            history = self.poller.history(self.host.instance)
        except PrometheusError as exc:
            self.app.call_from_thread(self._show_history, None, str(exc))
            return
        self.app.call_from_thread(self._show_history, history, None)

    def _show_history(self, history: dict | None, error: str | None) -> None:
        note = self.query_one("#history-note", Static)
        if history is None:
            note.update(f"memory history not available: {error}")
            return
        note.update("memory used, last 10 min" if history else "no memory history stored for this host")
        box = self.query_one("#history", VerticalScroll)
        for gpu, points in sorted(history.items()):
            peak = max((v for _, v in points), default=None)
            box.mount(Static(f"GPU {gpu}  peak {_bytes(peak)}"))
            box.mount(Sparkline([v for _, v in points], summary_function=max))


class FleetApp(App):
    """Host table over Prometheus; see the module docstring for keys."""

    CSS = "#notice.failing { color: $warning; } #filter { display: none; } #filter.shown { display: block; }"
    BINDINGS = [Binding("s", "sort", "sort"), Binding("slash", "filter", "filter"),
                Binding("r", "refresh", "refresh"), Binding("q", "quit", "quit")]

    def __init__(self, poller: FleetPoller) -> None:
        super().__init__()
        self.poller = poller
        self.state = FleetState()
        self.sort_name = "instance"
        self.filter_text = ""
        self._timer = None

    def compose(self) -> ComposeResult:
        yield Static("", id="notice")
        yield Input(placeholder="filter hosts", id="filter")
        yield DataTable(id="hosts", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"gpumem-tui fleet: {self.poller.client.url}"
        table = self.query_one("#hosts", DataTable)
        table.add_columns("INSTANCE", "HOSTNAME", "GPUS", "USED", "TOTAL", "UTIL", "BIGGEST PROCESS", "PROBED (MEAS / PRED)")
        self.query_one("#notice", Static).update(f"reading {self.poller.client.url} ...")
        table.focus()
        self.action_refresh()

    def action_refresh(self) -> None:
        self._refresh_worker()

    @work(thread=True, exclusive=True)
    def _refresh_worker(self) -> None:
        state = self.poller.refresh()
        self.call_from_thread(self.show, state)

    def show(self, state: FleetState) -> None:
        """Draw ``state`` and schedule the next refresh (back-off after a failure)."""
        self.state = state
        notice = self.query_one("#notice", Static)
        notice.set_class(bool(state.notice), "failing")
        if state.notice:
            notice.update(f"{state.notice}; next try in {state.retry_in:.0f} s")
        self._draw()
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(state.retry_in or self.poller.interval, self.action_refresh)

    def visible_hosts(self) -> list[HostRow]:
        """Hosts after the filter, in the current sort order."""
        needle = self.filter_text.lower()
        hosts = [h for h in self.state.hosts if not needle or needle in
                 f"{h.instance} {h.hostname} {h.biggest_process.command if h.biggest_process else ''}".lower()]
        return sorted(hosts, key=SORTS[self.sort_name])

    def _draw(self) -> None:
        table = self.query_one("#hosts", DataTable)
        table.clear()
        visible = self.visible_hosts()
        if not self.state.notice and self.state.updated_at is not None:
            shown = f"{len(visible)} of {len(self.state.hosts)}" if self.filter_text else str(len(visible))
            self.query_one("#notice", Static).update(f"{shown} hosts, sorted by {self.sort_name}")
        for h in visible:
            big = h.biggest_process
            biggest = "-" if big is None else f"{big.pid} {big.command[:28]} {_bytes(big.used_bytes)}"
            table.add_row(h.instance, h.hostname or "-", str(len(h.gpus)), _bytes(h.used_bytes), _bytes(h.total_bytes),
                          _pct(h.utilization), biggest, _probe_text(h), key=h.instance)

    def action_sort(self) -> None:
        names = list(SORTS)
        self.sort_name = names[(names.index(self.sort_name) + 1) % len(names)]
        self._draw()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self._draw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#hosts", DataTable).focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id != "hosts":
            return
        host = next((h for h in self.state.hosts if h.instance == event.row_key.value), None)
        if host is not None:
            self.push_screen(HostScreen(self.poller, host))
