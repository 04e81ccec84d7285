"""Append-only JSONL writer for one probe stream (no torch).

One ``os.write`` per line on a file opened with ``O_APPEND``, so a reader never sees a line
interleaved with another and a killed process leaves at most its last line torn. When the file
grows past ``max_bytes`` it is replaced by a new one that starts with the same info line
(``os.replace`` is atomic; readers notice the new inode and start over), which bounds the disk
a long job uses. Failures to write never reach the training script: the writer disables itself
and warns once.

Safety on a shared machine (issue 13, item 14): the stream directory must belong to this user
and be writable by no one else, like OpenSSH's ``StrictModes`` checks of ``~/.ssh``; missing
parents are created 0700 whatever the umask. Files are created with ``O_CREAT | O_EXCL |
O_NOFOLLOW`` relative to a descriptor of the checked directory (``openat``), so a symlink or
a file planted under the stream's name is never followed or reused, and a directory renamed
after the check is not written into. A refused directory disables the writer with one
warning that says which check failed; the training job runs on.
"""

from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path
from typing import Any

from gpumem_tui.safe_files import group_is_private, user_name
from gpumem_tui.telemetry.serialize import jsonable


def encode(record: dict[str, Any]) -> bytes:
    """One record as one ``\\n``-terminated JSON line (ASCII: any text survives round trips)."""
    try:
        text = json.dumps(record, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        text = json.dumps(jsonable(record), separators=(",", ":"), allow_nan=False)
    return text.encode("ascii") + b"\n"


class StreamRefused(OSError):
    """The stream directory or file is not safe to write; the message says which and why."""


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each mode 0700 whatever the umask
    (directories that exist are left as they are).

    Raises:
        OSError: a parent cannot be created.
    """
    missing: list[Path] = []
    current = Path(directory)
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue  # created by someone else meanwhile: checked like any existing directory
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, 0o700)  # the umask may have taken bits away (0o777 leaves 0000)
        finally:
            os.close(fd)


def directory_problem(st: os.stat_result, directory: Path) -> str | None:
    """Why a directory with status ``st`` is unsafe for this user's streams, or None.

    Refused: not a directory, owned by another user (root's directories included: a
    non-root writer needs its own), or writable by its group (unless it is the user's private
    group) or by everyone (the sticky bit does not help: another user could still create the
    stream's names first).
    """
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    me = os.geteuid()
    problems = []
    if st.st_uid != me:
        problems.append(f"owned by {user_name(st.st_uid)}, not by you ({user_name(me)})")
    group_writes = bool(st.st_mode & stat.S_IWGRP) and not group_is_private(st.st_gid)
    writable = [who for who, writes in (("its group", group_writes), ("every user", st.st_mode & stat.S_IWOTH))
                if writes]
    if writable:
        problems.append(f"writable by {' and '.join(writable)} (mode {stat.S_IMODE(st.st_mode):04o})")
    if not problems:
        return None
    fix = f"chmod go-w {directory}, or use" if st.st_uid == me else "use"
    return (f"directory {directory} is {' and '.join(problems)}: another user could replace the "
            f"stream with a link to your files ({fix} a directory of your own)")


class StreamWriter:
    """Writes ``<directory>/<pid>.jsonl``: the info line first, then one record per call.

    Never raises: a directory that cannot be created or is refused (see
    :func:`directory_problem`), or a file that cannot be created, sets :attr:`failed` to the
    reason and warns once (``RuntimeWarning``); later calls do nothing.
    """

    def __init__(self, path: Path, info: dict[str, Any], *, max_bytes: int = 32 << 20) -> None:
        self.path = Path(path)
        self.max_bytes = max(64 << 10, int(max_bytes))
        self.failed: str | None = None
        self._info = dict(info)
        self._generation = 0
        self._info_line = encode(self._info)
        self._fd: int | None = None
        self._dir_fd: int | None = None
        self._size = 0
        try:
            self._dir_fd = self._open_directory(self.path.parent)
            self._fd = self._create(self.path.name)
            self._write_raw(self._info_line)
        except OSError as exc:
            reason = str(exc) if isinstance(exc, StreamRefused) else f"cannot write {self.path}: {exc.strerror or exc}"
            self._fail(reason, stacklevel=4)

    @staticmethod
    def _open_directory(directory: Path) -> int:
        make_private_dirs(directory)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        problem = directory_problem(os.fstat(fd), directory)
        if problem is not None:
            os.close(fd)
            raise StreamRefused(problem)
        return fd

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
        tmp = self.path.name + ".new"
        self._generation += 1
        # A different first line tells readers this is a new file even if the inode is reused.
        self._info_line = encode({**self._info, "generation": self._generation})
        fd = self._create(tmp)
        try:
            os.write(fd, self._info_line)
            os.replace(tmp, self.path.name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
        except OSError:
            os.close(fd)
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
