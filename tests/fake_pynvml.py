"""A fake ``pynvml`` (nvidia-ml-py) module for tests: no GPU, no driver, full control.

The names, signatures, error classes and return shapes follow nvidia-ml-py 13.x
(``pynvml.py``): ``NVMLError(value)`` maps to subclasses ``NVMLError_NotSupported`` & co.,
``str(err)`` is the driver's text ("Not Supported", "GPU is lost", ...), process lists hold
objects with ``pid``, ``usedGpuMemory``, ``gpuInstanceId``, ``computeInstanceId``, the
``_v2``/``_v3`` process calls turn ``usedGpuMemory == 2**64-1`` into ``None`` and the plain
``nvmlDeviceGet*RunningProcesses`` calls ``_v3`` (nvidia-ml-py >= 12.535 ``pynvml.py``: the
plain name is ``return ..._v3(handle)`` under ``@throwOnVersionMismatch``, so a driver without
``_v3`` raises ``NVMLLibraryMismatchError``, not an NVMLError), ``nvmlInit`` / ``nvmlShutdown``
count references like the library (a shutdown without an init raises
``NVMLError_Uninitialized``; every other call needs the count above zero), power
is in milliwatts, temperature in °C, and ``nvmlSystemGetCudaDriverVersion`` returns an int
such as 12040.

Use::

    fake = FakeNvml(gpus=2)
    fake.add_process(0, pid=1234, used=512 * MiB, kind="compute", sm=40)
    fake.install(monkeypatch)        # sys.modules["pynvml"] = fake.module
    fake.fail("nvmlDeviceGetTemperature", NVML_ERROR_TIMEOUT, device=1, times=2)
    fake.lose_gpu(0); ...; fake.recover_gpu(0)

A test in tests/test_nvml.py checks that every public name here exists in the real module.
"""

from __future__ import annotations

import string
import sys
import threading
import time
import types
from collections import Counter
from dataclasses import dataclass, field

MiB = 1024**2
GiB = 1024**3
ULLONG_MAX = 2**64 - 1

# Error codes, as in nvidia-ml-py.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

_ERROR_TEXT = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_IN_USE: "In Use",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_NO_DATA: "No Data",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE = 0, 1
NVML_VALUE_NOT_AVAILABLE_ulonglong_value = ULLONG_MAX


class NVMLError(Exception):
    """Like pynvml.NVMLError: ``NVMLError(code)`` returns the matching subclass."""

    _valClassMapping: dict[int, type] = {}

    def __new__(cls, value):  # noqa: D102
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, *args):  # the real class has no __init__; keep args harmless
        super().__init__(*args)

    def __str__(self):
        return _ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other):
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


class NVMLLibraryMismatchError(Exception):
    """Like pynvml.NVMLLibraryMismatchError: an unversioned call whose ``_v3`` the driver lacks."""


_ERROR_CLASSES: dict[str, type] = {}
for _name, _val in list(globals().items()):
    if _name.startswith("NVML_ERROR_"):
        _cls_name = "NVMLError_" + string.capwords(_name.replace("NVML_ERROR_", ""), "_").replace("_", "")

        def _gen_new(val):
            def new(cls, *args):
                return NVMLError.__new__(cls, val)

            return new

        _cls = type(_cls_name, (NVMLError,), {"__new__": _gen_new(_val)})
        _cls.__module__ = "pynvml"
        NVMLError._valClassMapping[_val] = _cls
        _ERROR_CLASSES[_cls_name] = _cls
globals().update(_ERROR_CLASSES)


class _Friendly:
    """Like pynvml's nvmlFriendlyObject: a plain attribute bag."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return f"{type(self).__name__}({self.__dict__})"


class _ProcessInfo:
    """Like the friendly object built from c_nvmlProcessInfo_v2_t (slots: cheap to make)."""

    __slots__ = ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId")

    def __init__(self, pid, used, gi=0xFFFFFFFF, ci=0xFFFFFFFF):
        self.pid = pid
        self.usedGpuMemory = used
        self.gpuInstanceId = gi
        self.computeInstanceId = ci


class _UtilSample:
    """Like c_nvmlProcessUtilizationSample_t."""

    __slots__ = ("pid", "timeStamp", "smUtil", "memUtil", "encUtil", "decUtil")

    def __init__(self, pid, stamp, sm, mem=0):
        self.pid, self.timeStamp, self.smUtil, self.memUtil = pid, stamp, sm, mem
        self.encUtil = self.decUtil = 0


@dataclass
class FakeProcess:
    """A process on a fake GPU. ``used`` is bytes (``None``/ULLONG_MAX: not available)."""

    pid: int
    used: int | None
    kind: str = "compute"  # compute | graphics | mps
    sm: int | None = None  # SM % reported by nvmlDeviceGetProcessUtilization (None: no sample)
    sample_time_us: int | None = None  # None: a fresh sample at each call
    mem: int = 0  # memory-bandwidth % of the same sample (memUtil)
    gpu_instance: int | None = None  # MIG GPU / compute instance ids (None: not MIG, 0xFFFFFFFF)
    compute_instance: int | None = None


@dataclass
class FakeGpu:
    name: str = "NVIDIA A100-SXM4-80GB"
    uuid: str = ""
    memory_total: int = 80 * GiB
    memory_used: int = 1 * GiB
    util_gpu: int = 37
    util_mem: int = 12
    temperature: int = 55
    power_mw: int = 123_456
    power_limit_mw: int = 400_000
    clock_sm_mhz: int = 1410
    clock_mem_mhz: int = 1593
    fan_percent: int = 42  # nvmlDeviceGetFanSpeed; data-centre boards answer NOT_SUPPORTED (use fail())
    pcie_tx_kbps: int = 2_000  # nvmlDeviceGetPcieThroughput, KB/s
    pcie_rx_kbps: int = 500_000
    nvlink_tx_kib: int | None = 7_000_000  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB; None: no NVLink
    nvlink_rx_kib: int | None = 9_000_000
    mig_mode: int | None = 0  # nvmlDeviceGetMigMode current (and pending) mode; None: not supported
    processes: list[FakeProcess] = field(default_factory=list)
    lost: bool = False


class _Handle:
    """Stands in for c_nvmlDevice_t: refers to one FakeGpu object."""

    def __init__(self, gpu: FakeGpu, index: int):
        self.gpu = gpu
        self.index = index

    def __repr__(self):
        return f"<fake nvmlDevice {self.index}>"


_PROCESS_FUNCS = {
    "compute": "nvmlDeviceGetComputeRunningProcesses",
    "graphics": "nvmlDeviceGetGraphicsRunningProcesses",
    "mps": "nvmlDeviceGetMPSComputeRunningProcesses",
}


class FakeNvml:
    """Controllable NVML. ``module`` is the object to install as ``sys.modules['pynvml']``.

    Knobs:
    - ``gpus``: list of :class:`FakeGpu` (append/remove to change the device count).
    - ``init_error``: an NVML error code raised by ``nvmlInit`` (e.g. LIBRARY_NOT_FOUND).
    - ``process_api``: highest process-list version the "driver" has (3, 2 or 1); calls to
      newer versions raise ``NVMLError_FunctionNotFound`` like a binding newer than the driver,
      and the plain call (which is ``_v3``) raises ``NVMLLibraryMismatchError`` below 3.
    - ``init_count``: ``nvmlInit`` calls not yet matched by ``nvmlShutdown`` (the library's
      ``_nvmlLib_refcount``); 0 after code that pairs them.
    - ``fail(func, code, device=None, times=None)``: make calls raise; ``func="*"`` is any call.
    - ``calls``: Counter of function names called.
    """

    def __init__(self, gpus: int = 2):
        self.gpus: list[FakeGpu] = []
        for i in range(gpus):
            self.add_gpu()
        self.driver_version = "550.54.15"
        self.cuda_driver_version = 12040
        self.init_error: int | None = None
        self.process_api = 3
        self.init_count = 0
        self.calls: Counter[str] = Counter()
        self._faults: list[list] = []  # [func, code, device, remaining]
        self._lock = threading.Lock()
        self.module = self._build_module()

    # ---- configuration -------------------------------------------------------------------
    def add_gpu(self, **kw) -> FakeGpu:
        index = len(self.gpus)
        kw.setdefault("uuid", f"GPU-{index:08d}-fake-0000-0000-{index:012d}")
        gpu = FakeGpu(**kw)
        self.gpus.append(gpu)
        return gpu

    def add_process(self, gpu: int, pid: int, used: int | None = 256 * MiB, kind: str = "compute",
                    sm: int | None = None, sample_time_us: int | None = None, mem: int = 0,
                    gpu_instance: int | None = None, compute_instance: int | None = None) -> FakeProcess:
        proc = FakeProcess(pid=pid, used=used, kind=kind, sm=sm, sample_time_us=sample_time_us, mem=mem,
                           gpu_instance=gpu_instance, compute_instance=compute_instance)
        self.gpus[gpu].processes.append(proc)
        return proc

    def remove_process(self, pid: int) -> None:
        for gpu in self.gpus:
            gpu.processes[:] = [p for p in gpu.processes if p.pid != pid]

    def fail(self, func: str, code: int, *, device: int | None = None, times: int | None = None) -> None:
        """Make ``func`` (or every call, ``"*"``) raise NVMLError(code), on ``device`` only if
        given, for the next ``times`` calls (forever if None)."""
        self._faults.append([func, code, device, times])

    def clear_faults(self) -> None:
        self._faults.clear()

    def lose_gpu(self, index: int) -> None:
        self.gpus[index].lost = True

    def recover_gpu(self, index: int) -> None:
        self.gpus[index].lost = False

    def remove_function(self, name: str) -> None:
        """Delete a function from the module (an older nvidia-ml-py without it)."""
        if hasattr(self.module, name):
            delattr(self.module, name)

    def install(self, monkeypatch) -> types.ModuleType:
        monkeypatch.setitem(sys.modules, "pynvml", self.module)
        return self.module

    # ---- internals -----------------------------------------------------------------------
    def _check(self, func: str, handle: _Handle | None = None) -> None:
        self.calls[func] += 1
        if self.init_count <= 0 and func not in ("nvmlInit", "nvmlInitWithFlags"):
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        device = handle.index if handle is not None else None
        with self._lock:
            for fault in self._faults:
                name, code, dev, remaining = fault
                if name not in ("*", func):
                    continue
                if dev is not None and dev != device:
                    continue
                if remaining is not None:
                    if remaining <= 0:
                        continue
                    fault[3] = remaining - 1
                raise NVMLError(code)
        if handle is not None:
            if handle.gpu.lost or not any(g is handle.gpu for g in self.gpus):
                raise NVMLError(NVML_ERROR_GPU_IS_LOST)

    def _processes(self, func: str, handle: _Handle, kind: str, version: int):
        self._check(func, handle)
        if version > self.process_api:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        out = []
        for p in handle.gpu.processes:
            if p.kind != kind:
                continue
            # the binding turns NVML_VALUE_NOT_AVAILABLE_ulonglong into None (pynvml.py, _v2/_v3)
            used = None if p.used is None or p.used == ULLONG_MAX else p.used
            none = 0xFFFFFFFF
            out.append(_ProcessInfo(p.pid, used, none if p.gpu_instance is None else p.gpu_instance,
                                    none if p.compute_instance is None else p.compute_instance))
        return out

    def _build_module(self) -> types.ModuleType:
        mod = types.ModuleType("pynvml")
        mod.__file__ = __file__
        fake = self
        for name, value in globals().items():
            if name.startswith(("NVML_ERROR_", "NVMLError", "NVML_CLOCK_", "NVML_PCIE_UTIL_", "NVML_FI_DEV_",
                                "NVML_DEVICE_MIG_")) or name in (
                    "NVML_SUCCESS", "NVML_TEMPERATURE_GPU", "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG"):
                setattr(mod, name, value)
        mod.NVMLError = NVMLError
        mod.NVMLLibraryMismatchError = NVMLLibraryMismatchError
        mod.NVML_VALUE_NOT_AVAILABLE_ulonglong = _Friendly(value=ULLONG_MAX)

        def nvmlInit():
            fake.calls["nvmlInit"] += 1
            if fake.init_error is not None:
                raise NVMLError(fake.init_error)
            with fake._lock:
                fake.init_count += 1

        def nvmlInitWithFlags(flags):
            nvmlInit()

        def nvmlShutdown():
            # the C library answers NVML_ERROR_UNINITIALIZED once its count is back at 0
            fake._check("nvmlShutdown")
            with fake._lock:
                fake.init_count -= 1

        def nvmlSystemGetDriverVersion():
            fake._check("nvmlSystemGetDriverVersion")
            return fake.driver_version

        def nvmlSystemGetCudaDriverVersion():
            fake._check("nvmlSystemGetCudaDriverVersion")
            return fake.cuda_driver_version

        def nvmlSystemGetCudaDriverVersion_v2():
            fake._check("nvmlSystemGetCudaDriverVersion_v2")
            return fake.cuda_driver_version

        def nvmlDeviceGetCount():
            fake._check("nvmlDeviceGetCount")
            return len(fake.gpus)

        def nvmlDeviceGetHandleByIndex(index):
            fake._check("nvmlDeviceGetHandleByIndex")
            if not 0 <= index < len(fake.gpus):
                raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
            gpu = fake.gpus[index]
            if gpu.lost:
                raise NVMLError(NVML_ERROR_GPU_IS_LOST)
            return _Handle(gpu, index)

        def nvmlDeviceGetName(handle):
            fake._check("nvmlDeviceGetName", handle)
            return handle.gpu.name

        def nvmlDeviceGetUUID(handle):
            fake._check("nvmlDeviceGetUUID", handle)
            return handle.gpu.uuid

        def nvmlDeviceGetMemoryInfo(handle, version=None):
            fake._check("nvmlDeviceGetMemoryInfo", handle)
            g = handle.gpu
            return _Friendly(total=g.memory_total, used=g.memory_used, free=g.memory_total - g.memory_used)

        def nvmlDeviceGetUtilizationRates(handle):
            fake._check("nvmlDeviceGetUtilizationRates", handle)
            return _Friendly(gpu=handle.gpu.util_gpu, memory=handle.gpu.util_mem)

        def nvmlDeviceGetTemperature(handle, sensor):
            fake._check("nvmlDeviceGetTemperature", handle)
            if sensor != NVML_TEMPERATURE_GPU:
                raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
            return handle.gpu.temperature

        def nvmlDeviceGetPowerUsage(handle):
            fake._check("nvmlDeviceGetPowerUsage", handle)
            return handle.gpu.power_mw

        def nvmlDeviceGetEnforcedPowerLimit(handle):
            fake._check("nvmlDeviceGetEnforcedPowerLimit", handle)
            return handle.gpu.power_limit_mw

        def nvmlDeviceGetPowerManagementLimit(handle):
            fake._check("nvmlDeviceGetPowerManagementLimit", handle)
            return handle.gpu.power_limit_mw

        def nvmlDeviceGetClockInfo(handle, type):
            fake._check("nvmlDeviceGetClockInfo", handle)
            clocks = {NVML_CLOCK_SM: handle.gpu.clock_sm_mhz, NVML_CLOCK_MEM: handle.gpu.clock_mem_mhz}
            if type not in clocks:
                raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
            return clocks[type]  # MHz

        def nvmlDeviceGetFanSpeed(handle):
            fake._check("nvmlDeviceGetFanSpeed", handle)
            return handle.gpu.fan_percent

        def nvmlDeviceGetPcieThroughput(device, counter):
            fake._check("nvmlDeviceGetPcieThroughput", device)
            if counter not in (NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES):
                raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
            return device.gpu.pcie_tx_kbps if counter == NVML_PCIE_UTIL_TX_BYTES else device.gpu.pcie_rx_kbps

        def nvmlDeviceGetFieldValues(handle, fieldIds):
            # like the real call: one c_nvmlFieldValue_t per id, each with its own nvmlReturn
            fake._check("nvmlDeviceGetFieldValues", handle)
            kib = {NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: handle.gpu.nvlink_tx_kib,
                   NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: handle.gpu.nvlink_rx_kib}
            out = []
            for field_id in fieldIds:
                fid, scope = field_id if isinstance(field_id, tuple) else (field_id, 0)
                value = kib.get(fid)
                ret = NVML_SUCCESS if value is not None else NVML_ERROR_NOT_SUPPORTED
                out.append(_Friendly(fieldId=fid, scopeId=scope, timestamp=int(time.time() * 1e6), latencyUsec=0,
                                     valueType=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, nvmlReturn=ret,
                                     value=_Friendly(ullVal=value or 0)))
            return out

        def nvmlDeviceGetMigMode(device):
            fake._check("nvmlDeviceGetMigMode", device)
            if device.gpu.mig_mode is None:
                raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
            return [device.gpu.mig_mode, device.gpu.mig_mode]

        def nvmlDeviceGetProcessUtilization(handle, timeStamp):
            fake._check("nvmlDeviceGetProcessUtilization", handle)
            now = int(time.time() * 1e6)
            samples = []
            for p in handle.gpu.processes:
                if p.sm is None:
                    continue
                ts = now if p.sample_time_us is None else p.sample_time_us
                if ts > timeStamp:
                    samples.append(_UtilSample(p.pid, ts, p.sm, p.mem))
            if not samples:
                # the driver answers NOT_FOUND when no process ran since timeStamp
                raise NVMLError(NVML_ERROR_NOT_FOUND)
            return samples

        funcs = dict(locals())
        for kind, base in _PROCESS_FUNCS.items():
            for suffix, version in (("_v3", 3), ("_v2", 2)):
                name = base + suffix

                def proc_func(handle, _name=name, _kind=kind, _v=version):
                    return fake._processes(_name, handle, _kind, _v)

                proc_func.__name__ = name
                funcs[name] = proc_func

            def plain(handle, _name=base, _kind=kind):
                # nvidia-ml-py >= 12.535: @throwOnVersionMismatch def <base>(h): return <base>_v3(h)
                try:
                    return fake._processes(_name, handle, _kind, 3)
                except NVMLError_FunctionNotFound:  # noqa: F821 -- made by the loop above
                    raise NVMLLibraryMismatchError(
                        "Unversioned function called and the pyNVML version does not match the NVML lib "
                        f"version. Either use matching pyNVML and NVML lib versions or use a versioned "
                        f"function such as {_name}_v2") from None

            plain.__name__ = base
            funcs[base] = plain
        for name, obj in funcs.items():
            if name.startswith("nvml") and callable(obj):
                setattr(mod, name, obj)
        return mod


def public_names(module: types.ModuleType) -> list[str]:
    """Names the fake exports that code may use (to compare with the real binding)."""
    return sorted(n for n in vars(module) if n.startswith(("nvml", "NVML")))
