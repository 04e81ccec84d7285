"""Two throw-away local users for the shared-machine tests of issue 13 (items 14-16).

``two_users`` (a session fixture) creates them with ``useradd`` and removes them with
``userdel`` afterwards; it skips where the tests do not run as root or ``useradd`` is
missing. :func:`run_as` runs a function in a forked child that has switched to a user: the
interpreter of this project's venv may live where other users cannot read it, so the child
keeps the already imported modules instead of starting a new interpreter.
"""

from __future__ import annotations

import grp  # noqa: F401 -- see below
import os
import pickle
import pwd  # noqa: F401 -- see below
import secrets
import shutil
import subprocess
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


# The forked child of run_as cannot import a module from this interpreter's installation
# (under /root, unreadable to the user it switched to): what the code it runs imports lazily
# must be imported here first. safe_files.group_is_private imports grp and pwd on first use;
# without this a child's check answered "not private" (ImportError) unless an earlier test
# in the same worker had happened to import grp (a CI run failed on it).


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int


def _create(name: str) -> LocalUser:
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    return LocalUser(name, entry.pw_uid, entry.pw_gid)


@pytest.fixture(scope="session")
def two_users() -> Iterator[tuple[LocalUser, LocalUser]]:
    """(attacker, victim): two fresh unprivileged users, removed after the session."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create two local users")
    tag = secrets.token_hex(3)
    made: list[LocalUser] = []
    try:
        made.append(_create(f"gmt-att-{tag}"))
        made.append(_create(f"gmt-vic-{tag}"))
        yield made[0], made[1]
    finally:
        for user in made:
            subprocess.run(["userdel", "--force", user.name], capture_output=True)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A fresh directory every user can reach (``/tmp/gmt-...``, mode 0755, root's)."""
    path = Path(tempfile.mkdtemp(prefix="gmt-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_as(user: LocalUser, func: Callable[..., Any], *args: Any) -> Any:
    """``func(*args)`` in a forked child running as ``user``; its result (or its exception,
    re-raised here as RuntimeError with the child's traceback) comes back pickled."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        status = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
            try:
                payload = pickle.dumps(("ok", func(*args)))
            except BaseException:  # noqa: BLE001 - everything goes back to the parent
                payload = pickle.dumps(("error", traceback.format_exc()))
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        except BaseException:  # noqa: BLE001
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        data = handle.read()
    os.waitpid(pid, 0)
    if not data:
        raise RuntimeError(f"the child running as {user.name} died without a result")
    kind, value = pickle.loads(data)
    if kind == "error":
        raise RuntimeError(f"as {user.name}:\n{value}")
    return value
