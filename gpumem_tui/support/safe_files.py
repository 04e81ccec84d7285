"""Bounded reads of files a user names (configs, traces): regular files only, size-limited.

Headless, stdlib only. Every file this project reads from a path on the command line or in
a form goes through here, so that ``/dev/zero``, a FIFO, or a multi-gigabyte file gives one
clear error instead of a hang or a runaway read (issue 13, item 18):

- the file is opened ``O_NONBLOCK`` (opening a FIFO does not wait for a writer) and must be
  a regular file by ``fstat`` (not a FIFO, device, socket or directory);
- whole-file reads stop at a size limit that the error states;
- JSON nested deeper than Python's parser can recurse is an error, not a ``RecursionError``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

KiB = 1 << 10
MiB = 1 << 20

#: Largest model ``config.json`` read (bytes). Real ones are a few KiB (Llama-3.1-405B's is
#: under 2 KiB); the limit leaves room for configs that embed long lists.
CONFIG_JSON_LIMIT = 4 * MiB

#: Largest gpumem-tui TOML config read (bytes).
TOML_LIMIT = 1 * MiB


class FileRefused(OSError):
    """A file that is not read: not a regular file, or over a size limit. ``str()`` says
    why in one line (without the path: callers name it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def format_limit(limit: int) -> str:
    """4194304 -> "4 MiB" (binary units, as on screen)."""
    if limit % MiB == 0:
        return f"{limit // MiB} MiB"
    if limit % KiB == 0:
        return f"{limit // KiB} KiB"
    return f"{limit} bytes"


def open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of ``path`` (blocking mode restored) when it is a regular file.

    Raises:
        FileRefused: a FIFO, device, socket or directory.
        OSError: it cannot be opened (missing, permissions).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"not a regular file ({_kind(st.st_mode)})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular_binary(path: str | os.PathLike[str]):  # noqa: ANN201 - a BufferedReader
    """:func:`open_regular` as a binary file object (``with`` closes it)."""
    return open(open_regular(path), "rb")  # noqa: SIM115 - the caller closes it


def read_bytes(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole content of a regular file of at most ``limit`` bytes.

    Raises:
        FileRefused: not a regular file, or larger than ``limit`` (the message states it).
        OSError: it cannot be opened or read.
    """
    with open_regular_binary(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise FileRefused(f"{format_limit(size) if size % KiB == 0 else f'{size} bytes'} is over the "
                              f"{format_limit(limit)} limit for this file")
        data = handle.read(limit + 1)  # the file may have grown since fstat
    if len(data) > limit:
        raise FileRefused(f"over the {format_limit(limit)} limit for this file")
    return data


def loads_json(data: str | bytes) -> Any:
    """``json.loads`` where nesting too deep for the parser is a ``ValueError`` like any
    other malformed JSON (``json.JSONDecodeError`` passes through unchanged).

    Raises:
        ValueError: not JSON, or nested too deeply.
    """
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def read_json(path: str | os.PathLike[str], limit: int = CONFIG_JSON_LIMIT) -> Any:
    """A regular JSON file of at most ``limit`` bytes, parsed.

    Raises:
        FileRefused: not a regular file, or over ``limit``.
        OSError: unreadable. UnicodeDecodeError: not UTF-8.
        ValueError: not JSON (``json.JSONDecodeError`` with its line) or nested too deeply.
    """
    return loads_json(read_bytes(Path(path), limit).decode("utf-8"))


def user_name(uid: int) -> str:
    """``"alice (uid 1000)"`` for messages about who owns a file (``"uid 1000"`` if unknown)."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def group_is_private(gid: int) -> bool:
    """True when group ``gid`` is this user's private group (a "user private group", the
    default on Debian/Ubuntu with umask 002): named like the user, the user's primary group,
    and with no other member. Writable by such a group is writable by this user only -- the
    exception OpenSSH's StrictModes makes too."""
    try:
        import grp
        import pwd

        me = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == me.pw_gid and group.gr_name == me.pw_name and set(group.gr_mem) <= {me.pw_name}
