"""Steady-state CPU of the dashboard at 1 Hz (target: < 1.5 % of one core).

Runs the real app in a pseudo-terminal (so Textual renders and writes every frame) on a
synthetic 8 GPU x 64 process source whose values change every poll, waits for it to settle,
then measures the child's CPU time (user + system, from psutil) over the window. In the same
run, and measured the same way, a minimal Textual app (one Static whose text changes every
second) gives the floor any Textual app pays on this machine at this moment; the ratio of the
two is what stays comparable on a shared, noisy machine. The minimal app updates its Static the
usual way (``Static.update``, which by default also re-lays out the screen each second); the
dashboard's polls change no layout. Its figure varies with the machine's load (0.37-0.43 % of
a core measured on the 2-core helper machine, load 5-12), so compare ratios from runs made
alternately, and note the mode: without ``--steady`` the chart's time axis still grows and the
whole plot is drawn again every poll (the costlier case).

    .venv/bin/python benchmarks/idle_cpu.py [--seconds 30] [--interval 1.0] [--gpus 8 --per-gpu 8]
        [--static] [--steady] [--live] [--no-baseline] [--profile FILE]

``--live`` uses the real LiveSource instead (NVML if present, else host processes).
``--profile FILE`` writes a cProfile of the dashboard's main (UI) thread to FILE.
Prints: cpu_percent_of_one_core (dashboard and minimal app), ratio, cpu_seconds, wall_seconds,
rss_mib.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHILD = """
import sys
sys.path.insert(0, {bench!r})
if {profile!r}:
    import cProfile, os, signal
    _prof = cProfile.Profile()
    def _dump(signum, frame):
        _prof.disable()
        _prof.dump_stats({profile!r})
        os._exit(0)
    signal.signal(signal.SIGTERM, _dump)
    signal.signal(signal.SIGUSR1, lambda signum, frame: _prof.enable())  # sent after the warm-up
from _pty_child import BusySource
from gpumem_tui.ui.launch import run_dashboard
live = {live!r}
run_dashboard(None if live else BusySource(*{shape!r}, static={static!r}, prefill={prefill!r}), interval={interval!r}, demo=False)
"""

# The floor: the least a Textual app that changes what it shows once a second costs.
MINIMAL = """
import time
from textual.app import App
from textual.widgets import Static

class Minimal(App):
    def compose(self):
        yield Static(id="clock")

    def on_mount(self):
        self.set_interval({interval!r}, self.tick)

    def tick(self):
        self.query_one("#clock", Static).update(f"{{time.time():.0f}}")

Minimal().run()
"""


def measure(code: str, seconds: float, warmup: float, profile: bool = False) -> tuple[float, float, int]:
    """(cpu seconds, wall seconds, rss bytes) of ``python -c code`` in a pty after ``warmup``."""
    import psutil

    from _pty_child import drain, run_in_pty, stop

    pid, fd = run_in_pty(["-c", code], seconds)
    try:
        drain(fd, time.monotonic() + warmup)
        if profile:
            os.kill(pid, signal.SIGUSR1)
        proc = psutil.Process(pid)
        c0 = proc.cpu_times()
        t0 = time.monotonic()
        drain(fd, t0 + seconds)
        c1 = proc.cpu_times()
        wall = time.monotonic() - t0
        rss = proc.memory_info().rss
    finally:
        stop(pid)
    return (c1.user - c0.user) + (c1.system - c0.system), wall, rss


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
    parser.add_argument("--no-baseline", action="store_true", help="skip the minimal Textual app")
    parser.add_argument("--profile", default="", help="write a cProfile of the dashboard's UI thread here")
    args = parser.parse_args()

    bench = str(Path(__file__).resolve().parent)
    code = CHILD.format(bench=bench, live=args.live, interval=args.interval, shape=(args.gpus, args.per_gpu), static=args.static,
                       prefill=300.0 if args.steady else 0.0, profile=args.profile)
    os.environ["GPUMEM_TUI_CONFIG_DIR"] = "/nonexistent-gpumem-bench"
    base_pct = None
    if not args.no_baseline:
        base_cpu, base_wall, _ = measure(MINIMAL.format(interval=args.interval), args.seconds, args.warmup)
        base_pct = 100.0 * base_cpu / base_wall
    cpu, wall, rss = measure(code, args.seconds, args.warmup, profile=bool(args.profile))
    pct = 100.0 * cpu / wall
    source = "live" if args.live else f"synthetic {args.gpus} GPUs x {args.gpus * args.per_gpu} processes " + (
        " (values constant)" if args.static else " (all values change every poll)") + (
        ", chart window already spanned (--steady)" if args.steady else ", first minute (chart axis still growing)")
    print(f"source: {source}, interval {args.interval} s")
    print(f"cpu_seconds: {cpu:.3f}")
    print(f"wall_seconds: {wall:.1f}")
    print(f"cpu_percent_of_one_core: {pct:.2f}  (target < 1.5)")
    if base_pct is not None:
        print(f"minimal_textual_app_cpu_percent: {base_pct:.2f}  (same run, same measurement)")
        print(f"ratio_to_minimal_app: {pct / base_pct:.2f}" if base_pct > 0 else "ratio_to_minimal_app: n/a")
    print(f"rss_mib: {rss / 2**20:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
