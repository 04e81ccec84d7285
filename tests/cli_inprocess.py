"""Run ``gpumem-tui ARGS`` in the test process: the same dispatcher (:func:`gpumem_tui.cli.main`),
the same output, the same exit code, without a child interpreter.

A child ``python -m gpumem_tui`` costs CPU for the interpreter and the imports (measured here,
bytecode cached: ~0.2 s for estimate, compare, replay or fleet refusing input; ~4 s for a measure
run that imports torch) and the suite started dozens of them only to read a subcommand's output
and exit code. Tests about the
real entry point (``python -m``, signals, a terminal, a crash's exit status) keep their child
processes; tests/test_cli_entry.py covers ``--help``, ``--version``, an unknown subcommand, the
dashboard and replay end to end.

``run_cli`` returns a :class:`subprocess.CompletedProcess`, so a test reads ``returncode``,
``stdout`` and ``stderr`` as it did with ``subprocess.run(..., capture_output=True, text=True)``.
An uncaught exception is NOT turned into exit 1 with a traceback: it propagates and fails the
test, which is what a child's traceback made the test do as well (no test expects a crash).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping

from gpumem_tui.cli import main


class _Capture(io.TextIOWrapper):
    """A text stream with a ``buffer`` (as sys.stdout has) that is never a terminal."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", newline="\n", write_through=True)

    def text(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode("utf-8")

    def isatty(self) -> bool:
        return False


class _Routed:
    """Stands in for ``sys.stdout`` / ``sys.stderr`` during a call: what the command's thread writes
    goes to the capture, what other threads write (a fake server's request thread in the test)
    to the stream as it was -- as another process's output never lands in a child's pipes."""

    def __init__(self, capture: _Capture, original) -> None:
        self._capture, self._original, self.ident = capture, original, threading.get_ident()

    def __getattr__(self, name: str):
        return getattr(self._capture if threading.get_ident() == self.ident else self._original, name)


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    """Replace ``os.environ`` by ``env`` for the call (as ``subprocess.run(env=...)`` does)."""
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _call(args: list[str], result: dict, streams: tuple[_Routed, _Routed]) -> None:
    for stream in streams:
        stream.ident = threading.get_ident()
    try:
        result["code"] = main(args)
    except SystemExit as exc:  # argparse: --help (0) and usage errors (2)
        result["code"] = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # noqa: BLE001 -- raised again in the test's thread
        result["error"] = exc


def run_cli(*args: str, env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess:
    """``gpumem-tui *args`` in this process: its exit code (``SystemExit`` from argparse included),
    stdout and stderr as text; ``env`` replaces the environment and ``cwd`` the working directory
    for the call; stdin is empty (as ``stdin=DEVNULL``).

    With ``timeout`` (seconds) the command runs in a daemon thread and a command still running
    then raises :class:`subprocess.TimeoutExpired`, as ``subprocess.run`` does (a reader that
    blocks, e.g. on a FIFO, fails the test instead of hanging the suite)."""
    out, err = _Capture(), _Capture()
    streams = (_Routed(out, sys.stdout), _Routed(err, sys.stderr))
    result: dict = {}
    old_stdin = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        with _environment(env), contextlib.chdir(cwd or os.getcwd()), contextlib.redirect_stdout(streams[0]), \
                contextlib.redirect_stderr(streams[1]):
            if timeout is None:
                _call(list(args), result, streams)
            else:
                worker = threading.Thread(target=_call, args=(list(args), result, streams), daemon=True)
                worker.start()
                worker.join(timeout)
                if worker.is_alive():
                    raise subprocess.TimeoutExpired(["gpumem-tui", *args], timeout)
    finally:
        sys.stdin = old_stdin
    if "error" in result:
        raise result["error"]
    return subprocess.CompletedProcess(["gpumem-tui", *args], result["code"], out.text(), err.text())
