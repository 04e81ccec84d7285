"""Reading trace files as a stream: one pass to index, then records in order from any point.

Headless (no Textual, no torch). The format is described in :mod:`gpumem_tui.telemetry.replay`
(which writes it). Nothing here holds more than one record at a time: a 200 MB trace is read
in memory that does not depend on its length.

Reading is bounded (issue 13, items 17-18): only regular files are read (a FIFO or
``/dev/zero`` is a :class:`TraceError`), the header line may be at most
:data:`HEADER_LIMIT` bytes and any other line at most :data:`LINE_LIMIT` (a longer one is
skipped with a notice, read in chunks so memory stays bounded), JSON nested too deeply is an
unreadable line, a record keeps at most :data:`LIST_CAPS` items per list (e.g. 4096
processes; the rest are dropped with a notice that says how many), and a record whose time a
later record contradicts by more than :data:`OUT_OF_ORDER_SECONDS` is skipped (a record a
day ahead would otherwise hold every curve until the replay reached that day).

:func:`scan_trace` reads the file once without building snapshots and returns a
:class:`TraceScan`: the header, the notices, the number of records, the duration and a sparse
index of :class:`Checkpoint` byte offsets (one per :data:`CHECKPOINT_SECONDS` of trace time at
least, at most :data:`MAX_CHECKPOINTS`). :class:`TraceCursor` then reads the records in order
from any checkpoint; :func:`iter_snapshots` yields them lazily (``compare``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from gpumem_tui.support.safe_files import FileRefused, format_limit, loads_json, open_regular_binary
from gpumem_tui.telemetry.capped_json import cap_lists, load_capped
from gpumem_tui.telemetry.model import Snapshot
from gpumem_tui.telemetry.plausible import plausible_time
from gpumem_tui.telemetry.serialize import SerializeError, snapshot_from_dict

TRACE_FORMAT = "gpumem-tui-trace"
TRACE_VERSION = 1

#: Longest header line read (bytes): a header is a few hundred bytes.
HEADER_LIMIT = 1 << 20
#: Longest snapshot line read (bytes): 64 GPUs x 1000 processes is ~20 MiB as JSON.
LINE_LIMIT = 64 << 20
#: The first two bytes of every gzip member (RFC 1952, section 2.3.1): a compressed trace.
GZIP_MAGIC = b"\x1f\x8b"
#: A record this many seconds later than a record after it is out of order and skipped.
OUT_OF_ORDER_SECONDS = 60.0
#: Most items kept per list of one record; the rest are dropped with a notice. 4096
#: processes is more than any machine lists (NVML's and ps's tables of a 64-GPU node), and
#: keeps a record's snapshot near 2 MB however long its line.
LIST_CAPS = {"processes": 4096, "devices": 256, "probes": 4096, "probe_infos": 256, "phase_marks": 4096,
             "phase_peaks": 4096, "notices": 256}
#: A line up to this long is parsed with ``json.loads`` (then capped); a longer one item by item.
SHORT_LINE = 1 << 20
#: Trace seconds between two checkpoints of the index, at least ...
CHECKPOINT_SECONDS = 10.0
#: ... and at most this many checkpoints (a long trace spaces them further apart).
MAX_CHECKPOINTS = 256

_ERRORS = (ValueError, UnicodeDecodeError, RecursionError, SerializeError)


class TraceError(ValueError):
    """A file that cannot be replayed at all: empty, not JSON, not a gpumem-tui trace, or no
    snapshots. The message is one line that names the file."""


# -- lines -----------------------------------------------------------------------------------


def open_trace(path: Path) -> BinaryIO:
    """The trace as a binary file object (regular files only).

    Raises:
        TraceError: not a regular file. OSError: cannot be opened.
    """
    try:
        return open_regular_binary(path)
    except FileRefused as exc:
        raise TraceError(f"{path}: {exc}; a trace must be a file written by gpumem-tui record") from None


def lines(handle: Any, start: int, number: int = 1) -> Iterator[tuple[int, int, bytes | None]]:
    """``(number, offset, line)`` for each line from byte ``start`` (the handle's position;
    ``number`` is the line number before it); ``line`` is None for a line longer than
    LINE_LIMIT, which is skipped in chunks without holding it."""
    offset = start
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


def parse_header(path: Path, line: bytes) -> dict[str, Any]:
    """The header dict of the first line. Raises TraceError (one line naming the file)."""
    if not line.strip():
        raise TraceError(f"{path}: empty trace file")
    if line.startswith(GZIP_MAGIC):
        # record writes plain JSON lines; a trace someone compressed is read after gunzip
        raise TraceError(f"{path}: gzip-compressed: decompress it first (gunzip -k), then open the .jsonl")
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


def read_trace_header(path: Any) -> dict[str, Any]:
    """The header of a trace file.

    Raises:
        TraceError: empty, not JSON, or not a gpumem-tui trace. OSError: unreadable.
    """
    with open_trace(Path(path)) as handle:
        first = handle.readline(HEADER_LIMIT + 1)
    return parse_header(Path(path), first)


def _newer_notice(path: Path, header: dict[str, Any]) -> list[str]:
    if header["version"] <= TRACE_VERSION:
        return []
    return [f"{path.name}: trace version {header['version']} is newer than this reader "
            f"({TRACE_VERSION}); fields it does not know are ignored"]


# -- one record ------------------------------------------------------------------------------


def _load(line: bytes) -> tuple[Any, dict[str, int]]:
    if len(line) <= SHORT_LINE:
        record = loads_json(line)
        return record, cap_lists(record, LIST_CAPS) if isinstance(record, dict) else {}
    return load_capped(line.decode("utf-8"), LIST_CAPS)


def parse_record(line: bytes) -> Snapshot:
    """One snapshot line as a Snapshot, with at most :data:`LIST_CAPS` items per list; a
    notice in ``Snapshot.notices`` says how many were dropped.

    Raises:
        ValueError, UnicodeDecodeError, SerializeError: not a snapshot (see
        :func:`gpumem_tui.telemetry.serialize.snapshot_from_dict`).
    """
    record, left_out = _load(line)
    snap = snapshot_from_dict(record)
    if left_out:
        dropped = tuple(f"{n} {key.replace('_', ' ')} beyond the {LIST_CAPS[key]} kept per snapshot dropped"
                        for key, n in left_out.items())
        snap = dataclasses.replace(snap, notices=(*snap.notices, *dropped))
    return snap


_TIME_PREFIX = re.compile(rb'^\{"time":(-?[0-9][0-9.eE+-]*)[,}]')
_NO_LISTS = dict.fromkeys(LIST_CAPS, 0)


def _line_time(line: bytes) -> float | None:
    """The ``time`` of a snapshot line (fast path for this writer's field order), or None."""
    match = _TIME_PREFIX.match(line)
    value: Any = None
    if match:
        try:
            value = float(match.group(1))
        except ValueError:
            value = None
    else:
        try:  # another writer's field order: read the object, not its lists
            record, _ = load_capped(line.decode("utf-8"), _NO_LISTS)
            value = record.get("time")
        except _ERRORS:
            return None
    return plausible_time(value)


def _parses(line: bytes) -> bool:
    try:
        load_capped(line.decode("utf-8"), _NO_LISTS)
    except _ERRORS:
        return False
    return True


def _record_time(line: bytes) -> float | None:
    """The time of a line that is a record (an index entry), else None: blank, no plausible
    time, or a torn last line (no newline and not JSON)."""
    if not line.strip():
        return None
    when = _line_time(line)
    if when is None or not (line.endswith(b"\n") or _parses(line)):
        return None
    return when


# -- the index pass --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where record ``index`` starts: byte ``offset``, line ``number`` (1 = the header), and
    its play ``position`` (seconds from the first record)."""

    index: int
    offset: int
    number: int
    position: float


@dataclasses.dataclass(frozen=True)
class TraceScan:
    """What one pass over a trace found (see the module docstring).

    ``count`` records (lines with a plausible time, in time order as the replay keeps them);
    ``start`` the first record's epoch time; ``duration`` seconds from the first to the last
    (a clock step back in the recording holds the position); ``dropped`` byte offsets of
    lines skipped as out of time order; ``checkpoints`` in record order, the first at record 0;
    ``unreadable`` how many lines were not records and the first one's number (0: none).
    """

    path: Path
    header: dict[str, Any]
    notices: tuple[str, ...]
    count: int
    start: float
    duration: float
    last_time: float
    checkpoints: tuple[Checkpoint, ...]
    dropped: frozenset[int]
    unreadable: tuple[int, int] = (0, 0)

    def notices_with_unreadable(self, count: int, first: int) -> list[str]:
        """The notices, with ``count`` more unreadable lines (the first: line ``first``)
        counted in the one notice about unreadable lines."""
        if not count:
            return list(self.notices)
        old = unreadable_notice(self.path, *self.unreadable)
        total = (self.unreadable[0] + count, min(n for n in (self.unreadable[1], first) if n))
        merged = unreadable_notice(self.path, *total)
        if old:
            return [merged[0] if n == old[0] else n for n in self.notices]
        return [*self.notices, *merged]


def scan_trace(path: Any) -> TraceScan:
    """Index ``path`` in one pass without building snapshots.

    Holds 24 bytes per line while it runs (offsets, line numbers and times in arrays, for the
    out-of-order rule, which needs the times after each record), and keeps only the sparse
    index.

    Raises:
        TraceError: empty file, first line not JSON or not a trace header, or no records.
        OSError: the file cannot be read (missing, permissions).
    """
    path = Path(path)
    offsets, numbers, times = array("q"), array("q"), array("d")
    bad = [0, 0]  # unreadable lines: how many, the first's number
    long_lines: list[int] = []
    torn = 0
    with open_trace(path) as handle:
        first = handle.readline(HEADER_LIMIT + 1)
        header = parse_header(path, first)
        notices = _newer_notice(path, header)
        for number, offset, line in lines(handle, len(first)):
            if line is None:
                long_lines.append(number)
                continue
            when = _record_time(line)
            if when is not None:
                offsets.append(offset)
                numbers.append(number)
                times.append(when)
            elif line.strip():
                if line.endswith(b"\n"):
                    bad = [bad[0] + 1, bad[1] or number]
                else:
                    torn = len(line)
    notices.extend(_long_line_notice(path, long_lines))
    skip = out_of_order(times)
    if skip:
        notices.append(f"{path.name}: {len(skip)} record{'s' if len(skip) > 1 else ''} out of time order skipped "
                       f"(more than {OUT_OF_ORDER_SECONDS:g} s after a record that follows)")
    notices.extend(_unreadable_notices(path, bad[0], bad[1], torn))
    if len(times) == len(skip):
        raise TraceError(f"{path}: the trace holds no snapshots")
    return _with_checkpoints(path, header, notices, offsets, numbers, times, skip, (bad[0], bad[1]))


def _with_checkpoints(path: Path, header: dict[str, Any], notices: list[str], offsets: array, numbers: array,
                      times: array, skip: set[int], unreadable: tuple[int, int]) -> TraceScan:
    kept = [i for i in range(len(times)) if i not in skip] if skip else range(len(times))
    start = times[kept[0]]
    duration = 0.0
    for i in kept:  # a clock step back in the recording: the position holds
        duration = max(duration, times[i] - start)
    spacing = max(CHECKPOINT_SECONDS, duration / MAX_CHECKPOINTS)
    checkpoints: list[Checkpoint] = []
    position = 0.0
    for index, i in enumerate(kept):
        position = max(position, times[i] - start)
        if not checkpoints or position >= checkpoints[-1].position + spacing:
            checkpoints.append(Checkpoint(index, offsets[i], numbers[i], position))
    dropped = frozenset(offsets[i] for i in skip)
    return TraceScan(path, header, tuple(notices), len(kept), start, duration, times[kept[-1]],
                     tuple(checkpoints), dropped, unreadable)


def unreadable_notice(path: Path, count: int, first: int) -> list[str]:
    """The notice for ``count`` unreadable lines skipped (the first: line ``first``), or none."""
    if not count:
        return []
    return [f"{path.name}: {count} unreadable line{'s' if count > 1 else ''} skipped (first: line {first})"]


def _unreadable_notices(path: Path, count: int, first: int, torn: int) -> list[str]:
    notices = unreadable_notice(path, count, first)
    if torn:
        notices.append(f"{path.name}: the last line is torn ({torn} bytes, recorder stopped mid-write); "
                       "replayed up to it")
    return notices


def _long_line_notice(path: Path, numbers: list[int]) -> list[str]:
    if not numbers:
        return []
    many = len(numbers) > 1
    return [f"{path.name}: {len(numbers)} line{'s' if many else ''} longer than the {format_limit(LINE_LIMIT)} "
            f"limit skipped (first: line {numbers[0]})"]


def out_of_order(times: Any) -> set[int]:
    """Indices of ``times`` (record times in file order) out of time order by more than
    OUT_OF_ORDER_SECONDS, to skip.

    First a lone record far from both neighbours (which agree with each other) goes, either
    way: a corrupt time. Then every record later than some following record by more than
    the bound goes: after a large step back of the clock the records before the step lie in
    the future of those after it, and a replay would hold every curve until it got there.
    Smaller steps back are kept and held by the replay.
    """
    gap = OUT_OF_ORDER_SECONDS
    n = len(times)
    skip = {
        i for i in range(1, n - 1)
        if abs(times[i - 1] - times[i + 1]) <= gap
        and abs(times[i] - times[i - 1]) > gap and abs(times[i] - times[i + 1]) > gap
    }
    floor = math.inf  # the earliest time of any kept entry after the current one
    for i in range(n - 1, -1, -1):
        if i in skip:
            continue
        if times[i] > floor + gap:
            skip.add(i)
        floor = min(floor, times[i])
    return skip


# -- records in order ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One record's line: its ``index`` among the records, line ``number``, play ``position``."""

    index: int
    number: int
    position: float
    line: bytes


class TraceCursor:
    """Reads the records of a scanned trace in order, from any :class:`Checkpoint`.

    Holds one line at a time (the one :meth:`peek` looked at). Not thread-safe: its owner
    serialises calls. Raises OSError when the file cannot be read.
    """

    def __init__(self, scan: TraceScan) -> None:
        self.scan = scan
        self._handle: BinaryIO | None = open_trace(scan.path)
        self._next: Entry | None = None
        self._lines: Iterator[tuple[int, int, bytes | None]] = iter(())
        self._index = 0
        self._held = 0.0
        self.go_to(scan.checkpoints[0])

    def go_to(self, checkpoint: Checkpoint) -> None:
        """The next record read is ``checkpoint``'s."""
        if self._handle is None:
            raise OSError("the trace is closed")
        self._handle.seek(checkpoint.offset)
        self._lines = lines(self._handle, checkpoint.offset, checkpoint.number - 1)
        self._index = checkpoint.index
        self._held = checkpoint.position
        self._next = None

    def peek(self) -> Entry | None:
        """The next record's entry (None at the end), without moving past it."""
        if self._next is None and self._index < self.scan.count and self._handle is not None:
            self._next = self._read()
        return self._next

    def take(self) -> Entry | None:
        """The next record's entry, and move past it (None at the end)."""
        entry = self.peek()
        if entry is not None:
            self._next = None
            self._index += 1
        return entry

    def _read(self) -> Entry | None:
        dropped = self.scan.dropped
        for number, offset, line in self._lines:
            if line is None or offset in dropped:
                continue
            when = _record_time(line)
            if when is None:
                continue
            self._held = max(self._held, when - self.scan.start)
            return Entry(self._index, number, self._held, line)
        return None

    def close(self) -> None:
        """Close the file (idempotent)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()


def iter_snapshots(scan: TraceScan, until: float | None = None,
                   unreadable: list[int] | None = None) -> Iterator[Snapshot]:
    """The readable records of ``scan``'s trace in order, parsed one at a time; with
    ``until``, only those at play positions up to it (seconds from the first record).
    ``unreadable``, a ``[count, first line number]`` pair, counts the records that fail to parse.

    Raises:
        OSError: the file cannot be read.
    """
    cursor = TraceCursor(scan)
    try:
        while (entry := cursor.take()) is not None:
            if until is not None and entry.position > until + 1e-9:
                return
            try:
                yield parse_record(entry.line)
            except _ERRORS:
                if unreadable is not None:
                    unreadable[:] = [unreadable[0] + 1, unreadable[1] or entry.number]
    finally:
        cursor.close()


def read_trace(path: Any) -> tuple[list[Snapshot], list[str]]:
    """All snapshots of a trace as a list, in file order, and notices about what was skipped.

    Holds every snapshot: for small traces and tests. ``compare`` and ``replay`` stream
    (:func:`iter_snapshots`, :class:`TraceCursor`). A torn last line (no newline, not valid
    JSON: the recorder was killed mid-write) ends the trace with a notice; other unreadable
    lines are skipped and counted in one notice; unknown fields are ignored; a trace from a
    newer writer is read with a notice. Records out of time order are kept here.

    Returns:
        (snapshots, notices): snapshots non-empty.

    Raises:
        TraceError: empty file, first line not JSON or not a trace header, or no snapshots.
        OSError: the file cannot be read (missing, permissions).
    """
    path = Path(path)
    snapshots: list[Snapshot] = []
    bad = [0, 0]  # unreadable lines: how many, the first's number
    long_lines: list[int] = []
    torn = 0
    with open_trace(path) as handle:
        first = handle.readline(HEADER_LIMIT + 1)
        notices = _newer_notice(path, parse_header(path, first))
        for number, _, line in lines(handle, len(first)):
            if line is None:
                long_lines.append(number)
                continue
            if not line.strip():
                continue
            try:
                snapshots.append(parse_record(line))
            except _ERRORS:
                if not line.endswith(b"\n"):
                    torn = len(line)
                else:
                    bad = [bad[0] + 1, bad[1] or number]
    notices.extend(_long_line_notice(path, long_lines))
    notices.extend(_unreadable_notices(path, bad[0], bad[1], torn))
    if not snapshots:
        raise TraceError(f"{path}: the trace holds no snapshots")
    return snapshots, notices
