"""Deterministic fake telemetry for UI tests (no clocks, no hostnames, no NVML)."""

from __future__ import annotations

import threading
from dataclasses import replace

from gpumem_tui.telemetry.model import (
    DeviceSample,
    Phase,
    PhaseMark,
    ProbeInfo,
    ProbeSample,
    ProcessSample,
    ProcessStatus,
    ProcessType,
    Snapshot,
)
from gpumem_tui.support.units import GiB, MiB

T0 = 1_700_000_000.0
HOSTILE = "[bold red]pwn[/] \x1b[31mred\x1b[0m [link=http://x]click[/link]"


def devices(t: int) -> tuple[DeviceSample, ...]:
    return (
        DeviceSample(0, "NVIDIA A100-SXM4-40GB", "GPU-0", 40 * GiB, (10 + t % 5) * GiB, 87.0, 61.0, 245.0, 400.0),
        DeviceSample(1, "NVIDIA A100-SXM4-40GB", "GPU-1", 40 * GiB, 2 * GiB, None, 40.0, None, 400.0,
                     field_errors=(("utilization_gpu_percent", "N/A"), ("power_draw_w", "no permission"))),
        DeviceSample(2, None, None, None, None, None, None, None, None, error="GPU is lost"),
    )


def processes(t: int) -> tuple[ProcessSample, ...]:
    return (
        ProcessSample(1001, 0, ProcessType.COMPUTE, (6 + t % 3) * GiB, 55.0, "alice", "python train.py --bs 32",
                      101.0, 3 * GiB, T0 - 3725),
        ProcessSample(1002, 0, ProcessType.COMPUTE, 3 * GiB, 20.0, "bob", "python serve.py", 12.0, 2 * GiB, T0 - 60),
        ProcessSample(1003, 1, ProcessType.GRAPHICS, 512 * MiB, None, "carol", HOSTILE, 0.5, 100 * MiB, T0 - 5,
                      field_errors=(("sm_percent", "N/A"),)),
        ProcessSample(1004, 1, ProcessType.MPS, None, None, None, None, None, None, None,
                      status=ProcessStatus.NO_PERMISSION, field_errors=(("used_memory_bytes", "N/A"),)),
        ProcessSample(1005, 0, ProcessType.COMPUTE, 1 * GiB, None, None, None, None, None, None,
                      status=ProcessStatus.NOT_IN_NAMESPACE),
        ProcessSample(1006, 1, ProcessType.COMPUTE, 256 * MiB, 1.0, "alice", "python eval.py", 3.0, 512 * MiB,
                      T0 - 90_000, status=ProcessStatus.ZOMBIE, container="docker:4f2a9c1b"),
    )


def snapshot(t: int) -> Snapshot:
    time = T0 + t
    probes = (ProbeSample(time, 1001, "cuda", (5 + t % 3) * GiB, (6 + t % 3) * GiB),)
    phases = [Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER_STEP]
    marks = (PhaseMark(time - 0.5, 1001, phases[t % 3], t // 3),)
    return Snapshot(
        time=time, driver_version="550.54.15", cuda_driver_version="12.4",
        devices=devices(t), processes=processes(t), probes=probes, phase_marks=marks,
        probe_infos=(ProbeInfo(1001, None, (("batch", 32), ("seq", 1024))),),
    )


class FakeSource:
    """Yields snapshot(0), snapshot(1), ... ; can be told to raise or to stop advancing."""

    def __init__(self, steps: int | None = None, nvml_error: str | None = None) -> None:
        self.t = 0
        self.steps = steps
        self.nvml_error = nvml_error
        self.fail_with: Exception | None = None
        self.polls = 0
        self.closed = False
        self.lock = threading.Lock()

    def poll(self) -> Snapshot:
        with self.lock:
            self.polls += 1
            if self.fail_with is not None:
                raise self.fail_with
            t = self.t
            if self.steps is None or self.t < self.steps - 1:
                self.t += 1
        snap = snapshot(t)
        if self.nvml_error:
            snap = replace(snap, nvml_error=self.nvml_error, devices=(), driver_version=None,
                           cuda_driver_version=None,
                           processes=tuple(replace(p, device_index=None, type=ProcessType.HOST,
                                                   used_memory_bytes=None) for p in snap.processes[:3]))
        return snap

    def close(self) -> None:
        self.closed = True
