"""``gpumem-tui demo``: run the built-in training job and watch it (or record it headless).

The job (``gpumem_tui.demo.job``: a small GPT-2-style LM, AdamW, random tokens; CUDA when
there is one, else the CPU) runs as a child process with the probe attached, writing to its
own probe directory, so the dashboard (or the recorder) shows exactly that job. This process
never imports torch (only :func:`importlib.util.find_spec` checks it is installed).

    gpumem-tui demo                                       # dashboard on the job
    gpumem-tui demo --headless --steps 5 --record t.jsonl # no UI: record the job, then exit

Exit codes: 0 done, 1 the job failed (the end of its log is printed), 2 bad input.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from gpumem_tui.support.cli_support import InputError, OneLineParser, non_negative_int, positive_int, positive_seconds
from gpumem_tui.support.text import print_error


from gpumem_tui.demo.process import DemoError, start_demo_job


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
        print_error("gpumem-tui demo", exc)
        return 2
    if args.headless:
        return _headless(args, job_args)
    return _interactive(args, job_args)


def _interactive(args: argparse.Namespace, job_args: list[str]) -> int:
    try:
        job = start_demo_job(steps=args.steps or 0, device=args.device, model=args.model, extra_args=job_args)
    except DemoError as exc:
        print_error("gpumem-tui demo", exc)
        return 1
    try:
        from gpumem_tui.telemetry.live import LiveSource
        from gpumem_tui.ui.launch import run_dashboard_command

        return run_dashboard_command(
            "gpumem-tui demo",
            source=LiveSource(job.probe_dir),
            interval=args.interval or 1.0,
            theme=args.theme,
            select_pid=job.pid,
            demo_job=job,
            banner=f"built-in demo: training job PID {job.pid}",
        )
    except KeyboardInterrupt:  # while the live source opens (the dashboard's own is handled there)
        return 0
    finally:
        job.stop()


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
            print_error("gpumem-tui demo", f"cannot write {args.record}: {exc.strerror or exc}")
            return 2
    try:
        job = start_demo_job(steps=steps, device=args.device, model=args.model, pause=0.0, nice=0, extra_args=job_args)
    except DemoError as exc:
        if recorder is not None:
            recorder.close()
        print_error("gpumem-tui demo", exc)
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
    from gpumem_tui.support.units import format_bytes

    print(f"demo job PID {job.pid}: {samples} probe samples, {marks} phase marks, peak {format_bytes(peak)} "
          f"({figure})")
    if recorder is not None:
        print(f"trace: {args.record.resolve()} ({snapshots} snapshots)")
    return 1 if failed else 0
