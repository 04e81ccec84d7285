"""Issue 13, screens that hide what they should say (items 6-10, 12, 13): each test here
fails on the code before the fix."""

from __future__ import annotations

from textual.widgets import Input

from test_ui import SIZE, FakeReplay, make_app, wait_for


async def test_replay_keys_leave_a_focused_text_field_alone():
    """Item 12: Left in a text field moves its cursor; it does not seek the replay."""
    source = FakeReplay()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("slash")
        box = app.query_one("#filter", Input)
        assert box.has_focus
        await pilot.press("8", "left", "1", "space", "plus")
        assert box.value == "1 +8"  # the cursor moved left of the 8
        assert source.seeks == [] and not source.paused and source.speed == 1.0
        await pilot.press("enter")  # back on the table: the replay keys work again
        await pilot.press("right")
        assert source.seeks == [40.0]


def _header_line(app) -> str:
    """The process table's header row as drawn (cut to the column widths)."""
    return app.table.render_line(0).text


async def test_the_sorted_column_shows_its_arrow_whichever_it_is():
    """Item 7: GPU, PID, USER, SM% and TIME headers were sized before the arrow was added,
    which cut it off; every column now shows it."""
    from gpumem_tui.ui.process_columns import _BY_KEY, COLUMN_KEYS

    app = make_app()
    async with app.run_test(size=(200, 40)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.table.row_count > 0)
        table = app.table
        for key in (k for k in COLUMN_KEYS if k in table.visible_columns):
            for reverse in (True, False):
                table.set_sort(key, reverse=reverse)
                await pilot.pause()
                shown = _header_line(app)
                arrow = "▼" if reverse else "▲"
                assert f"{_BY_KEY[key].label} {arrow}" in shown, (key, shown)
                assert shown.count("▼") + shown.count("▲") == 1, shown


async def test_palette_screenshot_saves_in_the_working_directory_and_says_where(tmp_path, monkeypatch):
    """Item 9: with no ~/Downloads the palette's Screenshot failed; it now saves under the
    working directory (or ``screenshot_dir``) and the notification names the file."""
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DOWNLOAD_DIR", raising=False)
    monkeypatch.chdir(work)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        command = next(c for c in app.get_system_commands(app.screen) if c.title == "Screenshot")
        command.callback()
        await wait_for(pilot, lambda: any("saved to" in n.message for n in app._notifications))
        saved = next(work.glob("*.svg"))
        assert saved.read_text().startswith("<svg")
        assert saved.stat().st_mode & 0o077 == 0
        messages = [n.message for n in app._notifications]
        assert any(str(saved) in m for m in messages), messages


async def test_screenshot_dir_from_the_config_and_a_clear_refusal(tmp_path):
    from gpumem_tui.ui.config import parse_config

    assert parse_config('screenshot_dir = "~/shots"').screenshot_dir == "~/shots"
    assert parse_config("screenshot_dir = 3").notices
    shots = tmp_path / "shots"
    shots.mkdir()
    app = make_app(screenshot_dir=str(shots))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        saved = app.deliver_screenshot()
        assert saved is not None and saved.startswith(str(shots))
        app.screenshot_dir = str(tmp_path / "missing")
        assert app.deliver_screenshot() is None
        await pilot.pause()
        last = list(app._notifications)[-1].message
        assert "missing" in last and "No such file" in last


async def test_a_filter_that_matches_nothing_says_so_and_the_chart_follows_it():
    """Item 8: the table says why it is empty; the chart and pane never show a row the filter
    hid, and follow the row the filter leaves."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.table.row_count > 0)
        assert app.chart_pid() == 1001  # the probed process is selected first
        await pilot.press("slash", *"serve")
        await wait_for(pilot, lambda: [p.pid for p in app.table.shown] == [1002])
        assert app.chart_target == ("proc", 1002) and app.chart_pid() == 1002
        assert "1002" in app.chart.title
        await pilot.press(*"zzz")
        await wait_for(pilot, lambda: not app.table.shown)
        assert app.table_empty.display
        assert str(app.table_empty.render()) == "no process matches 'servezzz' · esc clears"
        assert app.chart_target is None and app.chart_pid() is None
        assert "no process matches" in (app.chart.message or "")
        seen = app.snapshot.time
        await wait_for(pilot, lambda: app.snapshot.time >= seen + 2)  # two new polls keep it that way
        assert app.chart_target is None and app.table_empty.display
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.chart_target is not None)
        # (the fake lists a PID /proc cannot see: the namespace note stays)
        assert "no process matches" not in str(app.table_empty.render())
        assert app.chart_target[0] == "proc"


def _dead_pid() -> int:
    import psutil

    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


def test_snapshot_shows_question_marks_and_one_note_for_an_invisible_pid(fake_nvml, spawn):
    """Item 6: a PID NVML lists but /proc does not: "?" in User/CPU/RSS/Command, one note
    (text table and JSON), not the 72-character hint in every column."""
    from gpumem_tui.telemetry.host import HostEnricher
    from gpumem_tui.telemetry.model import NAMESPACE_NOTE
    from gpumem_tui.telemetry.snapshot_cli import format_table, snapshot_to_json, take_snapshot

    alive = spawn()
    hidden = _dead_pid()
    fake_nvml.add_process(0, pid=alive.pid, used=1 << 30)
    fake_nvml.add_process(0, pid=hidden, used=2 << 30)
    fake_nvml.add_process(1, pid=hidden, used=3 << 30)
    snap = take_snapshot(0, host=HostEnricher(in_container=True))
    doc = snapshot_to_json(snap)
    assert doc["note"] == NAMESPACE_NOTE
    hidden_rows = [p for p in doc["processes"] if p["pid"] == hidden]
    assert len(hidden_rows) == 2 and all(p["user"] is None and p["command"] is None for p in hidden_rows)
    table = format_table(snap)
    assert table.count("--pid=host") == 1 and table.endswith(NAMESPACE_NOTE)
    for line in (line for line in table.splitlines() if f" {hidden} " in line):
        # User, CPU, RSS and Command each read "?"
        assert line.split()[-4:] == ["?", "?", "?", "?"], line
    assert len(max(table.splitlines()[:-1], key=len)) <= 120


async def test_dashboard_shows_question_marks_and_one_notice_for_invisible_pids(fake_nvml, spawn):
    from gpumem_tui.telemetry.host import HostEnricher
    from gpumem_tui.telemetry.live import LiveSource
    from gpumem_tui.telemetry.model import NAMESPACE_NOTE
    from gpumem_tui.ui.screens import detail_rows

    alive = spawn()
    hidden = [_dead_pid(), _dead_pid() - 1]
    fake_nvml.add_process(0, pid=alive.pid, used=1 << 30)
    for pid in hidden:
        fake_nvml.add_process(0, pid=pid, used=2 << 30)
    source = LiveSource(host=HostEnricher(in_container=True))
    app = make_app(source)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.table.row_count == 3)
        await wait_for(pilot, lambda: str(app.table_empty.render()) == NAMESPACE_NOTE)
        await pilot.pause()  # the frame with it
        screen = app.export_screenshot()
        assert screen.count("--pid=host") == 1  # one notice for the whole table
        assert str(app.table_empty.render()) == NAMESPACE_NOTE
        row = next(p for p in app.table.shown if p.pid == hidden[0])
        rendered = [str(getattr(c, "plain", c)) for c in app.table.get_row(f"{hidden[0]}:0")]
        keys = app.table.visible_columns
        for column in ("user", "cpu", "rss", "command"):
            assert rendered[keys.index(column)] == "?", (column, rendered)
        details = detail_rows(row, app.snapshot.time, None)
        assert sum("--pid=host" in text.plain for _, text in details) == 1


def test_seeking_forward_at_the_end_of_a_replay_says_nothing_new(tmp_path):
    """Item 13: each → at the end of a replay toasted "replay at 20.0 s of 20.0 s" and
    "replay finished" again; the end is now said once."""
    from gpumem_tui.telemetry.replay import ReplaySource
    from test_replay import Clock, make_snapshot, write_trace

    path = tmp_path / "t.jsonl"
    write_trace(path, [make_snapshot(1000.0 + i, i) for i in range(5)])
    clock = Clock()
    src = ReplaySource(path, clock=clock)
    said = list(src.poll().notices)
    clock.now = 10.0
    for _ in range(3):
        said += src.poll().notices
        src.seek(src.position + 10)  # what → does
        said += src.poll().notices
    assert [n for n in said if "finished" in n] == ["replay finished (4.0 s, 5 records)"]
    assert not any("replay at" in n for n in said)
    src.seek(1.0)  # a real move still says where it is, and the end is said again later
    assert any("replay at 1.0 s of 4.0 s" in n for n in src.poll().notices)


def test_replay_with_an_unknown_theme_exits_2_with_one_line(tmp_path, capsys):
    """Item 13: like the dashboard, not a window with a toast."""
    from gpumem_tui.ui import replay_cli
    from test_replay import make_snapshot, write_trace

    path = tmp_path / "t.jsonl"
    write_trace(path, [make_snapshot(1000.0 + i, i) for i in range(3)])
    assert replay_cli.main([str(path), "--theme", "nosuch"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("gpumem-tui replay: unknown theme 'nosuch'; available: ") and "dark" in err


def test_container_cell_and_filter_show_the_pid_inside_the_container():
    """Item 6, the "better" part: run on the host, a containerised process shows its
    container and the PID it has there (NSpid); the filter finds it by either."""
    from gpumem_tui.telemetry.model import ProcessSample, ProcessType
    from gpumem_tui.ui import cells
    from gpumem_tui.ui.process_table import ProcessFilter

    boxed = ProcessSample(pid=48213, device_index=0, type=ProcessType.COMPUTE, container="docker cdcdcdcdcdcd",
                          container_pid=42, command="python train.py")
    assert cells.container(boxed).plain == "docker cdcdcdcdcdcd pid 42"
    assert cells.container(ProcessSample(pid=1, device_index=0, type=ProcessType.COMPUTE)).plain == "-"
    assert ProcessFilter.parse("cdcdcd").matches(boxed)
    assert ProcessFilter.parse("42").matches(boxed)
    assert not ProcessFilter.parse("43").matches(boxed)
