"""Append-only JSONL writer for one probe stream (no torch).

One ``os.write`` per line on a file opened with ``O_APPEND``, so a reader never sees a line
interleaved with another and a killed process leaves at most its last line torn. When the file
grows past ``max_bytes`` it is replaced by a new one that starts with the same info line
(``os.replace`` is atomic; readers notice the new inode and start over), which bounds the disk
a long job uses. Failures to write never reach the training script: the writer disables itself
and warns once.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from gpumem_tui.telemetry.serialize import jsonable


def encode(record: dict[str, Any]) -> bytes:
    """One record as one ``\\n``-terminated JSON line (ASCII: any text survives round trips)."""
    try:
        text = json.dumps(record, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        text = json.dumps(jsonable(record), separators=(",", ":"), allow_nan=False)
    return text.encode("ascii") + b"\n"


class StreamWriter:
    """Writes ``<directory>/<pid>.jsonl``: the info line first, then one record per call."""

    def __init__(self, path: Path, info: dict[str, Any], *, max_bytes: int = 32 << 20) -> None:
        self.path = Path(path)
        self.max_bytes = max(64 << 10, int(max_bytes))
        self.failed: str | None = None
        self._info = dict(info)
        self._generation = 0
        self._info_line = encode(self._info)
        self._fd: int | None = None
        self._size = 0
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._fd = self._open(self.path, truncate=True)
        self._write_raw(self._info_line)

    @staticmethod
    def _open(path: Path, truncate: bool) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
        return os.open(path, flags, 0o600)

    def _write_raw(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(data)

    def write(self, record: dict[str, Any]) -> None:
        """Append one record; rotate first when the file is over its size limit."""
        if self._fd is None or self.failed:
            return
        try:
            line = encode(record)
            if self._size + len(line) > self.max_bytes:
                self._rotate()
            self._write_raw(line)
        except OSError as exc:
            self._fail(f"cannot write {self.path}: {exc.strerror or exc}")

    def update_info(self, info: dict[str, Any]) -> None:
        """Append a new info line (readers replace the setup they had with it) and start
        rotated files with it from now on."""
        self._info = dict(info)
        self._info_line = encode({**self._info, "generation": self._generation} if self._generation else self._info)
        self.write(self._info)

    def _rotate(self) -> None:
        tmp = self.path.with_name(self.path.name + ".new")
        self._generation += 1
        # A different first line tells readers this is a new file even if the inode is reused.
        self._info_line = encode({**self._info, "generation": self._generation})
        fd = self._open(tmp, truncate=True)
        try:
            os.write(fd, self._info_line)
            os.replace(tmp, self.path)
        except OSError:
            os.close(fd)
            raise
        old, self._fd, self._size = self._fd, fd, len(self._info_line)
        if old is not None:
            os.close(old)

    def _fail(self, reason: str) -> None:
        self.failed = reason
        warnings.warn(f"gpumem_tui.probe stopped writing: {reason}", RuntimeWarning, stacklevel=3)
        self.close()

    def close(self) -> None:
        """Close the file (idempotent). The file stays for readers."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
