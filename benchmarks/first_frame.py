"""Time from process start to the dashboard's first frame (target <= 1.0 s); torch not loaded.

Runs ``python -m gpumem_tui --no-demo`` equivalent in a pseudo-terminal, with a tiny wrapper
that records, inside the child, the time since the parent forked it (a wall-clock stamp the
parent passes in GPUMEM_BENCH_T0, so interpreter start-up counts; psutil's create_time is not
used: it is derived from /proc/stat's whole-second boot time and was off by ~0.75 s here) to (a) the first screen refresh after mount ("first
frame") and (b) the first refresh showing a polled sample ("first data frame"), plus whether
``torch`` is in ``sys.modules`` at that point. Repeats a few times and prints each run and
the median.

    .venv/bin/python benchmarks/first_frame.py [--runs 5] [--live]

Without ``--live`` a synthetic 8 GPU x 64 process source is used (the import of the live
NVML/psutil source is part of ``--live``). Each run also times a minimal Textual app (a Static
and a Footer) the same way, so a loaded machine can be told apart from a slow dashboard.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CHILD = r"""
import json, os, sys, time
created = float(os.environ["GPUMEM_BENCH_T0"])
sys.path.insert(0, {bench!r})
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--live", action="store_true")
    args = parser.parse_args()

    bench = str(Path(__file__).resolve().parent)
    os.environ["GPUMEM_TUI_CONFIG_DIR"] = "/nonexistent-gpumem-bench"
    results = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "marks.json")
            marks = _run_child(CHILD.format(bench=bench, out=out, live=args.live), out)
            if marks is None:
                print(f"run {run + 1}: no frame within 15 s")
                continue
            base = _run_child(BASELINE.format(out=out + ".base"), out + ".base")
            marks["baseline_s"] = base["first_frame_s"] if base else float("nan")
        results.append(marks)
        print(
            f"run {run + 1}: first frame {marks['first_frame_s']:.3f} s, "
            f"first data frame {marks['first_data_frame_s']:.3f} s, torch imported: {marks['torch_imported']}; "
            f"minimal Textual app: {marks['baseline_s']:.3f} s"
        )
    if not results:
        return 1
    first = statistics.median(r["first_frame_s"] for r in results)
    data = statistics.median(r["first_data_frame_s"] for r in results)
    torch_loaded = any(r["torch_imported"] for r in results)
    print(f"median first frame: {first:.3f} s (target <= 1.0)")
    print(f"median first data frame: {data:.3f} s")
    base = statistics.median(r["baseline_s"] for r in results)
    print(f"median minimal Textual app (hello + footer) on this machine now: {base:.3f} s")
    print(f"torch imported: {torch_loaded}")
    assert not torch_loaded, "the dashboard imported torch"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
