"""NVML source: devices and their processes, read through nvidia-ml-py (``pynvml``).

Every NVML call goes through :meth:`NvmlSource._query`, which turns NVML errors into
``(None, reason)`` instead of raising (the nvitop ``nvmlQuery`` habit): a field the GPU does
not support reads "N/A", a field the user may not read reads "no permission", and a device
whose calls say "GPU is lost" becomes a ``DeviceSample(error="GPU is lost")`` row. A failed
device is looked up again at the next poll, so it comes back when the driver does.

Processes: compute, graphics and MPS lists are merged per GPU (one row per PID per GPU);
process calls fall back ``_v3`` -> ``_v2`` -> v1 (remembered per list once one works) and
``usedGpuMemory == 2**64-1`` (NVML_VALUE_NOT_AVAILABLE_ulonglong: MIG without privileges,
WDDM) reads as ``None`` "N/A". Per-process SM % (and memory-bandwidth %) comes from
``nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp)``, which returns only samples
newer than the time stamp (NVML API reference, "nvmlDeviceGetProcessUtilization").

Units: bytes for memory, watts for power (NVML gives milliwatts), °C, percent.
Imports ``pynvml`` lazily (when the source starts), never Textual or torch.

Implausible values read as "N/A", not as numbers (issue 13, item 19): memory above
:data:`gpumem_tui.telemetry.plausible.MAX_BYTES` (e.g. ``ULLONG_MAX - 1``), utilization
above 100 % (e.g. 2**31), temperature above :data:`MAX_TEMPERATURE_C` (e.g. 4294967294),
power above :data:`MAX_POWER_MW` (e.g. 18446744073709552 W); each kind is named once in a
notice. When ``nvmlDeviceGetCount`` fails before any device was ever counted (every call
failing after init), the reading carries the error instead of an empty "0 GPUs".
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from gpumem_tui.telemetry.model import DeviceSample, ProcessSample, ProcessStatus, ProcessType
from gpumem_tui.telemetry.nvml_extra import MIG_NONE, read_extra
from gpumem_tui.telemetry.plausible import MAX_BYTES

ULLONG_MAX = 2**64 - 1
UINT_MAX = 2**32 - 1

# Reasons shown in place of a value (short, lower case, as the table cells show them).
NOT_AVAILABLE = "N/A"
NO_PERMISSION = "no permission"
GPU_LOST = "GPU is lost"
TIMEOUT = "timeout"
UNKNOWN = "unknown NVML error"

# An SM % sample older than this (seconds, by our clock) is no longer shown.
SM_HOLD_SECONDS = 1.5
_IDLE = (0.0, 0.0)  # (SM %, memory %) of a process without a recent sample: it did not run
_NO_UTIL = (None, None)  # the utilisation call failed: both unknown

# Upper bounds of plausible readings: no GPU runs above 200 °C (NVIDIA's slowdown limits are
# near 90 °C) or draws 100 kW (an 8-GPU board draws ~10 kW).
MAX_TEMPERATURE_C = 200
MAX_POWER_MW = 100_000_000


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here; ``str(err)`` is the NVML error text (e.g. "NVML Shared
    Library Not Found", "Driver Not Loaded")."""


@dataclass(frozen=True, slots=True)
class NvmlReading:
    """One poll of NVML. ``error`` is set (and everything else empty) without NVML.

    ``processes`` carry only NVML figures (pid, device_index, type, used_memory_bytes,
    sm_percent); host details are added by :mod:`gpumem_tui.telemetry.host`.
    """

    error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    devices: tuple[DeviceSample, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    notices: tuple[str, ...] = ()


# Process list kinds: (ProcessType, base function name). Order = type priority when one PID
# shows up in several lists of the same GPU: a compute context is what holds the memory.
_PROCESS_KINDS: tuple[tuple[ProcessType, str], ...] = (
    (ProcessType.COMPUTE, "nvmlDeviceGetComputeRunningProcesses"),
    (ProcessType.MPS, "nvmlDeviceGetMPSComputeRunningProcesses"),
    (ProcessType.GRAPHICS, "nvmlDeviceGetGraphicsRunningProcesses"),
)
_VERSIONS = ("_v3", "_v2", "")


class _FunctionMissing(Exception):
    """The binding or the driver lacks a function (AttributeError / FunctionNotFound)."""


@dataclass
class _Device:
    """Cached per-index state: the handle and the fields that never change."""

    handle: Any
    name: str | None = None
    uuid: str | None = None
    util_stamp: int = 0  # newest process-utilization sample time stamp seen (µs)
    sm_last: dict[int, tuple[float, float | None, float]] = field(default_factory=dict)  # pid -> (sm %, mem %, our time)


def _text(value: Any) -> str:
    """NVML strings arrive as str (nvidia-ml-py >= 11.5) or bytes (older)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def format_cuda_version(value: int) -> str:
    """12040 -> "12.4" (NVML encodes CUDA driver version as 1000*major + 10*minor)."""
    return f"{value // 1000}.{(value % 1000) // 10}"


class NvmlSource:
    """Reads devices and GPU processes from NVML; never raises for data it reads.

    ``NvmlSource()`` imports ``pynvml`` and calls ``nvmlInit`` once. With ``extended=True``
    each device sample also carries the figures of :mod:`gpumem_tui.telemetry.nvml_extra`
    (clocks, fan, PCIe / NVLink throughput, MIG mode). If ``nvmlInit`` fails,
    :attr:`error` holds the NVML error text (e.g. "NVML Shared Library Not Found") and every
    :meth:`poll` returns ``NvmlReading(error=...)``; the init is not retried.
    Use from one thread at a time (the poller thread).
    """

    def __init__(self, module: Any = None, *, extended: bool = False) -> None:
        self._nv: Any = None
        # The exporter's figures beyond the dashboard's (clocks, fan, PCIe and NVLink
        # throughput, MIG mode): extra NVML calls per GPU per poll, so only when asked.
        self.extended = extended
        self.error: str | None = None
        self._devices: dict[int, _Device] = {}
        self._count: int | None = None
        self._proc_version: dict[str, int] = {}  # base name -> index into _VERSIONS that works
        self._reported: set[str] = set()
        self._notices: list[str] = []
        self._power_limit_func = "nvmlDeviceGetEnforcedPowerLimit"
        self._driver: Any = None
        self._cuda: Any = None
        try:
            if module is None:
                import pynvml as module  # noqa: PLC0415 -- only when a source starts
            module.nvmlInit()
            self._nv = module
        except ImportError as exc:
            self.error = f"nvidia-ml-py is not installed ({exc})"
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ... or OSError
            self.error = _text(exc) or type(exc).__name__

    @property
    def available(self) -> bool:
        """True when ``nvmlInit`` succeeded."""
        return self._nv is not None

    def close(self) -> None:
        """Shut NVML down (errors ignored). The source returns errors afterwards."""
        if self._nv is not None:
            try:
                self._nv.nvmlShutdown()
            except Exception:
                pass
            self._nv = None
            self.error = "NVML was shut down"

    # ---- the query wrapper ---------------------------------------------------------------
    def _reason(self, exc: BaseException) -> str:
        nv = self._nv
        value = getattr(exc, "value", None)
        if value == getattr(nv, "NVML_ERROR_NOT_SUPPORTED", -1):
            return NOT_AVAILABLE
        if value == getattr(nv, "NVML_ERROR_NO_PERMISSION", -1):
            return NO_PERMISSION
        if value == getattr(nv, "NVML_ERROR_GPU_IS_LOST", -1):
            return GPU_LOST
        if value == getattr(nv, "NVML_ERROR_TIMEOUT", -1):
            return TIMEOUT
        if value == getattr(nv, "NVML_ERROR_UNKNOWN", -1):
            return UNKNOWN
        return _text(exc) or type(exc).__name__

    def _call(self, name: str, *args: Any) -> Any:
        """Call ``pynvml.<name>``; raise :class:`_FunctionMissing` if the binding/driver lacks it."""
        func: Callable[..., Any] | None = getattr(self._nv, name, None)
        if func is None:
            raise _FunctionMissing(name)
        # nvidia-ml-py >= 12.535 turns FunctionNotFound of an unversioned process call (which is
        # its _v3) into NVMLLibraryMismatchError, not an NVMLError (pynvml.py, throwOnVersionMismatch)
        mismatch = getattr(self._nv, "NVMLLibraryMismatchError", _FunctionMissing)
        try:
            return func(*args)
        except mismatch as exc:
            raise _FunctionMissing(name) from exc
        except self._nv.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(self._nv, "NVML_ERROR_FUNCTION_NOT_FOUND", -2):
                raise _FunctionMissing(name) from exc
            raise

    def _query(self, name: str, *args: Any) -> tuple[Any, str | None]:
        """``(value, None)`` or ``(None, reason)``; never raises for NVML errors."""
        try:
            return self._call(name, *args), None
        except _FunctionMissing:
            self._notice_once(name, f"NVML function {name} is not available with this driver; shown as N/A")
            return None, NOT_AVAILABLE
        except self._nv.NVMLError as exc:
            return None, self._reason(exc)
        except Exception as exc:  # a broken binding must not kill the poll
            return None, f"{type(exc).__name__}: {exc}"

    def _plausible(self, what: str, value: int | None, high: int) -> int | None:
        """``value`` when it is at most ``high``; otherwise None (shown as N/A), named once."""
        if value is None or value <= high:
            return value
        self._notice_once(f"implausible {what}", f"NVML reported an implausible {what} ({value}); shown as N/A")
        return None

    def _notice_once(self, key: str, text: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            self._notices.append(text)

    # ---- polling -------------------------------------------------------------------------
    def poll(self) -> NvmlReading:
        """Read every device and its processes now. Never raises."""
        if self._nv is None:
            return NvmlReading(error=self.error or "NVML is not available")
        self._notices = []
        # Versions do not change while NVML is loaded: read until known, then reuse.
        if self._driver is None:
            self._driver, _ = self._query("nvmlSystemGetDriverVersion")
        if self._cuda is None:
            self._cuda, _ = self._query("nvmlSystemGetCudaDriverVersion")
        driver, cuda = self._driver, self._cuda
        count, count_reason = self._query("nvmlDeviceGetCount")
        devices: list[DeviceSample] = []
        processes: list[ProcessSample] = []
        if count is None and not self._count:
            # Never counted a device: an empty table would read "0 GPUs"; say what failed.
            return NvmlReading(error=f"every NVML call fails after init (nvmlDeviceGetCount: {count_reason})",
                               notices=tuple(self._notices))
        if count is None:
            # Keep showing the GPUs we knew, each marked with why they could not be read.
            for index in range(self._count or 0):
                devices.append(_failed_device(index, self._devices.get(index), f"device count: {count_reason}"))
            self._devices.clear()
        else:
            if self._count is not None and count != self._count:
                self._notices.append(f"GPU count changed from {self._count} to {count}; devices re-enumerated")
                self._devices.clear()
            self._count = count
            for index in range(count):
                device, procs = self._poll_device(index)
                devices.append(device)
                processes.extend(procs)
        return NvmlReading(
            driver_version=_text(driver) if driver is not None else None,
            cuda_driver_version=format_cuda_version(int(cuda)) if isinstance(cuda, int) else None,
            devices=tuple(devices),
            processes=tuple(processes),
            notices=tuple(self._notices),
        )

    def _poll_device(self, index: int) -> tuple[DeviceSample, list[ProcessSample]]:
        dev = self._devices.get(index)
        if dev is None:
            handle, reason = self._query("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                return _failed_device(index, None, reason or UNKNOWN), []
            dev = self._devices[index] = _Device(handle=handle)
        h = dev.handle
        errors: list[tuple[str, str]] = []
        reasons: list[str] = []

        def get(field_name: str, func: str, *args: Any) -> Any:
            value, reason = self._query(func, h, *args)
            if reason is not None:
                errors.append((field_name, reason))
                reasons.append(reason)
            return value

        if dev.name is None:
            name = get("name", "nvmlDeviceGetName")
            dev.name = _text(name) if name is not None else None
        if dev.uuid is None:
            uuid = get("uuid", "nvmlDeviceGetUUID")
            dev.uuid = _text(uuid) if uuid is not None else None
        mem = get("memory", "nvmlDeviceGetMemoryInfo")
        total, used, free = (self._plausible(f"memory {key}", _ull(getattr(mem, key, None)), MAX_BYTES)
                             if mem is not None else None for key in ("total", "used", "free"))
        if mem is not None and (total is None or used is None):
            errors.append(("memory", NOT_AVAILABLE))
        util = get("utilization_gpu_percent", "nvmlDeviceGetUtilizationRates")
        gpu_util = self._plausible("utilization", _uint(getattr(util, "gpu", None)), 100) if util is not None else None
        mem_util = self._plausible("utilization", _uint(getattr(util, "memory", None)), 100) if util is not None else None
        if util is not None and gpu_util is None:
            errors.append(("utilization_gpu_percent", NOT_AVAILABLE))
        raw_temp = get("temperature_c", "nvmlDeviceGetTemperature", getattr(self._nv, "NVML_TEMPERATURE_GPU", 0))
        temp = self._plausible("temperature", _uint(raw_temp), MAX_TEMPERATURE_C)
        if raw_temp is not None and temp is None:
            errors.append(("temperature_c", NOT_AVAILABLE))
        raw_power = get("power_draw_w", "nvmlDeviceGetPowerUsage")
        power = self._plausible("power draw", _uint(raw_power) if raw_power is not None else None, MAX_POWER_MW)
        if raw_power is not None and power is None:
            errors.append(("power_draw_w", NOT_AVAILABLE))
        limit = self._plausible("power limit", self._power_limit(h, errors, reasons), MAX_POWER_MW)

        procs, proc_reason = self._processes(index, dev)
        if proc_reason is not None:
            errors.append(("processes", proc_reason))
            reasons.append(proc_reason)

        # A lost GPU, or one on which every reading failed the same way, is one error row.
        all_failed = mem is None and util is None and temp is None and power is None
        same = len(set(reasons)) == 1 and reasons[0] != NOT_AVAILABLE if reasons else False
        if GPU_LOST in reasons or (all_failed and same):
            self._devices.pop(index, None)  # look the handle up again next poll
            return _failed_device(index, dev, GPU_LOST if GPU_LOST in reasons else reasons[0]), []

        # memory reason applies to both memory fields
        field_errors: list[tuple[str, str]] = []
        for name_, reason in errors:
            if name_ == "memory":
                field_errors += [("memory_total_bytes", reason), ("memory_used_bytes", reason)]
            else:
                field_errors.append((name_, reason))
        sample = DeviceSample(
            index=index,
            name=dev.name,
            uuid=dev.uuid,
            memory_total_bytes=total,
            memory_used_bytes=used,
            utilization_gpu_percent=float(gpu_util) if gpu_util is not None else None,
            temperature_c=float(temp) if temp is not None else None,
            power_draw_w=power / 1000.0 if power is not None else None,
            power_limit_w=limit / 1000.0 if limit is not None else None,
            field_errors=tuple(dict.fromkeys(field_errors)),
            memory_free_bytes=free,
            utilization_memory_percent=float(mem_util) if mem_util is not None else None,
            **(read_extra(self._query, self._nv, h) if self.extended else {}),
        )
        return sample, procs

    def _power_limit(self, h: Any, errors: list, reasons: list) -> int | None:
        value, reason = self._query(self._power_limit_func, h)
        if reason == NOT_AVAILABLE and self._power_limit_func == "nvmlDeviceGetEnforcedPowerLimit":
            alt, alt_reason = self._query("nvmlDeviceGetPowerManagementLimit", h)
            if alt_reason is None:
                return _uint(alt)
        if reason is not None:
            errors.append(("power_limit_w", reason))
            reasons.append(reason)
        return _uint(value)

    def _list(self, base: str, h: Any) -> tuple[list[Any] | None, str | None]:
        """Call the newest working version of a process-list function."""
        start = self._proc_version.get(base, 0)
        for i in range(start, len(_VERSIONS)):
            try:
                result = self._call(base + _VERSIONS[i], h)
            except _FunctionMissing:
                continue
            except self._nv.NVMLError as exc:
                self._proc_version[base] = i
                return None, self._reason(exc)
            except Exception as exc:
                return None, f"{type(exc).__name__}: {exc}"
            self._proc_version[base] = i
            return list(result or ()), None
        self._notice_once(base, f"NVML function {base} is not available with this driver")
        return None, NOT_AVAILABLE

    def _processes(self, index: int, dev: _Device) -> tuple[list[ProcessSample], str | None]:
        """Merged compute/MPS/graphics processes of one GPU, and why the list failed (or None)."""
        merged: dict[int, tuple[ProcessType, int | None, int | None, int | None]] = {}
        list_reason: str | None = None
        for ptype, base in _PROCESS_KINDS:
            items, reason = self._list(base, dev.handle)
            if items is None:
                # Graphics/MPS lists are often unsupported (headless boards, no MPS): not news.
                if ptype is ProcessType.COMPUTE or reason != NOT_AVAILABLE:
                    list_reason = list_reason or reason
                continue
            for item in items:
                try:
                    pid, used = item.pid, item.usedGpuMemory
                except AttributeError:
                    continue
                # MIG instance ids (v2/v3 records); 0xFFFFFFFF or absent: not in MIG mode
                gi, ci = getattr(item, "gpuInstanceId", MIG_NONE), getattr(item, "computeInstanceId", MIG_NONE)
                if not isinstance(pid, int):
                    continue
                if used is not None and (used.__class__ is not int or used > MAX_BYTES or used < 0):
                    used = self._plausible("process memory", _ull(used), MAX_BYTES)
                prev = merged.get(pid)
                if prev is None:
                    merged[pid] = (ptype, used, _instance(gi), _instance(ci))
                else:
                    # keep the higher-priority type (listed first) and the known, larger figure
                    known = [m for m in (prev[1], used) if m is not None]
                    merged[pid] = (prev[0], max(known) if known else None, prev[2], prev[3])
        sm, sm_reason = self._sm_percent(dev, merged)
        out = []
        append = out.append
        sm_get = sm.get
        sm_missing = (("sm_percent", sm_reason),) if sm_reason else ()
        for pid, (ptype, used, gi, ci) in merged.items():
            sm_value, mem_value = sm_get(pid, _NO_UTIL)
            errs = sm_missing if sm_value is None else ()
            if used is None:
                errs = (("used_memory_bytes", NOT_AVAILABLE), *errs)
            # positional construction: this runs once per process row per poll
            append(ProcessSample(pid, index, ptype, used, sm_value, None, None, None, None, None,
                                 ProcessStatus.OK, None, errs, None, mem_value, gi, ci))
        return out, list_reason

    def _sm_percent(self, dev: _Device, pids: dict[int, Any]) -> tuple[dict[int, tuple[float, float | None]], str | None]:
        """pid -> (SM %, memory-bandwidth %) from nvmlDeviceGetProcessUtilization (``smUtil``,
        ``memUtil``), or ({}, reason) if it failed. A ``memUtil`` that is not available or
        implausible reads None while the sample's SM % stands.

        Only samples newer than the newest one already seen are returned by NVML, so the
        newest time stamp is passed back each poll. NVML_ERROR_NOT_FOUND means no process
        used the SMs since then: those PIDs read 0 %. A PID without a new sample keeps its
        last value for SM_HOLD_SECONDS (polls can be faster than NVML's sampling), then 0 %.
        """
        if not pids:
            dev.sm_last.clear()
            return {}, None
        now = time.monotonic()
        samples: Any = ()
        try:
            samples = self._call("nvmlDeviceGetProcessUtilization", dev.handle, dev.util_stamp)
        except _FunctionMissing:
            self._notice_once("nvmlDeviceGetProcessUtilization",
                              "NVML function nvmlDeviceGetProcessUtilization is not available; SM % shown as N/A")
            return {}, NOT_AVAILABLE
        except self._nv.NVMLError as exc:
            if getattr(exc, "value", None) != getattr(self._nv, "NVML_ERROR_NOT_FOUND", -1):
                return {}, self._reason(exc)
        except Exception as exc:
            return {}, f"{type(exc).__name__}: {exc}"
        newest: dict[int, tuple[int, int, int | None]] = {}
        stamp_max = dev.util_stamp
        for sample in samples or ():
            try:
                pid, stamp, util = sample.pid, sample.timeStamp, sample.smUtil
            except AttributeError:
                continue
            if util.__class__ is not int or util == UINT_MAX or not 0 <= util <= 100:
                continue  # not available, or implausible (2**31 %): no sample
            mem = getattr(sample, "memUtil", None)
            if mem.__class__ is not int or not 0 <= mem <= 100:
                mem = None
            prev = newest.get(pid)
            if prev is None or stamp >= prev[0]:
                newest[pid] = (stamp, util, mem)
            if stamp > stamp_max:
                stamp_max = int(stamp)
        dev.util_stamp = stamp_max
        sm_last = dev.sm_last
        for pid, (_, util, mem) in newest.items():
            sm_last[pid] = (float(util), None if mem is None else float(mem), now)
        out: dict[int, tuple[float, float | None]] = {}
        horizon = now - SM_HOLD_SECONDS
        for pid in pids:
            last = sm_last.get(pid)
            out[pid] = (last[0], last[1]) if last is not None and last[2] >= horizon else _IDLE
        if len(sm_last) > len(out):
            for pid in [p for p in sm_last if p not in out]:
                del sm_last[pid]
        return out, None


def _ull(value: Any) -> int | None:
    """An unsigned long long NVML figure, with NVML_VALUE_NOT_AVAILABLE (2**64-1) -> None."""
    if value is None or not isinstance(value, int) or value == ULLONG_MAX or value < 0:
        return None
    return value


def _uint(value: Any) -> int | None:
    """An unsigned int NVML figure, with 2**32-1 (not available) -> None."""
    if value is None or not isinstance(value, int) or value == UINT_MAX or value < 0:
        return None
    return value


def _instance(value: Any) -> int | None:
    """A MIG instance id, or None for NVML's "no instance" (0xFFFFFFFF) or a bad value."""
    return value if value.__class__ is int and 0 <= value < MIG_NONE else None


def _failed_device(index: int, dev: _Device | None, reason: str) -> DeviceSample:
    return DeviceSample(
        index=index,
        name=dev.name if dev else None,
        uuid=dev.uuid if dev else None,
        memory_total_bytes=None,
        memory_used_bytes=None,
        utilization_gpu_percent=None,
        temperature_c=None,
        power_draw_w=None,
        power_limit_w=None,
        error=reason,
    )
