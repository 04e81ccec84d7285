"""Fleet against a hostile Prometheus (tests/fake_prometheus.py): markup and terminal control in
labels, numbers that are not plausible, timestamps that are not numbers, answers too large,
targets down or gone; through ``fleet --once``, ``--once --json`` and the screen."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from cli_inprocess import run_cli
from fake_prometheus import GiB, FakePrometheus, series
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.text import Text

from gpumem_tui.remote import fleet_prometheus
from gpumem_tui.remote.fleet import PrometheusClient, PrometheusError, format_table, read_fleet
from gpumem_tui.ui.fleet_screen import BLOCKS, FleetApp, FleetPoller, HostScreen, MemoryBars, bars
from gpumem_tui.support.text import printable
from gpumem_tui.ui.themes import load_themes
from waiting import settle

MARKUP_HOST = "[bold red]pwn[/]:9835"
CONTROL_HOST = "\x1b]0;owned\x07\x1b[2Jevil:9835"
MARKUP_COMMAND = "[link=http://x]train[/] [/]"


@pytest.fixture
def prom():
    fake = FakePrometheus()
    yield fake
    fake.close()


def _once(url: str, *extra: str) -> subprocess.CompletedProcess:
    # in this process (tests/cli_inprocess.py): the same dispatcher, output and exit code
    return run_cli("fleet", "--prometheus", url, "--once", *extra, timeout=60)


def _hostile(prom: FakePrometheus) -> None:
    prom.add_gpumem_host("good:9835", gpus=2)
    prom.add_gpumem_host(MARKUP_HOST, pid="[/]", command=MARKUP_COMMAND)
    prom.add_gpumem_host(CONTROL_HOST, used="1e303")
    prom.add_gpumem_host("nan:9835", used="NaN", util="+Inf")
    prom.add_gpumem_host("negative:9835", used="-5", total="1e308", util="7")
    prom.vectors.setdefault("DCGM_FI_DEV_FB_USED", []).append(series({"instance": "dcgm:9400", "gpu": "0"}, "1e303"))
    prom.vectors.setdefault("DCGM_FI_DEV_FB_FREE", []).append(series({"instance": "dcgm:9400", "gpu": "0"}, "not a number"))


def test_implausible_values_are_none_with_one_notice(prom):
    _hostile(prom)
    reading = read_fleet(PrometheusClient(prom.url))
    rows = {r.host: r for r in reading.hosts}
    assert rows["good:9835"].used_bytes == 2 * GiB and rows["good:9835"].utilization == 0.5
    assert rows[CONTROL_HOST].used_bytes is None and rows[CONTROL_HOST].total_bytes == 80 * GiB
    assert rows["nan:9835"].used_bytes is None and rows["nan:9835"].utilization is None
    neg = rows["negative:9835"]
    assert (neg.used_bytes, neg.total_bytes, neg.utilization) == (None, None, None)
    assert neg.biggest is not None and neg.biggest[2] is None
    dcgm = rows["dcgm:9400"]
    assert dcgm.source == "dcgm" and dcgm.used_bytes is None and dcgm.total_bytes is None
    # one line: the first refused value named (host made printable), then how many more
    [notice] = reading.notices
    assert notice.startswith("shown as N/A: ") and "more" in notice and "\x1b" not in notice


def test_once_table_prints_labels_as_visible_escapes_and_na(prom):
    _hostile(prom)
    proc = _once(prom.url)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "warning: shown as N/A" in proc.stderr
    for stream in (proc.stdout, proc.stderr):
        assert "\x1b" not in stream and "\x07" not in stream
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()[1:]}
    assert "N/A / 80.0 GiB" in lines[printable(CONTROL_HOST, 28).split()[0]]
    assert "\\x1b]0;owned\\x07" in proc.stdout and MARKUP_HOST in proc.stdout
    # no 300-digit byte counts: every memory figure is N/A or a binary unit
    assert re.search(r"\d{16}", proc.stdout) is None


def test_once_json_keeps_labels_whole_and_values_null(prom):
    _hostile(prom)
    proc = _once(prom.url, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout  # json.dumps writes \u001b
    rows = {r["host"]: r for r in json.loads(proc.stdout)}
    assert rows[CONTROL_HOST]["used_bytes"] is None and rows[CONTROL_HOST]["up"] is True
    assert rows[MARKUP_HOST]["biggest_process"] == {"pid": "[/]", "command": MARKUP_COMMAND, "used_bytes": GiB}
    assert rows["negative:9835"]["utilization"] is None and rows["nan:9835"]["per_gpu"][0]["used_bytes"] is None


def test_down_target_is_a_down_row_with_its_last_seen_age(prom):
    prom.add_gpumem_host("alive:9835")
    prom.add_gpumem_host("dead:9835")
    prom.set_down("dead:9835", last_up=time.time() - 42)
    prom.add_gpumem_host("never:9835")
    prom.set_down("never:9835", last_up=None)
    proc = _once(prom.url, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["host"]: r for r in json.loads(proc.stdout)}
    assert rows["alive:9835"]["up"] is True and rows["alive:9835"]["last_seen"] is None
    dead = rows["dead:9835"]
    assert dead["up"] is False and dead["gpus"] == 0 and 41 <= dead["last_seen_age_s"] <= 60
    assert rows["never:9835"]["up"] is False and rows["never:9835"]["last_seen"] is None
    assert "2 hosts down: dead:9835 (last seen 4" in proc.stderr
    table = _once(prom.url)
    assert "down, last seen 4" in table.stdout and "down, not seen up in 1h" in table.stdout


def test_up_values_and_last_seen_times_are_checked(prom):
    prom.add_gpumem_host("odd:9835")
    prom.up["gpumem"][0]["value"][1] = "NaN"  # neither up nor down: not a down row, a notice
    prom.add_gpumem_host("future:9835")
    prom.set_down("future:9835", last_up=time.time() + 10**9)
    reading = read_fleet(PrometheusClient(prom.url))
    rows = {r.host: r for r in reading.hosts}
    assert rows["odd:9835"].up is True
    assert rows["future:9835"].up is False and rows["future:9835"].last_seen is None
    assert "up = not a number" in reading.notices[0] or "up = nan" in reading.notices[0]


def test_host_that_stops_reporting_becomes_a_down_row():
    fake = FakePrometheus()
    try:
        fake.add_gpumem_host("a:9835")
        fake.add_gpumem_host("b:9835")
        poller = FleetPoller(PrometheusClient(fake.url))
        first = poller.refresh()
        assert [h.up for h in first.hosts] == [True, True]
        fake.vectors, fake.up = {}, {}  # b's job and series are gone entirely
        fake.add_gpumem_host("a:9835")
        second = poller.refresh()
        by_host = {h.host: h for h in second.hosts}
        assert by_host["a:9835"].up and not by_host["b:9835"].up
        assert by_host["b:9835"].last_seen == first.updated_at
    finally:
        fake.close()


def test_answers_over_the_limits_are_refused_with_one_line(prom):
    prom.raw["/api/v1/query"] = b"[" + b"{}," * (11 * 2**20) + b"{}]"  # > 32 MiB of tiny objects
    with pytest.raises(PrometheusError, match="larger than 32 MiB"):
        PrometheusClient(prom.url).query("up")
    proc = _once(prom.url)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "larger than 32 MiB" in proc.stderr
    # under the byte limit but millions of values: refused before decoding
    prom.raw["/api/v1/query"] = b'{"status":"success","data":{"resultType":"vector","result":[' + b"[]," * 2_100_000 + b"[]]}}"
    with pytest.raises(PrometheusError, match="JSON values"):
        PrometheusClient(prom.url).query("up")
    # not JSON: said so, printable
    prom.raw["/api/v1/query"] = b"\x1b[2J<html>"
    with pytest.raises(PrometheusError, match="not a Prometheus API") as info:
        PrometheusClient(prom.url).query("up")
    assert "\x1b" not in str(info.value)


def test_series_beyond_the_cap_are_left_out_with_a_notice(prom, monkeypatch):
    monkeypatch.setattr(fleet_prometheus, "MAX_SERIES", 3)
    prom.add_gpumem_host("big:9835", gpus=5)
    reading = read_fleet(PrometheusClient(prom.url))
    assert len(reading.hosts[0].gpus) == 3
    assert any("2 series beyond the first" in n for n in reading.notices)


def test_many_series_of_one_host_group_by_gpu(prom):
    prom.add_gpumem_host("wide:9835", gpus=3000)
    [row] = read_fleet(PrometheusClient(prom.url)).hosts
    assert [g.gpu for g in row.gpus[:3]] == ["0", "1", "2"] and len(row.gpus) == 3000
    assert row.used_bytes == 3000 * GiB


def test_range_points_with_bad_timestamps_are_dropped(prom):
    prom.ranges["gpumem_gpu_memory_used_bytes"] = [{"metric": {"gpu": "0"}, "values": [
        ["soon", "1"], [None, "1"], [float("1e300"), "1"], [-5, "1"], [1.7e9, "1e303"], [1.7e9 + 1, str(GiB)]]}]
    history, problems = FleetPoller(PrometheusClient(prom.url)).history("h:1")
    assert history == {"0": [(1.7e9, None), (1.7e9 + 1, GiB)]}
    assert "4 points with an impossible timestamp left out" in problems and problems[0].startswith("shown as N/A")


def test_bars_scale_from_zero():
    assert bars([5.0] * 4, 10) == BLOCKS[-1] * 4  # constant non-zero: full height, not zero
    assert bars([0.0] * 4, 10) == BLOCKS[0] * 4  # zero: the baseline
    assert bars([0.0, 4.0, None, 8.0], 10) == BLOCKS[0] + BLOCKS[4] + " " + BLOCKS[-1]
    assert bars([1.0, 8.0, 0.0, 0.0], 2) == BLOCKS[-1] + BLOCKS[0]  # a cell shows its values' maximum
    assert bars([], 10) == "" and bars([1.0], 0) == ""


def _cells(table, row: int) -> list:
    return table.get_row_at(row)


async def _wait(pilot, cond):
    await settle(pilot, cond, what="the fleet screen state the test needs", poll=0.1)


async def test_screen_draws_hostile_labels_literally_and_down_rows(prom, tmp_path):
    from textual.widgets import DataTable, Static

    _hostile(prom)
    prom.add_gpumem_host("dead:9835")
    prom.set_down("dead:9835", last_up=time.time() - 42)
    prom.ranges["gpumem_gpu_memory_used_bytes"] = [{"metric": {"gpu": "0"}, "values": [["x", "1"], [1.7e9, str(GiB)]]}]
    app = FleetApp(FleetPoller(PrometheusClient(prom.url)), themes=load_themes(), screenshot_dir=str(tmp_path))
    async with app.run_test(size=(160, 30)) as pilot:
        table = app.query_one("#hosts", DataTable)
        await _wait(pilot, lambda: table.row_count == 7)
        rows = {str(_cells(table, i)[0]): _cells(table, i) for i in range(table.row_count)}
        markup = rows[MARKUP_HOST]
        assert isinstance(markup[0], Text) and markup[0].plain == MARKUP_HOST and not markup[0].spans
        assert MARKUP_COMMAND[:20] in markup[7].plain
        assert printable(CONTROL_HOST, 60) in rows and rows[printable(CONTROL_HOST, 60)][4] == "N/A"
        assert str(rows["dead:9835"][2]).startswith("DOWN last seen 4")
        notice = str(app.query_one("#notice", Static).render())
        assert notice.startswith("7 hosts, sorted by host") and "1 host down: dead:9835" in notice
        assert "shown as N/A" in notice and "\x1b" not in notice
        assert app.theme == "dark"  # the dashboard's theme files
        # Enter on the markup host: its screen, a non-numeric timestamp dropped, no crash
        table.move_cursor(row=next(i for i in range(table.row_count) if str(_cells(table, i)[0]) == MARKUP_HOST))
        await pilot.press("enter")
        await _wait(pilot, lambda: isinstance(app.screen, HostScreen) and len(app.screen.query(MemoryBars)) == 1)
        screen = app.screen
        assert "[/]" in str(screen.query_one("#host-title", Static).render())
        assert "1 point with an impossible timestamp" in str(screen.query_one("#history-note", Static).render())
        await pilot.press("escape")
        await _wait(pilot, lambda: not isinstance(app.screen, HostScreen))
        saved = app.deliver_screenshot()  # the palette's Screenshot
        assert saved is not None and Path(saved).parent == tmp_path and Path(saved).stat().st_size > 0


async def test_escape_clears_and_hides_the_filter(prom):
    from textual.widgets import DataTable, Input, Static

    prom.add_gpumem_host("alpha:9835")
    prom.add_gpumem_host("beta:9835")
    app = FleetApp(FleetPoller(PrometheusClient(prom.url)))
    async with app.run_test(size=(150, 30)) as pilot:
        table = app.query_one("#hosts", DataTable)
        box = app.query_one("#filter", Input)
        await _wait(pilot, lambda: table.row_count == 2)
        await pilot.press("slash", *"beta")
        await _wait(pilot, lambda: table.row_count == 1)
        assert box.display and "1 of 2 hosts" in str(app.query_one("#notice", Static).render())
        await pilot.press("escape")  # from inside the box
        await _wait(pilot, lambda: table.row_count == 2)
        assert box.value == "" and not box.display and app.focused is table
        await pilot.press("slash", *"alpha", "enter", "escape")  # from the table
        await _wait(pilot, lambda: table.row_count == 2 and not box.display)
        prom.vectors, prom.up = {}, {}
        prom.add_gpumem_host("alpha:9835")
        await pilot.press("r")  # beta stops reporting: a down row, "2 hosts", "1 host down"
        await _wait(pilot, lambda: "1 host down" in str(app.query_one("#notice", Static).render()))
        assert str(app.query_one("#notice", Static).render()).startswith("2 hosts,")
        assert app.theme == "dark"  # the dashboard's theme files, read when none are given


_LABEL_VALUE = st.one_of(st.text(max_size=12), st.integers(), st.floats(), st.none(), st.lists(st.integers(), max_size=2))
_NUMBER = st.one_of(st.text(max_size=8), st.floats(), st.integers(min_value=-10**400, max_value=10**400),
                    st.booleans(), st.none(), st.sampled_from(["1e303", "-5", "NaN", "+Inf", "-Inf", "0", "1", "0.5"]))
_SERIES = st.fixed_dictionaries({
    "metric": st.one_of(st.dictionaries(st.sampled_from(["instance", "gpu", "pid", "command", "name", "job", "x"]),
                                        _LABEL_VALUE, max_size=5), st.text(max_size=3), st.none()),
    "value": st.one_of(st.lists(_NUMBER, min_size=0, max_size=3), _NUMBER),
    "values": st.lists(st.one_of(st.lists(_NUMBER, min_size=2, max_size=2), _NUMBER), max_size=4),
})


class _Canned(PrometheusClient):
    """Every query answered with the same body, as if it came over HTTP."""

    def __init__(self, body: bytes) -> None:
        super().__init__("http://127.0.0.1:9")
        self.body = body

    def _read(self, address: str) -> tuple[bytes, str]:
        return self.body, "application/json"


@settings(max_examples=150, deadline=None)
@given(st.lists(_SERIES, max_size=6), st.sampled_from(["vector", "matrix"]))
def test_any_answer_gives_rows_or_one_error_never_a_crash(result, kind):
    body = json.dumps({"status": "success", "data": {"resultType": kind, "result": result}}).encode()
    client = _Canned(body)
    try:
        reading = read_fleet(client, now=1.7e9)
    except PrometheusError as exc:
        assert kind == "matrix" and "wanted a vector" in str(exc)
    else:
        text = format_table(reading.hosts, reading.read_at) + "\n".join(reading.notices)
        assert not any(ord(c) < 32 and c != "\n" for c in text)
        rows = json.loads(json.dumps([r.to_json(reading.read_at) for r in reading.hosts], allow_nan=False))
        for row in rows:
            for figure in (row["used_bytes"], row["total_bytes"], *(g["used_bytes"] for g in row["per_gpu"])):
                assert figure is None or 0 <= figure <= 2**60 * max(row["gpus"], 1)
            assert row["utilization"] is None or 0 <= row["utilization"] <= 1
    if kind == "matrix":
        history, problems = FleetPoller(client).history("h")
        for points in history.values():
            assert all(0 <= t <= 2**33 and (v is None or 0 <= v <= 2**60) for t, v in points)


async def test_a_bug_while_reading_is_a_notice_not_an_exit(prom):
    from textual.widgets import DataTable, Static

    prom.add_gpumem_host("alpha:9835")
    poller = FleetPoller(PrometheusClient(prom.url))
    app = FleetApp(poller)
    async with app.run_test(size=(150, 30)) as pilot:
        table = app.query_one("#hosts", DataTable)
        await _wait(pilot, lambda: table.row_count == 1)

        def broken() -> None:
            raise KeyError("boom")

        poller.refresh = broken
        await pilot.press("r")
        notice = app.query_one("#notice", Static)
        await _wait(pilot, lambda: "unexpected error while reading: KeyError" in str(notice.render()))
        assert app.is_running and table.row_count == 1


def test_cli_misuse_is_exit_2_with_one_line(prom):
    for args, says in ((["--theme", "no-such-theme"], "unknown theme 'no-such-theme'"), (["--json"], "--json needs --once")):
        proc = run_cli("fleet", "--prometheus", prom.url, *args, timeout=60)
        assert proc.returncode == 2 and says in proc.stderr and proc.stderr.count("\n") == 1
