"""The dashboard's side of alerts: per poll, the jobs' inputs from the app's state, the bell and
the notice on the screen, and the outside actions (gpumem_tui.alerts.actions) started off the UI
thread.

A job's drift and time-to-OOM are :func:`gpumem_tui.analysis.forecast.forecast` of its per-step peaks
against its GPU's free memory + its own (the table row's figures).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpumem_tui.alerts.actions import AlertActions
from gpumem_tui.alerts.rules import DRIFT, TIME_TO_OOM_BELOW, AlertRule
from gpumem_tui.alerts.evaluate import Alert, AlertEngine, JobInput
from gpumem_tui.analysis.forecast import forecast, snapshot_limit
from gpumem_tui.telemetry.step_peaks import step_peaks
from gpumem_tui.telemetry.model import Snapshot

#: notices at most per poll: a box of 16 GPUs crossing a threshold together shows a summary
MAX_NOTICES_PER_POLL = 4


class DashboardAlerts:
    """Evaluates the config's alert rules on every snapshot the app applies.

    Args:
        app: the GpuMemApp (read: snapshot state, process estimates, phase peaks; used: bell,
            notify, call_from_thread).
        rules: the validated rules.
        actions: the outside actions (default: hooks and desktop notifications, none in a replay).
    """

    def __init__(self, app: Any, rules: Sequence[AlertRule], actions: AlertActions | None = None) -> None:
        self.app = app
        self.engine = AlertEngine(rules)
        self.actions = actions if actions is not None else AlertActions(
            on_problem=self._problem_from_thread, run_programs=not app.replay)
        self._wants_drift = any(rule.kind in (DRIFT, TIME_TO_OOM_BELOW) for rule in rules)
        self._drift: dict[int, float] = {}
        self._seconds_to_oom: dict[int, float] = {}
        self.fired: list[Alert] = []  # the latest poll's alerts (tests, status)
        self._failed = False

    def on_snapshot(self, snap: Snapshot) -> None:
        """Evaluate the rules on ``snap`` (already recorded by the app) and act on what fires.
        An error here is logged and shown once; it never ends the dashboard."""
        try:
            self.fired = self.engine.evaluate(snap, self.job_inputs(snap))
            if self.fired:
                self._act()
        except Exception as exc:  # noqa: BLE001 - alerts must never take the dashboard down
            line = f"alerts: evaluation failed: {type(exc).__name__}: {exc}"
            self.actions.log.write(line)
            if not self._failed:
                self._failed = True
                self.app.notify(f"{line} (see {self.actions.log.path})", title="Alerts", severity="error",
                                timeout=15, markup=False)

    def _act(self) -> None:
        app = self.app
        if any(alert.rule.bell for alert in self.fired):
            app.bell()
        for alert in self.fired[:MAX_NOTICES_PER_POLL]:
            app.notify(alert.message, title=f"Alert: {alert.rule.name}", severity="warning", timeout=15,
                       markup=False)
        if len(self.fired) > MAX_NOTICES_PER_POLL:
            app.notify(f"{len(self.fired) - MAX_NOTICES_PER_POLL} more alerts: see {self.actions.log.path}",
                       title="Alerts", severity="warning", timeout=15, markup=False)
        for alert in self.fired:
            self.actions.handle(alert)

    def close(self) -> None:
        """The dashboard closes: kill the hooks still running (gpumem_tui.alerts.actions)."""
        self.actions.runner.close()

    def job_inputs(self, snap: Snapshot) -> list[JobInput]:
        """One input per probed PID with its job's own (probe's) estimate: a what-if the user
        typed is not the job. Drift and ``seconds_to_oom`` are kept for the PIDs with a steady
        rise (:meth:`_update_drift`)."""
        app = self.app
        if self._wants_drift:
            self._update_drift(snap)
        gpu_of: dict[int, int] = {}
        used: dict[int, int] = {}
        for p in snap.processes:
            if p.device_index is not None:
                gpu_of.setdefault(p.pid, p.device_index)
                if p.device_index == gpu_of[p.pid] and p.used_memory_bytes is not None:
                    used[p.pid] = used.get(p.pid, 0) + p.used_memory_bytes
        inputs = []
        for pid in sorted(set(app.process_estimates.pids()) | set(self._drift)):
            job = app.process_estimates.probe_estimate(pid)
            estimate = getattr(job, "estimate", None)
            inputs.append(JobInput(
                pid=pid, gpu=gpu_of.get(pid),
                predicted_peak_bytes=getattr(estimate, "peak_bytes", None),
                used_bytes=used.get(pid),
                drift_bytes_per_step=self._drift.get(pid),
                seconds_to_oom=self._seconds_to_oom.get(pid),
                label=getattr(job, "model", "") or "",
            ))
        return inputs

    def _update_drift(self, snap: Snapshot) -> None:
        """The drift and time-to-OOM of the PIDs with new phase peaks (the table row's forecast:
        :func:`gpumem_tui.analysis.forecast.forecast` against the GPU's free memory + the job's own).
        The dashboard computed it already for this poll (``app.outlooks``): that one is used."""
        probed = getattr(self.app, "probed", None)
        computed = getattr(self.app, "outlooks", {})
        for pid in {peak.pid for peak in snap.phase_peaks}:
            outlook = computed.get(pid)
            if outlook is None:
                context = probed.context(pid) if probed is not None else None
                outlook = forecast(step_peaks(self.app.phase_peaks.get(pid, ())), snapshot_limit(snap, pid, context))
            self._seconds_to_oom.pop(pid, None)
            if outlook.drift is None:
                self._drift.pop(pid, None)
            else:
                self._drift[pid] = outlook.drift.bytes_per_step
                if outlook.seconds_to_limit is not None:
                    self._seconds_to_oom[pid] = outlook.seconds_to_limit
        for pid in [pid for pid in self._drift if pid not in self.app.phase_peaks]:  # the app forgot it
            del self._drift[pid]
            self._seconds_to_oom.pop(pid, None)

    def _problem_from_thread(self, line: str) -> None:
        """A hook's failure (on a worker thread) as a notice on the dashboard."""
        app = self.app
        try:
            app.call_from_thread(app.notify, line, title="Alert hook", severity="error", timeout=15, markup=False)
        except RuntimeError:  # the app is closing or closed: the log has the line
            pass
