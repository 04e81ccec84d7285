"""The interactive fleet screen (``gpumem-tui fleet --prometheus URL`` without ``--once``).

:class:`FleetPoller` is the headless part: it refreshes the host rows of
:func:`gpumem_tui.fleet.fleet_rows`, keeps the last good rows when Prometheus is down, slow or
answers an error (``notice`` says what happened) and backs off exponentially; ``history``
reads one host's per-GPU memory with ``query_range``. :class:`FleetApp` only draws.

Keys: ``s`` next sort column, ``/`` filter (substring of host or biggest command), ``enter`` a
host's GPUs, probed jobs and memory history, ``r`` refresh now, ``q`` quit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Sparkline, Static

from gpumem_tui.fleet import HostRow, PrometheusClient, PrometheusError, fleet_rows
from gpumem_tui.units import MiB, format_bytes


@dataclass
class FleetState:
    """The last good host rows; ``notice`` is one line when the latest refresh failed.

    ``updated_at`` epoch seconds of the rows; ``retry_in`` seconds to the next refresh.
    """

    hosts: list[HostRow] = field(default_factory=list)
    updated_at: float | None = None
    notice: str | None = None
    retry_in: float = 0.0


class FleetPoller:
    """Refreshes a :class:`FleetState`; after ``n`` failures in a row the next try waits
    ``min(interval * 2**n, max_backoff)`` seconds (healthy: ``interval``)."""

    def __init__(self, client: PrometheusClient, interval: float = 5.0, max_backoff: float = 60.0) -> None:
        self.client = client
        self.interval = interval
        self.max_backoff = max_backoff
        self.failures = 0
        self.state = FleetState()

    def refresh(self) -> FleetState:
        """One refresh; never raises for what Prometheus answers."""
        try:
            hosts = fleet_rows(self.client)
        except PrometheusError as exc:
            self.failures += 1
            age = "no data yet" if self.state.updated_at is None else f"data from {time.time() - self.state.updated_at:.0f} s ago"
            self.state.notice = f"{exc} (showing {age}; retrying)"
            self.state.retry_in = min(self.interval * 2 ** self.failures, self.max_backoff)
            return self.state
        self.failures = 0
        self.state = FleetState(hosts, time.time(), None, self.interval)
        return self.state

    def history(self, host: str, seconds: float = 600.0, points: int = 120) -> dict[str, list[tuple[float, float]]]:
        """Memory used per GPU of ``host`` over the last ``seconds`` (bytes), keyed by GPU label.

        Our exporter's series, else dcgm-exporter's (MiB converted). Raises PrometheusError.
        """
        end = time.time()
        step = max(seconds / points, 1.0)
        inst = host.replace("\\", "\\\\").replace('"', '\\"')
        out: dict[str, list[tuple[float, float]]] = {}
        for query in (f'DCGM_FI_DEV_FB_USED{{instance="{inst}"}} * {MiB}', f'gpumem_gpu_memory_used_bytes{{instance="{inst}"}}'):
            for labels, pts in self.client.query_range(query, end - seconds, end, step):
                out[labels.get("gpu", "?")] = pts
        return out


SORTS = {
    "host": lambda h: h.host,
    "memory used": lambda h: -(h.used_bytes or 0),
    "utilization": lambda h: -(h.utilization or 0),
    "GPUs": lambda h: -len(h.gpus),
}


def _bytes(v: float | None) -> str:
    return "-" if v is None else format_bytes(int(v))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def _probed_text(h: HostRow) -> str:
    return "; ".join(f"{pid}: {_bytes(m)} / pred {_bytes(p)}" for pid, m, p in h.probed[:2]) or "-"


class HostScreen(Screen):
    """One host: its GPUs, probed jobs (measured vs predicted peak) and memory history."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "back")]

    def __init__(self, poller: FleetPoller, host: HostRow) -> None:
        super().__init__()
        self.poller, self.host = poller, host

    def compose(self) -> ComposeResult:
        big = self.host.biggest
        biggest = "-" if big is None else f"pid {big[0]} {_bytes(big[2])} {big[1]}"
        yield Static(f"{self.host.host} ({self.host.source})  biggest process: {biggest}", id="host-title")
        yield DataTable(id="gpus", cursor_type="row")
        yield DataTable(id="probed", cursor_type="row")
        yield VerticalScroll(Static("loading memory history ...", id="history-note"), id="history")
        yield Footer()

    def on_mount(self) -> None:
        gpus = self.query_one("#gpus", DataTable)
        gpus.add_columns("GPU", "NAME", "USED", "TOTAL", "UTIL")
        for g in self.host.gpus:
            gpus.add_row(g.gpu, g.name, _bytes(g.used_bytes), _bytes(g.total_bytes), _pct(g.utilization))
        probed = self.query_one("#probed", DataTable)
        probed.add_columns("PROBED PID", "MEASURED PEAK", "PREDICTED PEAK")
        for pid, measured, predicted in self.host.probed:
            probed.add_row(pid, _bytes(measured), _bytes(predicted))
        self.load_history()

    @work(thread=True, exclusive=True)
    def load_history(self) -> None:
        try:
            history = self.poller.history(self.host.host)
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
        self.sort_name = "host"
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
        table.add_columns("HOST", "SRC", "GPUS", "USED", "TOTAL", "UTIL", "BIGGEST PROCESS", "PROBED (MEAS / PRED)")
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
        hosts = [h for h in self.state.hosts
                 if not needle or needle in f"{h.host} {h.biggest[1] if h.biggest else ''}".lower()]
        return sorted(hosts, key=SORTS[self.sort_name])

    def _draw(self) -> None:
        table = self.query_one("#hosts", DataTable)
        table.clear()
        visible = self.visible_hosts()
        if not self.state.notice and self.state.updated_at is not None:
            shown = f"{len(visible)} of {len(self.state.hosts)}" if self.filter_text else str(len(visible))
            self.query_one("#notice", Static).update(f"{shown} hosts, sorted by {self.sort_name}")
        for h in visible:
            big = h.biggest
            biggest = "-" if big is None else f"{big[0]} {big[1][:28]} {_bytes(big[2])}"
            table.add_row(h.host, h.source, str(len(h.gpus)), _bytes(h.used_bytes), _bytes(h.total_bytes),
                          _pct(h.utilization), biggest, _probed_text(h), key=h.host)

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
        host = next((h for h in self.state.hosts if h.host == event.row_key.value), None)
        if host is not None:
            self.push_screen(HostScreen(self.poller, host))
