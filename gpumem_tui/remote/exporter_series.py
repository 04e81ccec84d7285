"""The exporter's Prometheus series, built from one poll (a Snapshot) at each scrape.

Prometheus naming (https://prometheus.io/docs/practices/naming/): base units in the name
(``_bytes``, ``_hertz``, ``_celsius``, ``_watts``, ``_ratio`` for 0-1, ``_total`` for a
counter). dcgm-exporter's names for the same figures are listed in ``docs/exporter.md``.

Per GPU (labels ``gpu`` index, ``uuid``, ``name``), each left out where NVML could not read it
(None, NaN or infinite: never a made-up 0):

- ``gpumem_gpu_memory_used_bytes`` / ``_total_bytes`` / ``_free_bytes`` (nvmlDeviceGetMemoryInfo),
- ``gpumem_gpu_utilization_ratio`` (SM busy) and ``gpumem_gpu_memory_utilization_ratio``
  (memory controller busy), both from nvmlDeviceGetUtilizationRates,
- ``gpumem_gpu_temperature_celsius``, ``gpumem_gpu_power_watts``, ``gpumem_gpu_power_limit_watts``,
- with the exporter's extended NVML reads: ``gpumem_gpu_sm_clock_hertz``,
  ``gpumem_gpu_memory_clock_hertz``, ``gpumem_gpu_fan_speed_ratio`` (may exceed 1: NVML gives
  percent of the rated speed), ``gpumem_gpu_pcie_transmit_bytes_per_second`` /
  ``_receive_bytes_per_second`` (NVML's rate), ``gpumem_gpu_nvlink_transmit_bytes_total`` /
  ``_receive_bytes_total`` (counters, all links), ``gpumem_gpu_mig_enabled`` (1 / 0).

Per process on a GPU (labels ``gpu``, ``uuid``, ``pid``, ``user``, ``command`` cut to
:data:`COMMAND_LIMIT` characters, and ``gpu_instance`` / ``compute_instance`` under MIG, else
empty): ``gpumem_process_memory_used_bytes`` (NVML used),
``gpumem_process_sm_utilization_ratio`` and ``gpumem_process_memory_utilization_ratio``
(nvmlDeviceGetProcessUtilization ``smUtil`` / ``memUtil``). Per process on the host (labels
``pid``, ``user``, ``command``; once per PID even when it uses several GPUs):
``gpumem_process_host_cpu_ratio`` (CPU time per second: 1 = one core busy) and
``gpumem_process_host_rss_bytes``. Only the processes of the last poll are exported, so ended
processes drop out and the label sets stay bounded.

Per probed process whose per-step peak rises steadily: ``gpumem_probe_drift_bytes_per_step``
(label ``pid``) and, with a time-to-OOM, ``gpumem_process_seconds_to_oom`` (labels ``gpu``,
``uuid``, ``pid``) (:mod:`gpumem_tui.analysis.forecast`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from gpumem_tui.analysis.forecast import forecast, snapshot_limit
from gpumem_tui.telemetry.model import DeviceSample, PhaseMark, Snapshot
from gpumem_tui.support.text import printable

COMMAND_LIMIT = 80  # label values are kept short: a long command line would bloat every scrape
NAME_LIMIT = 64

GPU_LABELS = ["gpu", "uuid", "name"]
PROCESS_LABELS = ["gpu", "uuid", "pid", "user", "command", "gpu_instance", "compute_instance"]
HOST_LABELS = ["pid", "user", "command"]


def _finite(value: float | None) -> float | None:
    """``value`` as a float, or None when it is None, NaN or infinite (not a reading)."""
    return None if value is None or not math.isfinite(value) else float(value)


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


# suffix -> (help text, counter?, value of a DeviceSample or None)
_GPU_SERIES: dict[str, tuple[str, bool, Callable[[DeviceSample], Any]]] = {
    "memory_used_bytes": ("NVML used memory of the GPU", False, lambda d: d.memory_used_bytes),
    "memory_total_bytes": ("Total memory of the GPU", False, lambda d: d.memory_total_bytes),
    "memory_free_bytes": ("Free memory of the GPU, as NVML reports it", False,
                          lambda d: d.memory_free_bytes),
    "utilization_ratio": ("GPU utilization: share of the sample period a kernel ran, 0-1", False,
                          lambda d: _scaled(d.utilization_gpu_percent, 0.01)),
    "memory_utilization_ratio": ("Share of the sample period device memory was read or written, 0-1", False,
                                 lambda d: _scaled(d.utilization_memory_percent, 0.01)),
    "temperature_celsius": ("GPU temperature", False, lambda d: d.temperature_c),
    "power_watts": ("GPU power draw", False, lambda d: d.power_draw_w),
    "power_limit_watts": ("GPU power limit enforced by the driver", False, lambda d: d.power_limit_w),
    "sm_clock_hertz": ("SM clock", False, lambda d: d.clock_sm_hz),
    "memory_clock_hertz": ("Memory clock", False, lambda d: d.clock_memory_hz),
    "fan_speed_ratio": ("Fan speed as a share of its rated speed (may exceed 1)", False,
                        lambda d: _scaled(d.fan_speed_percent, 0.01)),
    "pcie_transmit_bytes_per_second": ("PCIe transmit throughput (NVML's sampled rate)", False,
                                       lambda d: d.pcie_tx_bytes_per_second),
    "pcie_receive_bytes_per_second": ("PCIe receive throughput (NVML's sampled rate)", False,
                                      lambda d: d.pcie_rx_bytes_per_second),
    "nvlink_transmit_bytes": ("NVLink data bytes sent over all links", True, lambda d: d.nvlink_tx_bytes),
    "nvlink_receive_bytes": ("NVLink data bytes received over all links", True, lambda d: d.nvlink_rx_bytes),
    "mig_enabled": ("1 when the GPU is in MIG mode, 0 when not", False,
                    lambda d: None if d.mig_enabled is None else float(d.mig_enabled)),
}


def gpu_families(snap: Snapshot) -> Iterator[object]:
    """The per-GPU families of ``snap`` (a prometheus_client family each, possibly empty)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    labels = [[str(d.index), d.uuid or "", printable(d.name or "", NAME_LIMIT)] for d in snap.devices]
    for suffix, (doc, counter, value_of) in _GPU_SERIES.items():
        kind = CounterMetricFamily if counter else GaugeMetricFamily
        family = kind(f"gpumem_gpu_{suffix}", doc, labels=GPU_LABELS)
        for dev, label_values in zip(snap.devices, labels):
            value = _finite(value_of(dev))
            if value is not None:
                family.add_metric(label_values, value)
        yield family


def _instance(value: int | None) -> str:
    return "" if value is None else str(value)


def process_families(snap: Snapshot) -> Iterator[object]:
    """The per-process families of ``snap``: GPU figures per (GPU, PID), host figures per PID.

    Runs per row at every scrape (512 rows: ~1,800 samples), so each row's label dict is made
    once and shared by its samples (prometheus_client ``Sample`` tuples appended directly,
    which is what ``add_metric`` builds, without a dict per sample).
    """
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.samples import Sample

    used = GaugeMetricFamily("gpumem_process_memory_used_bytes", "NVML used memory of a process on a GPU",
                             labels=PROCESS_LABELS)
    sm = GaugeMetricFamily("gpumem_process_sm_utilization_ratio",
                           "Share of the sample period the process ran on the GPU's SMs, 0-1", labels=PROCESS_LABELS)
    mem = GaugeMetricFamily("gpumem_process_memory_utilization_ratio",
                            "Share of the sample period the process used the memory bandwidth, 0-1",
                            labels=PROCESS_LABELS)
    cpu = GaugeMetricFamily("gpumem_process_host_cpu_ratio", "Host CPU time per second of the process (1 = one core)",
                            labels=HOST_LABELS)
    rss = GaugeMetricFamily("gpumem_process_host_rss_bytes", "Resident set size of the process on the host",
                            labels=HOST_LABELS)
    uuids = {d.index: d.uuid or "" for d in snap.devices}
    on_host: set[int] = set()
    commands: dict[str | None, str] = {}  # a data-parallel job's command repeats on every GPU
    used_name, sm_name, mem_name = used.name, sm.name, mem.name
    used_add, sm_add, mem_add = used.samples.append, sm.samples.append, mem.samples.append
    for proc in snap.processes:
        pid, user = str(proc.pid), proc.user or ""
        command = commands.get(proc.command)
        if command is None:
            command = commands[proc.command] = printable(proc.command or "", COMMAND_LIMIT)
        if proc.device_index is not None:
            labels = {"gpu": str(proc.device_index), "uuid": uuids.get(proc.device_index, ""), "pid": pid,
                      "user": user, "command": command, "gpu_instance": _instance(proc.gpu_instance_id),
                      "compute_instance": _instance(proc.compute_instance_id)}
            if proc.used_memory_bytes is not None:
                used_add(Sample(used_name, labels, float(proc.used_memory_bytes)))
            if (value := _finite(proc.sm_percent)) is not None:
                sm_add(Sample(sm_name, labels, value / 100.0))
            if (value := _finite(proc.mem_percent)) is not None:
                mem_add(Sample(mem_name, labels, value / 100.0))
        if proc.pid in on_host:
            continue
        on_host.add(proc.pid)
        if (value := _finite(proc.cpu_percent)) is not None:
            cpu.add_metric([pid, user, command], value / 100.0)
        if proc.rss_bytes is not None:
            rss.add_metric([pid, user, command], float(proc.rss_bytes))
    yield from (used, sm, mem, cpu, rss)


def probe_families(probed: dict[int, tuple[int, PhaseMark | None, Any]]) -> Iterator[object]:
    """The probed jobs' families. ``probed``: pid -> (measured peak bytes, last phase mark,
    :class:`~gpumem_tui.analysis.process_estimate.ProcessEstimate` or None)."""
    from prometheus_client.core import GaugeMetricFamily

    measured = GaugeMetricFamily("gpumem_probe_measured_peak_bytes",
                                 "Highest torch allocated (CPU: live tensor) bytes the probe reported", labels=["pid"])
    predicted = GaugeMetricFamily("gpumem_probe_predicted_peak_bytes",
                                  "The estimator's peak for the probe's setup (NVML-used scope on CUDA)", labels=["pid"])
    step = GaugeMetricFamily("gpumem_probe_step", "The probed job's current training step", labels=["pid"])
    phase = GaugeMetricFamily("gpumem_probe_phase", "1 for the probed job's current phase", labels=["pid", "phase"])
    available = GaugeMetricFamily("gpumem_probe_prediction_available",
                                  "1 when the estimator predicts the probed job's memory, 0 when not (e.g. its probe "
                                  "published no model config: only what was measured is served)", labels=["pid"])
    for pid, (peak, mark, estimate) in sorted(probed.items()):
        if peak:
            measured.add_metric([str(pid)], float(peak))
        predicts = estimate is not None and estimate.estimate is not None
        available.add_metric([str(pid)], 1.0 if predicts else 0.0)
        if predicts:
            predicted.add_metric([str(pid)], float(estimate.estimate.peak_bytes))
        if mark is not None:
            step.add_metric([str(pid)], float(mark.step))
            phase.add_metric([str(pid), mark.phase.value], 1.0)
    yield from (measured, predicted, available, step, phase)


def forecasts(snap: Snapshot, measured: Any, pids: list[int]) -> list[tuple[int, str, str, Any]]:
    """``(pid, gpu, uuid, Forecast)`` of each of ``pids`` with per-step peaks:
    :func:`gpumem_tui.analysis.forecast.forecast` of its steps in ``measured`` (a
    :class:`~gpumem_tui.telemetry.probed_state.ProbedProcesses`) against
    :func:`~gpumem_tui.analysis.forecast.snapshot_limit` of ``snap`` (gpu and uuid "" when the process
    has no single GPU row: then there is no limit)."""
    out = []
    gpu_of = {p.pid: p.device_index for p in snap.processes if p.device_index is not None}
    uuids = {d.index: d.uuid or "" for d in snap.devices}
    for pid in pids:
        summary = measured.summary(pid)
        if summary is None or not summary.record.steps:
            continue
        limit = snapshot_limit(snap, pid, measured.context(pid))
        gpu = gpu_of.get(pid) if limit is not None else None
        out.append((pid, "" if gpu is None else str(gpu), uuids.get(gpu, "") if gpu is not None else "",
                    forecast(summary.record.steps, limit)))
    return out


def forecast_families(values: list[tuple[int, str, str, Any]]) -> Iterator[object]:
    """From :func:`forecasts`: ``gpumem_probe_drift_bytes_per_step`` (label ``pid``; the
    fitted rise of the per-step peak, only when it rises steadily) and
    ``gpumem_process_seconds_to_oom`` (labels ``gpu``, ``uuid``, ``pid``; only with a
    forecast in seconds). A PID without one (no drift, a poor fit, no GPU figures, no step
    times) is left out, never a made-up figure."""
    from prometheus_client.core import GaugeMetricFamily

    drift = GaugeMetricFamily("gpumem_probe_drift_bytes_per_step",
                              "Steady rise of the probed job's per-step peak (least-squares fit), bytes per step",
                              labels=["pid"])
    oom = GaugeMetricFamily("gpumem_process_seconds_to_oom",
                            "Seconds until the process's steadily rising per-step peak reaches its GPU's free "
                            "memory + its own (straight-line forecast)", labels=["gpu", "uuid", "pid"])
    for pid, gpu, uuid, outlook in values:
        if outlook.drift is not None and (rate := _finite(outlook.drift.bytes_per_step)) is not None:
            drift.add_metric([str(pid)], rate)
        if gpu and (seconds := _finite(outlook.seconds_to_limit)) is not None:
            oom.add_metric([gpu, uuid, str(pid)], seconds)
    yield from (drift, oom)
