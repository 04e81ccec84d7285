"""The screens and panes the dashboard opens (mixed into :class:`gpumem_tui.ui.app.GpuMemApp`).

The modal screens (help, process detail, the signal confirmation) come from
:mod:`gpumem_tui.ui.screens`, imported on first use: none is in the first frame. The estimator /
comparison side pane (:mod:`gpumem_tui.ui.side_pane`) mounts after the first frame, shows or
hides with `e` and with the terminal's width (the size classes below), and is told what is
selected after every change. The command palette's Screenshot is
:meth:`gpumem_tui.ui.app_common.ThemedAppMixin.deliver_screenshot`.
"""

from __future__ import annotations

import signal as _signal
from typing import Any

from textual.widgets import Footer

from gpumem_tui.support.text import printable
from gpumem_tui.telemetry.model import ProcessSample
from gpumem_tui.ui.app_actions import REPLAY_ACTIONS
from gpumem_tui.ui.process_table import ProcessTable

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


def side_pane_module() -> Any:
    """gpumem_tui.ui.side_pane, imported on first use: the pane mounts after the first frame
    and the chart's bands come with the first poll."""
    from gpumem_tui.ui import side_pane

    return side_pane


def screens_module() -> Any:
    """gpumem_tui.ui.screens, imported on first use: no modal screen is in the first frame."""
    from gpumem_tui.ui import screens

    return screens


class DashboardScreens:
    """Opening the screens and the side pane of :class:`gpumem_tui.ui.app.GpuMemApp` (a mixin:
    it uses the app's widgets, snapshot, estimates and the other mixins' methods)."""

    def _init_pane_state(self, side_pane: bool) -> None:
        """The side pane's state: none mounted yet, following the terminal's width."""
        self.side_pane_enabled = side_pane
        self.has_side_pane = False
        self._side_toggled = False
        self._side_widget: Any = None  # the mounted pane: the status line asks at every poll
        self._pane_state: Any = None  # what was last pushed to the pane (side_pane.PaneState)
        self._side_mounting: Any = None  # the pane's AwaitMount: a quit waits for it (GpuMemApp.exit)
        self._exiting = False  # set by GpuMemApp.exit: no mount starts once the app is quitting
        self._what_if_shown: int | None = None  # the PID whose what-if `p` drops, when shown
        self.size_class = ""

    # ---- screens and the side pane opened --------------------------------------------------
    def _mount_side_pane(self) -> None:
        """Mount the estimator/comparison pane after the first frame.

        Its form is ~90 widgets: styling them takes longer than the rest of the dashboard,
        so the dashboard shows first and the pane follows a moment later.

        The garbage collector, paused since compose (``StartupGcPause``), stays paused until
        the pane has mounted and been drawn: that allocates ~50 000 objects that mostly stay
        (widgets, styles, their lines), for which the collector ran ~150 young, ~14 middle and
        2 full passes over every object of the process in a start with the pane and 8 pauses
        in a test process (0.2-0.3 s of CPU, gc.callbacks timings; benchmarks/side_pane_mount.py).
        """
        if self.has_side_pane or self._exiting or not self.is_running:
            self._gc_pause.resume()
            return  # mounted; or a quit came first: #main is being torn down (MountError)
        side = side_pane_module().build()
        if side is None:
            self.side_pane_enabled = False  # its widgets are not installed: there will be none
            self._gc_pause.resume()
            return
        main = self.screen_stack[0].query_one("#main")
        if not self._side_toggled:
            side.display = self.size.width >= SIDE_PANE_MIN_WIDTH
        self._side_mounting = main.mount(side)
        # #main runs its callbacks in turn, Textual's wait for this mount first (Widget.mount):
        # then, once the frame showing the pane is drawn, the collector runs again.
        main.call_next(self.call_after_refresh, self._gc_pause.resume)
        self._side_widget = side
        self.has_side_pane = True
        self.refresh_bindings()
        self._update_status()
        self.call_after_refresh(self.update_side_pane)

    def side_pane_mounting(self) -> Any:
        """The side pane's mount (an awaitable) while it is under way: the pane and all it
        composes are not mounted yet; None before it starts and once it is done."""
        side = self._side_widget
        return None if side is None or side.is_mounted else self._side_mounting

    def help_rows(self) -> list[tuple[str, str, str]]:
        """(keys, description, id) for every binding that is active here."""
        bindings = [b for _, b in self._bindings] + list(ProcessTable.SORT_BINDINGS)  # type: ignore[arg-type]
        if self.table.jobs_shown:  # the job key acts only where a job's group row is listed
            bindings += ProcessTable.JOB_BINDINGS
        skip = () if self.replay else REPLAY_ACTIONS
        return screens_module().help_rows(bindings, skip, self._keymap, self.get_key_display)

    def action_help(self) -> None:
        self.push_screen(screens_module().HelpScreen(self.help_rows()))

    def action_detail(self) -> None:
        proc = self.table.selected
        if proc is None or self.snapshot is None:
            return
        self.push_screen(screens_module().ProcessDetailScreen(proc, self.snapshot.time, self.probe_infos.get(proc.pid)))

    def action_toggle_side(self) -> None:
        if not self.has_side_pane:
            self._mount_side_pane()  # pressed before the pane came: bring it now, then toggle
        self._side_toggled = True
        for side in self.screen_stack[0].query("#side"):
            side.display = not side.display
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

        self.push_screen(screens_module().ConfirmSignalScreen(proc, sig), answered)

    def send_signal(self, proc: ProcessSample, sig: int) -> None:
        """Send ``sig`` via gpumem_tui.support.signals; refusals and errors become notifications."""
        from gpumem_tui.support import signals

        name = screens_module().signal_name(sig)
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
        self.update_side_pane()

    def on_resize(self, event: Any) -> None:
        # Narrow terminals give the whole width to the table and chart; `e` still opens the pane.
        self._apply_size_class(event.size.width)
        if self.has_side_pane and not self._side_toggled:
            for side in self.screen_stack[0].query("#side"):
                side.display = event.size.width >= SIDE_PANE_MIN_WIDTH
        # app.size is still the old one here: this handler runs before Textual's App._on_resize
        self._update_status(event.size.width)

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

    def update_side_pane(self) -> None:
        """Show the current selection in the side pane (no-op without it). The pane's form
        calls it as it mounts (EstimatorPanel.on_mount), so its first estimate has the GPU's
        total whichever came first, the first snapshot or the mount."""
        if not self.has_side_pane or not self.screen_stack:  # not mounted, or shutting down
            return
        gpu = self.selected_gpu()
        pid = self.chart_pid()
        if self.chart_target is not None and self.chart_target[0] == "gpu":
            pid = None  # the GPU chart: the form is a what-if, not a process's estimate
        pane = side_pane_module()
        measured = self.probed.summary(pid)
        selection = pane.PaneSelection(
            gpu=gpu,
            gpu_total=self.device_total(gpu),
            gpu_label=self.device_name(gpu),
            pid=pid,
            process=self.process_estimates.get(pid),
            job=self.process_estimates.probe_estimate(pid) if pid is not None else None,
            measured=measured,
            gpu_context=self.gpu_contexts.get(gpu) if gpu is not None else None,
            # the pane reads the limit only beside probe samples (side_pane._update_comparison):
            # not a pass over every process at each poll for a process without any
            limit_bytes=self.live_limit(pid) if measured is not None and measured.record.sample_count else None,
        )
        what_if = self._what_if_pid()
        if what_if != self._what_if_shown:  # `p` (back to the job's estimate) comes or goes
            self._what_if_shown = what_if
            self.refresh_bindings()
        if self._pane_state is None:
            self._pane_state = pane.PaneState()
        error = pane.push(self.screen_stack[0], self._pane_state, selection)
        if error:
            self.notify(error, title="Estimator", severity="error", markup=False)
