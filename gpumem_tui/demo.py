"""``gpumem-tui demo``: run the built-in training job and watch it (or record it headless).

The job (``gpumem_tui.demo_job``: a small GPT-2-style LM, AdamW, random tokens; CUDA when
there is one, else the CPU) runs as a child process with the probe attached, writing to its
own probe directory, so the dashboard (or the recorder) shows exactly that job. This process
never imports torch (only :func:`importlib.util.find_spec` checks it is installed).

    gpumem-tui demo                                       # dashboard on the job
    gpumem-tui demo --headless --steps 5 --record t.jsonl # no UI: record the job, then exit

Exit codes: 0 done, 1 the job failed (the end of its log is printed), 2 bad input.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import gpumem_tui
from gpumem_tui.cli_support import InputError, OneLineParser, non_negative_int, positive_int, positive_seconds


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
        """The last lines of the job's output (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

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
    """Start ``python -m gpumem_tui.demo_job`` as a child process and return at once.

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
        python or sys.executable, "-m", "gpumem_tui.demo_job",
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


# -- CLI -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="gpumem-tui demo", description="Run the built-in training job and watch or record it.")
    parser.add_argument("--headless", action="store_true", help="no dashboard: run the job (and record it)")
    parser.add_argument("--steps", type=non_negative_int, default=None,
                        help="training steps (default: until you quit; headless: 10)")
    parser.add_argument("--record", type=Path, default=None, metavar="TRACE", help="record a trace (JSONL)")
    parser.add_argument("--interval", type=positive_seconds, default=None, metavar="SECONDS",
                        help="seconds between polls (default 1.0; headless 0.25)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--model", choices=("auto", "hf", "builtin"), default="auto",
                        help="hf: transformers GPT2LMHeadModel; builtin: the hand-written equivalent")
    parser.add_argument("--batch", type=positive_int, default=None, help="micro-batch size of the job")
    parser.add_argument("--seq", type=positive_int, default=None, help="sequence length of the job")
    parser.add_argument("--theme", default="dark", metavar="NAME", help="dashboard theme")
    parser.add_argument("--timeout", type=positive_seconds, default=None, metavar="SECONDS",
                        help="headless: stop the job after this long")
    return parser


def _job_args(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    for name in ("batch", "seq"):
        value = getattr(args, name)
        if value is not None:
            out += [f"--{name}", str(value)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``gpumem-tui demo``; returns the exit code."""
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        job_args = _job_args(args)
        if args.record is not None and not args.headless:
            raise InputError("--record needs --headless (in the dashboard, record with 'gpumem-tui record')")
        if args.record is not None and args.record.is_dir():
            raise InputError(f"--record {args.record} is a directory")
    except InputError as exc:
        print(f"gpumem-tui demo: {exc}", file=sys.stderr)
        return 2
    if args.headless:
        return _headless(args, job_args)
    return _interactive(args, job_args)


def _interactive(args: argparse.Namespace, job_args: list[str]) -> int:
    from gpumem_tui.crash import DashboardCrashed

    try:
        job = start_demo_job(steps=args.steps or 0, device=args.device, model=args.model, extra_args=job_args)
    except DemoError as exc:
        print(f"gpumem-tui demo: {exc}", file=sys.stderr)
        return 1
    try:
        from gpumem_tui.telemetry.live import LiveSource
        from gpumem_tui.ui.launch import run_dashboard

        source = LiveSource(job.probe_dir)
        run_dashboard(
            source=source,
            interval=args.interval or 1.0,
            theme=args.theme,
            select_pid=job.pid,
            demo_job=job,
            banner=f"built-in demo: training job PID {job.pid}",
        )
    except KeyboardInterrupt:
        pass
    except DashboardCrashed as exc:
        print(f"gpumem-tui demo: {exc}", file=sys.stderr)
        return 1
    finally:
        job.stop()
    return 0


def _headless(args: argparse.Namespace, job_args: list[str]) -> int:
    from gpumem_tui.telemetry.live import LiveSource
    from gpumem_tui.telemetry.replay import TraceRecorder

    steps = 10 if args.steps is None else args.steps
    interval = args.interval or 0.25
    recorder = None
    if args.record is not None:
        try:
            recorder = TraceRecorder(args.record, header={"interval": interval, "source": "gpumem-tui demo"})
        except OSError as exc:
            print(f"gpumem-tui demo: cannot write {args.record}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    try:
        job = start_demo_job(steps=steps, device=args.device, model=args.model, pause=0.0, nice=0, extra_args=job_args)
    except DemoError as exc:
        if recorder is not None:
            recorder.close()
        print(f"gpumem-tui demo: {exc}", file=sys.stderr)
        return 1

    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    source = LiveSource(job.probe_dir, host_limit=8)
    samples = marks = snapshots = 0
    peak = 0
    figure = "nothing measured"
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    code: int | None = None
    try:
        while True:
            ended = job.poll() is not None
            snap = source.poll()
            own = [p for p in snap.probes if p.pid == job.pid]
            samples += len(own)
            marks += sum(1 for m in snap.phase_marks if m.pid == job.pid)
            peak = max([peak, *(p.peak_allocated_bytes or p.allocated_bytes for p in own)])
            if own:
                figure = "torch max allocated" if own[-1].device == "cuda" else "CPU live tensors"
            if recorder is not None:
                recorder.write(snap)
                snapshots += 1
            if ended:  # this poll read what the job wrote before it exited
                break
            if stop.is_set() or (deadline is not None and time.monotonic() > deadline):
                job.stop(remove_dir=False)
                continue  # one more poll drains the stream
            stop.wait(interval)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        code = job.stop(remove_dir=False)
        source.close()
        if recorder is not None:
            recorder.close()
    failed = code not in (0, None) and not stop.is_set()
    if failed:
        print(f"gpumem-tui demo: the job exited with code {code}:\n{job.log_tail()}", file=sys.stderr)
    job.stop(remove_dir=True)
    from gpumem_tui.units import format_bytes

    print(f"demo job PID {job.pid}: {samples} probe samples, {marks} phase marks, peak {format_bytes(peak)} "
          f"({figure})")
    if recorder is not None:
        print(f"trace: {args.record.resolve()} ({snapshots} snapshots)")
    return 1 if failed else 0
