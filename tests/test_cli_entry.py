"""The ``gpumem-tui`` command itself, run as a user runs it (a subprocess, a pseudo-terminal):
``--help``, ``--version``, an unknown subcommand, the launch without an NVIDIA driver that
starts the built-in demo (what scripts/dashboard.sh does on a GPU-less machine), and ``replay``.

The pty runs wait for what they look for on the screen; their deadlines only stop a run that
never gets there (a failure), they are no speed target.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import psutil
import pytest

from gpumem_tui import __version__
from gpumem_tui.cli import SUBCOMMANDS
from gpumem_tui.telemetry.model import DeviceSample, ProcessSample, ProcessType, Snapshot
from gpumem_tui.telemetry.replay import TraceRecorder
from gpumem_tui.support.units import GiB

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
_ANSI = re.compile(rb"\x1b\[[0-9;?<>=$]*[A-Za-z~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>78]")


def _env(tmp_path: Path, pythonpath: list[Path] | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in [*(pythonpath or []), ROOT]),
               GPUMEM_TUI_CONFIG_DIR=str(tmp_path / "cfg"), TERM="xterm-256color", COLUMNS="160", LINES="48")
    env.pop("CI", None)  # not read by the command; keeps its environment the user's
    return env


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpumem_tui", *args], capture_output=True, text=True,
                          timeout=120, env=_env(tmp_path), cwd=tmp_path)


def test_help_lists_every_subcommand(tmp_path):
    proc = _run(tmp_path, "--help")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("usage: gpumem-tui [SUBCOMMAND] [OPTIONS]")
    listed = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(SUBCOMMANDS)


def test_the_program_exits_with_its_code_and_leaves_its_heap_to_the_os(tmp_path):
    """``python -m gpumem_tui``: the subcommand's exit code, and the heap frozen (gc.freeze, see
    gpumem_tui/support/shutdown.py) by the time atexit handlers run, so the interpreter's
    shutdown does not free a loaded torch object by object."""
    code = ("import atexit, gc, runpy\n"
            "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
            "runpy.run_module('gpumem_tui', run_name='__main__')\n")
    for args, exit_code in ((["--version"], 0), (["bogus"], 2)):
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                              timeout=120, env=_env(tmp_path), cwd=tmp_path)
        assert proc.returncode == exit_code, proc.stderr
        assert proc.stdout.splitlines()[-1] == "frozen at exit: True"


def test_version_is_the_package_version(tmp_path):
    proc = _run(tmp_path, "--version")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == f"gpumem-tui {__version__}\n"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'\nversion = "{__version__}"\n' in pyproject  # one version, not two that drift


def test_unknown_subcommand_is_one_line_exit_2(tmp_path):
    proc = _run(tmp_path, "estimat", "gpt2")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("gpumem-tui: unknown subcommand 'estimat' (choose from dashboard, snapshot, ")


class _Pty:
    """A command in a 160x48 pseudo-terminal; :meth:`wait_for` reads its screen output."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: becomes the command
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
        self.raw = b""
        self.status: int | None = None

    def text(self) -> str:
        """What was written so far: escape sequences (colour changes inside a line, cursor
        moves) as spaces, then every run of spaces as one."""
        return re.sub(r"[ \t]+", " ", _ANSI.sub(b" ", self.raw).decode("utf-8", "replace"))

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], wait)
        if ready:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            self.raw += chunk
            return bool(chunk)
        return True

    def wait_for(self, *words: str, deadline: float = 60.0) -> str:
        """Read until every word is on the screen; fail (with the screen) if it never is."""
        end = time.monotonic() + deadline
        while not all(w in self.text() for w in words):
            if time.monotonic() > end or not self._read(0.2):
                missing = [w for w in words if w not in self.text()]
                pytest.fail(f"never shown: {missing}; screen text: {self.text()[-3000:]!r}")
        return self.text()

    def quit(self, deadline: float = 60.0) -> int:
        """Press q; return the exit code once the command has ended."""
        os.write(self.fd, b"q")
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            self._read(0.1)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
                return os.waitstatus_to_exitcode(status)
        pytest.fail(f"did not exit after q; screen text: {self.text()[-2000:]!r}")

    def kill(self) -> None:
        if self.status is None:
            for proc in psutil.Process(self.pid).children(recursive=True) + [psutil.Process(self.pid)]:
                proc.send_signal(signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.fixture
def in_pty():
    started: list[_Pty] = []

    def _start(argv: list[str], env: dict[str, str], cwd: Path) -> _Pty:
        started.append(_Pty(argv, env, cwd))
        return started[-1]

    yield _start
    for run in started:
        run.kill()


def test_without_a_driver_the_dashboard_says_so_and_runs_the_demo(tmp_path, in_pty):
    """scripts/dashboard.sh on a machine without an NVIDIA driver: ``gpumem-tui`` says in one
    line that NVML is not available, starts the built-in demo job (a child process) and shows
    it; q ends both. The child's ``pynvml`` is the fake whose nvmlInit fails as the real one
    does without a driver (NVMLError_LibraryNotFound), so the test means the same on a GPU box."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pynvml.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "from fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeNvml\n"
        "_fake = FakeNvml(gpus=0)\n"
        "_fake.init_error = NVML_ERROR_LIBRARY_NOT_FOUND\n"
        "sys.modules[__name__] = _fake.module\n")
    run = in_pty([sys.executable, "-m", "gpumem_tui", "--interval", "0.5"], _env(tmp_path, [shim]), tmp_path)
    screen = run.wait_for("NVML not available: NVML Shared Library Not Found", "built-in demo: CPU training job PID")
    notice = next(line for line in screen.splitlines() if "NVML not available:" in line)
    assert "Traceback" not in screen and notice.count("NVML not available") == 1
    demo_pid = int(re.search(r"built-in demo: CPU training job PID (\d+) \(no GPU here\)", screen).group(1))
    demo = psutil.Process(demo_pid)
    assert demo in psutil.Process(run.pid).children(recursive=True)
    assert demo.cmdline()[1:3] == ["-m", "gpumem_tui.demo.job"]
    run.wait_for(f"{demo_pid} ")  # the job's row in the process table
    assert run.quit() == 0
    demo.wait(timeout=30)  # psutil.TimeoutExpired if the job outlives the dashboard
    assert not demo.is_running()


def test_replay_opens_the_dashboard_on_the_trace(tmp_path, in_pty):
    trace = tmp_path / "night_run.jsonl"
    with TraceRecorder(trace) as rec:
        for i in range(4):
            rec.write(Snapshot(
                time=1000.0 + i, driver_version="550.54.15", cuda_driver_version="12.4",
                devices=(DeviceSample(0, "NVIDIA H100 80GB HBM3", "GPU-0", 80 * GiB, (10 + i) * GiB, 50.0, 60.0,
                                      300.0, 700.0),),
                processes=(ProcessSample(4242, 0, ProcessType.COMPUTE, (8 + i) * GiB, 40.0, "alice",
                                         "python replay_marker_job.py"),)))
    run = in_pty([sys.executable, "-m", "gpumem_tui", "replay", str(trace), "--speed", "4"], _env(tmp_path),
                 tmp_path)
    screen = run.wait_for("replay of night_run.jsonl", "replay_marker_job.py", "NVIDIA H100 80GB HBM3")
    assert "Traceback" not in screen
    assert run.quit() == 0
