"""Process CPU per poll-and-repaint cycle, on a clock of the benchmark's own (A/B comparisons).

``idle_cpu.py`` (the figure of record, in a terminal) and ``idle_repaint.py`` run on the wall
clock: what a poll draws depends on when it lands (the chart redraws once its curve moved a
cell, the watchdog ticks every 2 s), so two runs of the same code differ by more than the
changes worth measuring on a busy shared machine. Here the same synthetic 8 GPU x 64 process
source (``_pty_child.BusySource``) is dated one second apart per poll whatever the wall clock
says, the app's own poller is stopped, and each snapshot goes through the same message the
poller posts (``SnapshotReady``), followed by a short pause in which Textual paints the frame.
Every run then draws the same frames; the process CPU time (all threads) over the measured
polls is divided by their number. Headless (``run_test``): no terminal output is counted.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/idle_polls.py [--polls 60] [--gap 0.05] [--steady]

Compare two versions by running them alternately, several times each, and report the load
average with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=60, help="polls measured (after --warm-polls)")
    parser.add_argument("--warm-polls", type=int, default=10)
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds for the app to settle first")
    parser.add_argument("--gap", type=float, default=0.05, help="wall seconds between two polls (frames paint)")
    parser.add_argument("--steady", action="store_true",
                        help="the first sample 300 s back: the chart's window is already spanned")
    args = parser.parse_args()
    os.environ.setdefault("GPUMEM_TUI_CONFIG_DIR", "/nonexistent-gpumem-bench")

    from _pty_child import BusySource
    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.poller import SnapshotReady

    # the last measured poll lands about now; without --steady the history spans under a minute
    first = time.time() - (300.0 if args.steady else args.warm_polls + args.polls + 10)
    source = BusySource(8, 8)
    polled = [0]
    busy_poll = source.poll

    def dated_poll():  # noqa: ANN202 -- one second of history per poll
        polled[0] += 1
        return dataclasses.replace(busy_poll(), time=first + polled[0])

    source.poll = dated_poll  # type: ignore[method-assign]

    async def run() -> float:
        app = GpuMemApp(source, interval=1000.0, theme="dark")  # its poller polls once, then waits
        async with app.run_test(size=(160, 48)):
            await asyncio.sleep(args.warmup)
            app.poller.stop()

            async def one_poll() -> None:
                app.post_message(SnapshotReady(source.poll(), 0.01))
                await asyncio.sleep(args.gap)

            for _ in range(args.warm_polls):
                await one_poll()
            started = time.process_time()
            for _ in range(args.polls):
                await one_poll()
            return time.process_time() - started

    cpu = asyncio.run(run())
    print(f"polls: {args.polls}, {'chart window spanned (--steady)' if args.steady else 'first minute'}, 160x48")
    print(f"process_cpu_ms_per_poll: {1000 * cpu / args.polls:.2f}")
    print(f"load_average: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
