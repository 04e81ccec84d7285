"""Snapshot <-> JSON-safe dict, for traces (``gpumem_tui.telemetry.replay``) and scripts.

Headless (no Textual, no torch). Memory stays in integer bytes; enums are their string values;
``field_errors`` and ``categories`` (tuples of pairs) become ``[[name, value], ...]`` and
``{name: bytes}``; ``ProbeInfo.setup`` becomes an object. Non-finite floats become ``null``
(JSON has no NaN). Text (process commands) is kept exactly as read: the encoder must escape
non-ASCII (``json.dumps`` default ``ensure_ascii=True``) so lone surrogates from undecodable
command lines survive the round trip; rendering it safely is the UI's job.

Reading is tolerant in the ways a trace reader needs: unknown fields are ignored at every
level; an item of a list (a device, a process, a probe sample, a phase mark) that cannot be
read -- e.g. a process type a newer writer added -- is skipped and counted in the snapshot's
``notices``. Only a record that is not a snapshot at all raises :class:`SerializeError`.

Figures are checked for being plausible, not only well-typed (a trace is a file anyone can
edit; see :mod:`gpumem_tui.telemetry.plausible`): times must be epoch seconds in [0, 2100];
a probe sample or phase mark may not lie more than ``MAX_FUTURE_SECONDS`` after its
snapshot; byte counts are at most ``MAX_BYTES``; percentages, temperatures and watts must
lie in physical ranges. An optional figure outside its range reads as unknown (None), a
required one makes its item unreadable.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gpumem_tui.telemetry.launch import RankLaunch, rank_launch
from gpumem_tui.telemetry.plausible import MAX_BYTES, MAX_FUTURE_SECONDS, plausible_time
from gpumem_tui.telemetry.model import (
    DeviceSample,
    Phase,
    PhaseMark,
    PhasePeak,
    ProbeInfo,
    ProbeSample,
    ProcessSample,
    ProcessStatus,
    ProcessType,
    Snapshot,
)

T = TypeVar("T")


class SerializeError(ValueError):
    """A record that cannot be read as a Snapshot; the message says which field and why."""


# -- to dict -------------------------------------------------------------------------------


def _num(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _errors(errors: tuple[tuple[str, str], ...]) -> list[list[str]]:
    return [[str(k), str(v)] for k, v in errors]


def device_to_dict(d: DeviceSample) -> dict[str, Any]:
    """One DeviceSample as a JSON-safe dict."""
    return {
        "index": d.index,
        "name": d.name,
        "uuid": d.uuid,
        "memory_total_bytes": d.memory_total_bytes,
        "memory_used_bytes": d.memory_used_bytes,
        "utilization_gpu_percent": _num(d.utilization_gpu_percent),
        "temperature_c": _num(d.temperature_c),
        "power_draw_w": _num(d.power_draw_w),
        "power_limit_w": _num(d.power_limit_w),
        "error": d.error,
        "field_errors": _errors(d.field_errors),
    }


def process_to_dict(p: ProcessSample) -> dict[str, Any]:
    """One ProcessSample as a JSON-safe dict (``command`` verbatim)."""
    return {
        "pid": p.pid,
        "device_index": p.device_index,
        "type": p.type.value,
        "used_memory_bytes": p.used_memory_bytes,
        "sm_percent": _num(p.sm_percent),
        "user": p.user,
        "command": p.command,
        "cpu_percent": _num(p.cpu_percent),
        "rss_bytes": p.rss_bytes,
        "start_time": _num(p.start_time),
        "status": p.status.value,
        "container": p.container,
        "field_errors": _errors(p.field_errors),
        "container_pid": p.container_pid,
        **({"launch": launch_to_dict(p.launch)} if p.launch is not None else {}),
    }


def probe_to_dict(p: ProbeSample) -> dict[str, Any]:
    """One ProbeSample as a JSON-safe dict."""
    return {
        "time": _num(p.time),
        "pid": p.pid,
        "device": p.device,
        "allocated_bytes": p.allocated_bytes,
        "reserved_bytes": p.reserved_bytes,
        "peak_allocated_bytes": p.peak_allocated_bytes,
        "categories": {str(k): int(v) for k, v in p.categories},
    }


def jsonable(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` that ``json.dumps(allow_nan=False)`` accepts.

    Non-finite floats become None, unknown objects (``torch.dtype``, paths, ...) their ``str``,
    mapping keys strings; nesting deeper than 32 levels is cut to a string.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth > 32:
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    return str(value)


def info_to_dict(i: ProbeInfo) -> dict[str, Any]:
    """One ProbeInfo as a JSON-safe dict."""
    return {
        "pid": i.pid,
        "model_config": jsonable(i.model_config) if i.model_config is not None else None,
        "setup": {str(k): jsonable(v) for k, v in i.setup},
        "ended": i.ended,
    }


def mark_to_dict(m: PhaseMark) -> dict[str, Any]:
    """One PhaseMark as a JSON-safe dict."""
    return {"time": _num(m.time), "pid": m.pid, "phase": m.phase.value, "step": m.step}


def peak_to_dict(p: PhasePeak) -> dict[str, Any]:
    """One PhasePeak as a JSON-safe dict."""
    return {"pid": p.pid, "step": p.step, "phase": p.phase.value, "start": _num(p.start), "end": _num(p.end),
            "peak_bytes": p.peak_bytes, "device": p.device, "steps": p.steps,
            **({"categories": {str(k): int(v) for k, v in p.categories}} if p.categories else {}),
            **({"end_bytes": p.end_bytes} if p.end_bytes is not None else {})}


def snapshot_to_dict(s: Snapshot) -> dict[str, Any]:
    """A Snapshot as a dict of JSON types only (bytes as ints). Inverse: :func:`snapshot_from_dict`."""
    return {
        "time": _num(s.time),
        "driver_version": s.driver_version,
        "cuda_driver_version": s.cuda_driver_version,
        "nvml_error": s.nvml_error,
        "devices": [device_to_dict(d) for d in s.devices],
        "processes": [process_to_dict(p) for p in s.processes],
        "probes": [probe_to_dict(p) for p in s.probes],
        "probe_infos": [info_to_dict(i) for i in s.probe_infos],
        "phase_marks": [mark_to_dict(m) for m in s.phase_marks],
        "notices": list(s.notices),
        **({"phase_peaks": [peak_to_dict(p) for p in s.phase_peaks]} if s.phase_peaks else {}),
    }


# -- from dict -----------------------------------------------------------------------------


def _get(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], *, optional: bool = True) -> Any:
    value = d.get(key)
    if value is None:
        if optional:
            return None
        raise SerializeError(f"{key!r} is missing")
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise SerializeError(f"{key!r} has the wrong type (bool)")
    if not isinstance(value, kind):
        raise SerializeError(f"{key!r} has the wrong type ({type(value).__name__})")
    return value


# Upper bounds of counters that are not bytes: Linux PIDs stay below 2**22 (PID_MAX_LIMIT),
# a device index below 2**16; a training step or any count below 2**53 (exact in a float).
_MAX_PID = 1 << 22
_MAX_COUNT = 1 << 53


def _int(d: Mapping[str, Any], key: str, *, optional: bool = True, minimum: int | None = 0,
         maximum: int = MAX_BYTES) -> int | None:
    value = _get(d, key, int, optional=optional)
    if value is not None and minimum is not None and value < minimum:
        raise SerializeError(f"{key!r} is negative")
    if value is not None and value > maximum:
        if optional:
            return None
        raise SerializeError(f"{key!r} is implausibly large")
    return value


def _float(d: Mapping[str, Any], key: str, *, optional: bool = True,
           low: float = -math.inf, high: float = math.inf) -> float | None:
    value = _get(d, key, (int, float), optional=optional)
    if value is None:
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer beyond the float range
        value = math.inf
    if not math.isfinite(value) or not low <= value <= high:
        if optional:
            return None
        raise SerializeError(f"{key!r} is not a plausible number")
    return value


def _time(d: Mapping[str, Any], key: str, *, optional: bool = False) -> float | None:
    raw = d.get(key)
    if raw is None and optional:
        return None
    value = plausible_time(raw)
    if value is None:
        if optional:
            return None
        raise SerializeError(f"{key!r} is not an epoch time in seconds between 1970 and 2100")
    return value


def _str(d: Mapping[str, Any], key: str) -> str | None:
    return _get(d, key, str)


def _field_errors(d: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    raw = d.get("field_errors") or []
    if not isinstance(raw, list):
        raise SerializeError("'field_errors' is not a list")
    out = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise SerializeError("'field_errors' items must be [name, reason] strings")
        out.append((item[0], item[1]))
    return tuple(out)


def _enum(enum_type: Callable[[str], T], value: Any, key: str) -> T:
    try:
        return enum_type(value)
    except ValueError:
        raise SerializeError(f"unknown {key} {value!r}") from None


def device_from_dict(d: Mapping[str, Any]) -> DeviceSample:
    """Inverse of :func:`device_to_dict`. Raises SerializeError."""
    return DeviceSample(
        index=_int(d, "index", optional=False, maximum=1 << 16),  # type: ignore[arg-type]
        name=_str(d, "name"),
        uuid=_str(d, "uuid"),
        memory_total_bytes=_int(d, "memory_total_bytes"),
        memory_used_bytes=_int(d, "memory_used_bytes"),
        utilization_gpu_percent=_float(d, "utilization_gpu_percent", low=0.0, high=100.0),
        temperature_c=_float(d, "temperature_c", low=-100.0, high=200.0),
        power_draw_w=_float(d, "power_draw_w", low=0.0, high=100_000.0),
        power_limit_w=_float(d, "power_limit_w", low=0.0, high=100_000.0),
        error=_str(d, "error"),
        field_errors=_field_errors(d),
    )


def process_from_dict(d: Mapping[str, Any]) -> ProcessSample:
    """Inverse of :func:`process_to_dict`. Raises SerializeError."""
    return ProcessSample(
        pid=_int(d, "pid", optional=False, maximum=_MAX_PID),  # type: ignore[arg-type]
        device_index=_int(d, "device_index", maximum=1 << 16),
        type=_enum(ProcessType, d.get("type"), "process type"),
        used_memory_bytes=_int(d, "used_memory_bytes"),
        sm_percent=_float(d, "sm_percent", low=0.0, high=100.0),
        user=_str(d, "user"),
        command=_str(d, "command"),
        cpu_percent=_float(d, "cpu_percent", low=0.0, high=100.0 * 65536),  # 100 % per core
        rss_bytes=_int(d, "rss_bytes"),
        start_time=_time(d, "start_time", optional=True),
        status=_enum(ProcessStatus, d.get("status", ProcessStatus.OK.value), "process status"),
        container=_str(d, "container"),
        field_errors=_field_errors(d),
        container_pid=_int(d, "container_pid", maximum=_MAX_PID),
        launch=launch_from_dict(d.get("launch")),
    )


def launch_to_dict(launch: RankLaunch) -> dict[str, Any]:
    """A process's launch identity (gpumem_tui.telemetry.launch) as a JSON-safe dict."""
    return {"job_id": launch.job_id, "rank": launch.rank, "world_size": launch.world_size,
            "local_rank": launch.local_rank, "source": launch.source}


def launch_from_dict(raw: Any) -> RankLaunch | None:
    """Inverse of :func:`launch_to_dict`; None when absent or not valid (an unreadable
    launch only loses the grouping, never the process row)."""
    if not isinstance(raw, Mapping):
        return None
    source = raw.get("source")
    return rank_launch(raw.get("job_id"), raw.get("rank"), raw.get("world_size"), raw.get("local_rank"),
                       source if source in ("env", "probe") else "env")


def probe_from_dict(d: Mapping[str, Any]) -> ProbeSample:
    """Inverse of :func:`probe_to_dict`. Raises SerializeError."""
    raw = d.get("categories") or {}
    if not isinstance(raw, Mapping):
        raise SerializeError("'categories' is not an object")
    categories = []
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BYTES:
            raise SerializeError(f"category {name!r} is not a plausible byte count")
        categories.append((str(name), value))
    device = _str(d, "device")
    if not device:
        raise SerializeError("'device' is missing")
    return ProbeSample(
        time=_time(d, "time"),  # type: ignore[arg-type]
        pid=_int(d, "pid", optional=False, maximum=_MAX_PID),  # type: ignore[arg-type]
        device=device,
        allocated_bytes=_int(d, "allocated_bytes", optional=False),  # type: ignore[arg-type]
        reserved_bytes=_int(d, "reserved_bytes"),
        peak_allocated_bytes=_int(d, "peak_allocated_bytes"),
        categories=tuple(categories),
    )


def info_from_dict(d: Mapping[str, Any]) -> ProbeInfo:
    """Inverse of :func:`info_to_dict`. Raises SerializeError."""
    config = d.get("model_config")
    if config is not None and not isinstance(config, dict):
        raise SerializeError("'model_config' is not an object")
    setup = d.get("setup") or {}
    if not isinstance(setup, Mapping):
        raise SerializeError("'setup' is not an object")
    ended = d.get("ended", False)
    if not isinstance(ended, bool):
        raise SerializeError("'ended' is not a boolean")
    return ProbeInfo(
        pid=_int(d, "pid", optional=False, maximum=_MAX_PID),  # type: ignore[arg-type]
        model_config=config,
        setup=tuple((str(k), v) for k, v in setup.items()),
        ended=ended,
    )


def mark_from_dict(d: Mapping[str, Any]) -> PhaseMark:
    """Inverse of :func:`mark_to_dict`. Raises SerializeError."""
    return PhaseMark(
        time=_time(d, "time"),  # type: ignore[arg-type]
        pid=_int(d, "pid", optional=False, maximum=_MAX_PID),  # type: ignore[arg-type]
        phase=_enum(Phase, d.get("phase"), "phase"),
        step=_int(d, "step", optional=False, maximum=_MAX_COUNT),  # type: ignore[arg-type]
    )


def peak_from_dict(d: Mapping[str, Any]) -> PhasePeak:
    """Inverse of :func:`peak_to_dict`. Raises SerializeError (also for end before start)."""
    start = _float(d, "start", optional=False)
    end = _float(d, "end", optional=False)
    if end < start:  # type: ignore[operator]
        raise SerializeError("phase peak ends before it starts")
    return PhasePeak(
        pid=_int(d, "pid", optional=False),  # type: ignore[arg-type]
        step=_int(d, "step", optional=False),  # type: ignore[arg-type]
        phase=_enum(Phase, d.get("phase"), "phase"),
        start=start,  # type: ignore[arg-type]
        end=end,  # type: ignore[arg-type]
        peak_bytes=_int(d, "peak_bytes", optional=False),  # type: ignore[arg-type]
        device=_str(d, "device") or "cuda",
        steps=_int(d, "steps") or 1,
        categories=_byte_counts(d.get("categories")),
        end_bytes=_int(d, "end_bytes"),
    )


def _byte_counts(raw: Any) -> tuple[tuple[str, int], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise SerializeError("'categories' is not an object")
    out = []
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SerializeError(f"category {name!r} is not a byte count")
        out.append((str(name), value))
    return tuple(out)


def _items(d: Mapping[str, Any], key: str, parse: Callable[[Mapping[str, Any]], T], skipped: list[str]) -> tuple[T, ...]:
    raw = d.get(key)
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SerializeError(f"{key!r} is not a list")
    out = []
    for item in raw:
        try:
            if not isinstance(item, Mapping):
                raise SerializeError("not an object")
            out.append(parse(item))
        except SerializeError as exc:
            skipped.append(f"{key}: {exc}")
    return tuple(out)


def snapshot_from_dict(d: Mapping[str, Any]) -> Snapshot:
    """A Snapshot from :func:`snapshot_to_dict`'s output (or a newer writer's).

    Unknown fields are ignored; unreadable list items are skipped and reported in
    ``notices`` (one notice per kind of problem).

    Raises:
        SerializeError: ``d`` is not an object, or ``time`` is missing or not a plausible
            epoch time (finite, 1970..2100).
    """
    if not isinstance(d, Mapping):
        raise SerializeError("a snapshot must be a JSON object")
    skipped: list[str] = []
    notices_raw = d.get("notices") or []
    if not isinstance(notices_raw, list):
        raise SerializeError("'notices' is not a list")
    when: float = _time(d, "time")  # type: ignore[assignment]
    snapshot = Snapshot(
        time=when,
        driver_version=_str(d, "driver_version"),
        cuda_driver_version=_str(d, "cuda_driver_version"),
        nvml_error=_str(d, "nvml_error"),
        devices=_items(d, "devices", device_from_dict, skipped),
        processes=_items(d, "processes", process_from_dict, skipped),
        probes=_items(d, "probes", probe_from_dict, skipped),
        probe_infos=_items(d, "probe_infos", info_from_dict, skipped),
        phase_marks=_items(d, "phase_marks", mark_from_dict, skipped),
        notices=tuple(str(n) for n in notices_raw),
        phase_peaks=_items(d, "phase_peaks", peak_from_dict, skipped),  # absent in older traces
    )
    # A sample stamped after its snapshot would stretch the chart's time axis beyond "now".
    latest = when + MAX_FUTURE_SECONDS
    if any(p.time > latest for p in snapshot.probes) or any(m.time > latest for m in snapshot.phase_marks):
        future = [p for p in snapshot.probes if p.time > latest] + [m for m in snapshot.phase_marks if m.time > latest]
        skipped.extend("a time after its snapshot's" for _ in future)
        snapshot = dataclasses.replace(
            snapshot,
            probes=tuple(p for p in snapshot.probes if p.time <= latest),
            phase_marks=tuple(m for m in snapshot.phase_marks if m.time <= latest),
        )
    if skipped:
        counts: dict[str, int] = {}
        for text in skipped:
            counts[text] = counts.get(text, 0) + 1
        extra = tuple(
            f"skipped {n} unreadable item{'s' if n > 1 else ''} ({text})" for text, n in counts.items()
        )
        snapshot = dataclasses.replace(snapshot, notices=(*snapshot.notices, *extra))
    return snapshot
