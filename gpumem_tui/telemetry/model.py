"""Immutable telemetry values that cross from the poller thread to the UI.

Headless: imports neither Textual, nor pynvml, nor torch. Every figure that could not be read
is ``None``; the reason, when there is one, is in the sample's ``field_errors`` (field name ->
short text such as ``"N/A"`` or ``"no permission"``) or in ``status``.

Memory is in bytes everywhere. NVML figures are *NVML used* memory (what nvidia-smi shows,
CUDA context and allocator reserve included); probe figures say which torch figure they are
(``allocated`` or ``reserved``) or, on the CPU, the live tensor bytes of the probe's tracker.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # an annotation only: a sample's launch is read by the live source, not here
    from gpumem_tui.telemetry.launch import RankLaunch


class ProcessType(str, enum.Enum):
    """How NVML lists a process (nvmlDeviceGetComputeRunningProcesses & co.), or a host process."""

    COMPUTE = "compute"
    GRAPHICS = "graphics"
    MPS = "mps"
    HOST = "host"  # not on any GPU: listed only when there is no NVML, or as a probed CPU job


class ProcessStatus(str, enum.Enum):
    """What the host (psutil) could say about a PID."""

    OK = "ok"
    EXITED = "exited"  # psutil.NoSuchProcess between listing and lookup
    NO_PERMISSION = "no permission"  # psutil.AccessDenied
    ZOMBIE = "zombie"  # psutil.ZombieProcess
    NOT_IN_NAMESPACE = "not visible from this PID namespace"  # NVML PID unknown to /proc


#: What a ``NOT_IN_NAMESPACE`` row's host fields show: one character, so the columns keep their
#: width; :data:`NAMESPACE_NOTE` explains it once per table, JSON document or detail view.
NOT_VISIBLE = "?"
NAMESPACE_NOTE = ("? = a PID the GPU driver reports that /proc here does not show (another PID "
                  "namespace); run the container with --pid=host")


def namespace_note(processes: Iterable[ProcessSample]) -> str | None:
    """:data:`NAMESPACE_NOTE` when any of ``processes`` is NOT_IN_NAMESPACE, else None."""
    return NAMESPACE_NOTE if any(p.status is ProcessStatus.NOT_IN_NAMESPACE for p in processes) else None


class Phase(str, enum.Enum):
    """Phases of a training step as the probe marks them."""

    INIT = "init"
    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER_STEP = "optimizer_step"
    IDLE = "idle"


FieldErrors = tuple[tuple[str, str], ...]


def field_error(errors: FieldErrors, name: str) -> str | None:
    """Return the reason field ``name`` is missing, or None."""
    for key, reason in errors:
        if key == name:
            return reason
    return None


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One GPU at one instant. Memory in bytes (NVML used / total), power in watts."""

    index: int
    name: str | None
    uuid: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    utilization_gpu_percent: float | None
    temperature_c: float | None
    power_draw_w: float | None
    power_limit_w: float | None
    error: str | None = None  # whole-device failure, e.g. "GPU is lost"
    field_errors: FieldErrors = ()
    # Optional figures (None: not read, or NVML could not read them; the exporter's source
    # reads them, the dashboard's does not). NVML units converted: bytes, Hz, bytes/s.
    memory_free_bytes: int | None = None  # nvmlDeviceGetMemoryInfo().free
    utilization_memory_percent: float | None = None  # memory controller busy, nvmlUtilization_t.memory
    clock_sm_hz: int | None = None  # nvmlDeviceGetClockInfo(NVML_CLOCK_SM), MHz x 1e6
    clock_memory_hz: int | None = None  # nvmlDeviceGetClockInfo(NVML_CLOCK_MEM), MHz x 1e6
    fan_speed_percent: float | None = None  # nvmlDeviceGetFanSpeed: % of the fan's rated speed (may exceed 100)
    pcie_tx_bytes_per_second: int | None = None  # nvmlDeviceGetPcieThroughput(TX), KB/s x 1024
    pcie_rx_bytes_per_second: int | None = None  # nvmlDeviceGetPcieThroughput(RX), KB/s x 1024
    nvlink_tx_bytes: int | None = None  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, all links, KiB x 1024 (a counter)
    nvlink_rx_bytes: int | None = None  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, all links (a counter)
    mig_enabled: bool | None = None  # nvmlDeviceGetMigMode current mode; None where MIG is not supported

    def reason(self, name: str) -> str | None:
        """Why field ``name`` is None (e.g. "N/A", "no permission"), or None."""
        return field_error(self.field_errors, name)


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process on one GPU (or a host process). Memory in bytes; CPU in percent of one core.

    ``used_memory_bytes`` is NVML's per-process figure (None when NVML reports
    ``usedGpuMemory == 2**64-1``, e.g. under MIG without privileges or WDDM).
    ``command`` is raw text from the OS: render it literally, never as markup.
    """

    pid: int
    device_index: int | None
    type: ProcessType
    used_memory_bytes: int | None = None
    sm_percent: float | None = None
    user: str | None = None
    command: str | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    start_time: float | None = None  # epoch seconds
    status: ProcessStatus = ProcessStatus.OK
    container: str | None = None  # container or pod from /proc/<pid>/cgroup
    field_errors: FieldErrors = ()
    # The PID inside the process's own (innermost) PID namespace, e.g. what `ps` shows inside
    # its container; None when that is ``pid`` itself. From ``NSpid`` in /proc/<pid>/status.
    container_pid: int | None = None
    # Memory-bandwidth (memory controller) utilisation of this process, percent: ``memUtil`` of
    # the same nvmlDeviceGetProcessUtilization sample that gives ``sm_percent``.
    mem_percent: float | None = None
    # MIG: the GPU instance and compute instance the process runs in (nvmlProcessInfo_v2_t
    # ``gpuInstanceId`` / ``computeInstanceId``); None when the GPU is not in MIG mode.
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    # The launch (torchrun / accelerate) and rank the process belongs to, read once from its
    # environment (gpumem_tui.telemetry.launch); None: not launched so, or not readable.
    launch: RankLaunch | None = None

    def reason(self, name: str) -> str | None:
        """Why field ``name`` is None, or None."""
        return field_error(self.field_errors, name)


@dataclass(frozen=True, slots=True)
class PhaseMark:
    """The probe entered ``phase`` of training step ``step`` at ``time`` (epoch seconds)."""

    time: float
    pid: int
    phase: Phase
    step: int


@dataclass(frozen=True, slots=True)
class PhasePeak:
    """The highest memory of one phase of one training step (a high-water mark).

    Written by the probe when the phase ends, so it holds a peak that no periodic sample
    caught (a backward spike of a few milliseconds). ``peak_bytes`` is in the probe's figure:
    ``torch.cuda.max_memory_allocated`` between the phase's boundaries on CUDA (device
    "cuda"), the tracker's highest live tensor bytes on the CPU (device "cpu").
    ``start``/``end`` are epoch seconds; ``steps`` > 1 when the probe folded the same phase
    of several steps it did not record one by one (fast steps) into this record.
    ``categories`` splits ``peak_bytes`` as far as the probe could (CUDA: parameters,
    gradients, optimizer_states, logits_and_loss and the unsplit
    ``activations_and_temporaries``; see ``gpumem_tui.probe.peak_split``), or is empty.
    ``end_bytes`` is the same figure at the phase's end (``torch.cuda.memory_allocated`` /
    the tracker's live bytes): for the optimizer step, the memory a step leaves behind. None in
    traces written before it existed.
    """

    pid: int
    step: int
    phase: Phase
    start: float
    end: float
    peak_bytes: int
    device: str = "cuda"
    steps: int = 1
    categories: tuple[tuple[str, int], ...] = ()
    end_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ProbeSample:
    """Memory of one probed process at one instant, as the probe in that process measured it.

    device "cuda": ``allocated_bytes`` is ``torch.cuda.memory_allocated``, ``reserved_bytes``
    is ``torch.cuda.memory_reserved``. device "cpu": ``allocated_bytes`` is the live tensor
    bytes of the probe's tracker and ``reserved_bytes`` is None. ``categories`` splits the
    live bytes (parameters, gradients, optimizer_states, activations, ...) when known.
    """

    time: float
    pid: int
    device: str
    allocated_bytes: int
    reserved_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    categories: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ProbeInfo:
    """What a probed training job published about itself (for estimator auto-configuration).

    ``model_config`` is the Hugging Face config as a dict (or None); ``setup`` holds batch,
    seq, dtype, optimizer, task and the like, as the probe read them.
    """

    pid: int
    model_config: dict | None = None
    setup: tuple[tuple[str, object], ...] = ()
    ended: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one poll saw. ``nvml_error`` is set (and ``devices`` empty) without NVML."""

    time: float
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_error: str | None = None
    devices: tuple[DeviceSample, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    probes: tuple[ProbeSample, ...] = ()
    probe_infos: tuple[ProbeInfo, ...] = ()
    phase_marks: tuple[PhaseMark, ...] = ()
    notices: tuple[str, ...] = field(default=())  # one-off messages for the user
    phase_peaks: tuple[PhasePeak, ...] = ()  # new since the previous snapshot, like probes


class TelemetrySource(Protocol):
    """Anything the poller can ask for a Snapshot: NVML+psutil, a replayed trace, ...

    ``poll`` blocks (it does I/O) and must not raise for data it reads: failures become
    None fields, ``error`` texts or ``notices``.
    """

    def poll(self) -> Snapshot: ...

    def close(self) -> None: ...
