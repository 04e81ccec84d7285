"""Dashboard behaviour through App.run_test / Pilot, against a deterministic fake source."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from ui_fakes import FakeSource  # noqa: E402
from waiting import HANG_TIMEOUT, settle  # noqa: E402

from gpumem_tui.ui.app import GpuMemApp  # noqa: E402
from gpumem_tui.ui.device_panel import DevicePanel  # noqa: E402
from gpumem_tui.ui.memory_chart import MemoryChart  # noqa: E402
from gpumem_tui.ui.process_rows import sort_processes  # noqa: E402
from gpumem_tui.ui.process_table import ProcessFilter, ProcessTable  # noqa: E402
from gpumem_tui.ui.screens import ConfirmSignalScreen, HelpScreen, ProcessDetailScreen  # noqa: E402
from gpumem_tui.ui.themes import load_themes  # noqa: E402
from gpumem_tui.support.units import GiB  # noqa: E402

SIZE = (160, 48)


pytestmark = pytest.mark.usefixtures("no_user_config")  # tests/conftest.py


def make_app(source=None, **kwargs) -> GpuMemApp:
    kwargs.setdefault("interval", 0.2)
    kwargs.setdefault("themes", load_themes())
    kwargs.setdefault("side_pane", False)
    return GpuMemApp(source or FakeSource(), **kwargs)


async def wait_for(pilot, cond, timeout: float = HANG_TIMEOUT, what: str = "the condition") -> None:
    # the timeout guards against a hang, it is no speed check (tests/waiting.py)
    await settle(pilot, cond, what=what, timeout=timeout)


def side_pane_mounted(app: GpuMemApp) -> bool:
    """The side pane is mounted with its estimator form's fields (``has_side_pane`` is set when
    the mount starts: a test that ends the app before the fields are mounted races Textual's
    Select, whose mount then finds its overlay gone -- NoMatches at exit under load)."""
    from gpumem_tui.ui.estimator_panel import EstimatorPanel

    panels = app.query(EstimatorPanel) if app.has_side_pane else ()
    return bool(panels) and all(panel._fields_mounted for panel in panels)


def pids(app: GpuMemApp) -> list[int]:
    return [p.pid for p in app.query_one(ProcessTable).shown]


def table_text(app: GpuMemApp) -> str:
    table = app.query_one(ProcessTable)
    lines = []
    for r in range(table.row_count):
        lines.append(" | ".join(str(getattr(c, "plain", c)) for c in table.get_row_at(r)))
    return "\n".join(lines)


async def test_rows_devices_and_marked_errors():
    app = make_app(FakeSource(steps=1))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert sorted(pids(app)) == [1001, 1002, 1003, 1004, 1005, 1006]
        panel = app.query_one(DevicePanel)
        rows = [" | ".join(getattr(c, "plain", str(c)) for c in panel.get_row_at(r)) for r in range(panel.row_count)]
        assert "10,240 / 40,960 MiB ( 25%)" in rows[0]
        assert "no permission / 400 W" in rows[1] and "N/A" in rows[1]
        assert "GPU is lost" in rows[2]
        text = table_text(app)
        assert "[no permission]" in text
        assert "[zombie] python eval.py" in text
        assert "--pid=host" not in text  # a PID /proc cannot see: "?" cells, one note below
        assert "0 | 1005 | ? | compute" in text and text.count("--pid=host") == 0
        assert "--pid=host" in str(app.table_empty.render())
        assert "01:02:05" in text  # 3725 s running time, from the snapshot's own clock
        assert "docker:4f2a9c1b" in text


async def test_sorting_keys_and_header_click():
    app = make_app(FakeSource(steps=1))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        table = app.query_one(ProcessTable)
        # default: GPU memory, largest first, unknown last
        assert pids(app) == [1001, 1002, 1005, 1003, 1006, 1004]
        await pilot.press("r")
        assert pids(app)[:5] == [1006, 1003, 1005, 1002, 1001] and pids(app)[-1] == 1004
        await pilot.press("s")  # next column after mem: SM%, descending
        assert table.sort_column == "sm"
        assert pids(app)[:3] == [1001, 1002, 1006]
        # click the USER header: ascending by user name, unknown users last
        user_x = 1 + sum(table.column_widths[:table.visible_columns.index("user")])
        await pilot.click(ProcessTable, offset=(user_x, 0))
        await pilot.pause()
        assert table.sort_column == "user" and not table.sort_reverse
        users = [p.user for p in table.shown]
        assert users[:4] == ["alice", "alice", "bob", "carol"] and users[4:] == [None, None]
        await pilot.click(ProcessTable, offset=(user_x, 0))
        await pilot.pause()
        assert table.sort_reverse and [p.user for p in table.shown][:2] == ["carol", "bob"]
        header = table.header_label("user")
        assert header.endswith("▼")


async def test_filter_by_user_gpu_and_text():
    app = make_app(FakeSource(steps=1))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("slash")
        assert app.focused.id == "filter"
        await pilot.press(*"user:alice")
        assert sorted(pids(app)) == [1001, 1006]
        await pilot.press("space", *"gpu:1")
        assert pids(app) == [1006]
        await pilot.press("enter")
        assert isinstance(app.focused, ProcessTable)
        assert "filter: user:alice gpu:1" in str(app.query_one("#status").render())
        await pilot.press("escape")
        assert len(pids(app)) == 6
        await pilot.press("slash", *"SERVE")
        assert pids(app) == [1002]


def test_filter_and_sort_logic():
    from ui_fakes import processes

    procs = processes(0)
    f = ProcessFilter.parse("gpu:x user:bob")
    assert f.problems and f.users == {"bob"} and not f.gpus
    assert [p.pid for p in procs if f.matches(p)] == [1002]
    assert [p.pid for p in procs if ProcessFilter.parse("1003").matches(p)] == [1003]
    by_time = sort_processes(procs, "time", False, 1_700_000_000.0)
    assert [p.pid for p in by_time] == [1003, 1002, 1001, 1006, 1004, 1005]


async def test_selection_drives_chart_and_survives_updates():
    app = make_app(FakeSource())
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("down")
        table = app.query_one(ProcessTable)
        assert table.selected.pid == 1002
        assert app.chart_target == ("proc", 1002)
        start = app.snapshot.time
        await wait_for(pilot, lambda: app.snapshot.time >= start + 3)
        assert table.selected.pid == 1002  # the cursor follows the process, not the row index
        chart = app.query_one(MemoryChart)
        assert chart.curves and chart.curves[0].label == "NVML used"
        assert len(chart.curves[0].points) >= 3
        assert chart.total_bytes == 40 * GiB
        await pilot.press("c")
        assert app.chart_target == ("gpu", 0)
        assert chart.title.startswith("GPU 0")


async def test_focusing_the_device_panel_charts_the_gpu_under_its_cursor():
    app = make_app(FakeSource(steps=1))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert app.chart_target[0] == "proc"
        app.query_one(DevicePanel).focus()
        # the focus event reaches the app's handler a few messages later; under load more than
        # one pause (CI saw ('proc', 1001) after one)
        await wait_for(pilot, lambda: app.chart_target == ("gpu", 0))
        assert app.query_one(MemoryChart).title.startswith("GPU 0")


async def test_select_pid_and_probe_curves_with_phases():
    app = make_app(FakeSource(), select_pid=1001)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.time > 1_700_000_003)
        assert app.query_one(ProcessTable).selected.pid == 1001
        chart = app.query_one(MemoryChart)
        labels = [c.label for c in chart.curves]
        assert labels == ["torch allocated", "torch reserved", "NVML used"]
        assert len(chart.phase_marks) >= 3
        assert {m.phase.value for m in chart.phase_marks} >= {"forward", "backward"}


async def test_bands_overlay_and_toggle():
    app = make_app(FakeSource(steps=2))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        components = {"parameters": 2 * GiB, "gradients": 2 * GiB}
        app.process_estimates.set_user(app.chart_target[1], None, None, {"components_bytes": components}, "mine")
        app._update_chart()
        bands = [("parameters", 2 * GiB, "band-parameters"), ("+ gradients", 4 * GiB, "band-gradients")]
        chart = app.query_one(MemoryChart)
        assert chart.bands == bands
        await pilot.pause()
        legend = chart._legend_shown.plain
        assert "parameters 2.0 GiB" in legend and "+ gradients 4.0 GiB" in legend
        # the chart is scaled to the data, the 40 GiB total is named but off the plot
        assert "GPU total 40.0 GiB (above the plot" in legend
        await pilot.press("b")
        assert chart.show_bands is False
        await pilot.pause()
        assert "parameters" not in chart._legend_shown.plain
        await pilot.press("t")
        assert chart.fit_total
        await pilot.pause()
        assert "above the plot" not in chart._legend_shown.plain


async def test_help_lists_bindings_and_q_quits():
    app = make_app(FakeSource(steps=1))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        ids = {row[2] for row in app.screen.rows}
        assert {"quit", "help", "filter", "sort_next", "toggle_bands", "signal_kill"} <= ids
        assert all(desc for _, desc, _ in app.screen.rows)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0 or app.return_code is None
    assert not app.is_running


def test_every_binding_has_id_and_description():
    from gpumem_tui.ui.app import SIGNAL_BINDINGS
    from gpumem_tui.ui.screens import ConfirmSignalScreen as C, HelpScreen as H, ProcessDetailScreen as D

    for binding in [*GpuMemApp.BINDINGS, *SIGNAL_BINDINGS, *ProcessTable.BINDINGS, *H.BINDINGS, *D.BINDINGS, *C.BINDINGS]:
        assert binding.id and binding.description, binding


async def test_readonly_removes_signal_keys(monkeypatch):
    sent = []
    import gpumem_tui.ui.app as app_mod

    app = make_app(FakeSource(steps=1), readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        keys = {b.key for _, b in app._bindings}
        assert not {"I", "T", "K"} & keys
        assert not any(b.binding.action.startswith("signal") for b in app.screen.active_bindings.values())
        await pilot.press("K")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmSignalScreen)
        assert "read-only" in str(app.query_one("#status").render())
    assert not sent and app_mod.SIGNAL_BINDINGS


async def test_signal_confirmation_names_process_and_refusal_is_notified(monkeypatch):
    calls = []

    class FakeSignals:
        @staticmethod
        def send_signal(pid, create_time, sig):
            calls.append((pid, create_time, sig))
            return "PID 1001 belongs to alice; you can signal only your own processes"

    monkeypatch.setitem(sys.modules, "gpumem_tui.support.signals", FakeSignals)
    import gpumem_tui.support

    # `from gpumem_tui.support import signals` reads the package attribute when the module was
    # imported before (another test on this worker), else sys.modules: both are replaced
    monkeypatch.setattr(gpumem_tui.support, "signals", FakeSignals, raising=False)
    app = make_app(FakeSource(steps=1))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("T")
        assert isinstance(app.screen, ConfirmSignalScreen)
        question = app.screen.question().plain
        assert "SIGTERM" in question and "PID 1001" in question and "alice" in question
        assert "python train.py --bs 32" in question
        await pilot.press("n")
        assert not calls and not isinstance(app.screen, ConfirmSignalScreen)
        await pilot.press("K", "y")
        await wait_for(pilot, lambda: bool(calls))
        assert calls == [(1001, 1_700_000_000.0 - 3725, signal.SIGKILL)]
        notes = [str(n.message) for n in app._notifications]
        assert any("SIGKILL not sent to PID 1001" in n and "only your own" in n for n in notes)


async def test_hostile_command_renders_literally():
    app = make_app(FakeSource(steps=1))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        text = table_text(app)
        assert "[bold red]pwn[/]" in text and "[link=http://x]click[/link]" in text
        assert "\x1b" not in text and "\\x1b[31m" in text
        app.query_one(ProcessTable).select_pid(1003)
        await pilot.press("enter")
        assert isinstance(app.screen, ProcessDetailScreen)
        rendered = app.screen.query_one("#detail-table").content
        from rich.console import Console

        console = Console(width=200, record=True, color_system=None)
        console.print(rendered)
        out = console.export_text()
        assert "[bold red]pwn[/]" in out and "\x1b" not in out
        await pilot.press("escape")
        await pilot.press("T")
        assert "[link=http://x]click[/link]" in app.screen.question().plain


async def test_nvml_unavailable_line():
    source = FakeSource(steps=1, nvml_error="NVML Shared Library Not Found")
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        status = str(app.query_one("#status").render())
        assert "NVML not available: NVML Shared Library Not Found" in status
        assert "showing 3 host processes" in status
        assert not app.query_one(DevicePanel).display
        assert len(pids(app)) == 3
        assert "gpumem-tui demo" not in status  # a probed job is on screen already
        from dataclasses import replace

        app.apply_snapshot(replace(app.snapshot, probes=()))
        assert "`gpumem-tui demo` runs a built-in training job" in str(app.status_bar.render())
        # at 80 columns the same facts fit the one-row status bar
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        narrow = str(app.status_bar.render())
        assert narrow.startswith("gpumem-tui no NVML: NVML Shared Library Not Found · 3 host processes")
        assert len(narrow) <= 80


async def test_the_status_line_follows_a_resize_before_the_next_poll():
    # The app's on_resize runs before Textual's App._on_resize records the new size: the line
    # was fitted to the old width and stayed so until a poll came (CI caught it once, at load).
    app = make_app(FakeSource(steps=1, nvml_error="NVML Shared Library Not Found"), interval=3600.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        polled = app.snapshot
        assert str(app.status_bar.render()).startswith("gpumem-tui NVML not available: ")
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert app.snapshot is polled  # no poll since: the resize alone redrew the line
        narrow = str(app.status_bar.render())
        assert narrow.startswith("gpumem-tui no NVML: NVML Shared Library Not Found · 3 host processes"), narrow
        assert len(narrow) <= 80


async def test_poller_keeps_running_when_poll_raises():
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        source.fail_with = RuntimeError("driver went away\nsecond line")
        before = source.polls
        await wait_for(pilot, lambda: app.poll_error is not None)
        status = str(app.query_one("#status").render())
        assert "poll failed: RuntimeError: driver went away second line" in status
        await wait_for(pilot, lambda: source.polls >= before + 3)  # still polling
        assert pids(app)  # last data stays on screen
        source.fail_with = None
        await wait_for(pilot, lambda: app.poll_error is None)
        assert "poll failed" not in str(app.query_one("#status").render())
    assert source.closed is False  # closing is run_dashboard's job


async def test_polls_do_not_overlap():
    import threading
    import time

    class Slow(FakeSource):
        def __init__(self):
            super().__init__()
            self.active = 0
            self.max_active = 0
            self.guard = threading.Lock()

        def poll(self):
            with self.guard:
                self.active += 1
                self.max_active = max(self.max_active, self.active)
            # stub slowness: a poll that takes 30 ms while the timer fires every 1 ms gives an
            # overlapping poll its chance; what is checked (never two at once) needs no timing
            time.sleep(0.03)
            try:
                return super().poll()
            finally:
                with self.guard:
                    self.active -= 1

    source = Slow()
    app = make_app(source, interval=0.001)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: source.polls >= 5)
    assert source.max_active == 1


async def test_bad_theme_file_falls_back_with_file_and_line(tmp_path):
    from gpumem_tui.ui.themes import bundled_theme_dir, load_themes as load

    (tmp_path / "broken.toml").write_text('primary = "#112233"\ndark = true\nbackground = "notacolour"\n')
    themes = load([bundled_theme_dir(), tmp_path])
    app = make_app(FakeSource(steps=1), themes=themes, theme="broken")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.theme == "dark"
        notes = [str(n.message) for n in app._notifications]
        assert any(f"{tmp_path / 'broken.toml'}:3:" in n and "notacolour" in n for n in notes)
        assert any("theme 'broken' could not be loaded; using 'dark'" in n for n in notes)


async def test_side_pane_wiring_gpu_total_probe_and_bands():
    from gpumem_tui.ui.estimator_panel import EstimatorPanel
    from gpumem_tui.ui.memory_bar import bands_from_estimate

    app = make_app(FakeSource(), side_pane=True, select_pid=1001)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_for(pilot, lambda: bool(app.query(EstimatorPanel)) and app.snapshot is not None)
        panel = app.query_one(EstimatorPanel)
        await wait_for(pilot, lambda: panel.estimate is not None and panel.process_pid == 1001)
        # selected process 1001 runs on GPU 0 (40 GiB): the panel checks the fit against it
        assert panel.budget_bytes == 40 * GiB
        # 1001's probe published no model config: no bands, and the chart says why
        assert app.chart.bands == [] and "no model config" in app.chart.bands_note
        # the user sets 1001's estimate in the pane: the chart overlays exactly that
        panel.set_form(batch=2)
        await wait_for(pilot, lambda: bool(app.bands))
        assert app.chart.bands == bands_from_estimate(panel.estimate)
        # selecting a process on GPU 1 moves the budget to that GPU's total
        app.table.select_pid(1003)
        await pilot.pause()
        assert app.chart_target == ("proc", 1003)
        assert app.selected_gpu() == 1 and panel.budget_bytes == 40 * GiB
        assert app.chart.bands == []  # 1003 has no estimate: 1001's is not drawn under it
        await pilot.press("e")
        assert not app.query_one("#side").display


class FakeReplay(FakeSource):
    """A replay-like source: pause/resume/seek/set_speed with position and duration."""

    def __init__(self):
        super().__init__()
        self.paused = False
        self.position = 30.0
        self.duration = 100.0
        self.speed = 1.0
        self.seeks = []

    def pause(self):
        self.paused = True

    def resume(self):
        self.paused = False

    def seek(self, seconds):
        self.seeks.append(seconds)
        self.position = seconds

    def set_speed(self, speed):
        self.speed = speed


async def test_replay_controls():
    source = FakeReplay()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        bar = app.replay_bar
        assert bar.display
        assert "▶ playing · 30.0 s / 100.0 s · ×1" in str(bar.render())
        await pilot.press("space")
        assert source.paused and "⏸ paused" in str(bar.render())
        await pilot.press("space")
        assert not source.paused
        await pilot.press("right", "right", "left")
        assert source.seeks == [40.0, 50.0, 40.0]
        await pilot.press("plus", "plus", "minus")
        assert source.speed == 2.0
        assert "×2" in str(bar.render())
        ids = {row[2] for row in app.help_rows()}
        assert {"replay_pause", "replay_back", "replay_forward", "replay_faster"} <= ids


async def test_live_source_has_no_replay_keys():
    app = make_app(FakeSource(steps=1))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert not app.replay_bar.display
        ids = {row[2] for row in app.help_rows()}
        assert "replay_pause" not in ids
        before = app.table.cursor_row
        await pilot.press("down")  # arrows still move the table cursor
        assert app.table.cursor_row == before + 1


async def test_first_probed_process_is_selected_without_select_pid():
    from dataclasses import replace

    from gpumem_tui.telemetry.model import ProbeInfo, ProbeSample

    class ProbedElsewhere(FakeSource):
        def poll(self):
            snap = super().poll()
            return replace(snap, probes=(ProbeSample(snap.time, 1006, "cpu", 123 * 2**20),),
                           probe_infos=(ProbeInfo(1006),), phase_marks=())

    app = make_app(ProbedElsewhere(steps=3))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert app.table.selected.pid == 1006
        assert app.chart_target == ("proc", 1006)
        await pilot.press("up")
        await wait_for(pilot, lambda: app.snapshot.time >= 1_700_000_002)
        assert app.table.selected.pid != 1006  # the user's move sticks
        assert app.chart.curves[0].label == "NVML used"


async def test_keymap_from_config_rebinds_by_id():
    app = make_app(FakeSource(steps=1), keymap=(("quit", "x"), ("toggle_bands", "B")))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("B")
        assert app.chart.show_bands is False
        keys = {row[2]: row[0] for row in app.help_rows()}
        assert keys["quit"] == "x"
        await pilot.press("x")
        await pilot.pause()
    assert not app.is_running


async def test_signal_end_to_end_with_real_signals_module():
    """A real child process: SIGTERM after confirmation; a wrong start time is refused."""
    import subprocess
    from dataclasses import replace

    import psutil

    from gpumem_tui.telemetry.model import ProcessSample, ProcessType

    child = subprocess.Popen(["sleep", "60"])
    decoy = subprocess.Popen(["sleep", "60"])
    try:
        me = psutil.Process(child.pid)
        good = ProcessSample(child.pid, 0, ProcessType.COMPUTE, 2**30, user=me.username(),
                             command="sleep 60", start_time=me.create_time())
        # same PID shown with another start time: what a reused PID looks like
        stale = ProcessSample(decoy.pid, 0, ProcessType.COMPUTE, 2**29, user=me.username(),
                              command="sleep 60", start_time=psutil.Process(decoy.pid).create_time() - 1000)

        class Real(FakeSource):
            def poll(self):
                return replace(super().poll(), processes=(good, stale), probes=(), probe_infos=())

        app = make_app(Real(steps=1))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.snapshot is not None)
            assert app.table.select_pid(decoy.pid)
            await pilot.press("T", "y")
            await pilot.pause()
            notes = [str(n.message) for n in app._notifications]
            assert any(f"SIGTERM not sent to PID {decoy.pid}" in n and "start time" in n for n in notes), notes
            assert decoy.poll() is None  # still running
            assert app.table.select_pid(child.pid)
            await pilot.press("T", "y")
            await pilot.pause()
            assert child.wait(timeout=60) == -signal.SIGTERM  # a hang guard
            notes = [str(n.message) for n in app._notifications]
            assert any(f"SIGTERM sent to PID {child.pid}" in n for n in notes)
    finally:
        for proc in (child, decoy):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def test_hanging_poll_is_reported():
    import threading

    release = threading.Event()

    class Hanging(FakeSource):
        def poll(self):
            if self.polls >= 1:
                release.wait(HANG_TIMEOUT)  # hangs until the test has seen the report (a slow
                # machine must not see the poll end by itself first)
            return super().poll()

    app = make_app(Hanging(), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await wait_for(pilot, lambda: app.poll_error is not None)
        assert "the last poll has been running for" in str(app.status_bar.render())
        release.set()
        await wait_for(pilot, lambda: app.poll_error is None)


async def test_reused_pid_starts_a_new_curve():
    from dataclasses import replace

    class Reuse(FakeSource):
        reused_after: float | None = None  # set by the test once the first curve is long enough

        def poll(self):
            snap = super().poll()
            if self.reused_after is not None and snap.time > self.reused_after:
                # PID 1002 now names a process started later
                procs = tuple(replace(p, start_time=snap.time - 0.5) if p.pid == 1002 else p for p in snap.processes)
                snap = replace(snap, processes=procs)
            return snap

    source = Reuse()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        # the first process's curve has 3 points (waited for: polls may arrive in a burst)
        await wait_for(pilot, lambda: len(app.history.points(("proc", 1002))) >= 3)
        source.reused_after = switch = source.poll().time  # polls after this one see the new process
        await wait_for(pilot, lambda: app.snapshot.time > switch)
        points = app.history.points(("proc", 1002))
        assert points and points[0][0] > switch  # a new curve: none of the old process's points


async def test_comparison_follows_the_selected_probed_process():
    from gpumem_tui.ui.comparison_view import ComparisonView
    from gpumem_tui.ui.estimator_panel import EstimatorPanel

    app = make_app(FakeSource(), side_pane=True, select_pid=1001)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_for(pilot, lambda: bool(app.query(EstimatorPanel)) and app.snapshot is not None)
        panel = app.query_one(EstimatorPanel)
        view = app.query_one(ComparisonView)
        await wait_for(pilot, lambda: panel.process_pid == 1001 and "no model config" in str(
            app.query_one("#cmp-figure").render()))
        panel.set_form(batch=2)  # the user's estimate for 1001 is compared with its samples
        await wait_for(pilot, lambda: view.result is not None)
        assert view.result.pid == 1001
        assert app.query_one("#cmp-table").row_count > 0
        # a process without a probe: the view says why there is nothing to compare
        app.table.select_pid(1002)
        await wait_for(pilot, lambda: view.result is None)
        assert "gpumem_tui.probe" in str(app.query_one("#cmp-figure").render())


class _ExitingJobSource(FakeSource):
    """The probed job (pid 1001) is listed for three polls, then exits."""

    def poll(self):
        snap = super().poll()
        if self.t > 3:
            from dataclasses import replace

            snap = replace(snap, processes=tuple(p for p in snap.processes if p.pid != 1001), probes=(),
                           phase_marks=())
        return snap


async def test_chart_stays_on_a_selected_process_that_exits():
    app = make_app(_ExitingJobSource(), select_pid=1001)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.chart_target == ("proc", 1001))
        source = app.source
        await wait_for(pilot, lambda: source.t > 5)
        await wait_for(pilot, lambda: all(p.pid != 1001 for p in app.snapshot.processes))
        # the ended job's curve stays on screen until the user moves the cursor
        assert app.chart_target == ("proc", 1001)
        assert app.query_one(MemoryChart).title.startswith("PID 1001")
        await pilot.press("down")
        assert app.chart_target != ("proc", 1001)


async def test_the_chart_draws_the_samples_its_throttle_skipped_once_they_stop_coming():
    """Samples closer than one chart cell are not redrawn one by one; when they stop (a
    finished or paused replay repeats its last record), the curve still reaches the last one."""
    from dataclasses import replace

    from ui_fakes import T0

    class Dense(FakeSource):
        def poll(self):  # noqa: ANN202
            snap = super().poll()
            return replace(snap, time=T0 + (snap.time - T0) * 0.01, probes=())  # 10 ms apart

    source = Dense(steps=25)
    app = make_app(source, interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: source.polls > 30)
        await wait_for(pilot, lambda: app.chart.now is not None and app.chart.now - T0 == pytest.approx(0.24))
        assert app.chart.seconds_per_cell() > 0.24  # the samples span less than one cell
        assert app.snapshot.time - T0 == pytest.approx(0.24)
        assert app.chart.now - T0 == pytest.approx(0.24)


async def test_device_panel_fits_the_column_beside_the_side_pane():
    # a panel wider than the column under it would put the side pane into the dirty box of
    # every poll's frame (issue 11's idle cost): its bar narrows to fit, down to a floor
    from gpumem_tui.ui.device_panel import BAR_WIDTH, NARROW_BAR_WIDTH

    app = make_app(FakeSource(), side_pane=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: side_pane_mounted(app) and app.snapshot is not None)
        panel = app.query_one(DevicePanel)
        # a poll after the pane took its width
        await wait_for(pilot, lambda: panel.fit_width == app.query_one("#left").size.width)
        others = sum(panel.column_widths) - panel.column_widths[3]
        # a column with room for a 15-cell bar
        panel.show(panel.devices, fit_width=others + 2 + 15)
        assert panel.column_widths[3] - 2 == 15 and len(panel.get_row_at(0)[3].plain) == 15
        assert sum(panel.column_widths) <= panel.fit_width and not panel.defer_repaint
        # with room to spare the bar keeps its full width
        panel.show(panel.devices, fit_width=400)
        assert panel.column_widths[3] - 2 == BAR_WIDTH and not panel.defer_repaint
        # a column too narrow for the floor: the bar stops at it and the panel repaints in a
        # frame of its own
        panel.show(panel.devices, fit_width=40)
        assert panel.column_widths[3] - 2 == NARROW_BAR_WIDTH and panel.defer_repaint
