"""What each poll repaints, and the process CPU it costs, with no terminal in the way.

Runs the dashboard headless (Textual's ``run_test``; everything but writing to a terminal)
on the same synthetic 8 GPU x 64 process source as ``idle_cpu.py``, and after a warm-up
prints, per poll: the process CPU time (both threads: the poll's and the UI's), and for each
widget Textual painted, the lines it drew again (not served from Textual's line cache) and
the wall time of its ``render_lines`` (wall time: a garbage collection or the poll thread
holding the GIL lands on whichever widget was drawing). Finer-grained than ``idle_cpu.py`` (process CPU in
milliseconds instead of clock ticks), so two versions can be compared on a busy machine;
``idle_cpu.py`` stays the figure of record (it includes writing frames to a terminal).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/idle_repaint.py [--seconds 20] [--steady]
        [--width 160 --height 48]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=6.0)
    parser.add_argument("--steady", action="store_true",
                        help="date the first sample 300 s back: the chart's window is already spanned")
    parser.add_argument("--width", type=int, default=160)
    parser.add_argument("--height", type=int, default=48)
    args = parser.parse_args()
    os.environ.setdefault("GPUMEM_TUI_CONFIG_DIR", "/nonexistent-gpumem-bench")

    from textual.widget import Widget

    from _pty_child import BusySource
    from gpumem_tui.ui.app import GpuMemApp

    lines: collections.Counter[str] = collections.Counter()
    seconds: collections.Counter[str] = collections.Counter()
    polls = [0]
    render_lines = Widget.render_lines

    def counted_render_lines(widget: Widget, crop):  # noqa: ANN001, ANN202
        cache = widget._styles_cache  # lines not cached (or marked dirty) are drawn again
        drawn = sum(1 for y in crop.line_range if y in cache._dirty_lines or y not in cache._cache)
        started = time.perf_counter()
        try:
            return render_lines(widget, crop)
        finally:
            name = type(widget).__name__ + (f"#{widget.id}" if widget.id else "")
            lines[name] += drawn
            seconds[name] += time.perf_counter() - started

    apply_snapshot = GpuMemApp.apply_snapshot

    def counted_apply(app: GpuMemApp, snap) -> None:  # noqa: ANN001
        polls[0] += 1
        apply_snapshot(app, snap)

    Widget.render_lines = counted_render_lines  # type: ignore[method-assign]
    GpuMemApp.apply_snapshot = counted_apply  # type: ignore[method-assign]

    async def run() -> tuple[int, float]:
        app = GpuMemApp(BusySource(8, 8, prefill=300.0 if args.steady else 0.0), interval=1.0, theme="dark")
        async with app.run_test(size=(args.width, args.height)):
            await asyncio.sleep(args.warmup)
            lines.clear()
            seconds.clear()
            first, cpu = polls[0], time.process_time()
            await asyncio.sleep(args.seconds)
            return polls[0] - first, time.process_time() - cpu

    count, cpu = asyncio.run(run())
    if not count:
        print("no poll in the window")
        return 1
    print(f"polls: {count}, {'chart window spanned (--steady)' if args.steady else 'first minute'}, "
          f"{args.width}x{args.height}")
    print(f"process_cpu_ms_per_poll: {1000 * cpu / count:.2f}")
    print("widget: lines drawn again per poll, render_lines ms per poll")
    for name, spent in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"  {name:28s} {lines[name] / count:6.1f} {1000 * spent / count:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
