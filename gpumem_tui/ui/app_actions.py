"""The dashboard's key bindings and the actions they run (mixed into
:class:`gpumem_tui.ui.app.GpuMemApp`).

What each key may do where the focus is (:meth:`DashboardActions.check_action`), the filter
box, the chart keys (target, bands, scale, time window), dropping a what-if, the replay's
pause / seek / speed and quitting. The keys that open a screen or a pane (help, detail, signal
confirmation, the estimator pane) are in :mod:`gpumem_tui.ui.app_screens`.
"""

from __future__ import annotations

from typing import Any

from textual.binding import Binding

from gpumem_tui.support.text import printable
from gpumem_tui.ui.app_common import is_text_field
from gpumem_tui.ui.device_panel import DevicePanel
from gpumem_tui.ui.memory_chart import MemoryChart
from gpumem_tui.ui.process_table import ProcessTable

# Down to 2 s: an H100 training step of 300 ms spans a few character cells there.
CHART_WINDOWS = (2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 6 * 3600.0)

SIGNAL_BINDINGS = (
    Binding("I", "signal('SIGINT')", "SIGINT", id="signal_int", tooltip="Send SIGINT to the selected process (asks first)"),
    Binding("T", "signal('SIGTERM')", "SIGTERM", id="signal_term", tooltip="Send SIGTERM to the selected process (asks first)"),
    Binding("K", "signal('SIGKILL')", "SIGKILL", id="signal_kill", tooltip="Send SIGKILL to the selected process (asks first)"),
)
REPLAY_ACTIONS = {"replay_pause", "replay_seek", "replay_speed"}

#: The dashboard's own bindings (``GpuMemApp.BINDINGS``); the signal keys are added only when
#: not read-only, the table's sort and job keys are the table's.
DASHBOARD_BINDINGS = [
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


class DashboardActions:
    """The key actions of :class:`gpumem_tui.ui.app.GpuMemApp` (a mixin: it uses the app's
    widgets, ``source``, ``poller`` and the other mixins' methods)."""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self._exiting:
            # A key typed right after `q` (queued behind it) would mount its widget or screen
            # into an app being torn down: MountError, or NoMatches in the screen's on_mount.
            return action == "quit"
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

    async def action_filter(self) -> None:
        box = self.filter_box
        if not self._filter_mounted:
            # Mounted on first use, between the table's note and the chart: hidden in the first
            # frame, its styles (Input's CSS, one more widget to style) cost start-up ~1.5 %.
            self._filter_mounted = True
            await self._left_column.mount(box, before=self.chart)
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
        self.update_side_pane()

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
        self.update_side_pane()

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
            self.forget_history()  # time went backwards: start the curves again
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

    async def action_quit(self) -> None:
        self.poller.stop()
        self.exit()
