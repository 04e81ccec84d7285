"""Time to out-of-memory of a probed job, from its per-step peaks.

Headless: pure Python over :class:`~gpumem_tui.telemetry.step_peaks.StepPeak` values (no Textual, no
torch). ``compare`` (``--limit``), the dashboard's process row and comparison pane, and the
exporter (``gpumem_process_seconds_to_oom``) all call :func:`forecast`, so they agree.

The rule, bytes and seconds throughout:

- **bytes per step**: the drift fit of :func:`gpumem_tui.telemetry.step_peaks.step_drift_fit` (least
  squares over the last steps, R² >= 0.8, of the per-step peak, else of the memory left after
  each step); none when that fit finds no steady rise, with its reason;
- **seconds per step**: ``(end of the last fitted step - end of the first) / (their step
  numbers' difference)``, from the probe's phase high-water marks' end times;
- **latest peak**: the highest per-step peak of the last :data:`LATEST_STEPS` steps (the last
  one may still be running, so it alone can be low);
- **limit**: what the job's measured figure (torch allocated on CUDA, the tracker's live
  tensor bytes on the CPU) may reach: the user's ``--limit``, or on a live GPU
  :func:`live_limit`;
- ``steps_to_limit = floor((limit - latest peak) / bytes per step)`` (0 when already there),
  ``seconds_to_limit = steps_to_limit * seconds per step``: a straight-line extrapolation of
  the fitted rise (it says when the line meets the limit, not what else the job allocates).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpumem_tui.support import units
from gpumem_tui.telemetry.step_peaks import Drift, StepPeak, step_drift_fit
from gpumem_tui.telemetry.model import Snapshot

#: Steps whose highest peak is the latest peak (the last step may be half done).
LATEST_STEPS = 3
#: The reason when no limit is known (``compare`` without ``--limit``).
NO_LIMIT = "no limit known: pass --limit"

#: The reason on a live dashboard when the process has no GPU figures to count against.
NO_LIVE_LIMIT = "no limit known: NVML gives no free memory for this process's GPU"

__all__ = ["Forecast", "LATEST_STEPS", "NO_LIMIT", "NO_LIVE_LIMIT", "forecast", "format_duration", "live_limit",
           "snapshot_limit"]


@dataclass(frozen=True, slots=True)
class Forecast:
    """What :func:`forecast` found; None figures have their reason.

    ``drift`` (bytes per step) or ``drift_reason``; ``seconds_per_step`` (None: fewer than two
    timed steps); ``limit_bytes`` (None: none known); ``latest_peak_bytes`` (None: no steps);
    ``steps_to_limit`` (whole steps that still fit) and ``seconds_to_limit``, or ``reason``
    (the first thing missing: no drift, a poor fit, no limit, no step times).
    """

    drift: Drift | None
    drift_reason: str | None
    seconds_per_step: float | None
    limit_bytes: int | None
    latest_peak_bytes: int | None
    steps_to_limit: int | None
    seconds_to_limit: float | None
    reason: str | None

    def text(self) -> str:
        """``"+12 MiB per step: out of memory in ~340 steps (~25 min)"``, or what is missing:
        ``"no time-to-OOM: fit too poor (R² 0.31)"`` (binary MiB)."""
        if self.drift is None:
            return f"no time-to-OOM: {self.drift_reason or 'no drift'}"
        rate = self.drift.text().split(" over ")[0]
        if self.steps_to_limit is None:
            return f"{rate}: no time-to-OOM ({self.reason})"
        when = f"~{self.steps_to_limit} steps"
        if self.seconds_to_limit is not None:
            when += f" ({format_duration(self.seconds_to_limit)})"
        return f"{rate}: out of memory in {when}"

    def short(self) -> str | None:
        """``"OOM ~25 min"`` (or ``"OOM ~340 steps"`` without step times) for a table row;
        None when there is no time-to-OOM."""
        if self.steps_to_limit is None:
            return None
        if self.seconds_to_limit is not None:
            return f"OOM {format_duration(self.seconds_to_limit)}"
        return f"OOM ~{self.steps_to_limit} steps"

    def to_json(self) -> dict[str, Any]:
        """``compare --json``'s fields: ``drift`` ({"bytes_per_step", "over_steps", "steps",
        "first_step", "last_step", "what", "r2", "text"} or null), ``drift_reason``,
        ``seconds_per_step``, ``limit_bytes``, ``latest_peak_bytes``, ``steps_to_limit``,
        ``seconds_to_limit``, ``forecast_reason`` (why ``steps_to_limit`` or
        ``seconds_to_limit`` is null), ``forecast_text`` (:meth:`text`)."""
        drift = None if self.drift is None else {
            "bytes_per_step": round(self.drift.bytes_per_step),
            "over_steps": self.drift.steps,
            "steps": self.drift.steps,
            "first_step": self.drift.first_step,
            "last_step": self.drift.last_step,
            "what": self.drift.what,
            "r2": round(self.drift.fit, 4),
            "text": self.drift.text(),
        }
        return {
            "drift": drift,
            "drift_reason": self.drift_reason,
            "seconds_per_step": None if self.seconds_per_step is None else round(self.seconds_per_step, 4),
            "limit_bytes": self.limit_bytes,
            "latest_peak_bytes": self.latest_peak_bytes,
            "steps_to_limit": self.steps_to_limit,
            "seconds_to_limit": None if self.seconds_to_limit is None else round(self.seconds_to_limit, 1),
            "forecast_reason": self.reason,
            "forecast_text": self.text(),
        }


def format_duration(seconds: float) -> str:
    """An approximate duration: ``~`` and :func:`gpumem_tui.support.units.format_duration`
    (``"~45 s"``, ``"~25 min"``, ``"~5.2 h"``, ``"~3.0 d"``)."""
    return "~" + units.format_duration(seconds)


def _seconds_per_step(steps: Sequence[StepPeak], drift: Drift | None) -> float | None:
    """Mean seconds per step between the first and last timed step (of the fitted ones when
    there is a drift); None with fewer than two timed steps or no time passing."""
    timed = [s for s in steps if s.end is not None and s.step > 0
             and (drift is None or drift.first_step <= s.step <= drift.last_step)]
    if len(timed) < 2:
        return None
    first, last = timed[0], timed[-1]
    seconds = float(last.end) - float(first.end)  # type: ignore[arg-type]
    if last.step <= first.step or not math.isfinite(seconds) or seconds <= 0:
        return None
    return seconds / (last.step - first.step)


def forecast(steps: Sequence[StepPeak], limit_bytes: int | None, no_limit: str = NO_LIMIT) -> Forecast:
    """The time-to-OOM of a job whose per-step peaks are ``steps`` (step order), against
    ``limit_bytes`` (in the figure of the steps' peaks; None: ``no_limit`` is the reason).
    See the module docstring for every formula. Never raises for the values it is given."""
    drift, drift_reason = step_drift_fit(steps)
    per_step = _seconds_per_step(steps, drift)
    latest = max((s.peak_bytes for s in steps[-LATEST_STEPS:]), default=None)
    steps_left: int | None = None
    seconds: float | None = None
    reason: str | None = None
    if drift is None:
        reason = drift_reason or "no drift"
    elif limit_bytes is None:
        reason = no_limit
    elif latest is not None:
        steps_left = max(0, math.floor((limit_bytes - latest) / drift.bytes_per_step))
        if per_step is None:
            reason = "no step times: the time-to-OOM is in steps only"
        else:
            seconds = steps_left * per_step
    return Forecast(drift, drift_reason, per_step, limit_bytes, latest, steps_left, seconds, reason)


def live_limit(free_bytes: int | None, own_used_bytes: int | None, own_context_bytes: int | None) -> int | None:
    """What a live CUDA job's torch allocated may reach on its GPU: ``NVML free + its own NVML
    used - its CUDA context`` (NVML's device "free" and per-process "used",
    nvmlDeviceGetMemoryInfo / nvmlDeviceGetComputeRunningProcesses; the context as
    :class:`~gpumem_tui.telemetry.measured_context.ContextMeter` measured it, 0 when not measured). The
    allocator's cached free blocks count as room (they serve new tensors); fragmentation is
    not modelled, so this is an upper figure. None when a figure is missing or the result is
    not positive."""
    if free_bytes is None or own_used_bytes is None:
        return None
    limit = free_bytes + own_used_bytes - (own_context_bytes or 0)
    return limit if limit > 0 else None


def snapshot_limit(snap: Snapshot | None, pid: int, own_context_bytes: int | None = None) -> int | None:
    """:func:`live_limit` of ``pid`` from one poll: its NVML rows with a "used" figure (summed:
    NVML may list a process as compute and graphics) and that GPU's free memory (NVML's ``free``, else ``total - used``). None without such a row (a CPU
    job, NVML without per-process figures) or when the process is on several GPUs (no single
    limit)."""
    if snap is None:
        return None
    rows = [p for p in snap.processes if p.pid == pid and p.device_index is not None
            and p.used_memory_bytes is not None]
    if len({p.device_index for p in rows}) != 1:
        return None
    device = next((d for d in snap.devices if d.index == rows[0].device_index), None)
    if device is None:
        return None
    free = device.memory_free_bytes
    if free is None and device.memory_total_bytes is not None and device.memory_used_bytes is not None:
        free = device.memory_total_bytes - device.memory_used_bytes
    own = sum(row.used_memory_bytes or 0 for row in rows)  # a compute and a graphics row: both its own
    return live_limit(free, own, own_context_bytes)
