"""Steady-state CPU of the dashboard at 1 Hz (target: < 1.5 % of one core).

Runs the real app in a pseudo-terminal (so Textual renders and writes every frame) on a
synthetic 8 GPU x 64 process source whose values change every poll, waits for it to settle,
then measures the child's CPU time (the scheduler's, summed over its threads) over the window. In the same
run, and measured the same way, a minimal Textual app (one Static whose text changes every
second) gives the floor any Textual app pays on this machine at this moment; the ratio of the
two is what stays comparable on a shared, noisy machine. The two run side by side, started
together and measured over the same window (the machine's load then weighs on both alike; each
uses ~1 % of a core, so they do not slow each other), in ``--rounds`` rounds (default 3), each
a fresh start of both; the ratio printed is the median of the rounds' ratios, each round's
figures printed above it. Before this change the minimal app ran first and the dashboard
after it, once: load that changed between the two moved the ratio by +-0.3. The minimal app updates its Static the
usual way (``Static.update``, which by default also re-lays out the screen each second); the
dashboard's polls change no layout. Its figure varies with the machine's load (0.37-0.43 % of
a core measured on the 2-core helper machine, load 5-12), so compare ratios from runs made
alternately, and note the mode: without ``--steady`` the chart's time axis still grows and the
whole plot is drawn again every poll (the costlier case).

    .venv/bin/python benchmarks/idle_cpu.py [--seconds 30] [--rounds 3] [--interval 1.0] [--gpus 8 --per-gpu 8]
        [--static] [--steady] [--live] [--no-baseline] [--profile FILE]

``--live`` uses the real LiveSource instead (NVML if present, else host processes).
``--profile FILE`` writes a cProfile of the dashboard's main (UI) thread to FILE.
Prints: per round, the dashboard's and the minimal app's percent of a core and their ratio;
then cpu_percent_of_one_core (dashboard and minimal app: medians), ratio_to_minimal_app (the
median of the rounds' ratios), cpu_seconds, wall_seconds, rss_mib (the last round's).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
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


def thread_cpu(proc) -> dict[str, float]:  # noqa: ANN001
    """CPU seconds of each thread of process ``proc`` (a psutil.Process) so far: the scheduler's
    on-CPU nanoseconds (``/proc/PID/task/TID/schedstat``, first field), not psutil's clock
    ticks: at ~0.4 % of a core a 30 s window is ~13 ticks of 10 ms, so one tick more or less
    moved the minimal app's figure by 8 %. Where schedstat is missing: psutil's user + system
    of the whole process, as one entry."""
    found = {}
    try:
        for task in os.listdir(f"/proc/{proc.pid}/task"):
            with open(f"/proc/{proc.pid}/task/{task}/schedstat") as stat:
                found[task] = int(stat.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        times = proc.cpu_times()
        return {"process": times.user + times.system}
    return found


def cpu_between(before: dict[str, float], after: dict[str, float]) -> float:
    """CPU seconds between two :func:`thread_cpu` readings: each thread alive at the end, less
    what it had used at the start (a thread started inside the window counts from zero; one
    that ended inside it is not counted -- the apps measured keep theirs)."""
    return sum(seconds - before.get(thread, 0.0) for thread, seconds in after.items())


def measure_together(codes: list[str], seconds: float, warmup: float,
                     profile: bool = False) -> list[tuple[float, float, int]]:
    """(cpu seconds, wall seconds, rss bytes) of each ``python -c code``, all started at once in
    ptys of their own and measured over the same window after ``warmup``; ``profile``: each is
    sent SIGUSR1 when the window opens (the dashboard's child code then starts its cProfile)."""
    import select

    import psutil

    from _pty_child import run_in_pty, stop

    children = [run_in_pty(["-c", code], seconds) for code in codes]
    fds = {fd: pid for pid, fd in children}

    def drain_all(until: float) -> None:
        open_fds = list(fds)
        while open_fds and time.monotonic() < until:
            ready, _, _ = select.select(open_fds, [], [], 0.05)
            for fd in ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    open_fds.remove(fd)

    try:
        drain_all(time.monotonic() + warmup)
        if profile:
            for pid, _ in children:
                os.kill(pid, signal.SIGUSR1)
        procs = [psutil.Process(pid) for pid, _ in children]
        before = [thread_cpu(proc) for proc in procs]
        t0 = time.monotonic()
        drain_all(t0 + seconds)
        after = [thread_cpu(proc) for proc in procs]
        wall = time.monotonic() - t0
        rss = [proc.memory_info().rss for proc in procs]
    finally:
        for pid, _ in children:
            stop(pid)
    return [(cpu_between(c0, c1), wall, r) for c0, c1, r in zip(before, after, rss)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each a fresh start of both apps (default 3)")
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
    if args.no_baseline or args.profile:
        (cpu, wall, rss), = measure_together([code], args.seconds, args.warmup, profile=bool(args.profile))
        pct = 100.0 * cpu / wall
    else:
        rounds = []
        for number in range(1, max(args.rounds, 1) + 1):
            (cpu, wall, rss), (base_cpu, base_wall, _) = measure_together(
                [code, MINIMAL.format(interval=args.interval)], args.seconds, args.warmup)
            pct, base_pct = 100.0 * cpu / wall, 100.0 * base_cpu / base_wall
            rounds.append((pct, base_pct))
            ratio = f"{pct / base_pct:.2f}" if base_pct > 0 else "n/a"
            print(f"round {number}: dashboard {pct:.2f} %, minimal app {base_pct:.2f} %, ratio {ratio}")
        pct = statistics.median(p for p, _ in rounds)
        base_pct = statistics.median(b for _, b in rounds)
        ratios = [p / b for p, b in rounds if b > 0]
    source = "live" if args.live else f"synthetic {args.gpus} GPUs x {args.gpus * args.per_gpu} processes " + (
        " (values constant)" if args.static else " (all values change every poll)") + (
        ", chart window already spanned (--steady)" if args.steady else ", first minute (chart axis still growing)")
    print(f"source: {source}, interval {args.interval} s")
    print(f"cpu_seconds: {cpu:.3f}")
    print(f"wall_seconds: {wall:.1f}")
    print(f"cpu_percent_of_one_core: {pct:.2f}  (target < 1.5)")
    if base_pct is not None:
        print(f"minimal_textual_app_cpu_percent: {base_pct:.2f}  (same windows, same measurement)")
        print(f"ratio_to_minimal_app: {statistics.median(ratios):.2f}  (median of {len(ratios)} rounds)"
              if ratios else "ratio_to_minimal_app: n/a")
    print(f"rss_mib: {rss / 2**20:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
