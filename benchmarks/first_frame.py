"""Time from process start to the dashboard's first frame (target <= 1.0 s); torch not loaded.

Runs ``python -m gpumem_tui --no-demo`` equivalent in a pseudo-terminal, with a tiny wrapper
that records, inside the child, the time since the parent forked it (a wall-clock stamp the
parent passes in GPUMEM_BENCH_T0, so interpreter start-up counts; psutil's create_time is not
used: it is derived from /proc/stat's whole-second boot time and was off by ~0.75 s here) to (a) the first screen refresh after mount ("first
frame") and (b) the first refresh showing a polled sample ("first data frame"), plus whether
``torch`` is in ``sys.modules`` at that point. Repeats a few times and prints each run and
the median.

    .venv/bin/python benchmarks/first_frame.py [--runs 5] [--live] [--bytecode both|none|cached] [--instructions]

Without ``--live`` a synthetic 8 GPU x 64 process source is used (the import of the live
NVML/psutil source is part of ``--live``). Each run also times a minimal Textual app (a Static
and a Footer) the same way, so a loaded machine can be told apart from a slow dashboard.

Bytecode: the dashboard runs from a copy of the package made for the benchmark, so the
worktree's own ``__pycache__`` (or its absence) does not decide the figure. ``none``: the
copy has no bytecode cache and none is written (PYTHONDONTWRITEBYTECODE=1, as this sandbox
and CI set it): every module of the package is compiled at start, as on a first start from a
source checkout. ``cached``: the copy is compiled first (compileall), as after ``pip install``
or ``scripts/test.sh``. ``both`` (default) alternates the two in each run. Textual, Rich and
the standard library keep their installed caches in both modes (the minimal app's too).

``--instructions`` counts, under valgrind's callgrind, the instructions from the start of each
child to its first frame (where it exits), once per mode: a figure that other processes on
the machine do not move, for decisions where the times are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CHILD = r"""
import json, os, sys, time
created = float(os.environ["GPUMEM_BENCH_T0"])
sys.path.insert(0, {src!r})  # the benchmark's copy of the package (and of _pty_child)
from gpumem_tui.ui.app import GpuMemApp
from gpumem_tui.ui.themes import load_themes
out = {out!r}
live = {live!r}
if live:
    from gpumem_tui.telemetry.live import LiveSource
    source = LiveSource()
else:
    from _pty_child import BusySource
    source = BusySource()

class Timed(GpuMemApp):
    marks = {{}}
    def on_mount(self):  # Textual also runs GpuMemApp.on_mount (handlers run per class)
        self.call_after_refresh(self._mark, "first_frame_s")
    def apply_snapshot(self, snap):
        super().apply_snapshot(snap)
        if "first_data_frame_s" not in self.marks:
            self.call_after_refresh(self._mark, "first_data_frame_s")
    def _mark(self, name):
        if {exit_first!r}:
            os._exit(0)  # --instructions: the count stops at the first frame
        self.marks[name] = time.time() - created
        if len(self.marks) == 2:
            self.marks["torch_imported"] = "torch" in sys.modules
            with open(out, "w") as f:
                json.dump(self.marks, f)
            self.set_timer(1.5, self.exit)  # let the side pane finish mounting first

Timed(source, interval=1.0, themes=load_themes()).run()
"""


BASELINE = r"""
import json, os, time
created = float(os.environ["GPUMEM_BENCH_T0"])
from textual.app import App
from textual.widgets import Footer, Static

class Minimal(App):
    def compose(self):
        yield Static("hello")
        yield Footer()
    def on_mount(self):
        self.call_after_refresh(self._mark)
    def _mark(self):
        if {exit_first!r}:
            os._exit(0)
        with open({out!r}, "w") as f:
            json.dump({{"first_frame_s": time.time() - created}}, f)
        self.exit()

Minimal().run()
"""


def _run_child(code: str, out: str) -> dict | None:
    from _pty_child import drain, run_in_pty, stop

    os.environ["GPUMEM_BENCH_T0"] = repr(time.time())  # the child inherits it through the fork
    pid, fd = run_in_pty(["-c", code], 10.0)
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline and not os.path.exists(out):
        drain(fd, time.monotonic() + 0.1)
    drain(fd, time.monotonic() + 0.3)
    stop(pid)
    if not os.path.exists(out):
        return None
    with open(out) as f:
        return json.load(f)


def _package_copy(tmp: str, compiled: bool) -> str:
    """A copy of the package, the bundled themes and ``_pty_child`` under ``tmp`` without any
    ``__pycache__``; compiled into one when ``compiled``. Returns the folder to import from."""
    root = Path(__file__).resolve().parents[1]
    src = os.path.join(tmp, "cached" if compiled else "none")
    no_cache = shutil.ignore_patterns("__pycache__")
    shutil.copytree(root / "gpumem_tui", os.path.join(src, "gpumem_tui"), ignore=no_cache)
    shutil.copytree(root / "themes", os.path.join(src, "themes"), ignore=no_cache)
    shutil.copy(Path(__file__).with_name("_pty_child.py"), src)
    if compiled:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        subprocess.run([sys.executable, "-m", "compileall", "-q", src], check=True, env=env, stdout=subprocess.DEVNULL)
    return src


def _one_run(src: str, mode: str, live: bool) -> dict | None:
    """Dashboard then minimal app, in bytecode ``mode`` ("none" or "cached")."""
    saved = os.environ.get("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written: "none" stays uncompiled
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "marks.json")
            marks = _run_child(CHILD.format(src=src, out=out, live=live, exit_first=False), out)
            if marks is None:
                return None
            base = _run_child(BASELINE.format(out=out + ".base", exit_first=False), out + ".base")
            marks["baseline_s"] = base["first_frame_s"] if base else float("nan")
    finally:
        if saved is None:
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        else:
            os.environ["PYTHONDONTWRITEBYTECODE"] = saved
    return marks


def _instructions(code: str) -> int | None:
    """Instructions the child ``code`` runs (valgrind --tool=callgrind, in a pseudo-terminal)
    from its start to its exit at the first frame; deterministic, unlike wall-clock time on a
    shared machine (PYTHONHASHSEED fixed)."""
    import fcntl
    import pty
    import re
    import struct
    import termios

    from _pty_child import drain

    pid, fd = pty.fork()
    if pid == 0:  # child
        os.environ.update(COLUMNS="160", LINES="48", PYTHONHASHSEED="0", GPUMEM_BENCH_T0=repr(time.time()))
        os.environ.setdefault("TERM", "xterm-256color")
        os.execvp("valgrind", ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                               sys.executable, "-c", code])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
    output = drain(fd, time.monotonic() + 600.0)
    os.waitpid(pid, 0)
    found = re.search(rb"Collected : (\d+)", output)
    return int(found.group(1)) if found else None


def _count_instructions(sources: dict[str, str], live: bool) -> int:
    """Print the instruction counts to the first frame, dashboard and minimal app, per mode."""
    if shutil.which("valgrind") is None:
        print("first_frame: --instructions needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    base = _instructions(BASELINE.format(out=os.devnull, exit_first=True))
    for mode, src in sources.items():
        app = _instructions(CHILD.format(src=src, out=os.devnull, live=live, exit_first=True))
        if app is None or base is None:
            print(f"[bytecode {mode}] no count (valgrind failed)")
            return 1
        print(f"[bytecode {mode}] instructions to the first frame: dashboard {app / 1e9:.3f} G, "
              f"minimal Textual app {base / 1e9:.3f} G: {app / base:.2f}x (target <= 1.5x)")
    return 0


def _summary(mode: str, results: list[dict]) -> None:
    first = statistics.median(r["first_frame_s"] for r in results)
    data = statistics.median(r["first_data_frame_s"] for r in results)
    base = statistics.median(r["baseline_s"] for r in results)
    ratio = statistics.median(r["first_frame_s"] / r["baseline_s"] for r in results)
    print(f"[bytecode {mode}] median first frame: {first:.3f} s (target <= 1.0); first data frame: {data:.3f} s; "
          f"minimal Textual app (hello + footer): {base:.3f} s; median ratio {ratio:.2f}x (target <= 1.5x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--live", action="store_true")
    parser.add_argument("--bytecode", choices=("both", "none", "cached"), default="both",
                        help="the package without a bytecode cache, compiled, or both alternately")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions to the first frame under callgrind instead of timing")
    args = parser.parse_args()

    os.environ["GPUMEM_TUI_CONFIG_DIR"] = "/nonexistent-gpumem-bench"
    modes = ("none", "cached") if args.bytecode == "both" else (args.bytecode,)
    results: dict[str, list[dict]] = {mode: [] for mode in modes}
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        sources = {mode: _package_copy(tmp, mode == "cached") for mode in modes}
        if args.instructions:
            return _count_instructions(sources, args.live)
        for run in range(args.runs):
            for mode in modes:
                marks = _one_run(sources[mode], mode, args.live)
                if marks is None:
                    print(f"run {run + 1} [bytecode {mode}]: no frame within 15 s")
                    continue
                results[mode].append(marks)
                print(
                    f"run {run + 1} [bytecode {mode}]: first frame {marks['first_frame_s']:.3f} s, "
                    f"first data frame {marks['first_data_frame_s']:.3f} s, torch imported: {marks['torch_imported']}; "
                    f"minimal Textual app: {marks['baseline_s']:.3f} s "
                    f"({marks['first_frame_s'] / marks['baseline_s']:.2f}x)"
                )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if not any(results.values()):
        return 1
    for mode in modes:
        if results[mode]:
            _summary(mode, results[mode])
    torch_loaded = any(r["torch_imported"] for rs in results.values() for r in rs)
    print(f"torch imported: {torch_loaded}")
    assert not torch_loaded, "the dashboard imported torch"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
