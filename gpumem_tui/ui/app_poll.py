"""The poll-and-apply path of the dashboard (mixed into :class:`gpumem_tui.ui.app.GpuMemApp`).

Each :class:`~gpumem_tui.telemetry.model.Snapshot` the poller posts goes through
:meth:`DashboardPoll.apply_snapshot`: its figures go into the history (the chart's curves), the
probes' samples, phase marks and high-water marks into their per-PID stores (bounded; both
by :mod:`gpumem_tui.ui.poll_record`, imported with the first snapshot), the launches into jobs; then the GPU panel, the process table (with the filter), the status line,
the chart (:mod:`gpumem_tui.ui.app_chart`), the side pane and the alerts are brought up to date.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from functools import partial
from operator import attrgetter, is_not
from typing import TYPE_CHECKING, Any

from rich.text import Text

from gpumem_tui.support.text import printable
from gpumem_tui.telemetry.model import (
    PhaseMark,
    PhasePeak,
    ProbeInfo,
    ProbeSample,
    Snapshot,
    namespace_note,
)
from gpumem_tui.ui.app_common import freeze_gc
from gpumem_tui.ui.process_columns import row_key

if TYPE_CHECKING:  # made at the first snapshot (DashboardPoll.probed, .history): not in the first frame
    from gpumem_tui.telemetry.probed_state import ProbedProcesses
    from gpumem_tui.ui.history import HistoryStore


# passes over a snapshot's processes at every poll, run in C (map), not a generator's steps
_PID = attrgetter("pid")
_LAUNCH = attrgetter("launch")
_IS_SET = partial(is_not, None)


class DashboardPoll:
    """Taking each snapshot into :class:`gpumem_tui.ui.app.GpuMemApp` (a mixin: it uses the
    app's widgets, ``poller`` and the other mixins' methods)."""

    def _init_poll_state(self) -> None:
        """What the polls gave so far: none yet."""
        self._selected_once = False
        self.snapshot: Snapshot | None = None
        self.poll_error: str | None = None
        self._history: HistoryStore | None = None  # made on first use (history)
        self.phase_marks: OrderedDict[int, deque[PhaseMark]] = OrderedDict()
        self._mark_keys: dict[int, set[tuple[float, str, int]]] = {}
        self.phase_peaks: OrderedDict[int, deque[PhasePeak]] = OrderedDict()  # high-water marks
        self.outlooks: dict[int, Any] = {}  # PID -> gpumem_tui.analysis.forecast.Forecast of its phase peaks
        self._position_notice: Any = None  # the replay's last "replay at ..." notification
        self._target_before_filter: tuple[str, int] | None = None  # charted before a filter hid all
        self._status_shown: Text | None = None
        self._status_inputs: Any = None  # what the status line shown was built from (status_line.status_inputs)
        self._previous_snapshot_time: float | None = None  # of the snapshot before the current one
        self._proc_start: dict[int, float] = {}
        self._table_note = ""

    def _init_probe_state(self, source: Any) -> None:
        """What the probed processes (and the launches among them) gave so far: none yet."""
        self.probe_infos: dict[int, ProbeInfo] = {}
        self.probe_devices: dict[int, str] = {}
        self.probe_samples: OrderedDict[int, deque[ProbeSample]] = OrderedDict()
        self._process_estimates: Any = None  # built on first use: its import is the estimator's
        self._job_tracker: Any = None  # the launches (torchrun ranks) among the processes, on first sight
        self._job_notices: set[str] = set()  # the jobs' notices shown once already
        # What each probed process measured so far (core state, the same compare folds): a
        # replay feeds its own per record and rebuilds it on a seek; otherwise each poll feeds it.
        replayed_state = getattr(source, "probed", None)
        self._probed: ProbedProcesses | None = None  # made on first use (probed)
        self._feeds_probed = True
        if replayed_state is not None:  # a replay brings its module in any case
            from gpumem_tui.telemetry.probed_state import ProbedProcesses

            self._feeds_probed = not isinstance(replayed_state, ProbedProcesses)
            self._probed = None if self._feeds_probed else replayed_state
        self.gpu_contexts: dict[int, int] = {}  # GPU index -> context after init measured on it

    @property
    def history(self) -> HistoryStore:
        """The measured curves (:class:`gpumem_tui.ui.history.HistoryStore`), made at the first
        snapshot: its module, compiled on a first start, stays out of the first frame. A
        replay seek back in time drops it (``forget_history``): the curves start again."""
        if self._history is None:
            from gpumem_tui.ui.history import HistoryStore

            self._history = HistoryStore()
        return self._history

    def forget_history(self) -> None:
        """Start the curves again (a new store at the next use)."""
        self._history = None

    @property
    def probed(self) -> ProbedProcesses:
        """What each probed process measured so far: the replay's own, else this app's, made
        at its first use (the first snapshot): its module and measured_context's, compiled on a
        first start, stay out of the first frame."""
        if self._probed is None:
            from gpumem_tui.telemetry.probed_state import ProbedProcesses

            self._probed = ProbedProcesses()
        return self._probed

    @property
    def contexts(self) -> ProbedProcesses:
        """The CUDA context per probed PID, measured here (``.context(pid)``): :attr:`probed`."""
        return self.probed

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Take one Snapshot: record history, update every widget."""
        self._previous_snapshot_time = self.snapshot.time if self.snapshot is not None else None
        self.snapshot = snap
        self.poll_error = None
        # The stores' bookkeeping comes with the first snapshot: the first frame goes without it.
        from gpumem_tui.ui.poll_record import record_snapshot

        record_snapshot(self, snap)
        for notice in snap.notices:
            self._show_notice(printable(notice, 1024))
        devices = self.device_panel
        if devices.display != bool(snap.devices):  # a style set per poll costs, even unchanged
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
        if target is not None and target[0] == "proc" and target[1] not in map(_PID, snap.processes):
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
        self.update_side_pane()
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
            if not self.probe_infos and not any(map(_IS_SET, map(_LAUNCH, snap.processes))):
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

    # ---- filter: the chart and the pane follow what the table lists ---------------------
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

    def _update_status(self, width: int | None = None) -> None:
        # Static.update re-lays out the screen: skip it when nothing changed. The line is a
        # function of its inputs: built again only when they changed (most polls change none).
        # ``width``: the new terminal width, from a Resize that app.size does not give yet.
        from gpumem_tui.ui.status_line import status_from, status_inputs

        inputs = status_inputs(self, width)
        if inputs != self._status_inputs:
            self._status_inputs = inputs
            text = status_from(*inputs)
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
