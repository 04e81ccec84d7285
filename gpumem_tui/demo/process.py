"""The built-in demo training job as a child process: start it, watch its state, stop it.

The job (``gpumem_tui.demo.job``: a small GPT-2-style LM, AdamW, random tokens; CUDA when
there is one, else the CPU) runs with the probe attached, writing to its own probe directory.
This process never imports torch (only :func:`importlib.util.find_spec` checks it is
installed). Used by ``gpumem-tui demo`` (:mod:`gpumem_tui.demo.cli`) and by the dashboard's
launcher when there is no GPU (:mod:`gpumem_tui.ui.launch`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import gpumem_tui

__all__ = ["DemoError", "DemoJob", "start_demo_job"]

class DemoError(RuntimeError):
    """The demo job cannot start (no torch, no Python to run it); one line for the user."""


class DemoJob:
    """A running demo training job (a child process).

    Attributes:
        pid: the child's PID (its probe stream is ``probe_dir/<pid>.jsonl``).
        probe_dir: the directory its probe writes to.
        log_path: its stdout/stderr.
    """

    def __init__(self, process: subprocess.Popen, probe_dir: Path, log_path: Path, owns_dir: bool) -> None:
        self.process = process
        self.pid = process.pid
        self.probe_dir = probe_dir
        self.log_path = log_path
        self._owns_dir = owns_dir
        self._stop_lock = threading.Lock()

    def poll(self) -> int | None:
        """The exit code once the job ended (reaps it), else None."""
        return self.process.poll()

    @property
    def running(self) -> bool:
        """True while the child runs."""
        return self.process.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the job to end; returns its exit code.

        Raises:
            subprocess.TimeoutExpired: still running after ``timeout`` seconds.
        """
        return self.process.wait(timeout)

    def log_tail(self, lines: int = 5) -> str:
        """The last ``lines`` lines of the job's output (for error messages), each made literal
        and cut to 400 characters (:func:`gpumem_tui.support.text.printable`): the log holds
        whatever torch, a library or the job printed, and is shown on the user's terminal."""
        from gpumem_tui.support.text import printable

        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(printable(line, 400) for line in text.strip().splitlines()[-lines:])

    def stop(self, timeout: float = 5.0, remove_dir: bool | None = None) -> int | None:
        """End the job: SIGTERM (it finishes its step and closes the probe), then SIGKILL
        after ``timeout`` seconds. Idempotent. Removes the probe directory if this object
        created it (``remove_dir`` overrides). Returns the exit code (None if unknown)."""
        with self._stop_lock:
            code = self.process.poll()
            if code is None:
                try:
                    self.process.send_signal(signal.SIGTERM)
                    code = self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    code = self.process.wait(timeout)
                except ProcessLookupError:
                    code = self.process.poll()
            if remove_dir if remove_dir is not None else self._owns_dir:
                shutil.rmtree(self.probe_dir, ignore_errors=True)
                self._owns_dir = False
            return code


def start_demo_job(
    *,
    steps: int = 0,
    probe_dir: str | os.PathLike[str] | None = None,
    device: str = "auto",
    model: str = "auto",
    pause: float = 0.2,
    nice: int = 5,
    extra_args: Sequence[str] = (),
    python: str | None = None,
) -> DemoJob:
    """Start ``python -m gpumem_tui.demo.job`` as a child process and return at once.

    Args:
        steps: training steps (0: until :meth:`DemoJob.stop`).
        probe_dir: the probe directory; default a new temporary directory that
            :meth:`DemoJob.stop` removes.
        device: auto | cpu | cuda. model: auto | hf | builtin (see ``demo_job``).
        pause: idle seconds between steps (the dashboard shows them as idle phases).
        nice: niceness increment of the job, so the dashboard stays responsive.
        extra_args: more ``demo_job`` arguments (e.g. ``["--batch", "2"]``).
        python: interpreter (default this one).

    The job exits by itself if this process dies (it watches its parent PID).

    Raises:
        DemoError: torch is not installed, or the child cannot be started.
    """
    if importlib.util.find_spec("torch") is None:
        raise DemoError("the demo job needs torch: pip install torch==2.13.0 'gpumem-tui[torch]'")
    owns = probe_dir is None
    directory = Path(tempfile.mkdtemp(prefix="gpumem-tui-demo-")) if owns else Path(probe_dir)  # type: ignore[arg-type]
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / "demo_job.log"
    env = dict(os.environ)
    env["GPUMEM_TUI_PROBE_DIR"] = str(directory)
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env["PYTHONUNBUFFERED"] = "1"
    # From a source checkout (not installed) the child must still find the package.
    package_root = str(Path(gpumem_tui.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    cmd = [
        python or sys.executable, "-m", "gpumem_tui.demo.job",
        "--steps", str(int(steps)), "--probe-dir", str(directory),
        "--device", device, "--model", model, "--pause", str(pause),
        "--nice", str(int(nice)), "--parent-pid", str(os.getpid()),
        *extra_args,
    ]
    try:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
    except OSError as exc:
        if owns:
            shutil.rmtree(directory, ignore_errors=True)
        raise DemoError(f"cannot start the demo job: {exc.strerror or exc}") from None
    return DemoJob(process, directory, log_path, owns)
