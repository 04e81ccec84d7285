"""The dashboard app: device panel, process table, memory chart, estimator side pane.

Data flow: a :class:`~gpumem_tui.ui.poller.Poller` thread polls any TelemetrySource and posts
frozen Snapshots; the handlers here own every state change (history, phase marks, widgets)
and re-arm the poller. Nothing in this module blocks on I/O except sending a signal, which is
a single syscall after the user confirmed it.
"""

from __future__ import annotations

import signal as _signal
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingsMap
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Input, Static
from textual.worker import Worker, WorkerState

from gpumem_tui.telemetry.probed_state import ProbedProcesses
from gpumem_tui.telemetry.model import (
    PhaseMark,
    PhasePeak,
    ProbeInfo,
    ProbeSample,
    ProcessSample,
    Snapshot,
    TelemetrySource,
    namespace_note,
)
from gpumem_tui.support.text import printable
from gpumem_tui.ui import side_pane as pane
from gpumem_tui.ui.app_common import StartupGcPause, ThemedAppMixin, freeze_gc, is_replay, is_text_field
from gpumem_tui.ui.device_panel import DevicePanel
from gpumem_tui.ui.history import HistoryStore
from gpumem_tui.ui.memory_chart import Band, CurveSpec, MemoryChart
from gpumem_tui.ui.poller import Poller, PollFailed, SnapshotReady
from gpumem_tui.ui.process_table import ProcessTable, row_key
from gpumem_tui.ui.themes import DEFAULT_THEME, ThemeSet

# Size classes (issue 13 item 10): "wide" (>= 160 columns) shows the estimator pane beside
# the table and chart; "medium" (>= 120) gives them the whole width and the status line says
# `e` opens the pane; "narrow" (< 120) also drops the less needed columns (process_table),
# caps the table and device panel so the chart keeps rows enough for its 0 tick, and shortens
# the replay and key lines so that nothing is cut.
WIDE_MIN_WIDTH = 160
MEDIUM_MIN_WIDTH = 120
SIDE_PANE_MIN_WIDTH = WIDE_MIN_WIDTH  # below this the pane starts hidden (`e` shows it)


def size_class(width: int) -> str:
    """"wide", "medium" or "narrow" for a terminal ``width`` columns wide."""
    if width >= WIDE_MIN_WIDTH:
        return "wide"
    return "medium" if width >= MEDIUM_MIN_WIDTH else "narrow"
# Down to 2 s: an H100 training step of 300 ms spans a few character cells there.
CHART_WINDOWS = (2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 6 * 3600.0)
MAX_MARKS_PER_PID = 4096
MAX_MARK_PIDS = 64

SIGNAL_BINDINGS = (
    Binding("I", "signal('SIGINT')", "SIGINT", id="signal_int", tooltip="Send SIGINT to the selected process (asks first)"),
    Binding("T", "signal('SIGTERM')", "SIGTERM", id="signal_term", tooltip="Send SIGTERM to the selected process (asks first)"),
    Binding("K", "signal('SIGKILL')", "SIGKILL", id="signal_kill", tooltip="Send SIGKILL to the selected process (asks first)"),
)
REPLAY_ACTIONS = {"replay_pause", "replay_seek", "replay_speed"}


def _screens() -> Any:
    """gpumem_tui.ui.screens, imported on first use: no modal screen is in the first frame."""
    from gpumem_tui.ui import screens

    return screens


class GpuMemApp(ThemedAppMixin, App[None]):
    """The gpumem-tui dashboard.

    Args:
        source: any TelemetrySource; closed when the app exits.
        interval: seconds between polls (> 0).
        theme: theme name to start with; an unusable one falls back to the default.
        themes: themes loaded from files (``gpumem_tui.ui.themes.load_themes()``); their
            problems are shown as notifications.
        readonly: no signal keys at all.
        select_pid: select this process when it first appears (e.g. the demo job).
        notices: one-off messages to show at start (e.g. config file problems).
        chart_window: seconds of history the chart shows.
        keymap: binding id -> keys overrides (from the config file).
        banner: extra text for the status line (e.g. "demo job PID 123").
        side_pane: mount the estimator / comparison pane (when its widgets are installed).
        screenshot_dir: folder the command palette's Screenshot saves into (``~`` expanded);
            None: the working directory.
        alerts: alert rules (``gpumem_tui.alerts.rules.AlertRule``, from the config file),
            evaluated on every snapshot (gpumem_tui.ui.alerting).
    """

    #: Once the dashboard is up (first data drawn, side pane mounted), collect once and move
    #: every object alive then (modules, widgets, styles: ~150 000) out of the garbage
    #: collector's reach (gc.freeze): its full passes walked them all, ~80 ms every minute or
    #: so, and its middle passes ~2 ms a few times a minute -- with 1 Hz redraws the largest
    #: single item of the idle CPU. run_dashboard turns it on; tests leave it off (a frozen
    #: object is never freed, and a test process makes many apps).
    freeze_gc_after_start = False

    # Absolute, so subclasses defined in other modules (tests, benchmarks) find it too.
    CSS_PATH = str(Path(__file__).with_name("app.tcss"))
    TITLE = "gpumem-tui"

    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit", tooltip="Quit gpumem-tui"),
        Binding("question_mark", "help", "Help", id="help", tooltip="Show the key bindings"),
        Binding("slash", "filter", "Filter", id="filter", tooltip="Filter processes: user:NAME gpu:N words"),
        # Esc: out of a form field, tab bar or the GPU panel back to the table; in the filter
        # box (or on the table) it clears the filter. Two bindings so that each says what it does.
        Binding("escape", "leave_field", "Back to table", id="leave_field",
                tooltip="Leave the form / tabs and go back to the process table"),
        Binding("escape", "clear_filter", "Clear filter", id="clear_filter",
                tooltip="Clear the process filter"),
        Binding("enter", "detail", "Detail", id="detail", tooltip="Show everything about the selected process"),
        Binding("c", "chart_target", "Chart GPU/proc", id="chart_target",
                tooltip="Chart the selected process or its GPU"),
        Binding("p", "job_estimate", "Job's estimate", id="job_estimate",
                tooltip="Drop the what-if: back to the job's own estimate (from its probe)"),
        Binding("ctrl+r", "job_estimate_in_field", "Job's estimate", id="job_estimate_in_field",
                tooltip="The same from a form field (where p is typed)"),
        Binding("b", "toggle_bands", "Bands", id="toggle_bands", tooltip="Show or hide the predicted bands"),
        Binding("t", "toggle_fit_total", "Scale to total", show=False, id="toggle_fit_total",
                tooltip="Scale the chart to the GPU total (or to the data)"),
        Binding("left_square_bracket", "window(-1)", "Zoom in", show=False, id="window_shorter",
                tooltip="Show a shorter time window"),
        Binding("right_square_bracket", "window(1)", "Zoom out", show=False, id="window_longer",
                tooltip="Show a longer time window"),
        Binding("e", "toggle_side", "Estimator", id="toggle_side", tooltip="Show or hide the estimator pane"),
        # Priority (the table would scroll with the arrows), but only while the focus is on the
        # table, the GPU panel or the chart: a tab bar, a text field, a checkbox keeps its keys.
        Binding("space", "replay_pause", "Pause", id="replay_pause", priority=True, tooltip="Pause or resume the replay"),
        Binding("left", "replay_seek(-10)", "-10 s", id="replay_back", priority=True, tooltip="Seek back 10 s"),
        Binding("right", "replay_seek(10)", "+10 s", id="replay_forward", priority=True, tooltip="Seek forward 10 s"),
        Binding("plus,equals_sign", "replay_speed(2)", "Faster", id="replay_faster", tooltip="Replay twice as fast"),
        Binding("minus", "replay_speed(0.5)", "Slower", id="replay_slower", tooltip="Replay half as fast"),
    ]

    def __init__(
        self,
        source: TelemetrySource,
        *,
        interval: float = 1.0,
        theme: str = DEFAULT_THEME,
        themes: ThemeSet | None = None,
        readonly: bool = False,
        select_pid: int | None = None,
        notices: Sequence[str] = (),
        chart_window: float = 300.0,
        keymap: Iterable[tuple[str, str]] = (),
        banner: str | None = None,
        side_pane: bool = True,
        screenshot_dir: str | None = None,
        alerts: Sequence[Any] = (),
    ) -> None:
        super().__init__()
        self.screenshot_dir = screenshot_dir
        self.side_pane_enabled = side_pane
        self.source = source
        self.interval = interval
        self.readonly = readonly
        self.replay = is_replay(source)
        self.requested_theme = theme
        self.theme_set = themes if themes is not None else ThemeSet()
        self.start_notices = list(notices)
        self.banner = banner
        self.select_pid = select_pid
        self._selected_once = False
        self.snapshot: Snapshot | None = None
        self.poll_error: str | None = None
        self.crash_line: str | None = None  # set when an unexpected error ended the app
        self.history = HistoryStore()
        self.phase_marks: OrderedDict[int, deque[PhaseMark]] = OrderedDict()
        self._mark_keys: dict[int, set[tuple[float, str, int]]] = {}
        self.phase_peaks: OrderedDict[int, deque[PhasePeak]] = OrderedDict()  # high-water marks
        self.outlooks: dict[int, Any] = {}  # PID -> gpumem_tui.analysis.forecast.Forecast of its phase peaks
        self.probe_infos: dict[int, ProbeInfo] = {}
        self.probe_devices: dict[int, str] = {}
        self.probe_samples: OrderedDict[int, deque[ProbeSample]] = OrderedDict()
        self._side_toggled = False
        self._position_notice: Any = None  # the replay's last "replay at ..." notification
        self._target_before_filter: tuple[str, int] | None = None  # charted before a filter hid all
        self._what_if_shown: int | None = None  # the PID whose what-if `p` drops, when shown
        self.chart_target: tuple[str, int] | None = None
        self.chart_window = chart_window
        self.bands: list[Band] = []  # the predicted bands drawn now (of the charted process)
        self._process_estimates: Any = None  # built on first use: its import is the estimator's
        self._job_tracker: Any = None  # the launches (torchrun ranks) among the processes, on first sight
        self._job_notices: set[str] = set()  # the jobs' notices shown once already
        # What each probed process measured so far (core state, the same compare folds): a
        # replay feeds its own per record and rebuilds it on a seek; otherwise each poll feeds it.
        replayed_state = getattr(source, "probed", None)
        self._feeds_probed = not isinstance(replayed_state, ProbedProcesses)
        self.probed: ProbedProcesses = replayed_state if not self._feeds_probed else ProbedProcesses()
        self.contexts = self.probed  # CUDA context per probed PID, measured here (.context(pid))
        self.gpu_contexts: dict[int, int] = {}  # GPU index -> context after init measured on it
        self._pane_state = pane.PaneState()
        self.poller = Poller(self, source, interval)
        self.has_side_pane = False
        self._gc_frozen = False
        self._gc_pause = StartupGcPause()
        self._side_widget: Any = None  # the mounted pane: the status line asks at every poll
        self.size_class = ""
        self._status_shown: Text | None = None
        self._charted_target: tuple[str, int] | None = None
        self._charted_time = 0.0
        self._previous_snapshot_time: float | None = None  # of the snapshot before the current one
        self._proc_start: dict[int, float] = {}
        self._highlighted_key: str | None = None
        # Widgets are kept as attributes: handlers also run while a modal screen is on top,
        # where App.query would search that screen instead of the dashboard.
        self.status_bar = Static(id="status")
        self.replay_bar = Static(id="replay-status")
        self.device_panel = DevicePanel(id="devices")
        self._left_column = Vertical(id="left")
        self.table = ProcessTable(id="processes")
        self.filter_box = Input(placeholder="filter: user:NAME gpu:N words (Enter keeps, Esc clears)", id="filter")
        self.chart = MemoryChart(id="chart")
        self.table_empty = Static(id="table-empty")  # says why the table has no rows, or "?"
        self._table_note = ""
        # A signal key (or the confirmation) that shares a key with another action is refused.
        safe_keymap, refused = _checked_keymap(tuple(keymap))
        self._keymap_pairs = dict(safe_keymap)
        self.start_notices.extend(refused)
        self._register_themes()
        self.alerts: Any = None
        if alerts:
            from gpumem_tui.ui.alerting import DashboardAlerts

            self.alerts = DashboardAlerts(self, alerts)
        if not readonly:
            # Signal keys exist only when not read-only: not disabled, absent.
            self._bindings = BindingsMap([*(b for _, b in self._bindings), *SIGNAL_BINDINGS])

    # ---- layout ---------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        self._gc_pause.pause()  # until the first frame (on_mount)
        # The size class before the widgets mount: set after, it restyles every widget again.
        self._apply_size_class(self.size.width, update=False)
        yield self.status_bar
        yield self.replay_bar
        yield self.device_panel
        with Horizontal(id="main"):
            with self._left_column:
                yield self.table
                yield self.table_empty
                yield self.filter_box
                yield self.chart
        yield Footer(compact=self.size_class != "wide")  # the size class was set above

    def _mount_side_pane(self) -> None:
        """Mount the estimator/comparison pane after the first frame.

        Its form is ~170 widgets: styling them takes longer than the rest of the dashboard,
        so the dashboard shows first and the pane follows a moment later.
        """
        if self.has_side_pane:
            return
        side = pane.build()
        if side is None:
            self.side_pane_enabled = False  # its widgets are not installed: there will be none
            return
        main = self.screen_stack[0].query_one("#main")
        if not self._side_toggled:
            side.display = self.size.width >= SIDE_PANE_MIN_WIDTH
        main.mount(side)
        self._side_widget = side
        self.has_side_pane = True
        self.refresh_bindings()
        self._update_status()
        self.call_after_refresh(self._update_side)

    def on_mount(self) -> None:
        self._show_theme_notices()
        if self._keymap_pairs:
            self.set_keymap(self._keymap_pairs)
        for notice in self.start_notices:
            self.notify(notice, title="Config", severity="warning", timeout=10, markup=False)
        self._apply_size_class(self.size.width)
        self.replay_bar.display = self.replay
        self.filter_box.display = False
        self.table_empty.display = False
        self.chart.window = self.chart_window
        self._update_status()
        self.call_after_refresh(self._after_first_frame)
        # A poll that hangs (a wedged driver) must show, not freeze the screen silently.
        self.set_interval(max(2.0, self.interval), self._watch_poll, name="poll-watchdog")
        if self.side_pane_enabled:
            self.call_after_refresh(self._mount_side_pane)

    def get_default_screen(self) -> Screen:
        screen = super().get_default_screen()
        screen.AUTO_FOCUS = ""  # no focus in the first frame: _after_first_frame gives it
        return screen

    def _after_first_frame(self) -> None:
        """What the first frame goes without: the focus (on a focus change the footer builds and
        styles its keys), the first poll (its rows; its thread's GIL) and the garbage collector."""
        vars(self.screen_stack[0]).pop("AUTO_FOCUS", None)  # back to the app's rule
        self.table.focus()
        self.poller.start()
        self._gc_pause.resume()

    def _handle_exception(self, error: Exception) -> None:
        """An unexpected error ends the app (Textual's rule) with exit status 1; its
        traceback goes to a file and ``crash_line`` (printed by the launcher) says where."""
        from gpumem_tui.support.crash import crash_line, write_crash_report

        if self.crash_line is None:  # the first error is the cause; later ones follow from it
            self.crash_line = crash_line(error, write_crash_report(error))
        super()._handle_exception(error)
        self._exit_renderables.clear()  # the traceback is in the file, not over the terminal

    def on_unmount(self) -> None:
        self._gc_pause.resume()
        self.poller.stop()
        if self.alerts is not None:
            self.alerts.close()

    # ---- data -----------------------------------------------------------------------------
    @on(SnapshotReady)
    def _on_snapshot(self, message: SnapshotReady) -> None:
        try:
            self.apply_snapshot(message.snapshot)
        finally:
            self.poller.rearm(message.poll_seconds)

    @on(PollFailed)
    def _on_poll_failed(self, message: PollFailed) -> None:
        self.poll_error = message.error
        self._update_status()
        self.poller.rearm(message.poll_seconds)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # The poll function catches everything; this covers a failure outside poll().
        if event.worker.group == "poller" and event.state is WorkerState.ERROR:
            self.poll_error = f"poller error: {event.worker.error!r}"
            self._update_status()
            self.poller.rearm(0.0)

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Take one Snapshot: record history, update every widget."""
        self._previous_snapshot_time = self.snapshot.time if self.snapshot is not None else None
        self.snapshot = snap
        self.poll_error = None
        self._record(snap)
        for notice in snap.notices:
            self._show_notice(printable(notice, 1024))
        devices = self.device_panel
        devices.display = bool(snap.devices)
        devices.show(snap.devices, fit_width=self._left_column.size.width or None)
        table = self.table
        keep = None
        # Select the requested process once it appears; without one, the first probed process
        # (a replayed or instrumented training job is what the user came to see).
        wanted = self.select_pid
        if wanted is None and not self._selected_once:
            probed = [i.pid for i in snap.probe_infos] + [p.pid for p in snap.probes]
            wanted = probed[0] if probed else None
        if not self._selected_once and wanted is not None:
            for p in snap.processes:
                if p.pid == wanted:
                    keep = row_key(p)
                    self._selected_once = True
                    self.chart_target = ("proc", p.pid)
                    break
        jobs = self._jobs(snap)
        table.show(snap.processes, snap.time, keep=keep, jobs=tuple(jobs))
        self._notify_job_problems(jobs)
        target = self.chart_target
        if target is not None and target[0] == "proc" and all(p.pid != target[1] for p in snap.processes):
            # The charted process exited: its row is gone and the cursor lands on another one.
            # That move is not the user's, so the ended job's curve stays until the cursor moves.
            self._highlighted_key = table.selected_key
        self._follow_filter()
        if self.chart_target is None and not self.filter_hides_all:
            selected = table.selected
            if selected is not None:
                self.chart_target = ("proc", selected.pid)
            elif snap.devices:
                self.chart_target = ("gpu", snap.devices[0].index)
        self._update_status()
        self._update_chart(throttle=True)
        self._update_side()
        if self.alerts is not None:
            self.alerts.on_snapshot(snap)
        if self.freeze_gc_after_start and not self._gc_frozen and (self.has_side_pane or not self.side_pane_enabled):
            self._gc_frozen = True
            self.call_after_refresh(freeze_gc)

    def _jobs(self, snap: Snapshot) -> tuple[Any, ...]:
        """The launches (torchrun / accelerate ranks) among ``snap``'s processes. The job code
        (and the estimator behind it) is imported on the first launch or probe seen, which keeps
        it off the dashboard's start-up path."""
        if self._job_tracker is None:
            if not self.probe_infos and not any(p.launch is not None for p in snap.processes):
                return ()
            from gpumem_tui.analysis.jobs import JobTracker

            self._job_tracker = JobTracker()
        from gpumem_tui.analysis.process_estimate import compare_summary

        return tuple(self._job_tracker.jobs(snap.processes, self.probed, self.process_estimates.probe_estimate,
                                            compare_summary))

    def _notify_job_problems(self, jobs: Sequence[Any]) -> None:
        """Say once what is wrong with a job's rank claims (its group row keeps a ⚠)."""
        for job in jobs:
            if job.notice is not None and job.notice not in self._job_notices:
                if len(self._job_notices) > 256:  # churning bad jobs: forget, do not grow
                    self._job_notices.clear()
                self._job_notices.add(job.notice)
                self.notify(job.notice, title="Job ranks", severity="warning", timeout=8, markup=False)

    #: a replay's notices that say where it is now: each replaces the previous one (seeking
    #: four times leaves one notice, the position, not four stacked over the pane)
    POSITION_NOTICES = ("replay at ", "replay finished")

    def _show_notice(self, text: str) -> None:
        """Show a notice of the source; a replay's position notice replaces the last one."""
        if not (self.replay and text.startswith(self.POSITION_NOTICES)):
            self.notify(text, severity="information", timeout=8, markup=False)
            return
        from textual.notifications import Notification, Notify

        if self._position_notice is not None:
            self._unnotify(self._position_notice)  # gone already (timed out): nothing happens
        self._position_notice = Notification(text, timeout=8, markup=False)
        self.post_message(Notify(self._position_notice))

    def _record(self, snap: Snapshot) -> None:
        t = snap.time
        for dev in snap.devices:
            self.history.add(("gpu", dev.index), t, dev.memory_used_bytes)
        per_pid: dict[int, int] = {}
        processes = snap.processes
        if len(processes) > self.history.max_series // 2:
            # Thousands of processes: keep curves only for the rows the table shows (what can
            # be selected) and the charted one, not a series created and evicted per process.
            wanted = {p.pid for p in self.table.shown}
            wanted.add(self.chart_pid())
            processes = tuple(p for p in processes if p.pid in wanted)
        for p in processes:
            if p.used_memory_bytes is not None:
                per_pid[p.pid] = per_pid.get(p.pid, 0) + p.used_memory_bytes
            if p.start_time is not None:
                previous = self._proc_start.get(p.pid)
                if previous is not None and abs(previous - p.start_time) > 1.0:
                    # the PID now names another process: its curve and estimate start afresh
                    self.history.drop(("proc", p.pid))
                    self.process_estimates.clear_user(p.pid)
                self._proc_start[p.pid] = p.start_time
        if len(self._proc_start) > 4096:  # churn: keep only the PIDs listed now
            current = {p.pid for p in snap.processes}
            self._proc_start = {pid: st for pid, st in self._proc_start.items() if pid in current}
        for pid, used in per_pid.items():
            self.history.add(("proc", pid), t, used)
        for probe in snap.probes:
            self._record_probe(probe)
        if self._feeds_probed:
            self.probed.add_snapshot(snap)
        self.probe_infos = self.probed.infos()
        self.process_estimates.keep_probes(self.probe_infos)  # after a seek back: those seen so far
        gpu_of = {p.pid: p.device_index for p in snap.processes if p.device_index is not None}
        for pid, info in self.probe_infos.items():  # the device may be known only after the info
            self.process_estimates.update_probe(info, self.probed.device(pid), self.probed.context(pid))
            probed = self.process_estimates.probe_estimate(pid)
            measured = getattr(probed.spec, "measured_context", None) if probed is not None else None
            if measured is not None and gpu_of.get(pid) is not None:
                self.gpu_contexts[gpu_of[pid]] = measured
        if snap.phase_peaks:
            self._record_phase_peaks(snap.phase_peaks)
        for mark in snap.phase_marks:
            key = (mark.time, mark.phase.value, mark.step)
            seen = self._mark_keys.setdefault(mark.pid, set())
            if key in seen:
                continue
            marks = self.phase_marks.get(mark.pid)
            if marks is None:
                marks = self.phase_marks[mark.pid] = deque(maxlen=MAX_MARKS_PER_PID)
                while len(self.phase_marks) > MAX_MARK_PIDS:
                    old, _ = self.phase_marks.popitem(last=False)
                    self._mark_keys.pop(old, None)
            if len(marks) == marks.maxlen:
                seen.discard((marks[0].time, marks[0].phase.value, marks[0].step))
            marks.append(mark)
            seen.add(key)

    def _record_phase_peaks(self, peaks: Sequence[PhasePeak]) -> None:
        """Keep the probe's high-water marks per PID, and flag a PID whose per-step peak rises
        steadily (gpumem_tui.telemetry.step_peaks) in its table row. Its forecast is kept in
        ``outlooks``: the alerts read it there (computed once per poll)."""
        from gpumem_tui.analysis.forecast import forecast
        from gpumem_tui.telemetry.step_peaks import step_peaks

        touched = set()
        for peak in peaks:
            kept = self.phase_peaks.get(peak.pid)
            if kept is None:
                kept = self.phase_peaks[peak.pid] = deque(maxlen=MAX_MARKS_PER_PID)
                while len(self.phase_peaks) > MAX_MARK_PIDS:
                    old, _ = self.phase_peaks.popitem(last=False)
                    self.table.flags.pop(old, None)
                    self.outlooks.pop(old, None)
            kept.append(peak)
            touched.add(peak.pid)
        flags = self.table.flags
        for pid in touched:
            # the GPU's free memory (+ the process's own) is the limit (gpumem_tui.analysis.forecast)
            outlook = self.outlooks[pid] = forecast(step_peaks(self.phase_peaks[pid]), self.live_limit(pid))
            if outlook.drift is None:
                flags.pop(pid, None)
            else:
                when = outlook.short()
                flags[pid] = "leak? " + outlook.drift.text().replace(" per step", "/step") + (
                    f", {when}" if when else "")

    def live_limit(self, pid: int | None) -> int | None:
        """What ``pid``'s torch allocated may reach on its GPU now (bytes;
        :func:`gpumem_tui.analysis.forecast.snapshot_limit` of the latest poll), or None."""
        from gpumem_tui.analysis.forecast import snapshot_limit

        return None if pid is None else snapshot_limit(self.snapshot, pid, self.probed.context(pid))

    @property
    def process_estimates(self) -> Any:
        """The per-PID estimates (:class:`gpumem_tui.analysis.process_estimate.ProcessEstimates`)."""
        if self._process_estimates is None:
            from gpumem_tui.analysis.process_estimate import ProcessEstimates

            self._process_estimates = ProcessEstimates()
        return self._process_estimates

    def _record_probe(self, probe: ProbeSample) -> None:
        self.probe_devices[probe.pid] = probe.device
        samples = self.probe_samples.get(probe.pid)
        if samples is None:
            samples = self.probe_samples[probe.pid] = deque(maxlen=MAX_MARKS_PER_PID)
            while len(self.probe_samples) > MAX_MARK_PIDS:
                self.probe_samples.popitem(last=False)
        if not samples or probe.time > samples[-1].time:
            samples.append(probe)
        self.history.add(("probe", probe.pid, "allocated"), probe.time, probe.allocated_bytes)
        self.history.add(("probe", probe.pid, "reserved"), probe.time, probe.reserved_bytes)

    # ---- status ---------------------------------------------------------------------------
    def status_text(self) -> Text:
        """The one-line status (:func:`gpumem_tui.ui.status_line.dashboard_status`)."""
        from gpumem_tui.ui.status_line import dashboard_status

        return dashboard_status(self)

    def _watch_poll(self) -> None:
        stuck = self.poller.in_flight_seconds()
        if stuck > max(5.0, 3 * self.interval):
            self.poll_error = f"the last poll has been running for {stuck:.0f} s (NVML or /proc not answering)"
            self._update_status()

    def _update_status(self) -> None:
        # Static.update re-lays out the screen: skip it when nothing changed.
        text = self.status_text()
        if text != self._status_shown:
            self._status_shown = text
            self.status_bar.update(text, layout=False)
        if self.replay:
            self.replay_bar.update(self.replay_text(), layout=False)

    def replay_text(self) -> Text:
        """The replay line: playing / paused / ended, position, speed and (not narrow) the keys."""
        from gpumem_tui.ui.status_line import replay_line

        src = self.source
        return replay_line(
            paused=bool(getattr(src, "paused", False)),
            ended=bool(getattr(src, "finished", False)),
            position=getattr(src, "position", None),
            duration=getattr(src, "duration", None),
            speed=getattr(src, "speed", None),
            keys=self.size_class != "narrow",  # narrow: the key line lists them
        )

    # ---- chart ----------------------------------------------------------------------------
    def device_total(self, index: int | None) -> int | None:
        """Total memory (bytes) of GPU ``index`` in the latest snapshot, or None."""
        if self.snapshot is None or index is None:
            return None
        for dev in self.snapshot.devices:
            if dev.index == index:
                return dev.memory_total_bytes
        return None

    def device_name(self, index: int | None) -> str | None:
        """Printable name of GPU ``index``, or None."""
        if self.snapshot is None or index is None:
            return None
        for dev in self.snapshot.devices:
            if dev.index == index and dev.name:
                return printable(dev.name, 40)
        return None

    def chart_pid(self) -> int | None:
        """PID the chart shows, else the selected process's PID."""
        if self.chart_target and self.chart_target[0] == "proc":
            return self.chart_target[1]
        proc = self.table.selected
        return proc.pid if proc is not None else None

    def selected_gpu(self) -> int | None:
        """The GPU the chart/estimator refer to: the selected process's, else the panel's."""
        table = self.table
        proc = table.selected
        if self.chart_target and self.chart_target[0] == "gpu":
            return self.chart_target[1]
        if proc is not None and proc.device_index is not None:
            return proc.device_index
        return self.device_panel.selected_index

    def _update_chart(self, throttle: bool = False) -> None:
        chart = self.chart
        snap = self.snapshot
        target = self.chart_target
        if throttle and snap is not None and target == self._charted_target:
            # A new sample moves the curve by less than one character cell until
            # seconds_per_cell have passed: redrawing sooner costs CPU and shows nothing new.
            # Once samples stop coming (a finished or paused replay repeats its last one) the
            # skipped ones are drawn, so the curve does not end short of the newest sample.
            settled = snap.time == self._previous_snapshot_time and self._charted_time < snap.time
            if snap.time - self._charted_time < chart.seconds_per_cell() and not settled:
                return
        self._charted_target = target
        self._charted_time = snap.time if snap is not None else 0.0
        chart.set_message(None)
        if snap is None or target is None:
            chart.set_series([], None)
            chart.set_message("no process matches the filter · esc clears" if self.filter_hides_all
                              else "no GPU or process selected")
            chart.replot()
            return
        kind, ident = target
        curves: list[CurveSpec] = []
        marks: list[PhaseMark] = []
        total: int | None = None
        if kind == "gpu":
            curves.append(CurveSpec("NVML used", self.history.points(("gpu", ident)), "curve-measured"))
            total = self.device_total(ident)
            chart.set_title(f"GPU {ident}: memory used (NVML)")
        else:
            proc = next((p for p in snap.processes if p.pid == ident), None)
            device = self.probe_devices.get(ident)
            probe_alloc = self.history.points(("probe", ident, "allocated"))
            if probe_alloc:
                label = "torch allocated" if device and device.startswith("cuda") else "live tensors (CPU tracker)"
                curves.append(CurveSpec(label, probe_alloc, "curve-measured"))
                reserved = self.history.points(("probe", ident, "reserved"))
                if reserved:
                    curves.append(CurveSpec("torch reserved", reserved, "curve-reserved"))
            nvml = self.history.points(("proc", ident))
            if nvml:
                curves.append(CurveSpec("NVML used", nvml, "curve-measured" if not probe_alloc else "curve-nvml"))
            if proc is not None:
                total = self.device_total(proc.device_index)
            marks = list(self.phase_marks.get(ident, ()))
            # a title has no room for printable's "(N bytes)" note: cut with an ellipsis only
            name = printable((proc.command if proc else None) or "", 4096)
            name = name if len(name) <= 60 else name[:59] + "…"
            where = f"GPU {proc.device_index}" if proc is not None and proc.device_index is not None else "host"
            chart.set_title(f"PID {ident} ({where}) {name}".rstrip())
            if not curves:
                chart.set_message(self._no_curve_reason(ident, snap))
        chart.set_series(curves, snap.time)
        chart.set_total(total, "GPU total")
        chart.set_phase_marks(marks)
        chart.set_phase_peaks(self.phase_peaks.get(ident, ()) if kind == "proc" else ())
        process = self.process_estimates.get(ident) if kind == "proc" else None
        self.bands, note = pane.predicted_bands(kind, ident, process)
        chart.set_bands(self.bands, note)  # replots

    @staticmethod
    def _no_curve_reason(pid: int, snap: Snapshot) -> str:
        """Why PID ``pid`` has no curve: no NVML at all, or NVML gives no figure for it."""
        if snap.nvml_error:
            return f"no NVML ({printable(snap.nvml_error, 40)}): no GPU memory to chart for PID {pid}"
        return f"PID {pid}: no memory figure to chart (NVML reports none for it)"

    # ---- side pane (estimator / comparison) -------------------------------------------------
    def on_estimator_panel_estimate_changed(self, message: Any) -> None:
        """A change of the form is the estimate of the process the form belonged to (if any):
        it becomes that PID's estimate, drawn on its chart; on a probed PID it is a what-if,
        shown beside (not instead of) the comparison of the job's own estimate. The form
        showing the PID's estimate as it is (its probe's, or the what-if already set) is no
        change."""
        if message.pid is None:
            return
        current = self.process_estimates.get(message.pid)
        if current is not None and (current.architecture, current.spec) == (message.architecture, message.spec):
            return
        self.process_estimates.set_user(message.pid, message.architecture, message.spec, message.estimate, message.model)
        if self.chart_target == ("proc", message.pid):
            self._update_chart()
        self._update_side()

    def on_resize(self, event: Any) -> None:
        # Narrow terminals give the whole width to the table and chart; `e` still opens the pane.
        self._apply_size_class(event.size.width)
        if self.has_side_pane and not self._side_toggled:
            for side in self.screen_stack[0].query("#side"):
                side.display = event.size.width >= SIDE_PANE_MIN_WIDTH
        self._update_status()

    def _apply_size_class(self, width: int, update: bool = True) -> None:
        wanted = size_class(width)
        if wanted == self.size_class:
            return
        self.size_class = wanted
        for name in ("wide", "medium", "narrow"):
            self.set_class(name == wanted, f"-size-{name}", update=update)
        for footer in self.screen_stack[0].query(Footer) if self.screen_stack else ():
            footer.compact = wanted != "wide"

    @property
    def side_pane_toggled(self) -> bool:
        """True once the user showed or hid the pane with `e` (it no longer follows the width)."""
        return self._side_toggled

    @property
    def side_pane_hidden(self) -> bool:
        """True when the pane exists but is not shown (the status line then says `e`)."""
        if not self.has_side_pane or not self.screen_stack:
            return False
        side = self._side_widget
        if side is not None and side.is_attached:  # a query per poll cost ~5 % of the idle CPU
            return not side.display
        return not any(side.display for side in self.screen_stack[0].query("#side"))

    def _update_side(self) -> None:
        """Show the current selection in the side pane (no-op without it)."""
        if not self.has_side_pane or not self.screen_stack:  # not mounted, or shutting down
            return
        gpu = self.selected_gpu()
        pid = self.chart_pid()
        if self.chart_target is not None and self.chart_target[0] == "gpu":
            pid = None  # the GPU chart: the form is a what-if, not a process's estimate
        selection = pane.PaneSelection(
            gpu=gpu,
            gpu_total=self.device_total(gpu),
            gpu_label=self.device_name(gpu),
            pid=pid,
            process=self.process_estimates.get(pid),
            job=self.process_estimates.probe_estimate(pid) if pid is not None else None,
            measured=self.probed.summary(pid),
            gpu_context=self.gpu_contexts.get(gpu) if gpu is not None else None,
            limit_bytes=self.live_limit(pid),
        )
        what_if = self._what_if_pid()
        if what_if != self._what_if_shown:  # `p` (back to the job's estimate) comes or goes
            self._what_if_shown = what_if
            self.refresh_bindings()
        error = pane.push(self.screen_stack[0], self._pane_state, selection)
        if error:
            self.notify(error, title="Estimator", severity="error", markup=False)

    # ---- selection ------------------------------------------------------------------------
    @on(ProcessTable.RowHighlighted, "#processes")
    def _process_highlighted(self, event: ProcessTable.RowHighlighted) -> None:
        # Rebuilding the table re-highlights the same row each poll: only a move counts.
        # The event may be stale (posted mid-rebuild), so the table's current row decides.
        key = self.table.selected_key
        if key == self._highlighted_key:
            return
        self._highlighted_key = key
        proc = self.table.selected
        if proc is None:
            return
        if self.chart_target != ("proc", proc.pid):
            self.chart_target = ("proc", proc.pid)
            self._update_chart()
            self._update_side()

    @on(DevicePanel.RowHighlighted, "#devices")
    def _device_highlighted(self, event: DevicePanel.RowHighlighted) -> None:
        if not self.device_panel.has_focus:
            return
        index = self.device_panel.selected_index
        if index is not None and self.chart_target != ("gpu", index):
            self.chart_target = ("gpu", index)
            self._update_chart()
            self._update_side()

    @on(ProcessTable.RowSelected, "#processes")
    def _process_selected(self, event: ProcessTable.RowSelected) -> None:
        self.action_detail()

    # ---- actions --------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in REPLAY_ACTIONS:
            # Priority bindings (the table would take the arrows), so only where no focused
            # widget needs these keys: tabs switch with the arrows, fields type, checkboxes
            # toggle with space. Elsewhere the key goes to that widget.
            return self.replay and self.focus_on_dashboard
        if action == "leave_field":
            return not self.focus_on_dashboard and self.focused is not self.filter_box
        if action == "clear_filter":  # shown (and acting) while there is a filter to clear
            return self.focused is self.filter_box or self.filter_box.display or bool(self.filter_box.value)
        if action in ("job_estimate", "job_estimate_in_field"):
            in_field = is_text_field(self.focused)
            if in_field != (action == "job_estimate_in_field"):
                return False  # one of the two keys is shown, the one that works here
            return self._what_if_pid() is not None  # hidden, not greyed: the footer is short
        if action == "signal" and self.readonly:
            return False
        if action == "toggle_side":
            # Shown from the first frame when a pane will come: Textual's Footer does not redraw
            # while the app lacks focus, so a served page (unfocused at start) kept a footer
            # without `e` when the binding appeared only once the pane mounted.
            return self.side_pane_enabled
        return True

    @property
    def focus_on_dashboard(self) -> bool:
        """True when nothing or one of the dashboard's own widgets (table, GPU panel, chart)
        has the focus, not a form field, tab bar or filter box."""
        return self.focused is None or isinstance(self.focused, (ProcessTable, DevicePanel, MemoryChart))

    def action_leave_field(self) -> None:
        self.table.focus()

    def help_rows(self) -> list[tuple[str, str, str]]:
        """(keys, description, id) for every binding that is active here."""
        bindings = [b for _, b in self._bindings] + list(ProcessTable.SORT_BINDINGS)  # type: ignore[arg-type]
        if self.table.jobs_shown:  # the job key acts only where a job's group row is listed
            bindings += ProcessTable.JOB_BINDINGS
        skip = () if self.replay else REPLAY_ACTIONS
        return _screens().help_rows(bindings, skip, self._keymap, self.get_key_display)

    def action_help(self) -> None:
        self.push_screen(_screens().HelpScreen(self.help_rows()))

    def action_filter(self) -> None:
        box = self.filter_box
        box.display = True
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.filter_box
        if box.value or box.display:
            box.value = ""
            box.display = False
            self.table.set_filter("")
            self.table.focus()
            self._update_status()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.table.set_filter(event.value)
        if self._follow_filter():
            self._update_chart()
            self._update_side()
        self._update_status()

    @property
    def filter_hides_all(self) -> bool:
        """True when a filter is set and no row matches it."""
        table = self.table
        return table.filter.active and not table.shown and bool(self.snapshot and self.snapshot.processes)

    def _follow_filter(self) -> bool:
        """The chart and the pane show a row the table lists, never one the filter hid: the
        selected row's process, or nothing (the table says no row matches). Also shows or
        hides that line. True when the chart's target changed."""
        table = self.table
        empty = self.filter_hides_all
        notes = []
        if empty:
            query = printable(self.filter_box.value.strip(), 60)
            notes.append(f"no process matches {query!r} · esc clears")
        namespace = namespace_note(table.shown)
        if namespace:  # once for the table, not in every "?" cell
            notes.append(namespace)
        note = " · ".join(notes)
        self.table_empty.display = bool(note)
        if note != self._table_note:
            self._table_note = note
            self.table_empty.update(note)
        target = self.chart_target
        if target is None and not empty and table.selected is not None:  # the filter was eased
            # back to the process charted before the filter hid every row, if it is listed
            before, self._target_before_filter = self._target_before_filter, None
            if before is not None and before[0] == "proc" and table.select_pid(before[1]):
                self.chart_target = before
            else:
                self.chart_target = ("proc", table.selected.pid)
            self._highlighted_key = table.selected_key
            return True
        if not table.filter.active or target is None or target[0] != "proc":
            return False
        if any(p.pid == target[1] for p in table.shown):
            return False
        selected = table.selected
        if selected is None:
            self._target_before_filter = target  # what Esc (or a wider filter) goes back to
        self.chart_target = ("proc", selected.pid) if selected is not None else None
        self._highlighted_key = table.selected_key
        return True

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            event.input.display = False
        self.table.focus()

    def action_detail(self) -> None:
        proc = self.table.selected
        if proc is None or self.snapshot is None:
            return
        self.push_screen(_screens().ProcessDetailScreen(proc, self.snapshot.time, self.probe_infos.get(proc.pid)))

    def action_chart_target(self) -> None:
        proc = self.table.selected
        target = self.chart_target
        if proc is not None and proc.device_index is None and target in (None, ("proc", proc.pid)):
            # nothing to switch to: say why rather than do nothing
            snap = self.snapshot
            why = (f"NVML is not available ({printable(snap.nvml_error, 80)})" if snap is not None and snap.nvml_error
                   else f"PID {proc.pid} is on no GPU")
            self.notify(f"no GPU chart: {why}; the chart shows the process", title="Chart", timeout=4, markup=False)
        if target and target[0] == "proc" and proc is not None and proc.device_index is not None:
            self.chart_target = ("gpu", proc.device_index)
        elif proc is not None:
            self.chart_target = ("proc", proc.pid)
        self._update_chart()
        self._update_side()

    def _what_if_pid(self) -> int | None:
        """The charted PID when its estimate is the user's what-if and its job's own (probe's)
        estimate exists to go back to; else None."""
        pid = self.chart_pid() if self.chart_target is None or self.chart_target[0] == "proc" else None
        process = self.process_estimates.get(pid) if pid is not None else None
        if pid is None or process is None or not process.is_what_if:
            return None
        return pid if self.process_estimates.probe_estimate(pid) is not None else None

    def action_job_estimate(self) -> None:
        pid = self._what_if_pid()
        if pid is None:
            self.notify("no what-if to drop: the selected process shows its job's own estimate", timeout=3)
            return
        self.process_estimates.clear_user(pid)
        self.notify(f"PID {pid}: back to its job's own estimate (from its probe)", timeout=3, markup=False)
        self._update_chart()
        self._update_side()

    def action_job_estimate_in_field(self) -> None:
        self.action_job_estimate()

    def action_toggle_bands(self) -> None:
        chart = self.chart
        chart.show_bands = not chart.show_bands
        self.notify(f"predicted bands {'shown' if chart.show_bands else 'hidden'}", timeout=2)

    def action_toggle_fit_total(self) -> None:
        chart = self.chart
        if not chart.total_bytes:
            self.notify("this chart has no GPU total to scale to", timeout=3)
            return
        chart.fit_total = not chart.total_on_scale  # flip what is shown now
        self.notify("scaled to the GPU total" if chart.fit_total else "scaled to the data", timeout=2)

    def action_window(self, step: int) -> None:
        chart = self.chart
        index = min(range(len(CHART_WINDOWS)), key=lambda i: abs(CHART_WINDOWS[i] - chart.window))
        chart.window = CHART_WINDOWS[min(max(index + step, 0), len(CHART_WINDOWS) - 1)]
        self.chart_window = chart.window

    def action_toggle_side(self) -> None:
        if not self.has_side_pane:
            self._mount_side_pane()  # pressed before the pane came: bring it now, then toggle
        self._side_toggled = True
        for side in self.screen_stack[0].query("#side"):
            side.display = not side.display
        self._update_status()

    # replay
    def action_replay_pause(self) -> None:
        src: Any = self.source
        if getattr(src, "paused", False):
            src.resume()
        else:
            src.pause()
        self._update_status()

    def action_replay_seek(self, delta: float) -> None:
        src: Any = self.source
        position = getattr(src, "position", 0.0) or 0.0
        target = max(0.0, position + delta)
        duration = getattr(src, "duration", None)
        if isinstance(duration, (int, float)):
            target = min(target, duration)
        src.seek(target)
        if delta < 0:
            self.history = HistoryStore()  # time went backwards: start the curves again
            self.phase_marks.clear()
            self._mark_keys.clear()
            self.phase_peaks.clear()
            self.outlooks.clear()
            self.probe_samples.clear()
            self.gpu_contexts.clear()
            self.table.flags.clear()
        self._update_status()
        self.poller.poll_now()

    def action_replay_speed(self, factor: float) -> None:
        src: Any = self.source
        speed = getattr(src, "speed", 1.0) or 1.0
        src.set_speed(min(max(speed * factor, 0.125), 64.0))
        self._update_status()

    # signals
    def action_signal(self, name: str) -> None:
        if self.readonly:  # belt and braces: the keys do not exist in read-only mode
            return
        proc = self.table.selected
        if proc is None:
            what = ("a job's row is several processes: open it (g) and select one rank"
                    if self.table.selected_job is not None else "no process selected")
            self.notify(what, severity="warning", markup=False)
            return
        sig = int(getattr(_signal, name))

        def answered(confirm: bool | None) -> None:
            if confirm:
                self.send_signal(proc, sig)

        self.push_screen(_screens().ConfirmSignalScreen(proc, sig), answered)

    def send_signal(self, proc: ProcessSample, sig: int) -> None:
        """Send ``sig`` via gpumem_tui.support.signals; refusals and errors become notifications."""
        from gpumem_tui.support import signals

        name = _screens().signal_name(sig)
        try:
            refusal = signals.send_signal(proc.pid, proc.start_time, sig)
        except Exception as exc:  # noqa: BLE001 -- never let a signal error kill the dashboard
            refusal = f"{type(exc).__name__}: {exc}"
        if refusal:
            self.notify(
                f"{name} not sent to PID {proc.pid}: {printable(str(refusal), 300)}",
                title="Signal refused", severity="error", timeout=8, markup=False,
            )
        else:
            self.notify(f"{name} sent to PID {proc.pid} ({printable(proc.command or '', 80)})",
                        title="Signal", timeout=5, markup=False)

    async def action_quit(self) -> None:
        self.poller.stop()
        self.exit()


def _checked_keymap(keymap: tuple[tuple[str, str], ...]) -> tuple[Any, Any]:
    """:func:`gpumem_tui.ui.config.check_signal_keys` of ``keymap`` (imported only when there is one)."""
    from gpumem_tui.ui.config import check_signal_keys

    return check_signal_keys(keymap, binding_defaults()) if keymap else ((), ())


def binding_defaults() -> dict[str, str]:
    """Every binding id of the dashboard (its screens, the table, Textual's own) with its
    default keys; a binding without an id is named by its action."""
    screens = _screens()
    out: dict[str, str] = {}
    for owner in (GpuMemApp, ProcessTable, screens.HelpScreen, screens.ProcessDetailScreen, screens.ConfirmSignalScreen):
        for klass in owner.__mro__:
            for binding in vars(klass).get("BINDINGS", ()):
                if isinstance(binding, tuple):
                    binding = Binding(*binding)
                out.setdefault(binding.id or f"{klass.__name__}.{binding.action}", binding.key)
    for binding in SIGNAL_BINDINGS:
        out[binding.id] = binding.key
    return out
