"""Issue 23 (performance): what the dashboard's start-up leaves out, the collector paused until
the first frame, and the drift / time-to-OOM computed once per poll.

No timing here (benchmarks/first_frame.py and benchmarks/idle_cpu.py print the figures): these
check the mechanisms the figures rely on.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections import deque
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: loaded on use, never by opening the dashboard (each was measured on its start-up path)
NOT_AT_START_UP = (
    "torch",
    "gpumem_tui.estimator.estimate",  # the estimator's formulas (via comparison)
    "gpumem_tui.analysis.comparison",
    "gpumem_tui.analysis.process_estimate",
    "gpumem_tui.alerts.rules",  # only a config with [[alerts]]
    "gpumem_tui.ui.screens",  # modal screens: opened by a key
    "textual.widgets._text_area",  # the side pane's form brings it
    "gpumem_tui.ui.side_pane",  # the pane mounts after the first frame; the bands come with a poll
    "gpumem_tui.analysis.jobs",  # the jobs are grouped at the first poll (JobTracker)
    "gpumem_tui.telemetry.launch",  # via analysis.jobs; telemetry.model names it in annotations only
    "gpumem_tui.telemetry.measured_record",  # a probed PID's record: made at its first sample
    "gpumem_tui.telemetry.step_peaks",  # via measured_record
    "gpumem_tui.ui.config",  # the config file's parser: the themes need only ui.config_dir
    "gpumem_tui.telemetry.probed_state",  # the app's probed state: made at the first snapshot
    "gpumem_tui.telemetry.measured_context",  # via probed_state
    "gpumem_tui.ui.history",  # the curves' store: made at the first snapshot
    "gpumem_tui.ui.job_rows",  # a job's group row: with the first job
    "gpumem_tui.ui.chart_scale",  # the chart's scale: with the first samples
    "gpumem_tui.ui.chart_samples",  # the chart's drawing with samples
    "gpumem_tui.ui.poll_record",  # a snapshot taken into the stores: with the first snapshot
    "gpumem_tui.ui.process_rows",  # the process table's rows: with the first processes
    "gpumem_tui.ui.braille",  # the chart's canvas: once there is a curve to draw
)


def test_importing_the_dashboard_leaves_the_estimator_and_screens_out():
    code = ("import json, sys; from gpumem_tui.ui.app import GpuMemApp; from gpumem_tui.ui.themes import load_themes;"
            "load_themes(); print(json.dumps(sorted(sys.modules)))")
    env = dict(os.environ, PYTHONPATH=str(ROOT), GPUMEM_TUI_CONFIG_DIR="/nonexistent-gpumem-test")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    loaded = set(json.loads(out.stdout))
    assert "gpumem_tui.ui.app" in loaded
    assert [name for name in NOT_AT_START_UP if name in loaded] == []


def test_the_collector_pause_stops_and_restarts_only_a_running_collector():
    from gpumem_tui.ui.app_common import StartupGcPause

    was = gc.isenabled()
    try:
        gc.enable()
        pause = StartupGcPause()
        pause.pause()
        assert not gc.isenabled()
        pause.resume()
        assert gc.isenabled()
        pause.resume()  # idempotent: nothing to undo twice
        assert gc.isenabled()
        gc.disable()  # someone else turned it off: a pause/resume must not turn it on
        other = StartupGcPause()
        other.pause()
        other.resume()
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.asyncio
async def test_the_collector_runs_again_once_the_dashboard_is_up():
    sys.path.insert(0, str(Path(__file__).parent))
    from ui_fakes import FakeSource

    from gpumem_tui.ui.app import GpuMemApp

    assert gc.isenabled()
    app = GpuMemApp(FakeSource(steps=1), interval=0.05, side_pane=False)
    async with app.run_test() as pilot:
        await pilot.pause()
        assert gc.isenabled()
        assert app.focused is app.table  # given after the first frame
    assert gc.isenabled()


def test_a_stopped_poller_does_not_start_again():
    from gpumem_tui.ui.poller import Poller

    class Source:
        polls = 0

        def poll(self):
            Source.polls += 1
            raise AssertionError("polled after stop")

        def close(self):
            pass

    poller = Poller(SimpleNamespace(post_message=lambda m: None), Source(), 1.0)
    poller.stop()  # the app quit before its first frame ran the deferred start
    poller.start()
    assert poller._thread is None and Source.polls == 0


def test_alerts_use_the_forecast_the_dashboard_computed_for_the_poll(tmp_path, monkeypatch):
    from gpumem_tui.alerts.actions import AlertActions, AlertLog
    from gpumem_tui.alerts.rules import parse_rule
    from gpumem_tui.analysis.forecast import forecast
    from gpumem_tui.telemetry.step_peaks import step_peaks
    from gpumem_tui.telemetry.model import Phase, PhasePeak, Snapshot
    from gpumem_tui.ui import alerting
    from gpumem_tui.support.units import GiB, MiB

    peaks = deque(PhasePeak(7, step, Phase.BACKWARD, step, step + 0.5, 2 * GiB + step * 10 * MiB) for step in range(1, 16))
    computed = forecast(step_peaks(peaks), None)
    assert computed.drift is not None
    app = SimpleNamespace(process_estimates=SimpleNamespace(pids=lambda: [], probe_estimate=lambda pid: None),
                          phase_peaks={7: peaks}, outlooks={7: computed}, bell=lambda: None,
                          notify=lambda *a, **k: None)

    def no_second_forecast(*args, **kwargs):
        raise AssertionError("the forecast was computed a second time")

    monkeypatch.setattr(alerting, "forecast", no_second_forecast)
    alerts = alerting.DashboardAlerts(app, [parse_rule({"rule": "drift", "bytes_per_step": "5MiB"})],
                                      AlertActions(AlertLog(tmp_path / "a.log"), env={}))
    (entry,) = alerts.job_inputs(Snapshot(time=1.0, phase_peaks=tuple(peaks)))
    assert entry.drift_bytes_per_step == computed.drift.bytes_per_step


@pytest.mark.asyncio
async def test_the_start_up_theme_is_in_the_first_css_pass_without_a_second_parse(monkeypatch):
    """The theme set in __init__ does not queue Textual's refresh_css (a second parse of every
    CSS source and a restyle of every widget); its colours, classes and variables are in
    effect all the same."""
    sys.path.insert(0, str(Path(__file__).parent))
    from textual.app import App
    from textual.filter import ANSIToTruecolor
    from ui_fakes import FakeSource

    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.themes import load_themes

    refreshes = []
    original = App.refresh_css
    monkeypatch.setattr(App, "refresh_css", lambda self, animate=True: (refreshes.append(self), original(self, animate)))
    app = GpuMemApp(FakeSource(steps=1), interval=0.05, side_pane=False, themes=load_themes(), theme="dark")
    async with app.run_test() as pilot:
        await pilot.pause()
        assert refreshes == []
        assert app.theme == "dark" and "-theme-dark" in app.classes and "-dark-mode" in app.classes
        assert app.stylesheet._variables == app.get_css_variables()
        background = app.current_theme.background
        assert background is not None and app.screen.styles.background.hex.lower() == background.lower()
        (truecolor,) = [f for f in app._filters if isinstance(f, ANSIToTruecolor)]
        assert truecolor.enabled == (not app.native_ansi_color) and truecolor._terminal_theme is app.ansi_theme_dark


@pytest.mark.asyncio
@pytest.mark.parametrize("theme", ["light", "ansi-dark"])
async def test_a_start_up_theme_of_another_darkness_or_ansi_flag_goes_through_textuals_watcher(theme):
    """A light theme, or an ANSI one, also rebuilds the ANSI colour filter, which only
    Textual's watcher does: the filter is then the one a theme switch would give."""
    sys.path.insert(0, str(Path(__file__).parent))
    from textual.filter import ANSIToTruecolor
    from ui_fakes import FakeSource

    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.themes import load_themes

    app = GpuMemApp(FakeSource(steps=1), interval=0.05, side_pane=False, themes=load_themes(), theme=theme)
    async with app.run_test() as pilot:
        await pilot.pause()
        current = app.current_theme
        assert app.theme == theme
        assert f"-theme-{theme}" in app.classes
        assert ("-dark-mode" in app.classes) == current.dark and ("-light-mode" in app.classes) == (not current.dark)
        assert app.stylesheet._variables == app.get_css_variables()
        (truecolor,) = [f for f in app._filters if isinstance(f, ANSIToTruecolor)]
        assert truecolor.enabled == (not app.native_ansi_color)
        assert truecolor._terminal_theme is (app.ansi_theme_dark if current.dark else app.ansi_theme_light)


@pytest.mark.asyncio
async def test_the_empty_chart_is_drawn_once_from_its_no_samples_commands(monkeypatch):
    """The first frame's plot is the 'no samples yet' plot, built once (not a blank-titled
    plot built, then rebuilt on the first resize)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from ui_fakes import FakeSource

    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.memory_chart import MemoryPlot

    builds = []
    original = MemoryPlot._build

    def counting_build(plot, width, height):
        builds.append((width, height))
        return original(plot, width, height)

    monkeypatch.setattr(MemoryPlot, "_build", counting_build)
    app = GpuMemApp(FakeSource(steps=1), interval=0.05, side_pane=False)
    app._after_first_frame = app._gc_pause.resume  # no first poll: the chart stays empty
    async with app.run_test() as pilot:
        await pilot.pause()
        await pilot.pause()
        plot = app.chart.query_one(MemoryPlot)
        assert "memory: no samples yet" in plot.plain_lines()[0]
        assert len(builds) == 1


@pytest.mark.asyncio
async def test_the_filter_box_mounts_on_first_use_in_its_place():
    """Hidden in the first frame, the filter box is not mounted then; `/` mounts it between
    the table's note and the chart and gives it the focus."""
    sys.path.insert(0, str(Path(__file__).parent))
    from textual.widgets import Input
    from test_ui import wait_for
    from ui_fakes import FakeSource

    from gpumem_tui.ui.app import GpuMemApp

    app = GpuMemApp(FakeSource(steps=1), interval=0.05, side_pane=False)
    async with app.run_test() as pilot:
        await pilot.pause()
        assert list(app.query(Input)) == []
        await pilot.press("slash")
        await wait_for(pilot, lambda: app.filter_box.has_focus)
        ids = [child.id for child in app.query_one("#left").children]
        assert ids == ["processes", "table-empty", "filter", "chart"]
        await pilot.press(*"user1", "escape")
        assert app.filter_box.value == "" and not app.filter_box.display


@pytest.mark.asyncio
async def test_a_resize_to_the_laid_out_size_costs_no_layout_and_a_real_one_lays_out(monkeypatch):
    """Textual forwards the start-up Resize and the driver's, both of the size the screen is
    laid out at: the dashboard's screen skips their layouts; a change of size still lays the
    widgets out at the new size."""
    sys.path.insert(0, str(Path(__file__).parent))
    from textual.geometry import Size
    from textual.screen import Screen
    from ui_fakes import FakeSource

    from gpumem_tui.ui.app import GpuMemApp

    layouts = []
    original = Screen._refresh_layout

    def counting_layout(screen, size=None, scroll=False):
        layouts.append(size)
        return original(screen, size, scroll)

    monkeypatch.setattr(Screen, "_refresh_layout", counting_layout)
    app = GpuMemApp(FakeSource(steps=1), interval=0.05, side_pane=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = app.screen
        layouts.clear()
        screen._screen_resized(Size(120, 40))
        assert layouts == []
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        assert Size(100, 30) in layouts
        assert screen.size == Size(100, 30) and app.chart.size.width == 100


def test_imports_out_of_the_collector_pause_it_then_freeze_what_they_made():
    """Inside: no automatic collection; after: what exists is in the permanent generation
    (gc.freeze) and collection is back as it was (a collector turned off stays off)."""
    from gpumem_tui.support.import_gc import ImportsOutOfCollector

    was = gc.isenabled()
    try:
        gc.enable()
        frozen = gc.get_freeze_count()
        with ImportsOutOfCollector():
            assert not gc.isenabled()
            made = [[] for _ in range(100)]  # tracked containers created inside
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen + len(made)
        gc.disable()
        with ImportsOutOfCollector():
            assert not gc.isenabled()
        assert not gc.isenabled()
        with pytest.raises(ImportError):
            with ImportsOutOfCollector():
                raise ImportError("a failed import inside")
    finally:
        (gc.enable if was else gc.disable)()


def test_once_up_the_dashboard_freezes_its_heap_and_runs_young_passes_less_often():
    # In a child: freeze_gc changes the whole process's collector, which a test worker must keep.
    code = (
        "import gc, json\n"
        "from gpumem_tui.ui.app_common import YOUNG_GENERATION_THRESHOLD, freeze_gc\n"
        "kept = [[] for _ in range(1000)]\n"
        "before = gc.get_threshold()\n"
        "freeze_gc()\n"
        "print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count(), YOUNG_GENERATION_THRESHOLD]))\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr
    before, after, frozen, young = json.loads(out.stdout)
    assert before[0] < young and after == [young, before[1], before[2]]
    assert frozen >= 1000  # the lists kept above are out of the collector's reach
