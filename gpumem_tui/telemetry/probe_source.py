"""Read the JSONL streams that probed training jobs write (``gpumem_tui.probe``).

Headless: imports neither Textual nor torch. psutil (a core dependency) is used to tell whether
a probed process is still alive.

The stream format (one JSON object per line, UTF-8, ``\\n``-terminated, flushed per line; a
file per process named ``<pid>.jsonl`` in :func:`default_probe_dir`):

``{"kind": "info", "format": "gpumem-tui-probe", "version": 1, "pid", "time", "create_time",
"model_config": {...} | null, "setup": {"batch", "seq", "dtype", "optimizer", "task",
"device", ...}}``
    written once, first. ``create_time`` is the process start time (psutil, epoch seconds)
    so a reused PID is not mistaken for the probed job.
``{"kind": "phase", "time", "step", "phase": "forward", <memory fields>}``
    the job entered ``phase`` (init, forward, backward, optimizer_step, idle) of training step
    ``step``; the memory fields are the memory at that instant.
``{"kind": "sample", "time", "step", "phase", <memory fields>}``
    a periodic sample inside a phase; with ``"at_peak": true`` (CPU tracker) it is the
    highest live bytes since the previous line, written late but stamped with the time it
    happened and split into categories as they were at that instant.
``{"kind": "peak", "time", "start", "step", "phase", "device", "peak_bytes", "steps"}``
    the highest memory of ``phase`` of step ``step`` between ``start`` and ``time`` (its end),
    written when the phase ends (``gpumem_tui.probe``: on CUDA ``torch.cuda.max_memory_allocated``
    with the peak statistics reset at every phase boundary, on the CPU the tracker's highest
    live bytes); ``steps`` > 1 when fast steps were folded into one record.
``{"kind": "gap", "time", "start", "dropped"}``
    the probe had no room to write (disk full, over quota) from ``start`` to ``time`` and lost
    ``dropped`` records (``dropped`` >= 1); written before the first record that fitted again.
    The reader says so in ``notices`` and shows nothing for that span (no sample is made up).
``{"kind": "end", "time"}``
    the probe was closed (the job finished); a job killed with SIGKILL writes none.

Memory fields, named for exactly what they are (bytes):
``device`` ("cpu" or "cuda:N");
CUDA: ``torch_allocated`` (``torch.cuda.memory_allocated``), ``torch_reserved``
(``torch.cuda.memory_reserved``), ``torch_max_allocated`` (``torch.cuda.max_memory_allocated``: since the current phase began when
the probe resets the peak statistics at phase boundaries, its default);
CPU: ``cpu_live_tensors`` (bytes of live tensor storages seen by the probe's tracker),
``cpu_live_tensors_peak`` (their maximum since the probe attached);
``categories``: ``{name: bytes}`` splitting the live bytes (parameters, gradients,
optimizer_states, activations, temporaries, buffers; see ``gpumem_tui.probe``).

Unknown kinds and unknown fields are ignored (newer probes stay readable); lines that are not
valid are counted and reported in ``notices``, never raised. A line is not valid either when a
figure is implausible: a time that is not finite or lies more than
:data:`MAX_FUTURE_SECONDS` ahead of the reader's clock (plotting it would stretch the chart's
axis to it), or a byte count above :data:`gpumem_tui.telemetry.plausible.MAX_BYTES`.

Trust (issue 13, item 15): a directory may be shared (``GPUMEM_TUI_PROBE_DIR`` on a team
box), so a stream is read only when it is a regular file (opened ``O_NOFOLLOW |
O_NONBLOCK``, checked with ``fstat``: a FIFO cannot block the reader, a link to
``/dev/zero`` is not followed) owned by the user who runs the process it names, or by root;
a stream of a process that is gone must be owned by the reader or by root. Refused files
are named once in ``notices``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpumem_tui.support.safe_files import user_name
from gpumem_tui.telemetry.model import Phase, PhaseMark, PhasePeak, ProbeInfo, ProbeSample
from gpumem_tui.telemetry.plausible import MAX_BYTES, MAX_FUTURE_SECONDS

PROBE_FORMAT = "gpumem-tui-probe"
PROBE_VERSION = 1
ENV_PROBE_DIR = "GPUMEM_TUI_PROBE_DIR"

_FILE_RE = re.compile(r"^([0-9]{1,10})\.jsonl$")
_PHASES = {p.value: p for p in Phase}


def default_probe_dir() -> Path:
    """Directory where probes write and the dashboard looks: ``$GPUMEM_TUI_PROBE_DIR`` if set,
    else the user's cache directory (platformdirs) + ``probes``, e.g.
    ``~/.cache/gpumem-tui/probes`` on Linux.

    Per user on purpose: a dashboard sees the probes of its own user's jobs. The cache
    directory (not the runtime directory) is used because ``/run/user/UID`` disappears when
    the user logs out while a ``nohup``'ed training job keeps running. The directory is not
    created here.
    """
    override = os.environ.get(ENV_PROBE_DIR)
    if override:
        return Path(override).expanduser()
    import platformdirs  # core dependency; deferred so importing this module stays cheap

    return Path(platformdirs.user_cache_dir("gpumem-tui")) / "probes"


@dataclass(frozen=True, slots=True)
class ProbeReading:
    """What one :meth:`ProbeSource.poll` found.

    ``probes`` and ``phase_marks`` are the samples and marks that are *new since the previous
    poll* (time order within each process; several per process when the probe wrote faster
    than the poll), so a consumer that accumulates them sees each exactly once.
    ``probe_infos`` is the current state of every probe known (one per process, ``ended``
    set once the process finished or died). ``notices`` are one-off messages for the user.
    """

    probes: tuple[ProbeSample, ...] = ()
    probe_infos: tuple[ProbeInfo, ...] = ()
    phase_marks: tuple[PhaseMark, ...] = ()
    notices: tuple[str, ...] = ()
    phase_peaks: tuple[PhasePeak, ...] = ()  # new since the previous poll, like probes


class _BadLine(ValueError):
    """A line of a probe stream that cannot be used (the message says why)."""


def _int(record: Mapping[str, object], key: str, *, required: bool = True) -> int | None:
    value = record.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _BadLine(f"{key!r} is not a non-negative integer")
    if value > MAX_BYTES:
        raise _BadLine(f"{key!r} is implausibly large")
    return value


def _time(record: Mapping[str, object], now: float) -> float:
    value = record.get("time")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _BadLine("'time' is not a number")
    try:
        value = float(value)
    except OverflowError:  # an int beyond the float range
        raise _BadLine("'time' is not a finite number") from None
    if not math.isfinite(value):
        raise _BadLine("'time' is not a finite number")
    if value > now + MAX_FUTURE_SECONDS:
        raise _BadLine("'time' lies in the future")
    return value


def _categories(record: Mapping[str, object]) -> tuple[tuple[str, int], ...]:
    categories_raw = record.get("categories") or {}
    if not isinstance(categories_raw, Mapping):
        raise _BadLine("'categories' is not an object")
    categories: list[tuple[str, int]] = []
    for name, value in categories_raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BYTES:
            raise _BadLine(f"category {name!r} is not a plausible byte count")
        categories.append((str(name), value))
    return tuple(categories)


def _sample_from_record(record: Mapping[str, object], pid: int, when: float) -> ProbeSample | None:
    """The memory fields of a phase/sample record as a ProbeSample (None if it has none)."""
    device = record.get("device")
    if not isinstance(device, str) or not device:
        raise _BadLine("'device' is missing")
    categories = _categories(record)
    if device.startswith("cuda"):
        allocated = _int(record, "torch_allocated", required=False)
        if allocated is None:
            return None
        return ProbeSample(
            time=when,
            pid=pid,
            device="cuda",
            allocated_bytes=allocated,
            reserved_bytes=_int(record, "torch_reserved", required=False),
            peak_allocated_bytes=_int(record, "torch_max_allocated", required=False),
            categories=tuple(categories),
        )
    live = _int(record, "cpu_live_tensors", required=False)
    if live is None:  # the probe ran without its tensor tracker: no live figure to show
        return None
    return ProbeSample(
        time=when,
        pid=pid,
        device=device.split(":", 1)[0],
        allocated_bytes=live,
        reserved_bytes=None,
        peak_allocated_bytes=_int(record, "cpu_live_tensors_peak", required=False),
        categories=tuple(categories),
    )


def _peak_from_record(record: Mapping[str, object], pid: int, now: float) -> PhasePeak:
    """A ``peak`` record as a PhasePeak (raises _BadLine)."""
    end = _time(record, now)
    start = _time({"time": record.get("start")}, now)
    phase = _PHASES.get(str(record.get("phase")))
    device = record.get("device")
    if phase is None or not isinstance(device, str) or not device or not start <= end:
        raise _BadLine("not a valid peak record")
    return PhasePeak(pid=pid, step=_int(record, "step"), phase=phase, start=start, end=end,  # type: ignore[arg-type]
                     peak_bytes=_int(record, "peak_bytes"), device=device.split(":", 1)[0],  # type: ignore[arg-type]
                     steps=_int(record, "steps", required=False) or 1,
                     categories=_categories(record),
                     end_bytes=_int(record, "end_bytes", required=False))


def _gap_notice(record: Mapping[str, object], name: str, now: float) -> str:
    """The notice for a ``gap`` record (raises _BadLine when it is not a valid one)."""
    end = _time(record, now)
    start = _time({"time": record.get("start")}, now)
    dropped = _int(record, "dropped")
    if not dropped or not 0 <= start <= end:
        raise _BadLine("not a valid gap record")
    span = f"{time.strftime('%H:%M:%S', time.localtime(start))}-{time.strftime('%H:%M:%S', time.localtime(end))}"
    return (f"probe stream {name}: {dropped} record{'s' if dropped > 1 else ''} lost {span} "
            "(the probe had no room to write: disk full or over quota)")


def _json_safe_setup(setup: object) -> tuple[tuple[str, object], ...]:
    if not isinstance(setup, Mapping):
        return ()
    return tuple((str(k), v) for k, v in setup.items())


def _process_alive(pid: int, create_time: float | None) -> bool:
    """True while ``pid`` runs and is the process that wrote the stream (not a reused PID).

    A zombie (exited, not yet reaped by its parent) counts as ended. A process we may not
    inspect (AccessDenied) counts as alive: there is no evidence that it ended.
    """
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a core dependency
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > 1.0:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # includes ZombieProcess
        return False
    except psutil.AccessDenied:
        return True
    except Exception:  # an unexpected psutil failure: fall back to the cheapest check
        return bool(psutil.pid_exists(pid))


def _process_owner(pid: int) -> int | None:
    """Real uid of the user running ``pid``, or None when there is no such process."""
    try:
        import psutil

        return psutil.Process(pid).uids().real
    except ImportError:  # pragma: no cover - psutil is a core dependency
        try:
            return os.stat(f"/proc/{pid}").st_uid
        except OSError:
            return None
    except Exception:  # NoSuchProcess, AccessDenied (a process we may not inspect)
        try:
            return os.stat(f"/proc/{pid}").st_uid
        except OSError:
            return None


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


@dataclass
class _Stream:
    """Tail state of one ``<pid>.jsonl`` file."""

    path: Path
    pid: int
    inode: int = -1
    offset: int = 0
    head: bytes = b""  # the file's first line: a new file (rotation) has a different one
    info_seen: bool = False
    model_config: dict | None = None
    setup: tuple[tuple[str, object], ...] = ()
    create_time: float | None = None
    ended: bool = False
    ended_at: float | None = None  # our clock, for eviction
    end_record: bool = False
    bad_lines: int = 0
    reported_bad: int = 0
    torn_reported: bool = False
    last_time: float = 0.0
    notices: list[str] = field(default_factory=list)
    peaks: list[PhasePeak] = field(default_factory=list)  # read, not yet handed out

    def info(self) -> ProbeInfo:
        return ProbeInfo(pid=self.pid, model_config=self.model_config, setup=self.setup, ended=self.ended)


class ProbeSource:
    """Tails every ``<pid>.jsonl`` probe stream in a directory, incrementally.

    Each poll reads only what was appended since the previous one (offsets are kept per file);
    a partial last line is left for the next poll until its newline arrives (or, once the
    process is gone, is counted as a torn line). A stream whose process ended -- an ``end``
    record, a dead or zombie PID, or a PID reused by another process (start time differs) --
    is reported with ``ProbeInfo.ended=True``. A stream that is replaced (the probe rotates
    its file when it grows past its size limit) is re-read from the start.

    Memory is bounded: at most ``max_read_bytes`` are read per file per poll (the rest next
    poll); a stream first seen with more than ``backlog_bytes`` of history is read from its
    info line and then only its last ``backlog_bytes``; at most ``max_probes`` streams are
    tracked (ended ones evicted first, oldest first); ended streams are dropped
    ``keep_ended_seconds`` after they ended, and files of dead processes untouched for that
    long are not picked up at all.

    Args:
        directory: the probe directory; default :func:`default_probe_dir`. A missing directory
            is not an error (nothing has been probed yet).
        alive: ``(pid, create_time) -> bool`` liveness check (tests inject one).
        clock: epoch-seconds clock (tests inject one).
        owner: ``pid -> uid`` of the user running a process, None when it is gone (tests
            inject one).

    Only the ``max_probes`` streams kept are read: files beyond the cap are listed (one
    ``stat`` each) but not opened until a kept stream ends and frees a place; the most
    recently written take free places first.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        backlog_bytes: int = 1 << 20,
        max_read_bytes: int = 4 << 20,
        max_probes: int = 64,
        keep_ended_seconds: float = 3600.0,
        alive: Callable[[int, float | None], bool] = _process_alive,
        clock: Callable[[], float] = time.time,
        owner: Callable[[int], int | None] | None = None,
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_probe_dir()
        self._backlog = max(4096, int(backlog_bytes))
        self._max_read = max(4096, int(max_read_bytes))
        self._max_probes = max(1, int(max_probes))
        self._keep_ended = float(keep_ended_seconds)
        self._alive = alive
        self._clock = clock
        self._owner = owner if owner is not None else _process_owner
        self._streams: dict[str, _Stream] = {}
        # Files not worth reading (stale, or evicted): name -> (inode, size) when last seen.
        self._ignored: dict[str, tuple[int, int]] = {}
        self._dir_error_reported = False
        # Files refused as untrusted: name -> inode (checked again once the file is replaced).
        self._refused: dict[str, int] = {}
        self._over_cap_reported = False

    # -- public ----------------------------------------------------------------------------

    def poll(self) -> ProbeReading:
        """Read what the probes appended since the last poll. Never raises for file contents."""
        notices: list[str] = []
        probes: list[ProbeSample] = []
        marks: list[PhaseMark] = []
        peaks: list[PhasePeak] = []
        now = self._clock()
        self._discover(now, notices)
        for name, stream in list(self._streams.items()):
            if not stream.ended:
                self._read(stream, probes, marks, now)
                if not stream.ended and not self._alive(stream.pid, stream.create_time):
                    # The process is gone: drain what it wrote last, then mark it ended.
                    self._read(stream, probes, marks, now, final=True)
                    stream.ended = True
                    stream.ended_at = now
            notices.extend(stream.notices)
            stream.notices.clear()
            peaks.extend(stream.peaks)
            stream.peaks.clear()
            if stream.bad_lines > stream.reported_bad:
                new = stream.bad_lines - stream.reported_bad
                stream.reported_bad = stream.bad_lines
                notices.append(
                    f"probe stream {stream.path.name}: {new} unreadable line{'s' if new > 1 else ''} skipped"
                )
            if stream.ended and stream.ended_at is not None and now - stream.ended_at > self._keep_ended:
                self._forget(name, stream)
        self._evict()
        return ProbeReading(
            probes=tuple(probes),
            probe_infos=tuple(s.info() for s in self._streams.values() if s.info_seen),
            phase_marks=tuple(marks),
            phase_peaks=tuple(peaks),
            notices=tuple(notices),
        )

    def close(self) -> None:
        """Forget all state (files are left alone)."""
        self._streams.clear()
        self._ignored.clear()
        self._refused.clear()

    # -- internals -------------------------------------------------------------------------

    def _forget(self, name: str, stream: _Stream) -> None:
        self._streams.pop(name, None)
        try:
            st = stream.path.stat()
            self._ignored[name] = (st.st_ino, st.st_size)
        except OSError:
            pass

    def _evict(self) -> None:
        if len(self._streams) <= self._max_probes:
            return
        # Ended first (oldest end first), then the streams with the oldest data.
        order = sorted(
            self._streams.items(),
            key=lambda item: (not item[1].ended, item[1].ended_at or 0.0, item[1].last_time),
        )
        for name, stream in order[: len(self._streams) - self._max_probes]:
            self._forget(name, stream)

    def _discover(self, now: float, notices: list[str]) -> None:
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return
        except OSError as exc:
            if not self._dir_error_reported:
                notices.append(f"probe directory {self.directory} unreadable: {exc.strerror or exc}")
                self._dir_error_reported = True
            return
        present = set()
        candidates: list[tuple[float, str, str, int, tuple[int, int]]] = []  # mtime, name, path, pid, (ino, size)
        for entry in entries:
            match = _FILE_RE.match(entry.name)
            if not match:
                continue
            present.add(entry.name)
            if entry.name in self._streams:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if self._refused.get(entry.name) == st.st_ino:
                continue
            if not stat.S_ISREG(st.st_mode):
                self._refuse(entry.name, st.st_ino, f"not a regular file ({_file_kind(st.st_mode)})", notices)
                continue
            ignored = self._ignored.get(entry.name)
            if ignored is not None and ignored == (st.st_ino, st.st_size):
                continue
            pid = int(match.group(1))
            if now - st.st_mtime > self._keep_ended and not self._alive(pid, None):
                self._ignored[entry.name] = (st.st_ino, st.st_size)
                continue
            candidates.append((st.st_mtime, entry.name, entry.path, pid, (st.st_ino, st.st_size)))
        # Only as many new streams as the cap leaves room for (ended streams give theirs up
        # in _evict): a file over the cap is not opened, so it costs one stat per poll.
        room = self._max_probes - sum(1 for s in self._streams.values() if not s.ended)
        candidates.sort(reverse=True)  # most recently written first
        for _, name, path, pid, _ in candidates[: max(room, 0)]:
            self._ignored.pop(name, None)
            self._streams[name] = _Stream(path=Path(path), pid=pid)
        for _, name, _, _, seen in candidates[max(room, 0):]:
            # not looked at again until it changes (a live stream grows; then it may get room)
            self._ignored[name] = seen
        over = len(candidates) - max(room, 0)
        if over > 0 and not self._over_cap_reported:
            self._over_cap_reported = True
            notices.append(f"{over} probe stream{'s' if over > 1 else ''} not read: at most "
                           f"{self._max_probes} are followed at a time (the most recently written)")
        # Files deleted from the directory: their streams end now.
        for name, stream in list(self._streams.items()):
            if name not in present and not stream.ended:
                stream.ended = True
                stream.ended_at = now
        for name in [n for n in self._ignored if n not in present]:
            del self._ignored[name]
        for name in [n for n in self._refused if n not in present]:
            del self._refused[name]

    def _refuse(self, name: str, inode: int, why: str, notices: list[str]) -> None:
        """Stop reading ``name`` until it is replaced by another file; say so once."""
        self._refused[name] = inode
        notices.append(f"probe stream {name} ignored: {why}")
        stream = self._streams.pop(name, None)
        if stream is not None:
            stream.ended = True

    def _untrusted(self, st: os.stat_result, pid: int) -> str | None:
        """Why a stream file with status ``st`` may not speak for ``pid``, or None."""
        if not stat.S_ISREG(st.st_mode):
            return f"not a regular file ({_file_kind(st.st_mode)})"
        if st.st_uid == 0:
            return None
        runs_as = self._owner(pid)
        if runs_as is None:  # the process is gone: only the reader's own files are history
            if st.st_uid == os.geteuid():
                return None
            return f"owned by {user_name(st.st_uid)} and PID {pid} is not running"
        if runs_as != st.st_uid:
            return f"owned by {user_name(st.st_uid)} but PID {pid} runs as {user_name(runs_as)}"
        return None

    def _read(
        self,
        stream: _Stream,
        probes: list[ProbeSample],
        marks: list[PhaseMark],
        now: float,
        final: bool = False,
    ) -> None:
        try:
            # O_NOFOLLOW: a link is refused (ELOOP), not followed to /dev/zero or another
            # user's file; O_NONBLOCK: opening a FIFO does not wait for a writer.
            fd = os.open(stream.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
            with open(fd, "rb") as handle:
                st = os.fstat(handle.fileno())
                why = self._untrusted(st, stream.pid)
                if why is not None:
                    self._refuse(stream.path.name, st.st_ino, why, stream.notices)
                    return
                replaced = st.st_ino != stream.inode or st.st_size < stream.offset
                if not replaced and stream.head:
                    replaced = os.pread(handle.fileno(), len(stream.head), 0) != stream.head
                if replaced:
                    # New file, or the probe replaced (rotated) it: start from the beginning.
                    first = stream.inode == -1
                    stream.inode = st.st_ino
                    stream.offset = 0
                    if not first:
                        stream.notices.append(f"probe stream {stream.path.name} was restarted")
                    if st.st_size > self._backlog:
                        self._read_head(stream, handle, probes, marks)
                        skip_to = st.st_size - self._backlog
                        if skip_to > stream.offset:
                            handle.seek(skip_to)
                            handle.readline()  # drop the partial line we landed in
                            stream.offset = handle.tell()
                handle.seek(stream.offset)
                data = handle.read(self._max_read)
        except FileNotFoundError:
            stream.ended = True
            stream.ended_at = now
            return
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._refuse(stream.path.name, -1, "a symbolic link", stream.notices)
                return
            stream.notices.append(f"probe stream {stream.path.name} unreadable: {exc.strerror or exc}")
            return
        end = data.rfind(b"\n")
        if end < 0:
            if final and data:
                stream.bad_lines += 1
                stream.offset += len(data)
            elif len(data) >= self._max_read:  # one line longer than a whole read: skip it
                stream.bad_lines += 1
                stream.offset += len(data)
            return
        complete = data[: end + 1]
        if stream.offset == 0:
            stream.head = complete[: complete.find(b"\n") + 1][:4096]
        stream.offset += len(complete)
        for line in complete.split(b"\n")[:-1]:
            self._handle_line(stream, line, probes, marks)
        if final and data[end + 1 :]:
            stream.bad_lines += 1  # a torn last line left by a killed process
            stream.offset += len(data) - end - 1

    def _read_head(self, stream: _Stream, handle, probes, marks) -> None:
        handle.seek(0)
        line = handle.readline(self._max_read)
        if line.endswith(b"\n"):
            stream.offset = len(line)
            self._handle_line(stream, line[:-1], probes, marks)
            stream.head = line[:4096]

    def _handle_line(
        self, stream: _Stream, line: bytes, probes: list[ProbeSample], marks: list[PhaseMark]
    ) -> None:
        if not line.strip():
            return
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise _BadLine("not a JSON object")
            kind = record.get("kind")
            if kind == "info":
                self._handle_info(stream, record)
            elif kind in ("phase", "sample"):
                when = _time(record, self._clock())
                sample = _sample_from_record(record, stream.pid, when)
                mark = None
                if kind == "phase":
                    phase = _PHASES.get(str(record.get("phase")))
                    step = _int(record, "step")
                    if phase is not None and step is not None:
                        mark = PhaseMark(time=when, pid=stream.pid, phase=phase, step=step)
                if mark is not None:
                    marks.append(mark)
                if sample is not None:
                    probes.append(sample)
                stream.last_time = when
            elif kind == "peak":
                stream.peaks.append(_peak_from_record(record, stream.pid, self._clock()))
            elif kind == "gap":
                stream.notices.append(_gap_notice(record, stream.path.name, self._clock()))
            elif kind == "end":
                stream.end_record = True
                stream.ended = True
                stream.ended_at = self._clock()
            # other kinds: written by a newer probe; ignored on purpose
        except (ValueError, UnicodeDecodeError, RecursionError):  # JSONDecodeError, _BadLine
            stream.bad_lines += 1

    def _handle_info(self, stream: _Stream, record: Mapping[str, object]) -> None:
        if record.get("format") not in (None, PROBE_FORMAT):
            raise _BadLine("not a gpumem-tui probe stream")
        if stream.info_seen and not isinstance(record.get("setup"), Mapping):
            # a later info line updates the setup (the probe's use_cache, kept outputs): one
            # without a setup object is malformed and must not wipe the setup already read
            raise _BadLine("info line without a setup object")
        version = record.get("version")
        if isinstance(version, int) and version > PROBE_VERSION and not stream.info_seen:
            stream.notices.append(
                f"probe stream {stream.path.name} has version {version} (this reader knows "
                f"{PROBE_VERSION}); unknown fields are ignored"
            )
        config = record.get("model_config")
        stream.model_config = config if isinstance(config, dict) else None
        stream.setup = _json_safe_setup(record.get("setup"))
        created = record.get("create_time")
        if isinstance(created, (int, float)) and not isinstance(created, bool) and math.isfinite(created):
            stream.create_time = float(created)
        stream.info_seen = True
