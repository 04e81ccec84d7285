"""NvmlSource against the fake pynvml: values, merging, fallbacks, faults and recovery."""

from __future__ import annotations

import importlib
import inspect
import sys

import pytest
from fake_pynvml import (
    GiB,
    MiB,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNKNOWN,
    ULLONG_MAX,
    FakeNvml,
    public_names,
)

from gpumem_tui.telemetry.model import ProcessType
from gpumem_tui.telemetry.nvml import NvmlSource, format_cuda_version


def _real_pynvml(monkeypatch):
    """The installed nvidia-ml-py (a dependency: its absence is a failure, not a skip)."""
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)  # never the fake of another test
    module = importlib.import_module("pynvml")
    assert "fake_pynvml" not in (getattr(module, "__file__", "") or "")
    return module


def test_fake_matches_real_binding_names_and_errors(monkeypatch):
    real = _real_pynvml(monkeypatch)
    fake = FakeNvml(1).module
    for name in public_names(fake):
        assert hasattr(real, name), f"fake exports {name}, which nvidia-ml-py does not have"
        value = getattr(fake, name)
        if name.startswith("NVML_ERROR_"):
            assert value == getattr(real, name), name
        if callable(value) and name.startswith("nvml"):
            real_params = list(inspect.signature(getattr(real, name)).parameters)
            fake_params = list(inspect.signature(value).parameters)
            assert fake_params[: len(real_params)] == real_params, name
    # errors: NVMLError(code) is the subclass, with .value and the driver's text
    for code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_GPU_IS_LOST, NVML_ERROR_TIMEOUT, NVML_ERROR_UNKNOWN):
        f_err, r_err = fake.NVMLError(code), real.NVMLError(code)
        assert type(f_err).__name__ == type(r_err).__name__
        assert f_err.value == r_err.value == code
        assert str(f_err) == str(r_err)
        assert isinstance(f_err, fake.NVMLError)


def _source(fake: FakeNvml) -> NvmlSource:
    return NvmlSource(fake.module)


def test_devices_are_read_with_units(fake_nvml):
    fake_nvml.gpus[1].memory_used = 3 * GiB
    fake_nvml.gpus[1].power_mw = 250_500
    fake_nvml.gpus[1].name = b"Tesla V100"  # older bindings return bytes
    reading = _source(fake_nvml).poll()
    assert reading.error is None
    assert reading.driver_version == "550.54.15"
    assert reading.cuda_driver_version == "12.4"
    assert [d.index for d in reading.devices] == [0, 1]
    d1 = reading.devices[1]
    assert d1.name == "Tesla V100"
    assert d1.memory_used_bytes == 3 * GiB and d1.memory_total_bytes == 80 * GiB
    assert d1.power_draw_w == pytest.approx(250.5)  # NVML milliwatts -> watts
    assert d1.power_limit_w == pytest.approx(400.0)
    assert d1.temperature_c == 55.0 and d1.utilization_gpu_percent == 37.0
    assert d1.error is None and d1.field_errors == ()


def test_cuda_version_format():
    assert format_cuda_version(12040) == "12.4"
    assert format_cuda_version(11080) == "11.8"


def test_init_failure_is_reported_once_and_not_retried(no_nvml):
    src = _source(no_nvml)
    assert not src.available
    assert src.error == "NVML Shared Library Not Found"
    for _ in range(3):
        reading = src.poll()
        assert reading.error == "NVML Shared Library Not Found"
        assert reading.devices == () and reading.processes == ()
    assert no_nvml.calls["nvmlInit"] == 1


def test_driver_not_loaded_text(fake_nvml):
    fake_nvml.init_error = NVML_ERROR_DRIVER_NOT_LOADED
    assert _source(fake_nvml).error == "Driver Not Loaded"


def test_processes_merge_compute_graphics_mps_and_dedupe(fake_nvml):
    fake_nvml.add_process(0, pid=10, used=100 * MiB, kind="graphics")
    fake_nvml.add_process(0, pid=10, used=300 * MiB, kind="compute")
    fake_nvml.add_process(0, pid=11, used=None, kind="graphics")
    fake_nvml.add_process(0, pid=11, used=50 * MiB, kind="mps")
    fake_nvml.add_process(0, pid=12, used=7 * MiB, kind="graphics")
    fake_nvml.add_process(1, pid=10, used=1 * GiB, kind="compute")  # same pid, other GPU
    procs = {(p.device_index, p.pid): p for p in _source(fake_nvml).poll().processes}
    assert len(procs) == 4
    assert procs[(0, 10)].type is ProcessType.COMPUTE and procs[(0, 10)].used_memory_bytes == 300 * MiB
    assert procs[(0, 11)].type is ProcessType.MPS and procs[(0, 11)].used_memory_bytes == 50 * MiB
    assert procs[(0, 12)].type is ProcessType.GRAPHICS
    assert procs[(1, 10)].used_memory_bytes == 1 * GiB


def test_fake_process_calls_behave_like_the_real_binding(monkeypatch):
    """What the fake copies from nvidia-ml-py's pynvml.py: the plain process calls are their _v3
    under throwOnVersionMismatch, and _v2/_v3 turn NVML_VALUE_NOT_AVAILABLE into None."""
    real = _real_pynvml(monkeypatch)
    for base in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
                 "nvmlDeviceGetMPSComputeRunningProcesses"):
        plain = inspect.getsource(getattr(real, base))
        assert f"return {base}_v3(handle)" in plain and "@throwOnVersionMismatch" in plain
        for version in ("_v2", "_v3"):
            assert "obj.usedGpuMemory = None" in inspect.getsource(getattr(real, base + version))
    assert issubclass(real.NVMLLibraryMismatchError, Exception)
    assert not issubclass(real.NVMLLibraryMismatchError, real.NVMLError)
    fake = FakeNvml(1)
    fake.module.nvmlInit()
    fake.add_process(0, pid=20, used=ULLONG_MAX)
    handle = fake.module.nvmlDeviceGetHandleByIndex(0)
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"):
        assert [(p.pid, p.usedGpuMemory) for p in getattr(fake.module, name)(handle)] == [(20, None)]
    fake.process_api = 2
    with pytest.raises(fake.module.NVMLLibraryMismatchError):
        fake.module.nvmlDeviceGetComputeRunningProcesses(handle)


def test_fake_counts_init_and_shutdown():
    """NVML counts nvmlInit calls; nvmlShutdown without an init raises NVMLError_Uninitialized."""
    fake = FakeNvml(1)
    nv = fake.module
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlShutdown()
    nv.nvmlInit()
    nv.nvmlInit()
    nv.nvmlShutdown()
    assert fake.init_count == 1 and nv.nvmlDeviceGetCount() == 1  # still initialised once
    nv.nvmlShutdown()
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlShutdown()


def test_source_pairs_init_with_shutdown(fake_nvml):
    source = _source(fake_nvml)
    assert fake_nvml.init_count == 1
    source.poll()
    source.close()
    source.close()  # a second close must not shut down someone else's reference
    assert fake_nvml.init_count == 0


def test_memory_not_available_is_none_with_reason(fake_nvml):
    fake_nvml.add_process(0, pid=20, used=ULLONG_MAX)  # NVML_VALUE_NOT_AVAILABLE (WDDM, some vGPUs)
    fake_nvml.add_process(0, pid=21, used=5 * MiB)
    procs = {p.pid: p for p in _source(fake_nvml).poll().processes}
    assert procs[20].used_memory_bytes is None
    assert procs[20].reason("used_memory_bytes") == "N/A"
    assert procs[21].used_memory_bytes == 5 * MiB and procs[21].reason("used_memory_bytes") is None


@pytest.mark.parametrize("api, first", [(3, "_v3"), (2, "_v2")])
def test_process_call_falls_back_and_remembers(fake_nvml, api, first):
    fake_nvml.process_api = api
    fake_nvml.add_process(0, pid=30, used=64 * MiB)
    src = _source(fake_nvml)
    for _ in range(3):
        procs = src.poll().processes
        assert [(p.pid, p.used_memory_bytes) for p in procs] == [(30, 64 * MiB)]
    base = "nvmlDeviceGetComputeRunningProcesses"
    # each newer version is tried once per GPU at the first poll only, then the working one is used
    assert fake_nvml.calls[base + first] == 3 * 2
    for newer in ("_v3", "_v2")[: 3 - api]:
        assert fake_nvml.calls[base + newer] == 1


def test_driver_with_only_v1_process_calls_says_not_available(fake_nvml):
    """A driver older than the _v2 calls: the binding's plain call is its _v3 and raises
    NVMLLibraryMismatchError; the source says the list is not available, in one notice."""
    fake_nvml.process_api = 1
    fake_nvml.add_process(0, pid=32, used=64 * MiB)
    src = _source(fake_nvml)
    readings = [src.poll() for _ in range(2)]
    assert all(r.processes == () for r in readings)
    notices = [n for r in readings for n in r.notices if "nvmlDeviceGetComputeRunningProcesses" in n]
    assert notices == ["NVML function nvmlDeviceGetComputeRunningProcesses is not available with this driver"]
    assert [d.memory_used_bytes for d in readings[-1].devices] == [1 * GiB, 1 * GiB]  # the rest still reads


def test_fallback_when_binding_lacks_v3_function(fake_nvml):
    fake_nvml.remove_function("nvmlDeviceGetComputeRunningProcesses_v3")
    fake_nvml.add_process(1, pid=31, used=1 * MiB)
    procs = _source(fake_nvml).poll().processes
    assert [p.pid for p in procs] == [31]
    assert fake_nvml.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 2


def test_unsupported_fields_become_none_with_reason(fake_nvml):
    fake_nvml.fail("nvmlDeviceGetPowerUsage", NVML_ERROR_NOT_SUPPORTED)
    fake_nvml.fail("nvmlDeviceGetTemperature", NVML_ERROR_NO_PERMISSION, device=1)
    fake_nvml.fail("nvmlDeviceGetUtilizationRates", NVML_ERROR_TIMEOUT, device=0)
    fake_nvml.fail("nvmlDeviceGetMemoryInfo", NVML_ERROR_UNKNOWN, device=1)
    d0, d1 = _source(fake_nvml).poll().devices
    assert d0.power_draw_w is None and d0.reason("power_draw_w") == "N/A"
    assert d0.utilization_gpu_percent is None and d0.reason("utilization_gpu_percent") == "timeout"
    assert d0.temperature_c == 55.0 and d0.error is None
    assert d1.temperature_c is None and d1.reason("temperature_c") == "no permission"
    assert d1.memory_used_bytes is None and d1.reason("memory_used_bytes") == "unknown NVML error"
    assert d1.reason("memory_total_bytes") == "unknown NVML error"
    assert d1.error is None and d1.utilization_gpu_percent == 37.0


def test_sm_percent_uses_last_seen_timestamp(fake_nvml):
    fake_nvml.add_process(0, pid=40, used=1 * MiB, sm=80, sample_time_us=1_000)
    fake_nvml.add_process(0, pid=41, used=1 * MiB, sm=None)  # never sampled: idle
    src = _source(fake_nvml)
    procs = {p.pid: p for p in src.poll().processes}
    assert procs[40].sm_percent == 80.0
    assert procs[41].sm_percent == 0.0 and procs[41].reason("sm_percent") is None
    # the next call passes the newest stamp; the old sample is not returned again (NOT_FOUND)
    fake_nvml.gpus[0].processes[0].sm = 10
    src.poll()
    dev = src._devices[0]
    assert dev.util_stamp == 1_000
    fake_nvml.gpus[0].processes[0].sample_time_us = 2_000
    procs = {p.pid: p for p in src.poll().processes}
    assert procs[40].sm_percent == 10.0


def test_sm_percent_not_supported(fake_nvml):
    fake_nvml.add_process(0, pid=42, used=1 * MiB, sm=50)
    fake_nvml.fail("nvmlDeviceGetProcessUtilization", NVML_ERROR_NOT_SUPPORTED)
    (proc,) = _source(fake_nvml).poll().processes
    assert proc.sm_percent is None and proc.reason("sm_percent") == "N/A"


def test_gpu_lost_mid_run_and_recovery(fake_nvml):
    fake_nvml.add_process(0, pid=50, used=1 * MiB)
    fake_nvml.add_process(1, pid=51, used=2 * MiB)
    src = _source(fake_nvml)
    assert src.poll().devices[1].error is None
    fake_nvml.lose_gpu(1)
    reading = src.poll()
    assert reading.devices[0].error is None
    assert reading.devices[1].error == "GPU is lost"
    assert reading.devices[1].name == "NVIDIA A100-SXM4-80GB"  # last known name kept
    assert [p.pid for p in reading.processes] == [50]
    assert src.poll().devices[1].error == "GPU is lost"  # handle lookup fails too
    fake_nvml.recover_gpu(1)
    reading = src.poll()
    assert reading.devices[1].error is None and reading.devices[1].memory_used_bytes == 1 * GiB
    assert sorted(p.pid for p in reading.processes) == [50, 51]


@pytest.mark.parametrize("code, text", [(NVML_ERROR_UNKNOWN, "unknown NVML error"),
                                        (NVML_ERROR_TIMEOUT, "timeout"),
                                        (NVML_ERROR_NO_PERMISSION, "no permission")])
def test_every_call_failing_on_one_device_marks_device_then_recovers(fake_nvml, code, text):
    src = _source(fake_nvml)
    src.poll()
    fake_nvml.fail("*", code, device=0, times=None)
    d0, d1 = src.poll().devices
    assert d0.error == text and d1.error is None
    fake_nvml.clear_faults()
    d0, _ = src.poll().devices
    assert d0.error is None and d0.memory_total_bytes == 80 * GiB


def test_transient_fault_on_any_call_never_raises(fake_nvml):
    fake_nvml.add_process(0, pid=60, used=1 * MiB, sm=5)
    src = _source(fake_nvml)
    names = [n for n in dir(fake_nvml.module) if n.startswith("nvmlDevice") or n.startswith("nvmlSystem")]
    for name in names:
        for code in (NVML_ERROR_UNKNOWN, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION, NVML_ERROR_TIMEOUT):
            fake_nvml.fail(name, code, times=1)
            reading = src.poll()
            assert len(reading.devices) == 2
    fake_nvml.clear_faults()
    reading = src.poll()
    assert all(d.error is None and d.field_errors == () for d in reading.devices)
    assert [p.pid for p in reading.processes] == [60]


def test_device_count_change_reenumerates(fake_nvml):
    src = _source(fake_nvml)
    assert len(src.poll().devices) == 2
    fake_nvml.add_gpu(name="NVIDIA H100 80GB HBM3")
    reading = src.poll()
    assert [d.name for d in reading.devices][-1] == "NVIDIA H100 80GB HBM3"
    assert any("GPU count changed from 2 to 3" in n for n in reading.notices)
    del fake_nvml.gpus[0]  # a GPU falls off the bus: indices shift
    reading = src.poll()
    assert len(reading.devices) == 2 and reading.devices[1].name == "NVIDIA H100 80GB HBM3"
    assert all(d.error is None for d in reading.devices)


def test_device_count_failure_keeps_rows_marked(fake_nvml):
    src = _source(fake_nvml)
    src.poll()
    fake_nvml.fail("nvmlDeviceGetCount", NVML_ERROR_UNKNOWN, times=1)
    reading = src.poll()
    assert [d.error for d in reading.devices] == ["device count: unknown NVML error"] * 2
    assert all(d.error is None for d in src.poll().devices)


def test_missing_function_reported_once(fake_nvml):
    fake_nvml.remove_function("nvmlDeviceGetPowerUsage")
    src = _source(fake_nvml)
    first = src.poll()
    assert first.devices[0].reason("power_draw_w") == "N/A"
    assert sum("nvmlDeviceGetPowerUsage" in n for n in first.notices) == 1
    assert not any("nvmlDeviceGetPowerUsage" in n for n in src.poll().notices)


def test_power_limit_falls_back_to_management_limit(fake_nvml):
    fake_nvml.fail("nvmlDeviceGetEnforcedPowerLimit", NVML_ERROR_NOT_SUPPORTED)
    fake_nvml.gpus[0].power_limit_mw = 300_000
    d0 = _source(fake_nvml).poll().devices[0]
    assert d0.power_limit_w == pytest.approx(300.0) and d0.reason("power_limit_w") is None


def test_process_list_failure_is_a_device_field_error(fake_nvml):
    fake_nvml.add_process(0, pid=70, used=1 * MiB)
    fake_nvml.fail("nvmlDeviceGetComputeRunningProcesses_v3", NVML_ERROR_NO_PERMISSION, device=0)
    d0 = _source(fake_nvml).poll().devices[0]
    assert d0.reason("processes") == "no permission" and d0.error is None
