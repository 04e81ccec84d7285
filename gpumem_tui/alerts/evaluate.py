"""Alert evaluation: which rules (gpumem_tui.alerts.rules) fire on this poll, and what each measured.

Headless: plain inputs in, plain :class:`Alert` values out; the dashboard (gpumem_tui.ui.alerting)
rings the bell and shows the notice, gpumem_tui.alerts.actions runs the hooks.

Per poll the evaluator takes the :class:`~gpumem_tui.telemetry.model.Snapshot` (per-GPU NVML used /
total, which GPUs exist, whether NVML answered) and one :class:`JobInput` per probed job. Times are
the snapshot's (epoch seconds), so a replayed trace alerts as it would have live.

Rate limiting, per (rule, subject) where the subject is a GPU, a PID or NVML itself:
- ``for`` (``AlertRule.hold_seconds``): the condition must hold on every poll for that long
  before the alert fires (Prometheus alerting rules' ``for:`` clause, "Alerting rules",
  prometheus.io/docs/prometheus/latest/configuration/alerting_rules/);
- ``repeat``: after firing, the same rule does not fire again for the same subject for that many
  seconds, whether the condition held throughout or came back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpumem_tui.alerts.rules import (
    DRIFT,
    GPU_LOST,
    MEMORY_ABOVE,
    TIME_TO_OOM_BELOW,
    WILL_NOT_FIT,
    AlertRule,
)
from gpumem_tui.telemetry.model import Snapshot
from gpumem_tui.support.text import printable
from gpumem_tui.support.units import format_bytes


@dataclass(frozen=True, slots=True)
class JobInput:
    """What the evaluator knows of one probed job on this poll. None: unknown.

    ``predicted_peak_bytes``: the job's own estimate's peak (``Estimate.peak_bytes``, NVML used on
    CUDA, CUDA context included). ``used_bytes``: NVML used by this PID on ``gpu`` now.
    ``seconds_to_oom``: a forecast of the seconds until its GPU runs out of memory.
    ``drift_bytes_per_step``: the steady per-step rise (gpumem_tui.telemetry.step_peaks.step_drift), None
    when no drift is detected. ``label``: a short name (model), shown literally.
    """

    pid: int
    gpu: int | None = None
    predicted_peak_bytes: int | None = None
    used_bytes: int | None = None
    seconds_to_oom: float | None = None
    drift_bytes_per_step: float | None = None
    label: str = ""


@dataclass(frozen=True, slots=True)
class Alert:
    """One firing. ``subject``: ``"GPU 0"``, ``"PID 1234"`` or ``"NVML"``. ``value`` and
    ``threshold`` are in ``unit`` ("%", "bytes", "s", "bytes/step", or "" for a loss, where
    ``value`` is 1). ``message`` says in words what was measured against what rule;
    ``time``: the snapshot's epoch seconds."""

    rule: AlertRule
    subject: str
    value: float
    threshold: float | None
    unit: str
    message: str
    time: float
    gpu: int | None = None
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class _Finding:
    subject: str
    value: float
    threshold: float | None
    unit: str
    message: str
    gpu: int | None = None
    pid: int | None = None


def _watched(rule: AlertRule, gpu: int | None) -> bool:
    return rule.gpus is None or (gpu is not None and gpu in rule.gpus)


class AlertEngine:
    """Evaluates ``rules`` poll after poll, keeping the state that ``for``, ``repeat`` and "lost"
    need (GPUs seen, whether NVML ever answered). Not thread-safe: call from one thread."""

    def __init__(self, rules: Sequence[AlertRule]) -> None:
        self.rules = tuple(rules)
        self._since: dict[tuple[int, str], float] = {}  # (rule index, subject) -> first poll true
        self._fired: dict[tuple[int, str], float] = {}  # (rule index, subject) -> last firing
        self._seen_gpus: set[int] = set()
        self._nvml_worked = False
        self._last_time: float | None = None

    def evaluate(self, snapshot: Snapshot, jobs: Iterable[JobInput] = ()) -> list[Alert]:
        """The alerts that fire on ``snapshot`` (rules in config order)."""
        now = snapshot.time
        if now == self._last_time:  # the same reading again (a paused or finished replay): nothing new
            return []
        if self._last_time is not None and now < self._last_time:  # a replay went back: start again
            self._since.clear()
            self._fired.clear()
        self._last_time = now
        jobs = tuple(jobs)
        fired: list[Alert] = []
        for index, rule in enumerate(self.rules):
            holding = set()
            for finding in self._findings(rule, snapshot, jobs):
                key = (index, finding.subject)
                holding.add(key)
                since = self._since.setdefault(key, now)
                last = self._fired.get(key)
                if now - since < rule.hold_seconds or (last is not None and now - last < rule.repeat_seconds):
                    continue
                self._fired[key] = now
                fired.append(Alert(rule, finding.subject, finding.value, finding.threshold, finding.unit,
                                   f"{finding.message} (rule {rule.name}: {rule.describe()})", now,
                                   finding.gpu, finding.pid))
            for key in [k for k in self._since if k[0] == index and k not in holding]:
                del self._since[key]  # the condition stopped holding: `for` starts again
        self._forget_old(now)
        self._remember(snapshot)
        return fired

    def _forget_old(self, now: float) -> None:
        # a firing older than its rule's repeat no longer limits anything (PIDs come and go)
        for key in [k for k, t in self._fired.items() if now - t >= self.rules[k[0]].repeat_seconds]:
            del self._fired[key]

    def _remember(self, snapshot: Snapshot) -> None:
        if snapshot.nvml_error is None:
            self._nvml_worked = True
            self._seen_gpus.update(d.index for d in snapshot.devices if d.error is None)

    def _findings(self, rule: AlertRule, snap: Snapshot, jobs: Sequence[JobInput]) -> Iterable[_Finding]:
        if rule.kind == MEMORY_ABOVE:
            return _memory_above(rule, snap)
        if rule.kind == WILL_NOT_FIT:
            return _will_not_fit(rule, snap, jobs)
        if rule.kind == TIME_TO_OOM_BELOW:
            return _time_to_oom(rule, jobs)
        if rule.kind == DRIFT:
            return _drift(rule, jobs)
        if rule.kind == GPU_LOST:
            return self._lost(rule, snap)
        return ()

    def _lost(self, rule: AlertRule, snap: Snapshot) -> list[_Finding]:
        if snap.nvml_error is not None:
            if not self._nvml_worked:
                return []  # never had NVML (no GPU here): nothing was lost
            why = printable(snap.nvml_error, 120)
            return [_Finding("NVML", 1.0, None, "", f"NVML: failing after it had worked ({why})")]
        found = []
        present = {d.index: d for d in snap.devices}
        for index in sorted(self._seen_gpus | {i for i, d in present.items() if d.error is not None}):
            if not _watched(rule, index):
                continue
            device = present.get(index)
            if device is None:
                found.append(_Finding(f"GPU {index}", 1.0, None, "", f"GPU {index}: lost (no longer listed by NVML)",
                                      gpu=index))
            elif device.error is not None:
                found.append(_Finding(f"GPU {index}", 1.0, None, "",
                                      f"GPU {index}: lost ({printable(device.error, 120)})", gpu=index))
        return found


def _memory_above(rule: AlertRule, snap: Snapshot) -> list[_Finding]:
    found = []
    for d in snap.devices:
        total, used = d.memory_total_bytes, d.memory_used_bytes
        if not _watched(rule, d.index) or not total or used is None or rule.threshold is None:
            continue
        percent = 100.0 * used / total
        if percent > rule.threshold:
            found.append(_Finding(f"GPU {d.index}", percent, rule.threshold, "%",
                                  f"GPU {d.index}: {percent:.1f} % of {format_bytes(total)} used "
                                  f"({format_bytes(used)}, NVML)", gpu=d.index))
    return found


def _job_name(job: JobInput) -> str:
    label = printable(job.label, 48) if job.label else ""
    return f"PID {job.pid} ({label})" if label else f"PID {job.pid}"


def _will_not_fit(rule: AlertRule, snap: Snapshot, jobs: Sequence[JobInput]) -> list[_Finding]:
    """A job's predicted peak above what its GPU can give it: the GPU's total less what the other
    processes use (NVML used of the GPU less the job's own NVML used)."""
    devices = {d.index: d for d in snap.devices}
    found = []
    for job in jobs:
        device = devices.get(job.gpu) if job.gpu is not None else None
        if device is None or job.predicted_peak_bytes is None or not _watched(rule, job.gpu):
            continue
        total, used = device.memory_total_bytes, device.memory_used_bytes
        if not total or used is None:
            continue
        others = max(0, used - (job.used_bytes or 0))
        room = total - others
        if job.predicted_peak_bytes > room:
            found.append(_Finding(
                f"PID {job.pid}", float(job.predicted_peak_bytes), float(room), "bytes",
                f"{_job_name(job)} on GPU {job.gpu} will not fit: predicted peak {format_bytes(job.predicted_peak_bytes)}"
                f" > {format_bytes(room)} it can have ({format_bytes(total)} total, {format_bytes(others)} used by "
                f"other processes, NVML)", gpu=job.gpu, pid=job.pid))
    return found


def _time_to_oom(rule: AlertRule, jobs: Sequence[JobInput]) -> list[_Finding]:
    found = []
    for job in jobs:
        seconds = job.seconds_to_oom
        if seconds is None or rule.threshold is None or not _watched(rule, job.gpu) or seconds >= rule.threshold:
            continue
        where = f" on GPU {job.gpu}" if job.gpu is not None else ""
        found.append(_Finding(f"PID {job.pid}", float(seconds), rule.threshold, "s",
                              f"{_job_name(job)}{where}: out of memory in about {seconds:.0f} s",
                              gpu=job.gpu, pid=job.pid))
    return found


def _drift(rule: AlertRule, jobs: Sequence[JobInput]) -> list[_Finding]:
    found = []
    for job in jobs:
        rise = job.drift_bytes_per_step
        if rise is None or rise <= 0 or not _watched(rule, job.gpu) or rise < (rule.threshold or 0.0):
            continue
        where = f" on GPU {job.gpu}" if job.gpu is not None else ""
        found.append(_Finding(f"PID {job.pid}", float(rise), rule.threshold, "bytes/step",
                              f"{_job_name(job)}{where}: memory drifts up {format_bytes(rise)} per step (leak?)",
                              gpu=job.gpu, pid=job.pid))
    return found
