"""Steady-state CPU of the dashboard at 1 Hz (target: < 2 % of one core).

Runs the real app in a pseudo-terminal (so Textual renders and writes every frame) on a
synthetic 8 GPU x 64 process source whose values change every poll, waits for it to settle,
then measures the child's CPU time (user + system, from psutil) over the window.

    .venv/bin/python benchmarks/idle_cpu.py [--seconds 30] [--interval 1.0] [--gpus 8 --per-gpu 8]
        [--static] [--steady] [--live]

``--live`` uses the real LiveSource instead (NVML if present, else host processes).
Prints: cpu_percent_of_one_core, cpu_seconds, wall_seconds, rss_mib.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHILD = """
import sys
sys.path.insert(0, {bench!r})
from _pty_child import BusySource
from gpumem_tui.ui.launch import run_dashboard
live = {live!r}
run_dashboard(None if live else BusySource(*{shape!r}, static={static!r}, prefill={prefill!r}), interval={interval!r}, demo=False)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--live", action="store_true")
    parser.add_argument("--gpus", type=int, default=8, help="synthetic GPUs (default 8)")
    parser.add_argument("--per-gpu", type=int, default=8, help="synthetic processes per GPU (default 8)")
    parser.add_argument("--static", action="store_true", help="synthetic values never change (only time)")
    parser.add_argument("--steady", action="store_true",
                        help="date the first synthetic sample 300 s back, so the chart's default 300 s "
                             "window is already spanned (the state of a dashboard left running); "
                             "without it the first minutes are measured, while the time axis still grows")
    args = parser.parse_args()

    import psutil

    from _pty_child import drain, run_in_pty, stop

    bench = str(Path(__file__).resolve().parent)
    code = CHILD.format(bench=bench, live=args.live, interval=args.interval, shape=(args.gpus, args.per_gpu), static=args.static,
                       prefill=300.0 if args.steady else 0.0)
    os.environ["GPUMEM_TUI_CONFIG_DIR"] = "/nonexistent-gpumem-bench"
    pid, fd = run_in_pty(["-c", code], args.seconds)
    try:
        drain(fd, time.monotonic() + args.warmup)
        proc = psutil.Process(pid)
        c0 = proc.cpu_times()
        t0 = time.monotonic()
        drain(fd, t0 + args.seconds)
        c1 = proc.cpu_times()
        wall = time.monotonic() - t0
        rss = proc.memory_info().rss
    finally:
        stop(pid)
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    pct = 100.0 * cpu / wall
    source = "live" if args.live else f"synthetic {args.gpus} GPUs x {args.gpus * args.per_gpu} processes " + (
        " (values constant)" if args.static else " (all values change every poll)") + (
        ", chart window already spanned (--steady)" if args.steady else ", first minute (chart axis still growing)")
    print(f"source: {source}, interval {args.interval} s")
    print(f"cpu_seconds: {cpu:.3f}")
    print(f"wall_seconds: {wall:.1f}")
    print(f"cpu_percent_of_one_core: {pct:.2f}  (target < 2.0)")
    print(f"rss_mib: {rss / 2**20:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
