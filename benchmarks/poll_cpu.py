"""CPU of one dashboard poll, measured in-process: a figure other processes barely move.

``idle_cpu.py`` measures the dashboard as a user runs it (a pty, 1 Hz) against a minimal
Textual app; its wall-clock ratio moves with the machine's load (a shared 2-core machine gave
1.2-2.8 % for the same code). This one drives the same synthetic source (8 GPUs x 64
processes, every value changing, the chart's 300 s window already spanned as ``--steady``;
with ``--growing``, the first minute instead: the chart's time axis still growing and the plot
drawn again every poll, as ``idle_cpu.py`` without ``--steady``) through the app headless at
160 x 48, one poll at a time: each poll's snapshot is applied and the frame drawn (Textual's
compositor runs; only the terminal write is skipped), snapshot time advancing 1 s per poll,
the garbage collector frozen as ``run_dashboard`` does. It prints the process CPU per poll;
with ``--instructions`` the instructions per poll counted by valgrind's callgrind, switched on
only around the measured polls (``callgrind_control``): the figure to compare two versions by
(two runs of the same code came within 2 %, at any load; ~4 minutes a run on the 2-core
helper machine).

    .venv/bin/python benchmarks/poll_cpu.py [--polls 30] [--warmup 20] [--growing] [--instructions]

Prints: cpu_ms_per_poll (or instructions_per_poll).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


async def _one_poll(app, source) -> None:  # noqa: ANN001
    """Apply one snapshot and wait until its frame is drawn (nothing left dirty)."""
    app.apply_snapshot(source.poll())
    for _ in range(500):
        await asyncio.sleep(0.02)
        screen = app.screen
        if not (screen._compositor._dirty_regions or screen._dirty_widgets or screen._repaint_required):
            break
    await asyncio.sleep(0.03)  # callbacks after the refresh (a deferred repaint) run too


def _stepped_source(growing: bool = False):  # noqa: ANN202
    """The benchmark's BusySource (first sample 300 s back; ``growing``: now), 1 s of snapshot
    time per poll."""
    from _pty_child import BusySource

    source = BusySource(8, 8, prefill=0.0 if growing else 300.0)
    clock = [time.time()]
    raw = source.poll

    def poll():  # noqa: ANN202
        snap = raw()
        if snap.time < clock[0] - 100:  # the prefilled first sample
            return snap
        clock[0] += 1.0
        return dataclasses.replace(snap, time=clock[0])

    source.poll = poll  # type: ignore[method-assign]
    return source


async def _measure(polls: int, warmup: int, marks: str | None, growing: bool = False) -> float:
    """CPU seconds of ``polls`` polls after ``warmup``; ``marks``: a folder where the start
    and end of the measured polls are signalled to (and acknowledged by) the parent."""
    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.themes import load_themes

    source = _stepped_source(growing)
    app = GpuMemApp(source, interval=3600.0, theme="dark", themes=load_themes())  # polls are driven here
    app.freeze_gc_after_start = True
    async with app.run_test(size=(160, 48)):
        for _ in range(400):
            await asyncio.sleep(0.05)
            if app.snapshot is not None and app.has_side_pane:
                break
        for _ in range(warmup):
            await _one_poll(app, source)
        await _signal(marks, "ready", "go")
        start = time.process_time()
        for _ in range(polls):
            await _one_poll(app, source)
        cpu = time.process_time() - start
        await _signal(marks, "end", "stop")
    return cpu


async def _signal(marks: str | None, mine: str, answer: str) -> None:
    if marks:
        Path(marks, mine).touch()
        while not Path(marks, answer).exists():
            await asyncio.sleep(0.2)


def _count_instructions(polls: int, warmup: int, growing: bool = False) -> int:
    """Instructions of the measured polls, run under callgrind in a child."""
    with tempfile.TemporaryDirectory() as marks:
        out = Path(marks, "callgrind.out")
        child = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", sys.executable,
             __file__, "--polls", str(polls), "--warmup", str(warmup), "--marks", marks,
             *(["--growing"] if growing else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for mine, answer, switch in (("ready", "go", "on"), ("end", "stop", "off")):
            while not Path(marks, mine).exists():
                if child.poll() is not None:
                    raise SystemExit("poll_cpu: the child under valgrind ended early")
                time.sleep(0.5)
            subprocess.run(["callgrind_control", "-i", switch, str(child.pid)], check=True, capture_output=True)
            Path(marks, answer).touch()
        child.wait()
        totals = [line for line in out.read_text().splitlines() if line.startswith("totals:")]
        return int(totals[0].split()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--instructions", action="store_true", help="count instructions under valgrind's callgrind")
    parser.add_argument("--growing", action="store_true",
                        help="the first minute (the chart's time axis still growing) instead of --steady's spanned window")
    parser.add_argument("--marks", default=None, help=argparse.SUPPRESS)  # the child of --instructions
    args = parser.parse_args()
    os.environ["GPUMEM_TUI_CONFIG_DIR"] = "/nonexistent-gpumem-bench"
    if args.instructions:
        total = _count_instructions(args.polls, args.warmup, args.growing)
        print(f"instructions_per_poll: {total / args.polls / 1e6:.2f} M  ({args.polls} polls)")
        return 0
    cpu = asyncio.run(_measure(args.polls, args.warmup, args.marks, args.growing))
    print(f"cpu_ms_per_poll: {1000 * cpu / args.polls:.2f}  ({args.polls} polls, load {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
