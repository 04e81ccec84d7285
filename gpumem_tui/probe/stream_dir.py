"""The probe's stream directory on a shared machine: opened through checked parents, then
used only through its descriptor (no torch).

:func:`open_stream_directory` walks the path from ``/`` down one component at a time with
``openat(..., O_DIRECTORY | O_NOFOLLOW)`` (parents with ``O_PATH``, which needs only search
permission), checking each directory as OpenSSH's
``StrictModes`` checks the parents of ``~/.ssh`` (``safe_path`` in OpenSSH's ``misc.c``): owned
by root or this user and writable by no one else -- except that a parent with the sticky bit
(``/tmp``) may be writable by all, since there no one can rename or delete another user's
entries. A symbolic link met on the way must be owned by root or this user; it is followed by
reading it (``readlink``) and walking its target the same way, so every directory the stream
ends up in was checked. The probe directory itself must be this user's and writable by no one
else (:func:`directory_problem`). Missing directories are created 0700 on the way.

The descriptor returned is the directory that was checked: the writer creates, rotates and
deletes files only relative to it (``dir_fd``), so swapping a path component for a link after
the check cannot redirect a write or a delete into another directory.
"""

from __future__ import annotations

import os
import stat
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from gpumem_tui.support.safe_files import group_is_private, user_name

#: Symbolic links followed in one path before giving up (Linux's own limit, ``MAXSYMLINKS``).
MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# Parents are only walked through: O_PATH (Linux) needs no read permission (a 0711 parent).
_WALK_FLAGS = (os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
               if hasattr(os, "O_PATH") else _DIR_FLAGS)

__all__ = ["MAX_LINKS", "StreamRefused", "directory_problem", "open_stream_directory", "parent_problem",
           "remove_stale_streams"]


class StreamRefused(OSError):
    """The stream directory or file is not safe to write; the message says which and why."""


def _writers(st: os.stat_result) -> list[str]:
    """Who besides the owner may write a directory with status ``st`` (the owner's private
    group does not count: OpenSSH makes the same exception)."""
    group_writes = bool(st.st_mode & stat.S_IWGRP) and not group_is_private(st.st_gid)
    return [who for who, writes in (("its group", group_writes), ("every user", st.st_mode & stat.S_IWOTH)) if writes]


def directory_problem(st: os.stat_result, directory: Path | str) -> str | None:
    """Why the probe directory with status ``st`` is unsafe for this user's streams, or None.

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
    writable = _writers(st)
    if writable:
        problems.append(f"writable by {' and '.join(writable)} (mode {stat.S_IMODE(st.st_mode):04o})")
    if not problems:
        return None
    fix = f"chmod go-w {directory}, or use" if st.st_uid == me else "use"
    return (f"directory {directory} is {' and '.join(problems)}: another user could replace the "
            f"stream with a link to your files ({fix} a directory of your own)")


def parent_problem(st: os.stat_result, directory: Path | str) -> str | None:
    """Why a parent (status ``st``) of the probe directory is unsafe, or None: owned by
    someone other than root or this user, or writable by others without the sticky bit
    (they could swap the probe directory for a link to another of your directories)."""
    me = os.geteuid()
    problems = []
    if st.st_uid not in (0, me):
        problems.append(f"owned by {user_name(st.st_uid)}")
    writable = _writers(st)
    if writable and not st.st_mode & stat.S_ISVTX:
        problems.append(f"writable by {' and '.join(writable)} without the sticky bit "
                        f"(mode {stat.S_IMODE(st.st_mode):04o})")
    if not problems:
        return None
    return (f"parent directory {directory} of the probe directory is {' and '.join(problems)}: another user "
            "could swap the probe directory for a link to your files (use a directory whose parents "
            "only you and root can change)")


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _open_root() -> tuple[int, str]:
    fd = os.open("/", _WALK_FLAGS)
    problem = parent_problem(os.fstat(fd), "/")
    if problem is not None:
        os.close(fd)
        raise StreamRefused(problem)
    return fd, "/"


def _enter(parent_fd: int, name: str, shown: str, last: bool, missing: bool) -> int:
    """Open (creating it 0700 if ``missing``) and check directory ``name`` under ``parent_fd``."""
    created = False
    if missing:
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            created = True
        except FileExistsError:
            pass  # made by someone else meanwhile: checked like any existing directory
    # ENOTDIR: a file, or a link put there since the lstat. A new one is opened to be chmod'ed.
    fd = os.open(name, _DIR_FLAGS if last or created else _WALK_FLAGS, dir_fd=parent_fd)
    try:
        if created:
            os.fchmod(fd, 0o700)  # the umask may have taken bits away (0o777 leaves 0000)
        st = os.fstat(fd)
        problem = directory_problem(st, shown) if last else parent_problem(st, shown)
        if problem is not None:
            raise StreamRefused(problem)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_stream_directory(directory: Path | str) -> int:
    """A descriptor (``O_DIRECTORY``, close-on-exec) of ``directory`` after checking it and
    every parent from ``/`` down (see the module's text); missing ones are created 0700.

    Raises:
        StreamRefused: a directory or link on the way fails a check (the message names it
            and says why), or more than :data:`MAX_LINKS` links.
        OSError: a directory cannot be created or opened (permissions, a read-only disk).
    """
    path = os.path.join(os.getcwd(), os.fspath(directory))
    pending = deque(_parts(path))
    fd, shown = _open_root()
    links = 0
    try:
        while pending:
            name = pending.popleft()
            here = os.path.normpath(os.path.join(shown, name))
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                links += 1
                if links > MAX_LINKS:
                    raise StreamRefused(f"{path}: more than {MAX_LINKS} symbolic links")
                if st.st_uid not in (0, os.geteuid()):
                    raise StreamRefused(f"{here} is a symbolic link owned by {user_name(st.st_uid)}: another "
                                        "user chooses where it leads (use a directory of your own)")
                target = os.readlink(name, dir_fd=fd)
                pending.extendleft(reversed(_parts(target)))
                if target.startswith("/"):
                    os.close(fd)
                    fd, shown = _open_root()
                continue
            child = _enter(fd, name, here, last=not pending, missing=st is None)
            os.close(fd)
            fd, shown = child, here
        if shown == "/":  # the path was "/" itself
            problem = directory_problem(os.fstat(fd), "/")
            if problem is not None:
                raise StreamRefused(problem)
            os.close(fd)
            fd = os.open("/", _DIR_FLAGS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_stale_streams(dir_fd: int, keep: str, max_age_seconds: float,
                         alive: Callable[[int, float | None], bool], now: float | None = None) -> list[str]:
    """Delete ``<pid>.jsonl`` streams in the directory ``dir_fd`` that are this user's regular
    files, untouched for ``max_age_seconds`` and whose process is gone (``alive(pid, None)``
    False); ``keep`` (the writer's own name) is never deleted. Every look-up and the unlink are
    relative to ``dir_fd`` and do not follow links. Returns the names deleted; errors skip a file.
    """
    from gpumem_tui.telemetry.probe_source import _FILE_RE

    now = time.time() if now is None else now
    removed: list[str] = []
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return removed
    for name in names:
        match = _FILE_RE.match(name)
        if not match or name == keep:
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and now - st.st_mtime > max_age_seconds
                    and not alive(int(match.group(1)), None)):
                os.unlink(name, dir_fd=dir_fd)
                removed.append(name)
        except OSError:
            continue
    return removed
