"""Trace files: record Snapshots as JSONL, replay them as a TelemetrySource.

Headless (no Textual, no torch).

Format (UTF-8 JSON Lines, ASCII-escaped): the first line is a header
``{"format": "gpumem-tui-trace", "version": 1, "created": <epoch s>, ...}``; every further line
is one Snapshot as written by :func:`gpumem_tui.telemetry.serialize.snapshot_to_dict`.
Readers ignore fields they do not know. The recorder writes each line with a single
``os.write`` on an ``O_APPEND`` file (optionally ``fsync``'ed), so a recorder killed with
SIGKILL leaves every line it finished intact and at most its last line torn; the reader
replays up to a torn last line and says so in a notice.

Reading (bounded, streamed) is :mod:`gpumem_tui.telemetry.trace_file`; its names that
callers used from here are re-exported.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumem_tui.telemetry.probed_state import ProbedProcesses
from gpumem_tui.telemetry.model import Snapshot
from gpumem_tui.telemetry.serialize import SerializeError, snapshot_to_dict
from gpumem_tui.telemetry.trace_file import (
    HEADER_LIMIT,
    LINE_LIMIT,
    OUT_OF_ORDER_SECONDS,
    TRACE_FORMAT,
    TRACE_VERSION,
    Entry,
    TraceCursor,
    TraceError,
    parse_record,
    read_trace,
    read_trace_header,
    scan_trace,
)

__all__ = [
    "HEADER_LIMIT", "LINE_LIMIT", "OUT_OF_ORDER_SECONDS", "TRACE_FORMAT", "TRACE_VERSION",
    "ReplaySource", "TraceError", "TraceRecorder", "read_trace", "read_trace_header",
]  # fmt: skip

_PARSE_ERRORS = (ValueError, UnicodeDecodeError, RecursionError, SerializeError)
#: Items (steps, marks, NVML peaks: :meth:`ProbedProcesses.size`) all saved states may hold
#: together, ~100 MB at most; beyond it every other saved state goes (the seeks read longer spans).
SAVED_ITEMS_BUDGET = 1_000_000


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


@dataclasses.dataclass(frozen=True, slots=True)
class _Passed:
    """What a poll returns of a record it passed: its samples, marks and notices (not its
    process table, which only the current record shows)."""

    probes: tuple[Any, ...]
    phase_marks: tuple[Any, ...]
    phase_peaks: tuple[Any, ...]
    notices: tuple[str, ...]

    @classmethod
    def of(cls, snap: Snapshot) -> _Passed:
        return cls(snap.probes, snap.phase_marks, snap.phase_peaks, snap.notices)


class ReplaySource:
    """Plays a trace back as a TelemetrySource, in (scaled) real time, streamed from the file.

    ``poll()`` advances the play position by the wall time since the previous poll times
    ``speed`` (not while paused) and returns the state at the position: devices, processes
    and probe infos of the last record reached, and the probe samples, phase marks and
    notices of *every* record passed since the previous poll (so none is lost when polls are
    slower than the recording). When nothing new was reached (paused, or between records),
    it returns the current record again with no probes, marks or notices. Snapshot times are
    the recorded epoch times. The trace's own notices (torn line, skipped lines) arrive with
    the first poll; reaching the end adds one "replay finished" notice.

    Position and duration are seconds from the first record. Safe to control (pause, seek,
    speed) from another thread than the one polling.

    Memory does not grow with the trace: opening reads it once without parsing
    (:func:`~gpumem_tui.telemetry.trace_file.scan_trace`: a sparse index of byte offsets,
    one every 10 s of trace time at least), and polls read the records in order, one at a
    time. :attr:`probed` is the measured state of the probed processes
    (:class:`~gpumem_tui.telemetry.probed_state.ProbedProcesses`), fed with every record the play has
    passed: after any seek it is the state of the trace up to the new position, rebuilt
    (by the next poll) from the state saved at the nearest index checkpoint before it, so
    the comparison the dashboard shows equals ``compare`` of the trace cut there. A
    background thread reads the trace once after opening to save those states ahead of the
    play (at most one per checkpoint), so that a seek forward reads at most one checkpoint's
    span of records too; until it got there, a seek reads on from the nearest state saved.
    The saved states hold at most :data:`SAVED_ITEMS_BUDGET` items together: past it only
    every second checkpoint keeps its state, then every fourth, and so on.

    Args:
        path: the trace file.
        speed: playback speed factor (> 0).
        clock: monotonic seconds (tests inject one).
        prebuild: save the checkpoints' states in a background thread (else only as the
            play passes them).

    Raises:
        TraceError, OSError: see :func:`~gpumem_tui.telemetry.trace_file.scan_trace`.
        ValueError: bad speed.
    """

    def __init__(self, path: str | os.PathLike[str], *, speed: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, prebuild: bool = True) -> None:
        self.path = Path(path)
        self._scan = scan_trace(self.path)
        self.header = self._scan.header
        self._cursor = TraceCursor(self._scan)
        self.probed = ProbedProcesses()
        # checkpoint number -> the state before its record, saved as the play passes it
        self._saved: dict[int, ProbedProcesses] = {0: ProbedProcesses()}
        self._saved_sizes: dict[int, int] = {0: 0}
        self._saved_stride = 1  # only checkpoints whose number it divides keep a state
        self._saved_lock = threading.Lock()
        self._closing = threading.Event()
        self._checkpoint_of = {cp.index: k for k, cp in enumerate(self._scan.checkpoints)}
        self._read_lock = threading.Lock()  # the cursor and the state fed from it
        self._fed = -1  # index of the last record fed to `probed` (and returned)
        self._fed_position = -math.inf
        self._current: Snapshot | None = None
        self._unreadable = 0
        self._clock = clock
        self._lock = threading.Lock()  # the play controls
        self._pending_notices = list(self._scan.notices)
        self._speed = 1.0
        self._paused = False
        self._position = 0.0
        self._seek_to: float | None = None
        self._last_clock: float | None = None  # set by the first poll: play starts there
        self.set_speed(speed)
        self._finished_reported = False
        if prebuild and len(self._scan.checkpoints) > 1:
            threading.Thread(target=self._prebuild, name="replay-checkpoints", daemon=True).start()

    # -- controls --------------------------------------------------------------------------

    @property
    def duration(self) -> float:
        """Seconds from the first to the last record."""
        return self._scan.duration

    @property
    def last_time(self) -> float:
        """Epoch time of the last record."""
        return self._scan.last_time

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
        """True once the position reached the last record and a poll returned it."""
        with self._lock:
            return (self._position >= self.duration and self._seek_to is None
                    and self._fed >= self._scan.count - 1)

    @property
    def snapshot_count(self) -> int:
        """Records in the trace."""
        return self._scan.count

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
        the record at that position with its samples, and a notice saying where it is; from
        then on :attr:`probed` is the state of the trace up to that position.

        Raises:
            ValueError: ``seconds`` is not finite.
        """
        if not math.isfinite(seconds):
            raise ValueError(f"seek position must be a finite number, got {seconds!r}")
        with self._lock:
            self._advance()
            target = min(max(0.0, float(seconds)), self.duration)
            if target == self._position:  # e.g. forward at the end: nothing moves, nothing to say
                return
            self._position = target
            self._seek_to = target
            self._last_clock = self._clock()
            self._finished_reported = False
            if target < self.duration:  # at the end, "replay finished" says where it is
                self._pending_notices.append(f"replay at {self._position:.1f} s of {self.duration:.1f} s")

    def seek_relative(self, seconds: float) -> None:
        """Jump by ``seconds`` (negative: back)."""
        self.seek(self.position + seconds)

    def _advance(self) -> None:
        now = self._clock()
        if self._last_clock is not None and not self._paused:
            self._position = min(self.duration, self._position + (now - self._last_clock) * self._speed)
        self._last_clock = now

    # -- reading ---------------------------------------------------------------------------

    def _save(self, entry: Entry, state: ProbedProcesses) -> None:
        """Keep a copy of ``state`` (the records before ``entry``) if ``entry`` starts a
        checkpoint whose state is not kept yet."""
        checkpoint = self._checkpoint_of.get(entry.index)
        if checkpoint is None:
            return
        with self._saved_lock:
            if checkpoint in self._saved or checkpoint % self._saved_stride:
                return
            self._saved[checkpoint] = state.copy()
            self._saved_sizes[checkpoint] = state.size()
            while sum(self._saved_sizes.values()) > SAVED_ITEMS_BUDGET and len(self._saved) > 1:
                self._saved_stride *= 2
                for k in [k for k in self._saved if k % self._saved_stride]:
                    del self._saved[k], self._saved_sizes[k]

    def _prebuild(self) -> None:
        """Read the whole trace once with its own cursor and state, saving the state at each
        checkpoint (the thread started by __init__). Stops at close; never raises."""
        try:
            cursor = TraceCursor(self._scan)
        except OSError:
            return
        state = ProbedProcesses()
        try:
            while not self._closing.is_set() and (entry := cursor.take()) is not None:
                self._save(entry, state)
                try:
                    state.add_snapshot(parse_record(entry.line))
                except _PARSE_ERRORS:
                    continue  # the play counts it when it gets there
        except Exception:  # noqa: BLE001 - a thread's traceback would land on the dashboard
            return  # the file went away or was closed: the play says so when it reads on there
        finally:
            cursor.close()

    def _feed(self, entry: Entry) -> Snapshot | None:
        """Parse the cursor's next record (``entry``), feed it to :attr:`probed`; the record,
        or None (counted) when it cannot be read."""
        self._save(entry, self.probed)
        self._cursor.take()
        self._fed, self._fed_position = entry.index, entry.position
        try:
            snap = parse_record(entry.line)
        except _PARSE_ERRORS:
            self._unreadable += 1
            return None
        self.probed.add_snapshot(snap)
        self._current = snap
        return snap

    def _rebuild(self, target: float) -> list[_Passed]:
        """Cursor and :attr:`probed` to just after the last record at or before ``target``;
        returns that record's samples (what a poll after a seek shows)."""
        checkpoints = self._scan.checkpoints
        with self._saved_lock:
            best = max((k for k in self._saved if checkpoints[k].position <= target), default=0)
            saved = self._saved[best]
        if self._fed_position > target or checkpoints[best].index > self._fed + 1:
            self.probed.restore(saved)  # back in time, or a saved state nearer ahead
            self._cursor.go_to(checkpoints[best])
            self._fed, self._fed_position, self._current = checkpoints[best].index - 1, -math.inf, None
        last: Snapshot | None = None
        while (not self._closing.is_set() and (entry := self._cursor.peek()) is not None
               and (entry.position <= target + 1e-9 or self._fed < 0)):
            last = self._feed(entry)
        return [_Passed.of(last)] if last is not None else []

    def poll(self) -> Snapshot:
        """The state at the play position (see the class docstring). Never raises."""
        with self._read_lock:
            with self._lock:
                self._advance()
                position, target, self._seek_to = self._position, self._seek_to, None
                notices, self._pending_notices = self._pending_notices, []
            unreadable_before = self._unreadable
            passed: list[_Passed] = []
            try:
                if target is not None:
                    passed = self._rebuild(target)
                while (not self._closing.is_set() and (entry := self._cursor.peek()) is not None
                       and (entry.position <= position + 1e-9 or self._fed < 0)):
                    snap = self._feed(entry)
                    if snap is not None:
                        passed.append(_Passed.of(snap))
            except OSError as exc:
                notices.append(f"{self.path.name}: cannot read on ({exc.strerror or exc})")
            current = self._current or Snapshot(time=0.0)
            if self._unreadable > unreadable_before:
                notices.append(f"{self.path.name}: {self._unreadable - unreadable_before} record(s) could not be read")
            for part in passed:
                notices.extend(part.notices)
            with self._lock:
                if (self._fed >= self._scan.count - 1 and self._position >= self.duration
                        and not self._finished_reported and self._seek_to is None):
                    self._finished_reported = True
                    notices.append(f"replay finished ({self.duration:.1f} s, {self._scan.count} records)")
        return dataclasses.replace(
            current,
            probes=tuple(p for part in passed for p in part.probes),
            phase_marks=tuple(m for part in passed for m in part.phase_marks),
            phase_peaks=tuple(p for part in passed for p in part.phase_peaks),
            notices=tuple(notices),
        )

    def close(self) -> None:
        """Close the trace file (idempotent)."""
        self._closing.set()
        with self._read_lock:
            self._cursor.close()
            self._current = None
