"""Trace files: record Snapshots as JSONL, read them back, replay them as a TelemetrySource.

Headless (no Textual, no torch).

Format (UTF-8 JSON Lines, ASCII-escaped): the first line is a header
``{"format": "gpumem-tui-trace", "version": 1, "created": <epoch s>, ...}``; every further line
is one Snapshot as written by :func:`gpumem_tui.telemetry.serialize.snapshot_to_dict`.
Readers ignore fields they do not know. The recorder writes each line with a single
``os.write`` on an ``O_APPEND`` file (optionally ``fsync``'ed), so a recorder killed with
SIGKILL leaves every line it finished intact and at most its last line torn; the reader
replays up to a torn last line and says so in a notice.

Reading is bounded (issue 13, items 17-18): only regular files are read (a FIFO or
``/dev/zero`` is a :class:`TraceError`), the header line may be at most
:data:`HEADER_LIMIT` bytes and any other line at most :data:`LINE_LIMIT` (a longer one is
skipped with a notice, read in chunks so memory stays bounded), JSON nested too deeply is an
unreadable line, and a record whose time a later record contradicts by more than
:data:`OUT_OF_ORDER_SECONDS` is skipped on replay (a record a day ahead would otherwise hold
every curve until the replay reached that day).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumem_tui.safe_files import FileRefused, format_limit, loads_json, open_regular_binary
from gpumem_tui.telemetry.model import Snapshot
from gpumem_tui.telemetry.plausible import plausible_time
from gpumem_tui.telemetry.serialize import SerializeError, snapshot_from_dict, snapshot_to_dict

TRACE_FORMAT = "gpumem-tui-trace"
TRACE_VERSION = 1

#: Longest header line read (bytes): a header is a few hundred bytes.
HEADER_LIMIT = 1 << 20
#: Longest snapshot line read (bytes): 64 GPUs x 1000 processes is ~20 MiB as JSON.
LINE_LIMIT = 64 << 20
#: A record this many seconds later than a record after it is out of order and skipped.
OUT_OF_ORDER_SECONDS = 60.0


class TraceError(ValueError):
    """A file that cannot be replayed at all: empty, not JSON, not a gpumem-tui trace, or no
    snapshots. The message is one line that names the file."""


def _encode(obj: dict[str, Any]) -> bytes:
    # ensure_ascii keeps lone surrogates (undecodable command lines) round-trippable.
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii") + b"\n"


class TraceRecorder:
    """Appends Snapshots to a trace file, one flushed line each.

    Args:
        path: the trace file; created (mode 0600, whatever the umask), or truncated and set
            to 0600 if it exists.
        fsync: also ``os.fsync`` after every line (survives a power cut, costs a disk flush).
        header: extra header fields (e.g. ``{"interval": 1.0}``); ``format``/``version`` win.

    Raises:
        OSError: the file cannot be created.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False, header: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self._fsync = fsync
        self._lock = threading.Lock()
        self.lines = 0  # snapshots written
        head: dict[str, Any] = dict(header or {})
        from gpumem_tui import __version__

        head.update({"format": TRACE_FORMAT, "version": TRACE_VERSION, "created": time.time(),
                     "writer": f"gpumem-tui {__version__}"})
        # 0600 like the probe streams: a trace carries their setups and every user's commands.
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        try:
            os.fchmod(self._fd, 0o600)  # an existing file keeps its mode through O_TRUNC
            self._write_line(_encode(head))
        except BaseException:
            self.close()
            raise

    def _write_line(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        if self._fsync:
            os.fsync(self._fd)

    def write(self, snapshot: Snapshot) -> None:
        """Append one snapshot as one line.

        Raises:
            ValueError: the recorder is closed.
            OSError: the write failed (disk full, ...).
        """
        data = _encode(snapshot_to_dict(snapshot))
        with self._lock:
            if self._fd is None:
                raise ValueError(f"trace recorder for {self.path} is closed")
            self._write_line(data)
            self.lines += 1

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_trace_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The header of a trace file.

    Raises:
        TraceError: empty, not JSON, or not a gpumem-tui trace. OSError: unreadable.
    """
    with _open_trace(Path(path)) as handle:
        first = handle.readline(HEADER_LIMIT + 1)
    return _parse_header(Path(path), first)


def _open_trace(path: Path):  # noqa: ANN202 - a binary file object
    try:
        return open_regular_binary(path)
    except FileRefused as exc:
        raise TraceError(f"{path}: {exc}; a trace must be a file written by gpumem-tui record") from None


def _lines(handle: Any, start: int) -> Any:
    """``(number, offset, line)`` for each line after the header; ``line`` is None for a line
    longer than LINE_LIMIT, which is skipped in chunks without holding it."""
    number, offset = 1, start
    while True:
        line = handle.readline(LINE_LIMIT + 1)
        if not line:
            return
        number += 1
        length = len(line)
        if length > LINE_LIMIT and not line.endswith(b"\n"):
            while not line.endswith(b"\n"):
                line = handle.readline(LINE_LIMIT)
                if not line:
                    break
                length += len(line)
            yield number, offset, None
        else:
            yield number, offset, line
        offset += length


def _parse_header(path: Path, line: bytes) -> dict[str, Any]:
    if not line.strip():
        raise TraceError(f"{path}: empty trace file")
    if len(line) > HEADER_LIMIT:
        raise TraceError(f"{path}: not a gpumem-tui trace (the first line is longer than {format_limit(HEADER_LIMIT)})")
    try:
        header = loads_json(line)
    except (ValueError, UnicodeDecodeError):
        raise TraceError(f"{path}: not a gpumem-tui trace (the first line is not JSON)") from None
    if not isinstance(header, dict) or header.get("format") != TRACE_FORMAT:
        raise TraceError(f"{path}: not a gpumem-tui trace (the first line has no \"format\": \"{TRACE_FORMAT}\")")
    version = header.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise TraceError(f"{path}: trace version {version!r} is not a positive integer")
    return header


def read_trace(path: str | os.PathLike[str]) -> tuple[list[Snapshot], list[str]]:
    """All snapshots of a trace, in file order, and notices about what was skipped.

    A torn last line (no newline, not valid JSON: the recorder was killed mid-write) ends the
    replay with a notice; other unreadable lines are skipped and counted in one notice;
    unknown fields are ignored; a trace from a newer writer is read with a notice.

    Returns:
        (snapshots, notices): snapshots non-empty.

    Raises:
        TraceError: empty file, first line not JSON or not a trace header, or no snapshots.
        OSError: the file cannot be read (missing, permissions).
    """
    path = Path(path)
    snapshots: list[Snapshot] = []
    notices: list[str] = []
    bad: list[int] = []
    long_lines: list[int] = []
    torn = 0
    with _open_trace(path) as handle:
        first = handle.readline(HEADER_LIMIT + 1)
        header = _parse_header(path, first)
        if header["version"] > TRACE_VERSION:
            notices.append(
                f"{path.name}: trace version {header['version']} is newer than this reader "
                f"({TRACE_VERSION}); fields it does not know are ignored"
            )
        for number, _, line in _lines(handle, len(first)):
            if line is None:
                long_lines.append(number)
                continue
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                snapshots.append(snapshot_from_dict(record))
            except (ValueError, UnicodeDecodeError, RecursionError, SerializeError):
                if not line.endswith(b"\n"):
                    torn = len(line)
                else:
                    bad.append(number)
    notices.extend(_long_line_notice(path, long_lines))
    if bad:
        notices.append(
            f"{path.name}: {len(bad)} unreadable line{'s' if len(bad) > 1 else ''} skipped "
            f"(first: line {bad[0]})"
        )
    if torn:
        notices.append(f"{path.name}: the last line is torn ({torn} bytes, recorder stopped mid-write); replayed up to it")
    if not snapshots:
        raise TraceError(f"{path}: the trace holds no snapshots")
    return snapshots, notices


def _long_line_notice(path: Path, numbers: list[int]) -> list[str]:
    if not numbers:
        return []
    many = len(numbers) > 1
    return [f"{path.name}: {len(numbers)} line{'s' if many else ''} longer than the {format_limit(LINE_LIMIT)} "
            f"limit skipped (first: line {numbers[0]})"]


_TIME_PREFIX = re.compile(rb'^\{"time":(-?[0-9][0-9.eE+-]*)[,}]')


def _line_time(line: bytes) -> float | None:
    """The ``time`` of a snapshot line (fast path for this writer's field order), or None."""
    match = _TIME_PREFIX.match(line)
    value: Any
    if match:
        try:
            value = float(match.group(1))
        except ValueError:
            value = None
    else:
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        value = record.get("time") if isinstance(record, dict) else None
    return plausible_time(value)


def _index_trace(path: Path) -> tuple[dict[str, Any], list[tuple[int, int, float]], list[str]]:
    """Header, ``(offset, length, time)`` of every snapshot line, and notices -- without
    building the snapshots (a long trace replays in memory proportional to its line count)."""
    entries: list[tuple[int, int, float]] = []
    notices: list[str] = []
    bad: list[int] = []
    long_lines: list[int] = []
    torn = 0
    with _open_trace(path) as handle:
        first = handle.readline(HEADER_LIMIT + 1)
        header = _parse_header(path, first)
        if header["version"] > TRACE_VERSION:
            notices.append(
                f"{path.name}: trace version {header['version']} is newer than this reader "
                f"({TRACE_VERSION}); fields it does not know are ignored"
            )
        for number, offset, line in _lines(handle, len(first)):
            if line is None:
                long_lines.append(number)
                continue
            when = _line_time(line) if line.strip() else None
            if when is not None and (line.endswith(b"\n") or _parses(line)):
                entries.append((offset, len(line), when))
            elif line.strip():
                if line.endswith(b"\n"):
                    bad.append(number)
                else:
                    torn = len(line)
    notices.extend(_long_line_notice(path, long_lines))
    entries, skipped = _drop_out_of_order(entries)
    if skipped:
        notices.append(f"{path.name}: {skipped} record{'s' if skipped > 1 else ''} out of time order skipped "
                       f"(more than {OUT_OF_ORDER_SECONDS:g} s after a record that follows)")
    if bad:
        notices.append(
            f"{path.name}: {len(bad)} unreadable line{'s' if len(bad) > 1 else ''} skipped "
            f"(first: line {bad[0]})"
        )
    if torn:
        notices.append(f"{path.name}: the last line is torn ({torn} bytes, recorder stopped mid-write); replayed up to it")
    if not entries:
        raise TraceError(f"{path}: the trace holds no snapshots")
    return header, entries, notices


def _drop_out_of_order(entries: list[tuple[int, int, float]]) -> tuple[list[tuple[int, int, float]], int]:
    """Entries without those out of time order by more than OUT_OF_ORDER_SECONDS.

    First a lone record far from both neighbours (which agree with each other) goes, either
    way: a corrupt time. Then every record later than some following record by more than
    the bound goes: after a large step back of the clock the records before the step lie in
    the future of those after it, and a replay would hold every curve until it got there.
    Smaller steps back are kept and held by the replay.
    """
    gap = OUT_OF_ORDER_SECONDS
    times = [e[2] for e in entries]
    lone = {
        i for i in range(1, len(entries) - 1)
        if abs(times[i - 1] - times[i + 1]) <= gap
        and abs(times[i] - times[i - 1]) > gap and abs(times[i] - times[i + 1]) > gap
    }
    kept: list[tuple[int, int, float]] = []
    floor = math.inf  # the earliest time of any kept entry after the current one
    for i in range(len(entries) - 1, -1, -1):
        if i in lone:
            continue
        if times[i] <= floor + gap:
            kept.append(entries[i])
        floor = min(floor, times[i])
    kept.reverse()
    return kept, len(entries) - len(kept)


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return True


class ReplaySource:
    """Plays a trace back as a TelemetrySource, in (scaled) real time.

    ``poll()`` advances the play position by the wall time since the previous poll times
    ``speed`` (not while paused) and returns the state at the position: devices, processes
    and probe infos of the last record reached, and the probe samples, phase marks and
    notices of *every* record passed since the previous poll (so none is lost when polls are
    slower than the recording). When nothing new was reached (paused, or between records),
    it returns the current record again with no probes, marks or notices. Snapshot times are
    the recorded epoch times. The trace's own notices (torn line, skipped lines) arrive with
    the first poll; reaching the end adds one "replay finished" notice.

    Position and duration are seconds from the first record. Safe to control (pause, seek,
    speed) from another thread than the one polling. Memory does not grow with the trace's
    content: opening indexes the lines (offset, length, time) and each poll parses only the
    records it passes; a record that cannot be parsed then is skipped with a notice.

    Args:
        path: the trace file.
        speed: playback speed factor (> 0).
        clock: monotonic seconds (tests inject one).

    Raises:
        TraceError, OSError: see :func:`read_trace`. ValueError: bad speed.
    """

    def __init__(self, path: str | os.PathLike[str], *, speed: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.header, entries, notices = _index_trace(self.path)
        self._pending_notices = list(notices)
        self._entries = [(offset, length) for offset, length, _ in entries]
        start = entries[0][2]
        offsets, last = [], 0.0
        for _, _, when in entries:
            last = max(last, when - start)  # a clock step back in the recording: hold
            offsets.append(last)
        self._offsets = offsets
        self._fd: int | None = os.open(self.path, os.O_RDONLY)
        self._cache: tuple[int, Snapshot] | None = None
        self._unreadable = 0
        self._clock = clock
        self._lock = threading.Lock()
        self._speed = 1.0
        self._paused = False
        self._position = 0.0
        self._last_clock: float | None = None  # set by the first poll: play starts there
        self.set_speed(speed)
        self._emitted = -1  # index of the last record whose samples were returned
        self._finished_reported = False

    def _load(self, index: int) -> Snapshot | None:
        """Record ``index`` parsed from the file (None, counted, if it cannot be read)."""
        if self._cache is not None and self._cache[0] == index:
            return self._cache[1]
        offset, length = self._entries[index]
        try:
            if self._fd is None:
                raise OSError("closed")
            data = os.pread(self._fd, length, offset)
            snap = snapshot_from_dict(json.loads(data))
        except (OSError, ValueError, UnicodeDecodeError, RecursionError, SerializeError):
            self._unreadable += 1
            return None
        self._cache = (index, snap)
        return snap

    # -- controls --------------------------------------------------------------------------

    @property
    def duration(self) -> float:
        """Seconds from the first to the last record."""
        return self._offsets[-1]

    @property
    def position(self) -> float:
        """Seconds from the first record to the play position."""
        with self._lock:
            return self._position

    @property
    def paused(self) -> bool:
        """True while paused."""
        return self._paused

    @property
    def speed(self) -> float:
        """Playback speed factor."""
        return self._speed

    @property
    def finished(self) -> bool:
        """True once the position reached the last record."""
        with self._lock:
            return self._position >= self.duration and self._emitted >= len(self._entries) - 1

    @property
    def snapshot_count(self) -> int:
        """Records in the trace."""
        return len(self._entries)

    def pause(self) -> None:
        """Stop advancing (poll keeps answering with the current state)."""
        with self._lock:
            self._advance()
            self._paused = True

    def resume(self) -> None:
        """Advance again from where it paused."""
        with self._lock:
            self._last_clock = self._clock()
            self._paused = False

    def toggle_pause(self) -> None:
        """Pause if playing, resume if paused."""
        if self._paused:
            self.resume()
        else:
            self.pause()

    def set_speed(self, speed: float) -> None:
        """Set the playback speed factor.

        Raises:
            ValueError: not a finite number > 0.
        """
        speed = float(speed)
        if not math.isfinite(speed) or speed <= 0:
            raise ValueError(f"replay speed must be a number > 0, got {speed!r}")
        with self._lock:
            if self._last_clock is not None:
                self._advance()
            self._speed = speed

    def seek(self, seconds: float) -> None:
        """Jump to ``seconds`` from the start (clamped to [0, duration]). The next poll returns
        the record at that position with its samples, and a notice saying where it is."""
        if not math.isfinite(seconds):
            raise ValueError(f"seek position must be a finite number, got {seconds!r}")
        with self._lock:
            self._advance()
            target = min(max(0.0, float(seconds)), self.duration)
            if target == self._position:  # e.g. forward at the end: nothing moves, nothing to say
                return
            self._position = target
            self._last_clock = self._clock()
            self._emitted = self._index_at(self._position) - 1
            self._finished_reported = False
            if target < self.duration:  # at the end, "replay finished" says where it is
                self._pending_notices.append(f"replay at {self._position:.1f} s of {self.duration:.1f} s")

    def seek_relative(self, seconds: float) -> None:
        """Jump by ``seconds`` (negative: back)."""
        self.seek(self.position + seconds)

    # -- TelemetrySource -------------------------------------------------------------------

    def _advance(self) -> None:
        now = self._clock()
        if self._last_clock is not None and not self._paused:
            self._position = min(self.duration, self._position + (now - self._last_clock) * self._speed)
        self._last_clock = now

    def _index_at(self, position: float) -> int:
        """Index of the last record at or before ``position`` (0 at the least)."""
        lo, hi = 0, len(self._offsets) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._offsets[mid] <= position + 1e-9:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def poll(self) -> Snapshot:
        """The state at the play position (see the class docstring). Never raises."""
        with self._lock:
            self._advance()
            index = self._index_at(self._position)
            passed_range = range(self._emitted + 1, index + 1)
            self._emitted = max(self._emitted, index)
            unreadable_before = self._unreadable
            passed = [snap for i in passed_range if (snap := self._load(i)) is not None]
            current = self._load(index)
            if current is None:  # fall back to the nearest readable record before it
                current = next((snap for i in range(index - 1, -1, -1) if (snap := self._load(i)) is not None),
                               Snapshot(time=0.0))
            notices = self._pending_notices
            self._pending_notices = []
            if self._unreadable > unreadable_before:
                notices.append(f"{self.path.name}: {self._unreadable - unreadable_before} record(s) could not be read")
            for snap in passed:
                notices.extend(snap.notices)
            if (index == len(self._entries) - 1 and self._position >= self.duration
                    and not self._finished_reported):
                self._finished_reported = True
                notices.append(f"replay finished ({self.duration:.1f} s, {len(self._entries)} records)")
        return dataclasses.replace(
            current,
            probes=tuple(p for snap in passed for p in snap.probes),
            phase_marks=tuple(m for snap in passed for m in snap.phase_marks),
            phase_peaks=tuple(p for snap in passed for p in snap.phase_peaks),
            notices=tuple(notices),
        )

    def snapshots(self) -> tuple[Snapshot, ...]:
        """Every readable record of the trace (for headless use such as ``compare``)."""
        with self._lock:
            return tuple(snap for i in range(len(self._entries)) if (snap := self._load(i)) is not None)

    def close(self) -> None:
        """Close the trace file (idempotent)."""
        with self._lock:
            fd, self._fd = self._fd, None
            self._cache = None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
