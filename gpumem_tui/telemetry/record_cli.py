"""``gpumem-tui record -o trace.jsonl [--interval S] [--duration S]``: the headless recorder.

Polls the live source (NVML + psutil + probe streams; without NVML, host processes and probes)
and appends each Snapshot to a JSONL trace (:class:`gpumem_tui.telemetry.replay.TraceRecorder`)
until ``--duration`` or Ctrl-C / SIGTERM. Exit codes: 0 ok, 2 bad input or an unwritable trace
(one line on stderr). Neither Textual nor torch is imported.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpumem_tui.support.cli_support import OneLineParser, positive_seconds, run_parsed
from gpumem_tui.support.text import print_error


def main(argv: Sequence[str]) -> int:
    """``gpumem-tui record ARGS``: returns the exit code (2 with one line on stderr for bad input)."""
    return run_parsed("record", _parser(), argv, _record)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="gpumem-tui record")
    parser.description = "Record samples and phase marks to a JSONL trace, without the UI."
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="TRACE", help="trace file to write")
    parser.add_argument("--interval", type=positive_seconds, default=1.0, metavar="SECONDS",
                        help="seconds between samples [1.0]")
    parser.add_argument("--duration", type=positive_seconds, default=None, metavar="SECONDS",
                        help="stop after this long (default: until Ctrl-C / SIGTERM)")
    parser.add_argument("--probe-dir", type=Path, default=None, help="probe stream directory (default: the usual)")
    parser.add_argument("--fsync", action="store_true", help="fsync every line (survives a power cut)")
    parser.add_argument("--quiet", action="store_true", help="no summary line")
    return parser


def record(source: Any, output: Path, *, interval: float, duration: float | None = None,
           stop: threading.Event | None = None, fsync: bool = False) -> int:
    """Poll ``source`` every ``interval`` seconds and append each Snapshot to ``output``
    until ``duration`` seconds passed or ``stop`` is set. Returns the number of snapshots.

    Raises:
        OSError: the trace cannot be created or written.
    """
    from gpumem_tui.telemetry.replay import TraceRecorder

    stop = stop or threading.Event()
    started = time.monotonic()
    with TraceRecorder(output, fsync=fsync, header={"interval": interval, "source": type(source).__name__}) as rec:
        next_at = started
        while not stop.is_set():
            rec.write(source.poll())
            if duration is not None and time.monotonic() - started >= duration:
                break
            next_at += interval
            stop.wait(max(0.0, next_at - time.monotonic()))
        return rec.lines


def _record(args: argparse.Namespace) -> int:
    if args.output.is_dir():
        print_error("gpumem-tui record", f"{args.output} is a directory")
        return 2
    from gpumem_tui.telemetry.live import LiveSource

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    source = LiveSource(args.probe_dir)
    try:
        if not args.quiet and not source.nvml_available:
            print(f"gpumem-tui record: no NVML ({source.nvml_error}); recording host processes and probes",
                  file=sys.stderr)
        lines = record(source, args.output, interval=args.interval, duration=args.duration, stop=stop,
                       fsync=args.fsync)
    except OSError as exc:
        print_error("gpumem-tui record", f"cannot write {args.output}: {exc.strerror or exc}")
        return 2
    finally:
        source.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not args.quiet:
        print(f"trace: {args.output.resolve()} ({lines} snapshots)")
    return 0
