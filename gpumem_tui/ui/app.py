"""The dashboard app: device panel, process table, memory chart, estimator side pane.

Data flow: a :class:`~gpumem_tui.ui.poller.Poller` thread polls any TelemetrySource and posts
frozen Snapshots; the handlers here own every state change (history, phase marks, widgets)
and re-arm the poller. Nothing in this module blocks on I/O except sending a signal, which is
a single syscall after the user confirmed it.

:class:`GpuMemApp` is the composition: its widgets, layout, start-up and shut-down, and the
messages it handles. What it does is in mixins, one module each: the keys and their actions
(:mod:`gpumem_tui.ui.app_actions`), the poll-and-apply path (:mod:`gpumem_tui.ui.app_poll`),
the chart (:mod:`gpumem_tui.ui.app_chart`), the screens and panes it opens
(:mod:`gpumem_tui.ui.app_screens`).
"""

from __future__ import annotations

from gpumem_tui.support.import_gc import ImportsOutOfCollector

# The collector would walk the ~150 000 objects these imports create, again and again while
# they are being made (~40 M instructions of the start-up): paused, then frozen (support/import_gc).
with ImportsOutOfCollector():
    from collections.abc import Iterable, Sequence
    from pathlib import Path
    from typing import Any

    from textual import on
    from textual.app import App, ComposeResult
    from textual.binding import Binding, BindingsMap
    from textual.geometry import Size
    from textual.screen import Screen
    from textual.widgets import Input, Static
    from textual.worker import Worker, WorkerState

    from gpumem_tui.telemetry.model import TelemetrySource
    from gpumem_tui.ui.app_actions import CHART_WINDOWS, DASHBOARD_BINDINGS, SIGNAL_BINDINGS, DashboardActions
    from gpumem_tui.ui.app_chart import DashboardChart
    from gpumem_tui.ui.app_common import StartupGcPause, ThemedAppMixin, is_replay
    from gpumem_tui.ui.app_poll import DashboardPoll
    from gpumem_tui.ui.app_screens import DashboardScreens, screens_module, size_class
    from gpumem_tui.ui.device_panel import DevicePanel
    from gpumem_tui.ui.memory_chart import MemoryChart
    from gpumem_tui.ui.plain_lines import KeptHorizontal, KeptScreen, KeptStatic, KeptVertical
    from gpumem_tui.ui.poller import Poller, PollFailed, SnapshotReady
    from gpumem_tui.ui.process_table import ProcessTable
    from gpumem_tui.ui.steady_footer import SteadyFooter
    from gpumem_tui.ui.themes import DEFAULT_THEME, ThemeSet

# Imported from here by tests and the launcher: the chart's windows, the signal keys, the size classes.
__all__ = ["CHART_WINDOWS", "SIGNAL_BINDINGS", "GpuMemApp", "binding_defaults", "size_class"]


class DashboardScreen(KeptScreen):
    """The dashboard's screen: Textual's default one, less the layouts for "resizes" to the
    size it is already laid out at.

    Textual 8.2 lays the screen out when it is first shown (``Screen._on_screen_resume``), then
    again for the app's start-up Resize and once more for the driver's (``App._on_resize``
    keeps that same-size event and ``App._on_idle`` forwards it): before the first frame, two
    full layouts of every widget at the same size (~15 M instructions, benchmarks/first_frame.py).
    A resize to the compositor's size is skipped here; what changed since the last layout (a
    widget shown or hidden) is laid out by the screen's update timer as usual
    (``Screen._on_timer_update``); a real change of size is laid out at once.
    """

    def _screen_resized(self, size: Size) -> None:
        if size == self._compositor.size:
            return
        super()._screen_resized(size)


class GpuMemApp(DashboardActions, DashboardScreens, DashboardPoll, DashboardChart, ThemedAppMixin, App[None]):
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

    BINDINGS = DASHBOARD_BINDINGS

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
        self.source = source
        self.interval = interval
        self.readonly = readonly
        self.replay = is_replay(source)
        self.requested_theme = theme
        self.theme_set = themes if themes is not None else ThemeSet()
        self.start_notices = list(notices)
        self.banner = banner
        self.select_pid = select_pid
        self.crash_line: str | None = None  # set when an unexpected error ended the app
        self._init_poll_state()
        self._init_probe_state(source)
        self._init_chart_state(chart_window)
        self._init_pane_state(side_pane)
        self.poller = Poller(self, source, interval)
        self._gc_frozen = False
        self._gc_pause = StartupGcPause()
        self._build_widgets()
        self._take_keymap(keymap)
        self._register_themes()
        self.alerts: Any = None
        if alerts:
            from gpumem_tui.ui.alerting import DashboardAlerts

            self.alerts = DashboardAlerts(self, alerts)
        if not readonly:
            # Signal keys exist only when not read-only: not disabled, absent.
            self._bindings = BindingsMap([*(b for _, b in self._bindings), *SIGNAL_BINDINGS])

    def _build_widgets(self) -> None:
        """The dashboard's widgets (mounted by compose)."""
        # Widgets are kept as attributes: handlers also run while a modal screen is on top,
        # where App.query would search that screen instead of the dashboard.
        # the status line is drawn again with every frame (the screen is its container): kept
        self.status_bar = KeptStatic(id="status")
        self.replay_bar = KeptStatic(id="replay-status")
        self.device_panel = DevicePanel(id="devices")
        self._left_column = KeptVertical(id="left")
        self.table = ProcessTable(id="processes")
        self.filter_box = Input(placeholder="filter: user:NAME gpu:N words (Enter keeps, Esc clears)", id="filter")
        self._filter_mounted = False  # it mounts on first use (action_filter)
        self.chart = MemoryChart(id="chart")
        self.table_empty = Static(id="table-empty")  # says why the table has no rows, or "?"

    def _take_keymap(self, keymap: Iterable[tuple[str, str]]) -> None:
        """Keep the config file's key overrides for on_mount, less the refused ones (their
        notices join ``start_notices``)."""
        # A signal key (or the confirmation) that shares a key with another action is refused.
        safe_keymap, refused = _checked_keymap(tuple(keymap))
        self._keymap_pairs = dict(safe_keymap)
        self.start_notices.extend(refused)

    # ---- layout ---------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        self._gc_pause.pause()  # until the first frame, or the side pane's mount after it
        # The size class before the widgets mount: set after, it restyles every widget again.
        self._apply_size_class(self.size.width, update=False)
        yield self.status_bar
        yield self.replay_bar
        yield self.device_panel
        with KeptHorizontal(id="main"):
            with self._left_column:
                yield self.table
                yield self.table_empty
                # the filter box (hidden until `/`) mounts there on first use: DashboardActions.action_filter
                yield self.chart
        yield SteadyFooter(compact=self.size_class != "wide")  # the size class was set above

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
        # Textual's default screen (App.get_default_screen) less same-size layouts, handing
        # back its background lines while they are unchanged (gpumem_tui.ui.plain_lines)
        screen = DashboardScreen(id="_default")
        screen.AUTO_FOCUS = ""  # no focus in the first frame: _after_first_frame gives it
        return screen

    def _after_first_frame(self) -> None:
        """What the first frame goes without: the focus (on a focus change the footer builds and
        styles its keys), the first poll (its rows; its thread's GIL) and the garbage collector
        (which waits on for the side pane's mount when one follows: _mount_side_pane)."""
        vars(self.screen_stack[0]).pop("AUTO_FOCUS", None)  # back to the app's rule
        self.table.focus()
        self.poller.start()
        if not self.side_pane_enabled or self.has_side_pane:
            self._gc_pause.resume()

    def _handle_exception(self, error: Exception) -> None:
        """An unexpected error ends the app (Textual's rule) with exit status 1; its
        traceback goes to a file and ``crash_line`` (printed by the launcher) says where."""
        from gpumem_tui.support.crash import crash_line, write_crash_report

        if self.crash_line is None:  # the first error is the cause; later ones follow from it
            self.crash_line = crash_line(error, write_crash_report(error))
        super()._handle_exception(error)
        self._exit_renderables.clear()  # the traceback is in the file, not over the terminal

    def _fatal_error(self) -> None:
        """Textual's exit after an unhandled error (``App._fatal_error``: the bell, then its
        message queue closed) without rendering the on-screen traceback that
        :meth:`_handle_exception` throws away: a rich ``Traceback`` with every frame's locals,
        about 1 s of CPU on the dashboard's stack for nothing seen."""
        self.bell()
        self._close_messages_no_wait()

    def exit(self, result: None = None, return_code: int = 0, message: Any = None) -> None:
        """Textual's ``App.exit``, but never while the side pane is still mounting.

        The pane mounts after the first frame. A quit (``q``, Ctrl-Q) during its mount made
        Textual tear down a half-composed form: a widget torn down before it composed gets no
        children (``Widget.mount`` refuses them while pruning, textual/widget.py) but still its
        Mount event, where Select's ``_on_mount`` (textual/widgets/_select.py) and the estimator
        form's ``on_mount`` look for children that never came -- NoMatches, exit status 1 and a
        crash report. So the quit waits for the mount (a fraction of a second), and a quit
        before the mount began stops it from starting (``_mount_side_pane``; it would mount into
        a ``#main`` being torn down: MountError).
        """
        self._exiting = True
        mounting = self.side_pane_mounting()
        if mounting is None:
            super().exit(result, return_code, message)
            return

        async def exit_once_mounted() -> None:
            await mounting
            if self.crash_line is None:  # an error while mounting keeps its exit status 1
                super(GpuMemApp, self).exit(result, return_code, message)

        self.call_next(exit_once_mounted)

    def on_unmount(self) -> None:
        self._gc_pause.resume()
        self.poller.stop()
        if self.alerts is not None:
            self.alerts.close()

    # ---- messages ---------------------------------------------------------------------------
    # Textual collects @on handlers only from classes of its own (its metaclass), not from
    # plain mixins: they are declared here and hand over to the mixins' methods.
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
            self.update_side_pane()

    @on(DevicePanel.RowHighlighted, "#devices")
    def _device_highlighted(self, event: DevicePanel.RowHighlighted) -> None:
        if not self.device_panel.has_focus:
            return
        index = self.device_panel.selected_index
        if index is not None and self.chart_target != ("gpu", index):
            self.chart_target = ("gpu", index)
            self._update_chart()
            self.update_side_pane()

    @on(ProcessTable.RowSelected, "#processes")
    def _process_selected(self, event: ProcessTable.RowSelected) -> None:
        self.action_detail()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.table.set_filter(event.value)
        if self._follow_filter():
            self._update_chart()
            self.update_side_pane()
        self._update_status()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            event.input.display = False
        self.table.focus()


def _checked_keymap(keymap: tuple[tuple[str, str], ...]) -> tuple[Any, Any]:
    """:func:`gpumem_tui.ui.config.check_signal_keys` of ``keymap`` (imported only when there is one)."""
    if not keymap:
        return (), ()
    from gpumem_tui.ui.config import check_signal_keys

    return check_signal_keys(keymap, binding_defaults())


def binding_defaults() -> dict[str, str]:
    """Every binding id of the dashboard (its screens, the table, Textual's own) with its
    default keys; a binding without an id is named by its action."""
    screens = screens_module()
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
