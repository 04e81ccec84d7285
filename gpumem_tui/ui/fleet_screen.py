"""The interactive fleet screen (``gpumem-tui fleet --prometheus URL`` without ``--once``).

:class:`FleetPoller` is the headless part: it refreshes the host rows of
:func:`gpumem_tui.remote.fleet.read_fleet`, keeps the last good rows when Prometheus is down, slow or
answers an error (``notice`` says what happened) and backs off exponentially; a host seen
before that is missing from a fresh read is kept as a down row with the time it was last seen.
``history`` reads one host's per-GPU memory with ``query_range``. :class:`FleetApp` only draws.

Everything from Prometheus is drawn as ``rich.text.Text`` of
:func:`gpumem_tui.support.text.printable` text: literal, never markup, never terminal control.

Keys: ``s`` next sort column, ``/`` filter (substring of host or biggest command; ``esc``
clears and hides it), ``enter`` a host's GPUs, probed jobs and memory history, ``r`` refresh
now, ``q`` quit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Input, Static

from gpumem_tui.remote.fleet import (
    HostRow,
    PrometheusClient,
    PrometheusError,
    ValueChecks,
    down_notice,
    read_fleet,
)
from gpumem_tui.support.text import json_safe, printable
from gpumem_tui.ui.app_common import ThemedAppMixin
from gpumem_tui.ui.themes import DEFAULT_THEME, ThemeSet, load_themes
from gpumem_tui.support.units import MiB, format_bytes


@dataclass
class FleetState:
    """The last good host rows; ``notice`` is one line when the latest refresh failed;
    ``problems`` the reading's notices (values shown as N/A, series left out).

    ``updated_at`` epoch seconds of the rows; ``retry_in`` seconds to the next refresh.
    """

    hosts: list[HostRow] = field(default_factory=list)
    updated_at: float | None = None
    notice: str | None = None
    retry_in: float = 0.0
    problems: list[str] = field(default_factory=list)


class FleetPoller:
    """Refreshes a :class:`FleetState`; after ``n`` failures in a row the next try waits
    ``min(interval * 2**n, max_backoff)`` seconds (healthy: ``interval``).

    ``seen`` maps each host ever read up to ``(source, epoch second last read up)``.
    """

    def __init__(self, client: PrometheusClient, interval: float = 5.0, max_backoff: float = 60.0) -> None:
        self.client = client
        self.interval = interval
        self.max_backoff = max_backoff
        self.failures = 0
        self.state = FleetState()
        self.seen: dict[str, tuple[str, float]] = {}

    def refresh(self) -> FleetState:
        """One refresh; never raises for what Prometheus answers."""
        try:
            reading = read_fleet(self.client)
        except PrometheusError as exc:
            self.failures += 1
            age = "no data yet" if self.state.updated_at is None else f"data from {time.time() - self.state.updated_at:.0f} s ago"
            self.state.notice = f"{printable(str(exc), 300)} (showing {age}; retrying)"
            self.state.retry_in = min(self.interval * 2 ** self.failures, self.max_backoff)
            return self.state
        self.failures = 0
        self.state = FleetState(self._with_vanished(reading.hosts, reading.read_at), reading.read_at, None,
                                self.interval, reading.notices)
        return self.state

    def _with_vanished(self, hosts: list[HostRow], now: float) -> list[HostRow]:
        """``hosts`` plus a down row for every host seen before and missing now; remembers
        when each host was last up (a down host's ``last_seen`` is filled from it if Prometheus
        no longer has it)."""
        present = {h.host for h in hosts}
        for h in hosts:
            if h.up:
                self.seen[h.host] = (h.source, now)
            elif h.last_seen is None and h.host in self.seen:
                h.last_seen = self.seen[h.host][1]
        vanished = [HostRow(host, source, up=False, last_seen=when)
                    for host, (source, when) in self.seen.items() if host not in present]
        return sorted([*hosts, *vanished], key=lambda h: h.host) if vanished else hosts

    def history(self, host: str, seconds: float = 600.0, points: int = 120) -> tuple[dict[str, list[tuple[float, int | None]]], list[str]]:
        """Memory used per GPU of ``host`` over the last ``seconds`` (bytes; None where the
        value was not plausible), keyed by GPU label, and notice lines about dropped points.

        Our exporter's series, else dcgm-exporter's (MiB converted). Raises PrometheusError.
        """
        end = time.time()
        step = max(seconds / points, 1.0)
        # a PromQL string literal: JSON's escapes are Go's (https://prometheus.io/docs/prometheus/latest/querying/basics/#string-literals)
        inst = json.dumps(json_safe(host), ensure_ascii=False)
        checks = ValueChecks()
        bad_times = 0
        out: dict[str, list[tuple[float, int | None]]] = {}
        for metric, unit in (("DCGM_FI_DEV_FB_USED", MiB), ("gpumem_gpu_memory_used_bytes", 1)):
            answer = checks.answered(metric, self.client.query_range(f"{metric}{{instance={inst}}}", end - seconds, end, step))
            bad_times += answer.bad_times
            for labels, pts in answer:
                out[labels.get("gpu", "?")] = [(t, checks.bytes(metric, labels, v, unit)) for t, v in pts]
        problems = checks.summary()
        if bad_times:
            problems.append(f"{_plural(bad_times, 'point')} with an impossible timestamp left out")
        return out, problems


SORTS = {
    "host": lambda h: h.host,
    "memory used": lambda h: -(h.used_bytes or 0),
    "utilization": lambda h: -(h.utilization or 0),
    "GPUs": lambda h: -len(h.gpus),
}
BLOCKS = "▁▂▃▄▅▆▇█"


def bars(values: Sequence[float | None], width: int) -> str:
    """A one-line bar chart of ``values`` in ``width`` cells, scaled from zero to the peak:
    0 is the lowest block, the peak the full block (so a constant non-zero series is full
    height, not mistaken for zero); None is a gap. Several values per cell: their maximum."""
    count = min(width, len(values))
    cells: list[float | None] = []
    for c in range(count):
        chunk = [v for v in values[c * len(values) // count:(c + 1) * len(values) // count] if v is not None]
        cells.append(max(chunk) if chunk else None)
    peak = max((v for v in cells if v is not None), default=0)
    top = len(BLOCKS) - 1
    return "".join(" " if v is None else BLOCKS[round(v / peak * top) if peak > 0 else 0] for v in cells)


class MemoryBars(Widget):
    """One GPU's memory history as :func:`bars` across the widget's width."""

    DEFAULT_CSS = "MemoryBars { height: 1; color: $primary; }"

    def __init__(self, values: Sequence[float | None]) -> None:
        super().__init__()
        self.values = list(values)

    def render(self) -> Text:
        return Text(bars(self.values, self.size.width))


def _bytes(v: float | None) -> str:
    return format_bytes(None if v is None else int(v))


def _pct(v: float | None) -> str:
    return "N/A" if v is None else f"{v * 100:.0f}%"


def _text(label: str, limit: int = 200) -> Text:
    """A label from Prometheus as literal, printable text."""
    return Text(printable(label, limit))


def _cut(label: str, width: int) -> str:
    """A label made printable and cut to ``width`` cells with "…" (no byte-count note: a
    table cell has no room for it)."""
    shown = printable(label, 4 * width)
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class HostScreen(Screen):
    """One host: its GPUs, probed jobs (measured vs predicted peak) and memory history."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "back")]

    def __init__(self, poller: FleetPoller, host: HostRow) -> None:
        super().__init__()
        self.poller, self.host = poller, host

    def compose(self) -> ComposeResult:
        big = self.host.biggest
        biggest = "-" if big is None else f"pid {printable(big[0], 20)} {_bytes(big[2])} {printable(big[1], 200)}"
        title = Text(f"{printable(self.host.host, 200)} ({self.host.source}, {self.host.state(time.time())})  "
                     f"biggest process: {biggest}")
        yield Static(title, id="host-title")
        yield DataTable(id="gpus", cursor_type="row")
        yield DataTable(id="probed", cursor_type="row")
        yield VerticalScroll(Static("loading memory history ...", id="history-note"), id="history")
        yield Footer()

    def on_mount(self) -> None:
        gpus = self.query_one("#gpus", DataTable)
        gpus.add_columns("GPU", "NAME", "USED", "TOTAL", "UTIL")
        for g in self.host.gpus:
            gpus.add_row(_text(g.gpu, 20), _text(g.name, 60), _bytes(g.used_bytes), _bytes(g.total_bytes),
                         _pct(g.utilization))
        probed = self.query_one("#probed", DataTable)
        probed.add_columns("PROBED PID", "MEASURED PEAK", "PREDICTED PEAK")
        for pid, measured, predicted in self.host.probed:
            probed.add_row(_text(pid, 20), _bytes(measured), _bytes(predicted))
        self.load_history()

    @work(thread=True, exclusive=True)
    def load_history(self) -> None:
        try:
            history, problems = self.poller.history(self.host.host)
        except Exception as exc:  # noqa: BLE001 - PrometheusError, or a bug: said, never fatal
            why = str(exc) if isinstance(exc, PrometheusError) else f"{type(exc).__name__}: {exc}"
            self.app.call_from_thread(self._show_history, None, [why])
            return
        self.app.call_from_thread(self._show_history, history, problems)

    def _show_history(self, history: dict | None, problems: list[str]) -> None:
        note = self.query_one("#history-note", Static)
        if history is None:
            note.update(Text(f"memory history not available: {printable(problems[0], 300)}"))
            return
        lines = ["memory used, last 10 min" if history else "no memory history stored for this host"]
        note.update(Text("\n".join(lines + [printable(p, 300) for p in problems])))
        box = self.query_one("#history", VerticalScroll)
        for gpu, points in sorted(history.items()):
            values = [v for _, v in points]
            peak = max((v for v in values if v is not None), default=None)
            box.mount(Static(Text(f"GPU {printable(gpu, 20)}  peak {_bytes(peak)}")))
            box.mount(MemoryBars(values))


class FleetApp(ThemedAppMixin, App):
    """Host table over Prometheus; see the module docstring for keys.

    Args:
        poller: the :class:`FleetPoller` that reads Prometheus.
        theme, themes, screenshot_dir: as for the dashboard (:class:`gpumem_tui.ui.app.GpuMemApp`);
            ``themes`` None reads the theme folders (:func:`gpumem_tui.ui.themes.load_themes`).
        notices: lines to show once at start (e.g. config file problems).
    """

    CSS = ("#notice.failing { color: $warning; } #filter { display: none; } #filter.shown { display: block; }"
           " #notice { height: auto; max-height: 4; }")
    BINDINGS = [Binding("s", "sort", "sort"), Binding("slash", "filter", "filter"),
                Binding("escape", "clear_filter", "clear filter", show=False),
                Binding("r", "refresh", "refresh"), Binding("q", "quit", "quit")]

    def __init__(self, poller: FleetPoller, theme: str = DEFAULT_THEME, themes: ThemeSet | None = None,
                 screenshot_dir: str | None = None, notices: Sequence[str] = ()) -> None:
        super().__init__()
        self.poller = poller
        self.state = FleetState()
        self.sort_name = "host"
        self.filter_text = ""
        self._timer = None
        self.requested_theme = theme
        self.theme_set = themes if themes is not None else load_themes()
        self.screenshot_dir = screenshot_dir
        self.start_notices = list(notices)
        self._register_themes()

    def compose(self) -> ComposeResult:
        yield Static("", id="notice")
        yield Input(placeholder="filter hosts (Enter keeps, Esc clears)", id="filter")
        yield DataTable(id="hosts", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self._show_theme_notices()
        for notice in self.start_notices:
            self.notify(notice, title="Config", severity="warning", timeout=10, markup=False)
        self.title = f"gpumem-tui fleet: {printable(self.poller.client.url, 200)}"
        table = self.query_one("#hosts", DataTable)
        table.add_columns("HOST", "SRC", "STATE", "GPUS", "USED", "TOTAL", "UTIL", "BIGGEST PROCESS",
                          "PROBED (MEAS / PRED)")
        self.query_one("#notice", Static).update(Text(f"reading {printable(self.poller.client.url, 200)} ..."))
        table.focus()
        self.action_refresh()

    def action_refresh(self) -> None:
        self._refresh_worker()

    @work(thread=True, exclusive=True)
    def _refresh_worker(self) -> None:
        try:
            state = self.poller.refresh()
        except Exception as exc:  # noqa: BLE001 - a bug must not close the screen: say it, keep the rows
            state = self.poller.state
            state.notice = f"unexpected error while reading: {type(exc).__name__}: {printable(str(exc), 200)}"
            state.retry_in = self.poller.max_backoff
        self.call_from_thread(self.show, state)

    def show(self, state: FleetState) -> None:
        """Draw ``state`` and schedule the next refresh (back-off after a failure)."""
        self.state = state
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

    def _status(self, visible: list[HostRow]) -> Text:
        """The notice line: the failure, or the host count; then the reading's problems."""
        state, now = self.state, time.time()
        if state.notice:
            lines = [f"{state.notice}; next try in {state.retry_in:.0f} s"]
        elif state.updated_at is None:
            lines = [f"reading {printable(self.poller.client.url, 200)} ..."]
        else:
            total = len(state.hosts)
            shown = f"{len(visible)} of {_plural(total, 'host')}" if self.filter_text else _plural(total, "host")
            lines = [f"{shown}, sorted by {self.sort_name}"]
        down = [h for h in state.hosts if not h.up]
        if down:
            lines.append(down_notice(down, now))
        lines += [printable(p, 300) for p in state.problems]
        return Text("\n".join(lines))

    def _draw(self) -> None:
        table = self.query_one("#hosts", DataTable)
        table.clear()
        visible = self.visible_hosts()
        notice = self.query_one("#notice", Static)
        notice.set_class(bool(self.state.notice or self.state.problems or any(not h.up for h in self.state.hosts)),
                         "failing")
        notice.update(self._status(visible))
        now = time.time()
        error = self.current_theme.error or "red"
        for h in visible:
            big = h.biggest
            biggest = "-" if big is None else f"{_cut(big[0], 12)} {_cut(big[1], 28)} {_bytes(big[2])}"
            probed = "; ".join(f"{_cut(pid, 12)}: {_bytes(m)} / pred {_bytes(p)}" for pid, m, p in h.probed[:2])
            state = Text("up") if h.up else Text(h.state(now).replace("down, ", "DOWN ", 1), style=f"bold {error}")
            table.add_row(Text(_cut(h.host, 60)), h.source, state, str(len(h.gpus)), _bytes(h.used_bytes),
                          _bytes(h.total_bytes), _pct(h.utilization), Text(biggest), Text(probed or "-"), key=h.host)

    def action_sort(self) -> None:
        names = list(SORTS)
        self.sort_name = names[(names.index(self.sort_name) + 1) % len(names)]
        self._draw()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    def action_clear_filter(self) -> None:
        """Esc: empty the filter, hide its box, back to the table."""
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.filter_text = ""
        self.query_one("#hosts", DataTable).focus()
        self._draw()

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
