"""``gpumem-tui snapshot [--json]``: print one sample of every GPU and GPU process, then exit.

JSON shape (issue 2; every unknown value is ``null``, memory in bytes, power in watts)::

    {"driver_version": str, "cuda_driver_version": str,
     "devices": [{"index", "name", "uuid", "memory_total_bytes", "memory_used_bytes",
                  "utilization_gpu_percent", "temperature_c", "power_draw_w", "power_limit_w"}],
     "processes": [{"pid", "device_index", "type", "used_memory_bytes", "sm_percent",
                    "user", "command", "cpu_percent", "rss_bytes"}]}

Command lines are whatever the process set, so they may hold control characters, Rich
markup or bytes that are not UTF-8: ``json.dumps`` escapes control characters, and bytes
that were not valid UTF-8 become U+FFFD (:func:`gpumem_tui.support.text.json_safe`), so the output is
always valid JSON and pure ASCII. The text table shows commands through
:func:`gpumem_tui.support.text.printable`.

Two readings ``--cpu-interval`` seconds apart are taken so that host CPU % is measured, not
guessed (psutil needs two readings); the second is printed.

Exit codes: 0 printed; 1 NVML not available (one stderr line naming the NVML error);
2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from gpumem_tui.support.cli_support import InputError, OneLineParser
from gpumem_tui.telemetry.model import NOT_VISIBLE, DeviceSample, ProcessSample, Snapshot, namespace_note
from gpumem_tui.support.text import json_safe, print_error, printable
from gpumem_tui.support.units import format_bytes

PROG = "gpumem-tui snapshot"


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="Print one sample of every GPU and GPU process, then exit.")
    p.add_argument("--json", action="store_true", help="machine-readable JSON (bytes, watts; null when unknown)")
    p.add_argument("--cpu-interval", type=float, default=0.2, metavar="SECONDS",
                   help="time between the two readings used for CPU %% (default 0.2, at least 0.05; 0 leaves CPU %% null)")
    return p


def device_to_json(d: DeviceSample) -> dict[str, Any]:
    """One device as the JSON object of issue 2."""
    return {
        "index": d.index,
        "name": json_safe(d.name),
        "uuid": json_safe(d.uuid),
        "memory_total_bytes": d.memory_total_bytes,
        "memory_used_bytes": d.memory_used_bytes,
        "utilization_gpu_percent": d.utilization_gpu_percent,
        "temperature_c": d.temperature_c,
        "power_draw_w": d.power_draw_w,
        "power_limit_w": d.power_limit_w,
    }


def process_to_json(p: ProcessSample) -> dict[str, Any]:
    """One process as the JSON object of issue 2 (command made valid Unicode, not shortened).

    A process in a container we can name or map also gets ``container`` (e.g. "docker
    1a2b3c4d5e6f") and ``container_pid`` (its PID inside its own PID namespace, from NSpid;
    null when unknown); the keys are absent otherwise, so issue 2's shape is unchanged.
    """
    doc = {
        "pid": p.pid,
        "device_index": p.device_index,
        "type": p.type.value,
        "used_memory_bytes": p.used_memory_bytes,
        "sm_percent": p.sm_percent,
        "user": json_safe(p.user),
        "command": json_safe(p.command),
        "cpu_percent": p.cpu_percent,
        "rss_bytes": p.rss_bytes,
    }
    if p.container is not None or p.container_pid is not None:
        doc["container"] = json_safe(p.container)
        doc["container_pid"] = p.container_pid
    return doc


def snapshot_to_json(snap: Snapshot) -> dict[str, Any]:
    """The ``snapshot --json`` document for ``snap`` (GPU processes only). A ``note`` key is
    added (once) when a process's host fields are null because /proc cannot see its PID."""
    processes = [p for p in snap.processes if p.device_index is not None]
    doc: dict[str, Any] = {
        "driver_version": snap.driver_version,
        "cuda_driver_version": snap.cuda_driver_version,
        "devices": [device_to_json(d) for d in snap.devices],
        "processes": [process_to_json(p) for p in processes],
    }
    note = namespace_note(processes)
    if note:
        doc["note"] = note
    return doc


def _cell(value: Any, reason: str | None, fmt) -> str:
    if value is None:
        return reason or "N/A"
    return fmt(value)


def format_table(snap: Snapshot, width: int = 120) -> str:
    """A compact nvidia-smi-like text rendering of ``snap``. Memory in MiB/GiB (binary)."""
    lines = [f"Driver {snap.driver_version or 'N/A'}   CUDA {snap.cuda_driver_version or 'N/A'}   "
             f"(memory in binary units: MiB = 2^20 bytes)"]
    lines.append(f"{'GPU':>3}  {'Name':<24} {'Memory used / total':>25} {'Util':>5} {'Temp':>5} {'Power / limit':>15}")
    for d in snap.devices:
        name = printable(d.name or "?", 24)
        if d.error:
            lines.append(f"{d.index:>3}  {name:<24} {printable(d.error, 60)}")
            continue
        used = _cell(d.memory_used_bytes, d.reason("memory_used_bytes"), format_bytes)
        total = _cell(d.memory_total_bytes, d.reason("memory_total_bytes"), format_bytes)
        util = _cell(d.utilization_gpu_percent, d.reason("utilization_gpu_percent"), lambda v: f"{v:.0f}%")
        temp = _cell(d.temperature_c, d.reason("temperature_c"), lambda v: f"{v:.0f}C")
        power = _cell(d.power_draw_w, d.reason("power_draw_w"), lambda v: f"{v:.0f}W")
        limit = _cell(d.power_limit_w, d.reason("power_limit_w"), lambda v: f"{v:.0f}W")
        lines.append(f"{d.index:>3}  {name:<24} {used + ' / ' + total:>25} {util:>5} {temp:>5} {power + ' / ' + limit:>15}")
    lines.append("")
    lines.append(f"{'GPU':>3} {'PID':>8} {'Type':<8} {'GPU mem':>10} {'SM':>4} {'User':<10} {'CPU':>6} {'RSS':>10}  Command")
    procs = [p for p in snap.processes if p.device_index is not None]
    if not procs:
        lines.append("    (no processes on any GPU)")
    for p in procs:
        mem = _cell(p.used_memory_bytes, p.reason("used_memory_bytes"), format_bytes)
        sm = _cell(p.sm_percent, p.reason("sm_percent"), lambda v: f"{v:.0f}%")
        cpu = _cell(p.cpu_percent, p.reason("cpu_percent"), lambda v: f"{v:.0f}%")
        rss = _cell(p.rss_bytes, p.reason("rss_bytes"), format_bytes)
        user = printable(p.user or p.reason("user") or "?", 10)
        prefix = f"{p.device_index:>3} {p.pid:>8} {p.type.value:<8} {mem:>10} {sm:>4} {user:<10} {cpu:>6} {rss:>10}  "
        reason = p.reason("command") or p.status.value
        command = p.command if p.command is not None else (reason if reason == NOT_VISIBLE else f"({reason})")
        lines.append(prefix + printable(command, max(width - len(prefix), 24)))
    note = namespace_note(procs)
    if note:
        lines.append(note)
    return "\n".join(lines)


def take_snapshot(cpu_interval: float = 0.2, *, nvml=None, host=None) -> Snapshot:
    """Poll NVML + host twice ``cpu_interval`` seconds apart; return the second reading.

    Raises :class:`gpumem_tui.telemetry.nvml.NvmlUnavailable` without NVML.
    """
    from gpumem_tui.telemetry.host import HostEnricher
    from gpumem_tui.telemetry.nvml import NvmlSource, NvmlUnavailable

    nvml = nvml if nvml is not None else NvmlSource()
    if not nvml.available:
        raise NvmlUnavailable(nvml.error or "NVML is not available")
    host = host if host is not None else HostEnricher()
    try:
        reading = nvml.poll()
        if cpu_interval > 0:
            host.enrich(reading.processes)
            time.sleep(cpu_interval)
            reading = nvml.poll()
        processes = host.enrich(reading.processes)
    finally:
        nvml.close()
    if reading.error is not None:  # initialised, then every call failed
        raise NvmlUnavailable(reading.error)
    return Snapshot(time=time.time(), driver_version=reading.driver_version,
                    cuda_driver_version=reading.cuda_driver_version, devices=reading.devices,
                    processes=tuple(processes), notices=reading.notices)


def main(argv: list[str]) -> int:
    """Entry point for ``gpumem-tui snapshot``; returns the exit code."""
    from gpumem_tui.telemetry.host import MIN_CPU_SECONDS
    from gpumem_tui.telemetry.nvml import NvmlUnavailable

    try:
        args = _parser().parse_args(argv)
    except InputError as exc:
        print_error(PROG, exc)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    if not (args.cpu_interval == 0 or MIN_CPU_SECONDS <= args.cpu_interval <= 60):
        # CPU time counts in 10 ms ticks: a shorter interval measures nothing (host.py)
        print(f"{PROG}: --cpu-interval must be 0 (no CPU %) or between {MIN_CPU_SECONDS:g} and 60 seconds",
              file=sys.stderr)
        return 2
    try:
        snap = take_snapshot(args.cpu_interval)
    except NvmlUnavailable as exc:
        print(f"{PROG}: NVML is not available: {printable(str(exc), 300)}", file=sys.stderr)
        return 1
    if args.json:
        # ensure_ascii: the output is plain ASCII whatever the terminal's encoding
        print(json.dumps(snapshot_to_json(snap), ensure_ascii=True, allow_nan=False))
    else:
        print(format_table(snap))
    return 0
