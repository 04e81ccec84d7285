"""The interactive fleet screen and its poller, against the real Prometheus of
tests/test_fleet_prometheus.py (exporters a: 2 GPUs, b and c: 1 GPU, a dcgm page) and broken servers."""

from __future__ import annotations

import http.server
import threading

import pytest
from test_fleet_prometheus import prometheus  # noqa: F401 -- the module-scoped fixture

from gpumem_tui.remote.fleet import PrometheusClient
from gpumem_tui.ui.fleet_screen import FleetPoller
from gpumem_tui.support.units import GiB, MiB
from waiting import HANG_TIMEOUT, settle, wait_until


def test_down_server_keeps_last_data_and_backs_off(prometheus):  # noqa: F811
    poller = FleetPoller(PrometheusClient(prometheus["url"]), interval=5, max_backoff=60)
    good = poller.refresh()
    assert good.notice is None and {h.host for h in good.hosts} >= {prometheus["a"], prometheus["b"]}
    poller.client = PrometheusClient("http://127.0.0.1:9", timeout=2)  # nothing listens on port 9
    first = poller.refresh()
    assert first.hosts == good.hosts and "refused" in first.notice.lower() and first.retry_in == 10
    assert poller.refresh().retry_in == 20
    for _ in range(5):
        poller.refresh()
    assert poller.state.retry_in == 60 and poller.state.hosts == good.hosts
    poller.client = PrometheusClient(prometheus["url"])
    back = poller.refresh()
    assert back.notice is None and back.retry_in == 5 and poller.failures == 0


def test_history_per_gpu_from_query_range(prometheus):  # noqa: F811
    poller = FleetPoller(PrometheusClient(prometheus["url"]))
    def stored() -> tuple | None:  # a few scrapes must be stored
        hist, problems = poller.history(prometheus["a"], seconds=60, points=60)
        return (hist, problems) if len(hist) == 2 and min(len(p) for p in hist.values()) >= 3 else None

    # Prometheus scrapes every 1 s: look twice a second
    hist, problems = wait_until(stored, what="three stored scrapes of both of A's GPUs", poll=0.5)
    assert {v for _, v in hist["0"]} == {1 * GiB} and problems == []
    dcgm, problems = poller.history(prometheus["dcgm"], seconds=60, points=60)
    assert {v for _, v in dcgm["0"]} == {40960 * MiB}
    assert {v for _, v in dcgm["1"]} == {None} and problems[0].startswith("shown as N/A: DCGM_FI_DEV_FB_USED = nan")


def test_slow_server_times_out_with_a_notice():
    release, answered = threading.Event(), threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 -- http.server's name
            release.wait(HANG_TIMEOUT)  # answers (by closing) only once the test has its result
            answered.set()

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        poller = FleetPoller(PrometheusClient(f"http://127.0.0.1:{server.server_address[1]}", timeout=0.5))
        state = poller.refresh()
        # refresh gave up on its own (the server had not answered), and says so
        assert not answered.is_set() and "no answer within 0.5 s" in state.notice and state.hosts == []
    finally:
        release.set()
        server.shutdown()
        server.server_close()


async def _wait(pilot, cond):
    await settle(pilot, cond, what="the fleet screen state the test needs", poll=0.2)


@pytest.mark.asyncio
async def test_screen_hosts_sort_filter_and_host_detail(prometheus, tmp_path):  # noqa: F811
    from textual.widgets import DataTable, Static

    from gpumem_tui.ui.fleet_screen import FleetApp, HostScreen, MemoryBars

    app = FleetApp(FleetPoller(PrometheusClient(prometheus["url"]), interval=1))
    async with app.run_test(size=(150, 30)) as pilot:
        table = app.query_one("#hosts", DataTable)
        notice = app.query_one("#notice", Static)
        await _wait(pilot, lambda: table.row_count == 4)
        await pilot.press("s")  # memory used, largest first: the dcgm host's 40 GiB
        assert app.sort_name == "memory used" and str(table.get_row_at(0)[0]) == prometheus["dcgm"]
        assert table.get_row_at(0)[1] == "dcgm"
        await pilot.press("slash")
        await pilot.press(*prometheus["b"])
        await _wait(pilot, lambda: table.row_count == 1)
        assert str(table.get_row_at(0)[0]) == prometheus["b"] and "1 of 4 hosts" in str(notice.render())
        await pilot.press("enter")  # leaves the filter box for the table
        app.save_screenshot(str(tmp_path / "fleet.svg"))
        await pilot.press("escape")  # clears and hides the filter
        await _wait(pilot, lambda: table.row_count == 4)
        table.move_cursor(row=next(i for i in range(4) if str(table.get_row_at(i)[0]) == prometheus["a"]))
        table.focus()
        await pilot.press("enter")
        await _wait(pilot, lambda: isinstance(app.screen, HostScreen))
        screen = app.screen
        await _wait(pilot, lambda: len(screen.query(MemoryBars)) == 2)
        assert screen.query_one("#gpus", DataTable).row_count == 2
        assert str(prometheus["pid"]) in str(screen.query_one("#host-title", Static).render())
        app.save_screenshot(str(tmp_path / "host.svg"))
        await pilot.press("escape")
        # exporter C is killed: its row turns DOWN with its last-seen age, the count stays 4
        prometheus["procs"]["c"].kill()
        await _wait(pilot, lambda: "1 host down: " + prometheus["c"] in str(notice.render()))
        row = next(table.get_row_at(i) for i in range(4) if str(table.get_row_at(i)[0]) == prometheus["c"])
        assert str(row[2]).startswith("DOWN last seen") and str(notice.render()).startswith("4 hosts")
        app.save_screenshot(str(tmp_path / "down.svg"))
        # Prometheus goes away: a notice, the rows kept
        app.poller.client = PrometheusClient("http://127.0.0.1:9", timeout=1)
        await pilot.press("r")
        await _wait(pilot, lambda: "retrying" in str(notice.render()))
        assert table.row_count == 4 and "next try in" in str(notice.render())
