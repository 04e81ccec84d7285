"""What an alert does outside the dashboard: the command hook, the desktop notification, the log.

Headless (stdlib + platformdirs). Every program runs from an argument list (never a shell), in
its own session (so a timeout kills its children too), with stdin and stdout closed, on a
daemon thread: the dashboard's thread never waits for one. A program that runs past its
timeout is killed (SIGKILL to its process group); one that fails to start, exits non-zero or
is killed is logged, and ``on_problem`` gets one line. At most :data:`MAX_RUNNING` run at
once; an alert beyond that is logged and its hook not run (a hook that hangs on every alert
must not pile up processes). :meth:`HookRunner.close` (the dashboard quits) kills those still
running: no timeout would end them after that.

The log is ``<user cache dir>/alerts.log`` (beside the crash reports, gpumem_tui.support.crash), mode
0600, kept under :data:`LOG_LIMIT` bytes by moving it to ``alerts.log.1`` when full.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gpumem_tui.alerts.evaluate import Alert
from gpumem_tui.support.text import printable

MAX_RUNNING = 4
LOG_LIMIT = 1 << 20
STDERR_KEPT = 400  # characters of a failed hook's stderr that go into the log line
DESKTOP_TIMEOUT_SECONDS = 5.0
DESKTOP_SESSION_VARS = ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")


def hook_environment(alert: Alert, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The hook's environment: ``base`` (default ``os.environ``) plus

    GPUMEM_ALERT_RULE (the rule's name), GPUMEM_ALERT_KIND (memory_above, ...),
    GPUMEM_ALERT_SUBJECT ("GPU 0", "PID 1234", "NVML"), GPUMEM_ALERT_GPU, GPUMEM_ALERT_PID (empty
    when not applicable), GPUMEM_ALERT_VALUE, GPUMEM_ALERT_THRESHOLD (empty when the rule has
    none), GPUMEM_ALERT_UNIT ("%", "bytes", "s", "bytes/step", ""), GPUMEM_ALERT_MESSAGE (the
    notice's text, printable), GPUMEM_ALERT_TIME (epoch seconds).
    """
    env = dict(os.environ if base is None else base)
    env.update({
        "GPUMEM_ALERT_RULE": alert.rule.name,
        "GPUMEM_ALERT_KIND": alert.rule.kind,
        "GPUMEM_ALERT_SUBJECT": alert.subject,
        "GPUMEM_ALERT_GPU": "" if alert.gpu is None else str(alert.gpu),
        "GPUMEM_ALERT_PID": "" if alert.pid is None else str(alert.pid),
        "GPUMEM_ALERT_VALUE": f"{alert.value:g}" if alert.unit != "bytes" else str(int(alert.value)),
        "GPUMEM_ALERT_THRESHOLD": "" if alert.threshold is None else (
            f"{alert.threshold:g}" if alert.unit != "bytes" else str(int(alert.threshold))),
        "GPUMEM_ALERT_UNIT": alert.unit,
        "GPUMEM_ALERT_MESSAGE": printable(alert.message, 1024),
        "GPUMEM_ALERT_TIME": f"{alert.time:.3f}",
    })
    return env


def desktop_command(env: Mapping[str, str] | None = None) -> list[str] | None:
    """``notify-send``'s path as a one-item list when this session can show desktop
    notifications (the program is on PATH and one of DISPLAY, WAYLAND_DISPLAY,
    DBUS_SESSION_BUS_ADDRESS is set), else None (e.g. over SSH)."""
    env = os.environ if env is None else env
    if not any(env.get(name) for name in DESKTOP_SESSION_VARS):
        return None
    program = shutil.which("notify-send", path=env.get("PATH"))
    return [program] if program else None


def alert_log_path() -> Path:
    """``<user cache dir of gpumem-tui>/alerts.log``."""
    from gpumem_tui.support.crash import crash_directory

    return crash_directory() / "alerts.log"


class AlertLog:
    """Appends one line per event to ``path`` (0600, rotated at :data:`LOG_LIMIT`); never
    raises (a log that cannot be written must not stop an alert)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else alert_log_path()
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        """Append ``"<UTC time> <line>"`` (line made printable, one line)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        text = f"{stamp} {printable(' '.join(line.split()), 2048)}\n"
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                if self.path.exists() and self.path.stat().st_size > LOG_LIMIT:
                    os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "a", encoding="utf-8") as handle:
                    handle.write(text)
            except OSError:
                pass


class HookRunner:
    """Runs hooks and desktop notifications off the caller's thread.

    Args:
        log: where outcomes are written.
        on_problem: called (from a worker thread) with one line when a program fails, hangs or
            is not run; the dashboard turns it into a notice.
        max_running: programs running at once, at most.
    """

    def __init__(self, log: AlertLog, on_problem: Callable[[str], None] | None = None,
                 max_running: int = MAX_RUNNING) -> None:
        self.log = log
        self.on_problem = on_problem
        self.max_running = max_running
        self._running = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._processes: set[subprocess.Popen[bytes]] = set()
        self._closed = False

    @property
    def running(self) -> int:
        """Programs running now."""
        with self._lock:
            return self._running

    def start(self, what: str, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> bool:
        """Run ``argv`` (``what`` names it in the log) on a daemon thread; False when
        :data:`MAX_RUNNING` already run (it is then logged and reported, not run)."""
        with self._lock:
            if self._closed:
                return False
            if self._running >= self.max_running:
                busy = True
            else:
                busy = False
                self._running += 1
        if busy:
            self._problem(f"{what} not run: {self.max_running} alert programs are still running")
            return False
        thread = threading.Thread(target=self._run, args=(what, list(argv), dict(env), timeout),
                                  name="gpumem-alert-hook", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return True

    def join(self, timeout: float | None = None) -> None:
        """Wait for the programs started so far (tests, and a clean exit)."""
        for thread in list(self._threads):
            thread.join(timeout)

    def close(self) -> None:
        """Kill the programs still running (with their children) and start no more: a hook
        must not outlive the dashboard that started it, where no timeout would end it."""
        with self._lock:
            self._closed = True
            running = list(self._processes)
        for process in running:
            _kill_group(process)

    def _track(self, process: subprocess.Popen[bytes], add: bool) -> None:
        with self._lock:
            if add:
                self._processes.add(process)
            else:
                self._processes.discard(process)
        if add and self._closed:  # closed while it started
            _kill_group(process)

    def _problem(self, line: str) -> None:
        self.log.write(line)
        if self.on_problem is not None:
            try:
                self.on_problem(line)
            except Exception:  # noqa: BLE001 - the dashboard may be closing; the log has it
                pass

    def _run(self, what: str, argv: list[str], env: dict[str, str], timeout: float) -> None:
        try:
            outcome = _run_killing_on_timeout(argv, env, timeout, self._track)
        except Exception as exc:  # noqa: BLE001 - any failure to start is logged, never raised
            outcome = f"could not start {printable(argv[0], 200)}: {type(exc).__name__}: {exc}"
        finally:
            with self._lock:
                self._running -= 1
        if outcome is None:
            self.log.write(f"{what}: ran {printable(argv[0], 200)}, exit status 0")
        else:
            self._problem(f"{what} failed: {outcome}")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``process``'s process group (its own session: the hook and its children)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        try:
            process.kill()
        except OSError:
            pass


def _run_killing_on_timeout(argv: list[str], env: dict[str, str], timeout: float,
                            track: Callable[[subprocess.Popen[bytes], bool], None]) -> str | None:
    """Run ``argv``; None on exit status 0, else why it failed (stderr's tail included).
    ``track(process, True)`` once it started, ``track(process, False)`` once it ended.

    Raises:
        OSError: it could not be started (not found, not executable).
    """
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: a grandchild holding it open cannot block us
        process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=stderr, start_new_session=True, close_fds=True)
        track(process, True)
        try:
            status = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.wait()
            return f"{printable(argv[0], 200)} killed after running past its {timeout:g} s timeout"
        finally:
            track(process, False)
        if status == 0:
            return None
        if status < 0:  # a signal: ours at close, or someone else's
            return f"{printable(argv[0], 200)} killed by signal {-status}"
        stderr.seek(0)
        tail = stderr.read()[-STDERR_KEPT * 4:].decode("utf-8", "replace")[-STDERR_KEPT:]
        said = f"; stderr: {printable(' '.join(tail.split()), STDERR_KEPT)}" if tail.strip() else ""
        return f"{printable(argv[0], 200)} exited with status {status}{said}"


class AlertActions:
    """The outside actions of fired alerts: log line, desktop notification, command hook.

    Args:
        log: the alert log (default :func:`alert_log_path`).
        on_problem: as for :class:`HookRunner`.
        env: the environment to read the desktop session from and to pass on (default
            ``os.environ``).
        run_programs: False (a replayed trace): alerts are logged, no program runs.
    """

    def __init__(self, log: AlertLog | None = None, on_problem: Callable[[str], None] | None = None,
                 env: Mapping[str, str] | None = None, run_programs: bool = True) -> None:
        self.log = log if log is not None else AlertLog()
        self.runner = HookRunner(self.log, on_problem)
        self.env = dict(os.environ if env is None else env)
        self.desktop = desktop_command(self.env)
        self.run_programs = run_programs
        self._said_no_desktop = False

    def handle(self, alert: Alert) -> None:
        """Log ``alert`` and start its desktop notification and hook (returns at once)."""
        rule = alert.rule
        self.log.write(f"alert {rule.name} {alert.subject}: {alert.message}")
        if not self.run_programs:
            if rule.command or rule.desktop:
                self.log.write(f"alert {rule.name}: a replayed trace runs no hook or desktop notification")
            return
        if rule.desktop:
            if self.desktop is not None:
                argv = [*self.desktop, "--app-name=gpumem-tui", "--", f"gpumem-tui: {rule.name}",
                        printable(alert.message, 1024)]
                self.runner.start(f"desktop notification of {rule.name} ({alert.subject})", argv, self.env,
                                  DESKTOP_TIMEOUT_SECONDS)
            elif not self._said_no_desktop:
                self._said_no_desktop = True
                self.log.write("desktop notifications: none in this session (needs notify-send on PATH and one of "
                               + ", ".join(DESKTOP_SESSION_VARS) + "); skipped")
        if rule.command:
            argv = [os.path.expanduser(rule.command[0]), *rule.command[1:]]
            self.runner.start(f"hook of rule {rule.name} ({alert.subject})", argv,
                              hook_environment(alert, self.env), rule.timeout_seconds)
