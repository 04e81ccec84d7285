"""The exporter's extra NVML figures per GPU: clocks, fan, PCIe and NVLink throughput, MIG mode.

Read by :class:`gpumem_tui.telemetry.nvml.NvmlSource` only when built with ``extended=True``
(``gpumem-tui exporter``): the dashboard does not show them, and they cost NVML calls per GPU
per poll (``nvmlDeviceGetPcieThroughput`` measures over a 20 ms window, NVML API reference,
"nvmlDeviceGetPcieThroughput").

As elsewhere in the NVML source, a figure NVML cannot read (NotSupported, NoPermission, a
function the driver lacks, a value outside its plausible range) is left as None -- never
invented, never raised. Units follow nvidia-ml-py (``pynvml.py``) and the NVML API reference,
converted to base units: clocks MHz -> Hz, PCIe KB/s -> bytes/s (x 1024, as nvitop reads it),
NVLink throughput fields KiB -> bytes.
"""

from __future__ import annotations

from typing import Any, Callable

# NVML's "no MIG instance" id (0xFFFFFFFF in nvmlProcessInfo_v2_t) and an unsigned int's
# "not available".
MIG_NONE = 0xFFFFFFFF
_UINT_MAX = 2**32 - 1

# Plausible upper bounds: no GPU clock reaches 100 GHz, no PCIe link 1 TB/s (PCIe 6.0 x16 is
# ~128 GB/s per direction), a fan 255 % of its rated speed (NVML allows above 100 %).
MAX_CLOCK_MHZ = 100_000
MAX_PCIE_KBPS = 10**9
MAX_FAN_PERCENT = 255
MAX_NVLINK_KIB = 2**60 // 1024

# nvidia-ml-py constant values, used when an old binding lacks the name.
_CLOCK_SM, _CLOCK_MEM = 1, 2
_PCIE_TX, _PCIE_RX = 0, 1
_NVLINK_DATA_TX, _NVLINK_DATA_RX = 138, 139
_MIG_ENABLE = 1
_SUCCESS = 0
_VALUE_TYPE_ULL = 3

Query = Callable[..., tuple[Any, "str | None"]]


def _uint(value: Any, high: int) -> int | None:
    """An unsigned NVML figure in 0..high, else None (2**32-1 is NVML's "not available")."""
    if value.__class__ is not int or value < 0 or value == _UINT_MAX or value > high:
        return None
    return value


def read_extra(query: Query, nv: Any, handle: Any) -> dict[str, Any]:
    """The extra figures of one GPU as :class:`~gpumem_tui.telemetry.model.DeviceSample` fields.

    ``query(name, handle, *args) -> (value, reason)`` is the NVML source's error-catching call;
    ``nv`` the pynvml module (for its constants). Returns a dict of field name -> value with
    every field present, None where NVML could not read it. Never raises for NVML errors.
    """
    out: dict[str, Any] = {}
    for name, clock in (("clock_sm_hz", getattr(nv, "NVML_CLOCK_SM", _CLOCK_SM)),
                        ("clock_memory_hz", getattr(nv, "NVML_CLOCK_MEM", _CLOCK_MEM))):
        mhz = _uint(query("nvmlDeviceGetClockInfo", handle, clock)[0], MAX_CLOCK_MHZ)
        out[name] = None if mhz is None else mhz * 1_000_000
    fan = _uint(query("nvmlDeviceGetFanSpeed", handle)[0], MAX_FAN_PERCENT)
    out["fan_speed_percent"] = None if fan is None else float(fan)
    for name, counter in (("pcie_tx_bytes_per_second", getattr(nv, "NVML_PCIE_UTIL_TX_BYTES", _PCIE_TX)),
                          ("pcie_rx_bytes_per_second", getattr(nv, "NVML_PCIE_UTIL_RX_BYTES", _PCIE_RX))):
        kbps = _uint(query("nvmlDeviceGetPcieThroughput", handle, counter)[0], MAX_PCIE_KBPS)
        out[name] = None if kbps is None else kbps * 1024
    out["nvlink_tx_bytes"], out["nvlink_rx_bytes"] = _nvlink(query, nv, handle)
    mode = query("nvmlDeviceGetMigMode", handle)[0]
    current = mode[0] if isinstance(mode, (list, tuple)) and mode else None
    out["mig_enabled"] = None if current.__class__ is not int else current == getattr(
        nv, "NVML_DEVICE_MIG_ENABLE", _MIG_ENABLE)
    return out


def _nvlink(query: Query, nv: Any, handle: Any) -> tuple[int | None, int | None]:
    """NVLink data bytes sent and received over all links since the driver loaded.

    One ``nvmlDeviceGetFieldValues`` call for ``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`` /
    ``_RX`` with scopeId UINT_MAX (the sum over all links, NVML API reference, "Field
    Identifiers"); values in KiB. A GPU without NVLink answers NOT_SUPPORTED per field.
    """
    ids = [(getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", _NVLINK_DATA_TX), _UINT_MAX),
           (getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", _NVLINK_DATA_RX), _UINT_MAX)]
    values = query("nvmlDeviceGetFieldValues", handle, ids)[0]
    out: list[int | None] = [None, None]
    try:
        for i in range(2):
            field = values[i]
            if field.nvmlReturn != _SUCCESS or field.valueType != _VALUE_TYPE_ULL:
                continue
            kib = field.value.ullVal
            if kib.__class__ is int and 0 <= kib <= MAX_NVLINK_KIB:
                out[i] = kib * 1024
    except (TypeError, IndexError, AttributeError):  # None (the call failed) or a malformed answer
        pass
    return out[0], out[1]
