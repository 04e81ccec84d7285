"""CPU of a dashboard start with and without the estimator / comparison side pane (issue 23).

The side pane (estimator form: 8 Selects, 8 Inputs, a TabbedContent; the predicted-vs-measured
view) mounts after the first frame. Its cost is paid by every user at start-up and by every
test that mounts it. This runs the app headless in this process (``App.run_test``, 160x48, the
tests' deterministic fake source with a probed process) for a start and a few pauses, once
without and once with the pane, alternately ``--runs`` times, and prints the CPU seconds
(user + system of this process, worker threads included, from ``getrusage``) of each: the
median and the least of each kind, the pane's own cost (with - without) and the ratio with /
without. ``--theme-switches N`` also times N theme switches with the pane mounted (each
switch restyles every widget) against the same number of pauses.

With ``--counts`` it also counts, for one start with the pane, Textual's stylesheet applies
(``Stylesheet.apply``, one per widget or component styled), screen layouts
(``Screen._refresh_layout``), footer recomposes that built the keys again, and the
estimates the form ran: figures that the machine's load does not move.

    PYTHONPATH=. .venv/bin/python benchmarks/side_pane_mount.py [--runs 5] [--pauses 8]
        [--theme-switches 4] [--counts]

CPU seconds move with the machine's load (other processes share the caches and cores): give
the load average with the figures, and compare figures from one run.

Measured 2026-11-27 on the 2-core helper machine, load 0.9-1.2, 8 runs each, run alternately
twice: before the issue-23 changes (commit 2f984d4) without the pane median 0.30-0.40 s, with
it 1.27-1.42 s, the pane 0.96-0.99 s; after: without 0.24-0.28 s, with 0.96-1.07 s, the
pane 0.66-0.80 s. Counts of one start with the pane (8 pauses), before -> after: stylesheet
applies 782 -> 336, footer key rebuilds 4 -> 2, estimates by the form 15 -> 1, garbage
collector passes during it 154 young / 14 middle / 1-2 full -> 11-64 / 1-5 / 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

SIZE = (160, 48)


def cpu_seconds() -> float:
    """User + system CPU of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def make_app(side_pane: bool) -> Any:
    from ui_fakes import FakeSource

    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.themes import load_themes

    return GpuMemApp(FakeSource(), interval=0.2, themes=load_themes(), side_pane=side_pane)


async def pane_mounted(app: Any, pilot: Any) -> None:
    """Pause until the pane's form has mounted (it mounts after the first frame)."""
    from gpumem_tui.ui.estimator_panel import EstimatorPanel

    for _ in range(2000):
        panels = app.query(EstimatorPanel) if app.has_side_pane else ()
        if panels and all(panel._fields_mounted for panel in panels):
            return
        await pilot.pause()
    raise RuntimeError("the side pane did not mount")


async def one_start(side_pane: bool, pauses: int, theme_switches: int = 0) -> Any:
    """A start, ``pauses`` pauses (and ``theme_switches`` switches, each followed by a pause); the app."""
    app = make_app(side_pane)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(pauses):
            await pilot.pause()
        if theme_switches:
            await pane_mounted(app, pilot)
            names = [name for name in app.available_themes if name != app.theme][:2]
            for i in range(theme_switches):
                app.theme = names[i % len(names)]
                await pilot.pause()
    return app


async def timed(side_pane: bool, pauses: int, theme_switches: int = 0) -> float:
    started = cpu_seconds()
    await one_start(side_pane, pauses, theme_switches)
    return cpu_seconds() - started


def summary(name: str, values: list[float]) -> str:
    return f"{name:>28}: median {statistics.median(values):.3f} s, least {min(values):.3f} s  " + \
        " ".join(f"{v:.3f}" for v in values)


async def counts(pauses: int) -> dict[str, int]:
    """Stylesheet applies, layouts, footer key rebuilds and estimates of one start with the pane."""
    from textual.css.stylesheet import Stylesheet
    from textual.screen import Screen

    from gpumem_tui.ui.estimator_panel import EstimatorPanel
    from gpumem_tui.ui.steady_footer import SteadyFooter

    seen = {"stylesheet applies": 0, "screen layouts": 0}
    apply, layout = Stylesheet.apply, Screen._refresh_layout

    def counted_apply(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen["stylesheet applies"] += 1
        return apply(self, *args, **kwargs)

    def counted_layout(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen["screen layouts"] += 1
        return layout(self, *args, **kwargs)

    Stylesheet.apply, Screen._refresh_layout = counted_apply, counted_layout  # type: ignore[method-assign]
    try:
        app = make_app(True)
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(pauses):
                await pilot.pause()
            await pane_mounted(app, pilot)
            seen["footer key rebuilds"] = app.query_one(SteadyFooter).recomposes
            seen["estimates by the form"] = app.query_one(EstimatorPanel).estimates_run
    finally:
        Stylesheet.apply, Screen._refresh_layout = apply, layout  # type: ignore[method-assign]
    return seen


async def main_async(args: argparse.Namespace) -> None:
    await timed(True, args.pauses)  # warm: imports, first parse of every widget's CSS
    plain: list[float] = []
    side: list[float] = []
    for _ in range(args.runs):
        plain.append(await timed(False, args.pauses))
        side.append(await timed(True, args.pauses))
    print(f"start + {args.pauses} pauses at {SIZE[0]}x{SIZE[1]}, {args.runs} runs each, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(summary("without the pane", plain))
    print(summary("with the pane", side))
    pane = [s - p for s, p in zip(side, plain)]
    print(f"{'the pane':>28}: median {statistics.median(pane):.3f} s "
          f"(medians: {statistics.median(side) - statistics.median(plain):.3f} s)")
    print(f"{'ratio with / without':>28}: {statistics.median(side) / statistics.median(plain):.2f} (medians), "
          f"{min(side) / min(plain):.2f} (least)")
    if args.theme_switches:
        still: list[float] = []
        switching: list[float] = []
        for _ in range(args.runs):
            still.append(await timed(True, args.pauses + args.theme_switches))
            switching.append(await timed(True, args.pauses, args.theme_switches))
        print(summary(f"pane, {args.theme_switches} more pauses", still))
        print(summary(f"pane, {args.theme_switches} theme switches", switching))
        print(f"{'one theme switch':>28}: "
              f"{(statistics.median(switching) - statistics.median(still)) / args.theme_switches:.3f} s (medians)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pauses", type=int, default=8)
    parser.add_argument("--theme-switches", type=int, default=0)
    parser.add_argument("--counts", action="store_true")
    args = parser.parse_args()
    # no user config (theme, keymap) changes the figures: an empty config folder
    os.environ["GPUMEM_TUI_CONFIG_DIR"] = tempfile.mkdtemp(prefix="gpumem-bench-config-")
    asyncio.run(main_async(args))
    if args.counts:
        for name, value in asyncio.run(counts(args.pauses)).items():
            print(f"{name:>28}: {value}")


if __name__ == "__main__":
    main()
