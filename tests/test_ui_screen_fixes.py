"""What the dashboard screen says (tester's items 4-7): the status line keeps the filter, its
error and the `e` hint at 160, 120 and 80 columns; one documented default sort at every
size; the truth without NVML; a replay that ended says so, speeds are written as set, seek
notices replace each other; the help speaks words, not binding ids; a state-space config is
named as an unsupported family; config errors start with the file; the torch versions in
``estimate --help`` and the README are the ones the code and the H100 data give.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from rich.text import Text

from gpumem_tui.estimator.architecture import ArchitectureError, architecture_from_config, load_architecture
from gpumem_tui.estimator.devices.cuda_kernels import TORCH_VERSION_MEASURED, TORCH_VERSION_MODELLED
from gpumem_tui.telemetry.replay import ReplaySource
from gpumem_tui.ui import status_line
from gpumem_tui.ui.process_table import ProcessTable
from gpumem_tui.ui.screens import HelpScreen
from test_ui import make_app, pids, side_pane_mounted, wait_for
from ui_fakes import FakeSource
from waiting import settle

ROOT = Path(__file__).resolve().parents[1]
from shared_data import GPU_DIR as SHARED  # noqa: E402
from shared_data import H100_TRACE as TRACE  # noqa: E402
from shared_data import needs_gpu_dir  # noqa: E402
from shared_data import needs_h100_trace as needs_trace  # noqa: E402
SIZES = [(160, 50), (120, 40), (80, 24)]


# ---- item 4: the status line fits, keeping what the user set -----------------------------

def test_fit_drops_the_least_important_first_and_shortens_rewordings_before_dropping():
    seg = status_line.segment
    parts = [seg("title", 100), seg("driver 580.159.04", 30), seg("filter: gpu:x", 90),
             seg("NVML not available: boom", 70, "no NVML: boom", reword=True), seg("poll failed: long reason", 95, "poll failed")]
    full = status_line.fit(parts, 200).plain
    assert full == "title · driver 580.159.04 · filter: gpu:x · NVML not available: boom · poll failed: long reason"
    # a little too long: the rewording first, nothing lost
    assert status_line.fit(parts, len(full) - 5).plain == (
        "title · driver 580.159.04 · filter: gpu:x · no NVML: boom · poll failed: long reason")
    # shorter: the driver goes before the poll error loses its reason
    assert status_line.fit(parts, 70).plain == "title · filter: gpu:x · no NVML: boom · poll failed: long reason"
    # the poll error outranks the filter; its reason is the last thing it loses
    assert status_line.fit(parts, 40).plain == "title · poll failed: long reason"
    assert status_line.fit(parts, 25).plain == "title · poll failed"
    assert len(status_line.fit([seg("x" * 50, 100)], 20).plain) == 20  # the title alone is cut, never lost


@needs_trace
@pytest.mark.parametrize("size", SIZES, ids=["160", "120", "80"])
async def test_status_line_keeps_filter_its_error_and_the_e_hint(size):
    source = ReplaySource(TRACE, speed=8.0)
    app = make_app(source, side_pane=True, readonly=True, banner=f"replay of {TRACE.name}")
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and side_pane_mounted(app))
        await pilot.press("slash")
        await pilot.pause()
        await pilot.press(*"gpu:x")
        await pilot.pause()
        status = app.status_text().plain
        assert len(status) <= size[0] - 2, status
        assert "filter: gpu:x" in status and "gpu:x is not a GPU index" in status, status
        assert ("e: estimator" in status) == (size[0] < 160), status
        assert str(app.status_bar.render()) == status  # what is drawn is the fitted line


# ---- item 5: one default sort, the truth without NVML, the selection after a filter -------

@pytest.mark.parametrize("size", SIZES, ids=["160", "120", "80"])
async def test_default_sort_is_gpu_memory_else_rss_at_every_size(size):
    for source, wanted in ((FakeSource(steps=2), "mem"), (FakeSource(steps=2, nvml_error="NVML Shared Library Not Found"), "rss")):
        app = make_app(source, side_pane=True)
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: app.snapshot is not None and side_pane_mounted(app))
            table = app.query_one(ProcessTable)
            await wait_for(pilot, lambda: table.effective_sort == (wanted, True))  # noqa: B023
            assert wanted in table.visible_columns


async def test_without_nvml_the_chart_says_so_and_c_says_why_it_does_nothing():
    app = make_app(FakeSource(steps=2, nvml_error="NVML Shared Library Not Found"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.chart_target is not None)
        app.table.select_pid(1002)  # not probed: no curve at all
        await wait_for(pilot, lambda: app.chart_target == ("proc", 1002))
        await wait_for(pilot, lambda: (app.chart.message or "").startswith("no NVML"))
        message = app.chart.message or ""
        assert message.startswith("no NVML (NVML Shared Library Not Found)") and "reports none" not in message
        before = app.chart_target
        await pilot.press("c")
        await pilot.pause()
        assert app.chart_target == before
        assert any("no GPU chart: NVML is not available" in n.message for n in app._notifications)


async def test_esc_after_a_filter_matching_nothing_goes_back_to_the_process_charted_before():
    app = make_app(FakeSource(steps=2, nvml_error="NVML Shared Library Not Found"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.chart_target is not None)
        await pilot.press("down", "down")
        chosen = app.table.selected.pid
        assert chosen != pids(app)[0] and app.chart_target == ("proc", chosen)
        await pilot.press("slash")
        await pilot.pause()
        await pilot.press(*"nothing-matches-this")
        await pilot.pause()
        assert app.chart_target is None and pids(app) == []
        await pilot.press("escape")
        await pilot.pause()
        assert app.chart_target == ("proc", chosen) and app.table.selected.pid == chosen


# ---- item 6: the replay line, speeds, seek notices -----------------------------------------

@needs_trace
async def test_replay_says_ended_speed_as_set_and_one_seek_notice():
    source = ReplaySource(TRACE, speed=64.0)
    app = make_app(source, side_pane=False, interval=0.05)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: source.finished and app.snapshot is not None)
        await wait_for(pilot, lambda: "■ ended" in app.replay_text().plain)
        line = app.replay_text().plain
        assert "■ ended" in line and "playing" not in line
        source.set_speed(0.5)
        assert "×0.5 " in app.replay_text().plain + " " and status_line.speed_text(0.125) == "×0.125"
        for _ in range(4):
            shown = app._position_notice
            await pilot.press("left")
            # each seek's own "replay at" notice is shown before the next seek (else four seeks
            # could make one notice and the check below would prove nothing)
            await settle(pilot, lambda: app._position_notice is not shown and app._position_notice in app._notifications,
                         what="the seek's position notice")
        seeks = [n for n in app._notifications if n.message.startswith("replay at ")]
        assert len(seeks) == 1, [n.message for n in seeks]  # the last position, not four stacked
        assert "ended" not in app.replay_text().plain  # back from the end: playing again


def test_replay_banner_has_no_speed_of_its_own():
    """The header named the start speed ("x1") after the speed changed: the replay line is
    the one place for it."""
    from gpumem_tui.ui import replay_cli

    source = Path(replay_cli.__file__).read_text(encoding="utf-8")
    assert 'banner=f"replay of {args.trace.name}"' in source


# ---- item 7: help, config errors, torch versions ------------------------------------------

async def test_help_shows_what_each_key_does_not_binding_ids():
    app = make_app(FakeSource(steps=1))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        from rich.console import Console

        console = Console(width=120, file=io.StringIO(), color_system=None)
        console.print(app.screen.query_one("#help-table").content)
        shown = console.file.getvalue()
        assert "Scale the chart to the GPU total" in shown
        assert "toggle_fit_total" not in shown and "window_shorter" not in shown


def test_a_state_space_config_is_an_unsupported_family_pointing_at_params():
    mamba = {"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24, "vocab_size": 50280,
             "state_size": 16, "conv_kernel": 4, "expand": 2}
    for config in (mamba, {**mamba, "model_type": "my_ssm"}):  # by name, or by its fields
        with pytest.raises(ArchitectureError) as info:
            architecture_from_config(config, name="mamba/config.json")
        message = str(info.value)
        assert message.startswith("mamba/config.json: model_type ") and repr(config["model_type"]) in message
        assert "not supported" in message and "--params" in message and "lacks field" not in message
        assert "\n" not in message


def test_config_errors_start_with_the_file(tmp_path):
    missing_heads = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}
    bad_kv = {**missing_heads, "num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 128}
    path = tmp_path / "config.json"
    cases = [missing_heads, bad_kv, {"hidden_size": 1}, [1]]
    for config in cases:
        path.write_text(__import__("json").dumps(config))
        with pytest.raises(ArchitectureError) as info:
            load_architecture(str(path))
        assert str(info.value).startswith(f"{path}: "), str(info.value)
    with pytest.raises(ArchitectureError) as info:
        load_architecture(str(tmp_path / "nothere.json"))
    assert str(info.value).startswith(f"{tmp_path / 'nothere.json'}: ")


def test_estimate_help_and_readme_give_the_torch_versions_the_code_and_data_give():
    from gpumem_tui.estimator.cli import build_parser

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        build_parser().print_help()
    text = " ".join(out.getvalue().split())
    assert f"models torch {TORCH_VERSION_MODELLED}'s kernel selection" in text
    assert f"torch {TORCH_VERSION_MEASURED}, with which they were checked on an H100" in text
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"rules of torch {TORCH_VERSION_MODELLED}, unchanged since torch {TORCH_VERSION_MEASURED}" in readme
    assert "rules of torch 2.11 on an H100" not in readme


@needs_gpu_dir
def test_the_h100_data_were_taken_with_the_torch_the_help_names():
    assert f"torch {TORCH_VERSION_MEASURED}.0+cu130" in (SHARED / "README.md").read_text(encoding="utf-8")


def test_text_helpers_are_literal():
    line = status_line.replay_line(paused=False, ended=True, position=20.0, duration=20.0, speed=0.5, keys=False)
    assert isinstance(line, Text) and line.plain == "replay ■ ended · 20.0 s / 20.0 s · ×0.5"


class _Reordering:
    """30 host processes without NVML; once ``moved`` is set, PID 1020 has the most RSS (it
    moves from row 20 to the top)."""

    def __init__(self) -> None:
        self.polls = 0
        self.moved = False

    def poll(self):
        from gpumem_tui.telemetry.model import ProcessSample, ProcessType, Snapshot

        self.polls += 1
        rows = []
        for i in range(30):
            pid = 1000 + i
            rss = 500 * 2**20 if pid == 1020 and self.moved else (100 - i) * 2**20
            rows.append(ProcessSample(pid, None, ProcessType.HOST, None, None, "u", f"job {i}", 1.0, rss, None))
        return Snapshot(time=1_700_000_000.0 + self.polls, driver_version=None, cuda_driver_version=None,
                        nvml_error="NVML Shared Library Not Found", devices=(), processes=tuple(rows))

    def close(self) -> None:
        pass


async def test_the_charted_row_stays_in_sight_when_the_sort_moves_it():
    source = _Reordering()
    app = make_app(source, select_pid=1020, interval=0.1)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.chart_target == ("proc", 1020))
        table = app.query_one(ProcessTable)
        await wait_for(pilot, lambda: table.cursor_row == 20 and table.cursor_row in table.rows_on_screen())
        assert table.cursor_row in table.rows_on_screen()  # selected at start: scrolled to it
        assert table.rows_on_screen().start > 0
        source.moved = True
        await wait_for(pilot, lambda: table.shown and table.shown[0].pid == 1020)  # now the largest
        await pilot.pause()
        assert table.selected.pid == 1020 and table.cursor_row == 0
        assert table.cursor_row in table.rows_on_screen()  # followed, not left above the view


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.tuples(st.text(alphabet="abc xyz", min_size=1, max_size=30), st.integers(0, 99),
                             st.one_of(st.none(), st.text(alphabet="ab", min_size=1, max_size=8)), st.booleans()),
                   min_size=1, max_size=8),
    width=st.integers(10, 200),
)
def test_fit_always_fits_and_drops_by_priority(parts, width):
    # each segment is marked <i> (its full form) or {i} (its short form) to see what stayed
    segments = [status_line.segment("TITLE", 100)] + [
        status_line.segment(f"<{i}>{t}", p, None if s is None else f"{{{i}}}{s}", reword=r)
        for i, (t, p, s, r) in enumerate(parts)]
    line = status_line.fit(segments, width).plain
    assert len(line) <= width
    assert line.startswith("TITLE"[: width - 1])
    if len(line) < len("TITLE") + 2:
        return  # only the title, cut: nothing else to check
    for i, (_, priority, short, reword) in enumerate(parts):
        dropped = f"<{i}>" not in line and f"{{{i}}}" not in line
        lost_words = f"{{{i}}}" in line and not reword  # its short form loses something
        if dropped or lost_words:
            # every strictly less important segment went before it
            for j, (_, other, _, _) in enumerate(parts):
                if other < priority:
                    assert f"<{j}>" not in line and f"{{{j}}}" not in line, (i, j, line)


async def test_the_estimator_key_is_offered_before_the_pane_mounts_and_brings_it():
    """A served page starts unfocused and Textual's Footer does not redraw while the app lacks
    focus, so the `e` binding must be active from the first frame, not only once the pane (mounted
    after the first frame) is there; pressing it then mounts the pane and toggles it."""
    app = make_app(FakeSource(steps=2), side_pane=True)
    app._mount_side_pane = lambda: None  # hold the pane back, as a slow first frame would  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not app.has_side_pane
        assert "toggle_side" in {b.action for _, b, enabled, _ in app.active_bindings.values() if enabled}
        del app._mount_side_pane  # the real method again
        await pilot.press("e")
        await wait_for(pilot, lambda: side_pane_mounted(app))
        assert app.query_one("#side").display  # narrow size class: hidden by default, shown by `e`
