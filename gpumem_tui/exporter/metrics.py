"""Prometheus metric families built from the dashboard's telemetry (``LiveSource`` Snapshots).

:class:`ExporterState` is fed one :class:`~gpumem_tui.telemetry.model.Snapshot` per poll
(``update``) and is registered as a ``prometheus_client`` collector: every scrape reads the
families of the latest poll, so a scrape never waits for NVML.

Metric names and labels are those of issue 12. Units: bytes, watts, degrees Celsius,
utilisation as a ratio 0-1 (NVML's ``utilization.gpu`` percent / 100, nvmlDeviceGetUtilizationRates).

Label cardinality stays bounded: only processes in the latest snapshot are exported (ended
processes disappear at the next poll), commands are cut to :data:`COMMAND_LIMIT` characters,
at most :data:`MAX_PROCESS_SERIES` process series are exported (the largest first), and probe
state is forgotten for PIDs no longer seen.

Probe figures and their scope (never mixed): on CUDA, ``gpumem_probe_measured_peak_bytes``
is the highest NVML "used" figure the exporter saw for the PID and
``gpumem_probe_predicted_peak_bytes`` is the estimator's ``Estimate.peak_bytes`` (its
NVML-used-like peak, CUDA context included; see /work/shared/ESTIMATOR.md). On the CPU (no
NVML figure) the measured peak is the probe tracker's highest live tensor bytes
(ProbeSample.allocated_bytes / PhasePeak.peak_bytes) and the predicted one the estimator's peak
for the CPU profile. The ``device`` label says which ("cuda" or "cpu").
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpumem_tui.process_estimate import ProcessEstimates, device_kind
from gpumem_tui.telemetry.model import Phase, ProbeInfo, Snapshot
from gpumem_tui.text import printable

COMMAND_LIMIT = 80
MAX_PROCESS_SERIES = 512


def _value(x: float | int | None) -> float | None:
    """A finite float or None (NaN/inf from a broken reading is dropped, not exported)."""
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class _ProbeState:
    """What the exporter keeps per probed PID between polls (samples arrive once each)."""

    __slots__ = ("device", "measured_peak", "step", "phase", "mark_time")

    def __init__(self) -> None:
        self.device: str | None = None
        self.measured_peak: int | None = None
        self.step: int | None = None
        self.phase: Phase | None = None
        self.mark_time = float("-inf")


class ExporterState(Collector):
    """The latest poll's metrics, served to every scrape; thread-safe.

    ``update(snapshot, poll_seconds)`` is called by the poll thread; ``collect()`` by
    prometheus_client for each scrape. Never raises for data it reads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._poll_seconds: float | None = None
        self._polls = 0
        self._poll_errors = 0
        self._estimates = ProcessEstimates()
        self._infos: dict[int, ProbeInfo] = {}
        self._probes: dict[int, _ProbeState] = {}

    def poll_failed(self) -> None:
        """Count a poll that raised (the previous data is kept)."""
        with self._lock:
            self._poll_errors += 1

    def update(self, snap: Snapshot, poll_seconds: float) -> None:
        """Fold one Snapshot (and how long ``LiveSource.poll`` took, seconds) into the state."""
        with self._lock:
            self._snapshot = snap
            self._poll_seconds = poll_seconds
            self._polls += 1
            nvml_used = {}
            for p in snap.processes:
                if p.used_memory_bytes is not None:
                    nvml_used[p.pid] = nvml_used.get(p.pid, 0) + p.used_memory_bytes
            for info in snap.probe_infos:
                if info.ended:
                    self._infos.pop(info.pid, None)
                else:
                    self._infos[info.pid] = info
            for sample in snap.probes:
                state = self._probes.setdefault(sample.pid, _ProbeState())
                state.device = device_kind(sample.device)
                if state.device == "cpu":
                    peak = max(sample.allocated_bytes, sample.peak_allocated_bytes or 0)
                    state.measured_peak = max(state.measured_peak or 0, peak)
            for peak in snap.phase_peaks:
                state = self._probes.setdefault(peak.pid, _ProbeState())
                if device_kind(peak.device) == "cpu":
                    state.measured_peak = max(state.measured_peak or 0, peak.peak_bytes)
            for mark in snap.phase_marks:
                state = self._probes.setdefault(mark.pid, _ProbeState())
                if mark.time >= state.mark_time:
                    state.mark_time, state.step, state.phase = mark.time, mark.step, mark.phase
            for pid, state in self._probes.items():
                if state.device != "cpu" and pid in nvml_used:
                    state.device = "cuda"
                    state.measured_peak = max(state.measured_peak or 0, nvml_used[pid])
            alive = {p.pid for p in snap.processes} | set(self._infos)
            self._probes = {pid: s for pid, s in self._probes.items() if pid in alive}
            self._infos = {pid: i for pid, i in self._infos.items() if pid in alive}
            for pid, info in self._infos.items():
                state = self._probes.get(pid)
                self._estimates.update_probe(info, state.device if state else None)
            self._estimates.prune(self._infos)

    def describe(self) -> Iterator[Any]:
        """No fixed description: the families depend on the data (prometheus_client calls
        ``collect`` at registration otherwise)."""
        return iter(())

    def collect(self) -> Iterator[Any]:
        """The metric families of the latest poll (prometheus_client Collector protocol)."""
        with self._lock:
            yield from self._families()

    def _families(self) -> Iterator[Any]:
        snap = self._snapshot
        up = GaugeMetricFamily("gpumem_exporter_nvml_up",
                               "1 when NVML answered at the latest poll, 0 without a driver/library")
        up.add_metric([], 0.0 if snap is None or snap.nvml_error is not None else 1.0)
        yield up
        dur = GaugeMetricFamily("gpumem_exporter_poll_duration_seconds",
                                "Seconds the latest telemetry poll (NVML + host + probes) took")
        if self._poll_seconds is not None:
            dur.add_metric([], self._poll_seconds)
        yield dur
        polls = CounterMetricFamily("gpumem_exporter_polls", "Telemetry polls done")
        polls.add_metric([], float(self._polls))
        yield polls
        errors = CounterMetricFamily("gpumem_exporter_poll_errors", "Telemetry polls that raised")
        errors.add_metric([], float(self._poll_errors))
        yield errors
        if snap is None:
            return
        yield from self._device_families(snap)
        yield from self._process_families(snap)
        yield from self._probe_families()

    def _device_families(self, snap: Snapshot) -> Iterator[Any]:
        labels = ["gpu", "uuid", "name"]
        fams = {
            "used": GaugeMetricFamily("gpumem_gpu_memory_used_bytes", "GPU memory used (NVML used), bytes", labels=labels),
            "total": GaugeMetricFamily("gpumem_gpu_memory_total_bytes", "GPU memory total (NVML), bytes", labels=labels),
            "util": GaugeMetricFamily("gpumem_gpu_utilization_ratio", "GPU utilization (NVML utilization.gpu), 0-1", labels=labels),
            "temp": GaugeMetricFamily("gpumem_gpu_temperature_celsius", "GPU temperature, degrees Celsius", labels=labels),
            "power": GaugeMetricFamily("gpumem_gpu_power_watts", "GPU power draw, watts", labels=labels),
        }
        for d in snap.devices:
            if d.error is not None:
                continue
            values = [str(d.index), printable(d.uuid or "", limit=96), printable(d.name or "", limit=96)]
            util = _value(d.utilization_gpu_percent)
            for key, v in (("used", d.memory_used_bytes), ("total", d.memory_total_bytes),
                           ("util", None if util is None else util / 100.0),
                           ("temp", d.temperature_c), ("power", d.power_draw_w)):
                v = _value(v)
                if v is not None:
                    fams[key].add_metric(values, v)
        yield from fams.values()

    def _process_families(self, snap: Snapshot) -> Iterator[Any]:
        fam = GaugeMetricFamily("gpumem_process_memory_used_bytes",
                                "GPU memory used by a process (NVML per-process used), bytes",
                                labels=["gpu", "pid", "user", "command"])
        rows = [p for p in snap.processes if p.device_index is not None and _value(p.used_memory_bytes) is not None]
        rows.sort(key=lambda p: p.used_memory_bytes or 0, reverse=True)
        for p in rows[:MAX_PROCESS_SERIES]:
            fam.add_metric([str(p.device_index), str(p.pid), printable(p.user or "", limit=32),
                            printable(p.command or "", limit=COMMAND_LIMIT)], float(p.used_memory_bytes or 0))
        yield fam

    def _probe_families(self) -> Iterator[Any]:
        labels = ["pid", "device"]
        measured = GaugeMetricFamily("gpumem_probe_measured_peak_bytes",
                                     "Highest memory seen for a probed process (cuda: NVML used; cpu: probe tracker), bytes",
                                     labels=labels)
        predicted = GaugeMetricFamily("gpumem_probe_predicted_peak_bytes",
                                      "Estimator peak for the probe's setup (cuda: NVML-used scope), bytes",
                                      labels=labels)
        step = GaugeMetricFamily("gpumem_probe_step", "Training step the probe reported last", labels=["pid"])
        phase = GaugeMetricFamily("gpumem_probe_phase", "1 for the phase the probe is in", labels=["pid", "phase"])
        for pid in sorted(set(self._probes) | set(self._infos)):
            state = self._probes.get(pid) or _ProbeState()
            device = state.device or "unknown"
            if state.measured_peak is not None:
                measured.add_metric([str(pid), device], float(state.measured_peak))
            est = self._estimates.get(pid)
            peak = _value(getattr(getattr(est, "estimate", None), "peak_bytes", None))
            if peak is not None and state.device is not None:
                predicted.add_metric([str(pid), device], peak)
            if state.step is not None:
                step.add_metric([str(pid)], float(state.step))
            if state.phase is not None:
                phase.add_metric([str(pid), state.phase.value], 1.0)
        yield from (measured, predicted, step, phase)
