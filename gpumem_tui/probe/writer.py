"""Append-only JSONL writer for one probe stream (no torch).

One ``os.write`` per line on a file opened with ``O_APPEND``, so a reader never sees a line
interleaved with another and a killed process leaves at most its last line torn. When the file
grows past ``max_bytes`` it is replaced by a new one that starts with the same info line
(``os.replace`` is atomic; readers notice the new inode and start over), which bounds the disk
a long job uses. Failures to write never reach the training script.

Out of room (disk full, quota, file size limit): a line that did not fit whole is cut off
again, records are counted while there is no room, and the stream resumes with a ``gap``
record saying how many were lost (see :class:`StreamWriter`). Any other write error disables
the writer with one warning.

Safety on a shared machine (issue 13, item 14): the stream directory and every parent are
checked from ``/`` down, like OpenSSH's ``StrictModes`` checks of ``~/.ssh``, and opened
``O_NOFOLLOW`` one component at a time (:mod:`gpumem_tui.probe.stream_dir`); missing ones are
created 0700 whatever the umask. Files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``,
rotated and deleted (stale streams) relative to that directory's descriptor (``openat``,
``unlinkat``), so a symlink or a file planted under the stream's name is never followed or
reused, and a directory swapped after the check is not written into. A refused directory
disables the writer with one warning that says which check failed; the training job runs on.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumem_tui.probe.stream_dir import StreamRefused, open_stream_directory, remove_stale_streams
from gpumem_tui.telemetry.serialize import jsonable

__all__ = ["SPACE_ERRORS", "StreamRefused", "StreamWriter", "encode"]

#: Write errors that mean "no room now" (disk full, over quota, over the file size limit):
#: the stream pauses and resumes with a ``gap`` record, instead of stopping for good.
SPACE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def encode(record: dict[str, Any]) -> bytes:
    """One record as one ``\\n``-terminated JSON line (ASCII: any text survives round trips)."""
    try:
        text = json.dumps(record, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        text = json.dumps(jsonable(record), separators=(",", ":"), allow_nan=False)
    return text.encode("ascii") + b"\n"


class StreamWriter:
    """Writes ``<directory>/<pid>.jsonl``: the info line first, then one record per call.

    Never raises. A directory that cannot be created or is refused (see
    :mod:`gpumem_tui.probe.stream_dir`), a file that cannot be created, or a write error other
    than running out of room sets :attr:`failed` to the reason and warns once
    (``RuntimeWarning``); later calls do nothing.

    Out of room (:data:`SPACE_ERRORS` on a write, or a short write): the bytes of the torn line
    are cut off again (``ftruncate`` to the end of the last whole line), the record is counted
    in :attr:`dropped` and the writer warns once; each later record tries again, and the first
    that fits is preceded by ``{"kind": "gap", "time", "start", "dropped"}`` (``start``: when the
    first record was lost, ``time``: when writing resumed, both epoch seconds; ``dropped``: the
    records lost). The training job never sees the error.
    """

    def __init__(self, path: Path, info: dict[str, Any], *, max_bytes: int = 32 << 20) -> None:
        self.path = Path(path)
        self.max_bytes = max(64 << 10, int(max_bytes))
        self.failed: str | None = None
        self.dropped = 0  # records lost since the last one written (0 while writing works)
        self._dropped_since: float | None = None
        self._space_warned = False
        self._info = dict(info)
        self._generation = 0
        self._info_line = encode(self._info)
        self._info_pending = True  # the file's first line is still to be written
        self._fd: int | None = None
        self._dir_fd: int | None = None
        self._size = 0
        try:
            self._dir_fd = open_stream_directory(self.path.parent)
            self._fd = self._create(self.path.name)
        except OSError as exc:
            reason = str(exc) if isinstance(exc, StreamRefused) else f"cannot write {self.path}: {exc.strerror or exc}"
            self._fail(reason, stacklevel=4)
            return
        self._append(b"")

    def _create(self, name: str) -> int:
        """A new, empty, 0600 regular file ``name`` in the checked directory."""
        assert self._dir_fd is not None
        try:  # ours from an earlier run (a reused PID) or a half-done rotation
            os.unlink(name, dir_fd=self._dir_fd)
        except FileNotFoundError:
            pass
        flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW
                 | getattr(os, "O_CLOEXEC", 0))
        fd = os.open(name, flags, 0o600, dir_fd=self._dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():  # O_EXCL makes this hold
            os.close(fd)
            raise StreamRefused(f"{self.path.parent / name} is not a new file of yours")
        os.fchmod(fd, 0o600)  # the umask may have taken our own bits away
        return fd

    def _write_line(self, fd: int, data: bytes, size: int) -> None:
        """``data`` (whole lines) with one ``os.write`` at the end of ``fd`` (``size`` bytes
        long). A short write is cut off again and raises ENOSPC; so does a failed one."""
        try:
            written = os.write(fd, data)
        except OSError as exc:
            if exc.errno in SPACE_ERRORS:
                os.ftruncate(fd, size)  # a failed write may still have left bytes on some systems
            raise
        if written != len(data):
            os.ftruncate(fd, size)  # never leave a torn line for readers
            raise OSError(errno.ENOSPC, f"no room: wrote {written} of {len(data)} bytes (disk full or over quota?)")

    def _append(self, line: bytes) -> None:
        """Write ``line`` after what is owed: the info line of a new file, a ``gap`` record."""
        if self._fd is None or self.failed:
            return
        try:
            owed = self._info_line if self._info_pending else b""
            if self.dropped:
                owed += encode({"kind": "gap", "time": time.time(), "start": self._dropped_since,
                                "dropped": self.dropped})
            if not self._info_pending and self._size + len(owed) + len(line) > self.max_bytes:
                self._rotate()
            data = owed + line
            if data:
                self._write_line(self._fd, data, self._size)
                self._size += len(data)
            self._info_pending = False
            self.dropped, self._dropped_since = 0, None
        except OSError as exc:
            if exc.errno not in SPACE_ERRORS:
                self._fail(f"cannot write {self.path}: {exc.strerror or exc}", stacklevel=5)
            elif line:
                self._lost(exc)

    def _lost(self, exc: OSError) -> None:
        if not self.dropped:
            self._dropped_since = time.time()
        self.dropped += 1
        if not self._space_warned:
            self._space_warned = True
            warnings.warn(f"gpumem_tui.probe: {self.path}: {exc.strerror or exc}; records are dropped until "
                          "there is room again, then the stream goes on with a gap record", RuntimeWarning,
                          stacklevel=6)

    def write(self, record: dict[str, Any]) -> None:
        """Append one record; rotate first when the file is over its size limit."""
        if self._fd is None or self.failed:
            return
        self._append(encode(record))

    def update_info(self, info: dict[str, Any]) -> None:
        """Append a new info line (readers replace the setup they had with it) and start
        rotated files with it from now on."""
        self._info = dict(info)
        self._info_line = encode({**self._info, "generation": self._generation} if self._generation else self._info)
        self.write(self._info)

    def remove_stale(self, max_age_seconds: float, alive: Callable[[int, float | None], bool]) -> list[str]:
        """Delete this user's streams of dead processes untouched for ``max_age_seconds`` in the
        checked directory (through its descriptor; see
        :func:`~gpumem_tui.probe.stream_dir.remove_stale_streams`). Returns the names deleted."""
        if self._dir_fd is None:
            return []
        return remove_stale_streams(self._dir_fd, self.path.name, max_age_seconds, alive)

    def _rotate(self) -> None:
        tmp = self.path.name + ".new"
        self._generation += 1
        # A different first line tells readers this is a new file even if the inode is reused.
        self._info_line = encode({**self._info, "generation": self._generation})
        fd = self._create(tmp)
        try:
            self._write_line(fd, self._info_line, 0)
            os.replace(tmp, self.path.name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
        except OSError:
            os.close(fd)
            try:
                os.unlink(tmp, dir_fd=self._dir_fd)
            except OSError:
                pass
            raise
        old, self._fd, self._size = self._fd, fd, len(self._info_line)
        if old is not None:
            os.close(old)

    def _fail(self, reason: str, stacklevel: int = 3) -> None:
        self.failed = reason
        warnings.warn(f"gpumem_tui.probe is not streaming: {reason}", RuntimeWarning, stacklevel=stacklevel)
        self.close()

    def close(self) -> None:
        """Close the file (idempotent). The file stays for readers."""
        for attr in ("_fd", "_dir_fd"):
            fd = getattr(self, attr)
            setattr(self, attr, None)
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
