"""gpumem-tui fleet against a real Prometheus (tests/prometheus_fleet.py) and broken servers."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from fake_pynvml import GiB, MiB
from prometheus_fleet import prometheus_fleet, serve_static  # noqa: F401 -- the fixture

from gpumem_tui.fleet.query import FleetPoller, PrometheusClient, PrometheusError, Sample, hosts_from_samples


def _fleet_json(url: str) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "gpumem_tui", "fleet", "--prometheus", url, "--once", "--json"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_host_rows_from_our_exporters_and_dcgm(prometheus_fleet):
    fleet = prometheus_fleet
    hosts = {h["instance"]: h for h in _fleet_json(fleet.url)}
    assert set(hosts) == {*fleet.exporters, fleet.dcgm_instance}
    for n, (instance, fake) in enumerate(fleet.exporters.items()):
        h = hosts[instance]
        assert h["gpus"] == len(fake.gpus)
        assert h["memory_used_bytes"] == sum(g.memory_used for g in fake.gpus)
        assert h["memory_total_bytes"] == sum(g.memory_total for g in fake.gpus)
        assert h["utilization"] == pytest.approx(sum(g.util_gpu for g in fake.gpus) / len(fake.gpus) / 100)
        last = fleet.children[instance][-1]
        big = h["biggest_process"]
        assert big["pid"] == str(last.pid) and big["used_bytes"] == fake.gpus[-1].processes[0].used
        assert big["command"].endswith(f"job-{n}-{len(fake.gpus) - 1}") and big["user"]
    d = hosts[fleet.dcgm_instance]
    assert d["hostname"] == "dcgm-node" and d["gpus"] == 2
    assert d["memory_used_bytes"] == (40960 + 1024) * MiB and d["memory_total_bytes"] == 2 * 81920 * MiB
    assert d["utilization"] == pytest.approx(0.9)  # GPU 1 reports NaN: left out, not counted as 0
    assert {g["name"] for g in d["gpu_rows"]} == {"NVIDIA H100 80GB HBM3"}


def test_history_comes_from_query_range(prometheus_fleet):
    fleet = prometheus_fleet
    instance = next(iter(fleet.exporters))
    poller = FleetPoller(PrometheusClient(fleet.url))
    deadline = time.monotonic() + 20
    while True:  # wait for a few scrapes to be stored
        hist = poller.history(instance, seconds=60, points=60)
        if hist and min(len(p) for p in hist.values()) >= 3:
            break
        assert time.monotonic() < deadline
        time.sleep(1)
    assert set(hist) == {"0", "1"}
    assert {v for _, v in hist["1"]} == {2 * GiB}
    dcgm = poller.history(fleet.dcgm_instance, seconds=60, points=60)
    assert {v for _, v in dcgm["0"]} == {40960 * MiB}


def test_a_change_on_a_host_reaches_the_fleet_view(prometheus_fleet):
    fleet = prometheus_fleet
    instance, fake = list(fleet.exporters.items())[1]
    fake.gpus[0].memory_used = 7 * GiB
    poller = FleetPoller(PrometheusClient(fleet.url))
    deadline = time.monotonic() + 20
    while True:
        state = poller.refresh()
        row = next(h for h in state.hosts if h.instance == instance)
        if row.gpus[0].used_bytes == 7 * GiB:
            break
        assert time.monotonic() < deadline and state.notice is None
        time.sleep(0.5)


def test_down_server_keeps_last_data_and_backs_off(prometheus_fleet):
    poller = FleetPoller(PrometheusClient(prometheus_fleet.url, timeout=5), interval=5, max_backoff=60)
    good = poller.refresh()
    assert good.notice is None and good.hosts
    poller.client = PrometheusClient("http://127.0.0.1:9", timeout=2)  # nothing listens on port 9
    first = poller.refresh()
    assert first.hosts == good.hosts and "refused" in first.notice.lower() and first.retry_in == 10
    assert poller.refresh().retry_in == 20
    for _ in range(5):
        poller.refresh()
    assert poller.state.retry_in == 60 and poller.state.hosts == good.hosts


def test_not_prometheus_says_what_answered():
    page = serve_static(b"<html><body>Grafana login</body></html>")
    try:
        url = f"http://127.0.0.1:{page.server_address[1]}"
        with pytest.raises(PrometheusError, match="not the Prometheus API: HTTP 200 text/plain.*Grafana"):
            PrometheusClient(url).query("up")
        r = subprocess.run([sys.executable, "-m", "gpumem_tui", "fleet", "--prometheus", url, "--once"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and "not the Prometheus API" in r.stderr and len(r.stderr.splitlines()) == 1
    finally:
        page.shutdown()
        page.server_close()


def test_slow_server_times_out():
    import http.server
    import threading

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            time.sleep(3)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        poller = FleetPoller(PrometheusClient(f"http://127.0.0.1:{server.server_address[1]}", timeout=0.5))
        start = time.monotonic()
        state = poller.refresh()
        assert time.monotonic() - start < 2.5 and "no answer within 0.5 s" in state.notice
    finally:
        server.shutdown()
        server.server_close()


def test_prometheus_error_answer_is_shown(prometheus_fleet):
    with pytest.raises(PrometheusError, match="bad_data"):
        PrometheusClient(prometheus_fleet.url).query("sum(")


def test_unexpected_labels_and_nan_are_skipped():
    samples = [
        Sample({"__name__": "gpumem_gpu_memory_used_bytes", "gpu": "0"}, 1.0),  # no instance
        Sample({"__name__": "gpumem_gpu_memory_used_bytes", "instance": "a:1"}, 2.0),  # no gpu
        Sample({"__name__": "gpumem_gpu_memory_used_bytes", "instance": "a:1", "gpu": "0", "extra": "x"}, 3.0),
        Sample({"__name__": "something_else", "instance": "a:1"}, 4.0),
    ]
    (host,) = hosts_from_samples(samples)
    assert [g.used_bytes for g in host.gpus] == [3.0] and host.total_bytes is None and host.utilization is None


def test_bad_arguments_exit_2():
    for args in (["--prometheus", "ftp://x"], ["--prometheus", "http://x", "--json"], []):
        r = subprocess.run([sys.executable, "-m", "gpumem_tui", "fleet", *args], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


async def _wait(pilot, cond, seconds=20.0):
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline
        await pilot.pause(0.2)


@pytest.mark.asyncio
async def test_screen_hosts_sort_filter_and_host_detail(prometheus_fleet, tmp_path):
    from textual.widgets import DataTable, Sparkline, Static

    from gpumem_tui.fleet.screen import FleetApp, HostScreen

    fleet = prometheus_fleet
    app = FleetApp(FleetPoller(PrometheusClient(fleet.url), interval=1))
    async with app.run_test(size=(150, 30)) as pilot:
        table = app.query_one("#hosts", DataTable)
        await _wait(pilot, lambda: table.row_count == 4)
        await pilot.press("s")  # memory used, largest first
        first = table.get_row_at(0)
        assert app.sort_name == "memory used" and first[0] == fleet.dcgm_instance  # 41 GiB used
        await pilot.press("slash")
        await pilot.press(*"dcgm-node")  # hostname filter
        await _wait(pilot, lambda: table.row_count == 1)
        assert table.get_row_at(0)[1] == "dcgm-node" and "1 of 4 hosts" in str(app.query_one("#notice", Static).render())
        await pilot.press("enter")  # leaves the filter box
        app.save_screenshot(str(tmp_path / "fleet.svg"))
        target = list(fleet.exporters)[2]
        app.query_one("#filter").value = ""
        await _wait(pilot, lambda: table.row_count == 4)
        table.move_cursor(row=next(i for i in range(4) if table.get_row_at(i)[0] == target))
        table.focus()
        await pilot.press("enter")
        await _wait(pilot, lambda: isinstance(app.screen, HostScreen))
        screen = app.screen
        await _wait(pilot, lambda: len(screen.query(Sparkline)) == len(fleet.exporters[target].gpus))
        assert screen.query_one("#gpus", DataTable).row_count == 4
        assert screen.query_one("#procs", DataTable).row_count == 4
        app.save_screenshot(str(tmp_path / "host.svg"))
        await pilot.press("escape")
        # Prometheus goes away: a notice, the rows kept
        app.poller.client = PrometheusClient("http://127.0.0.1:9", timeout=1)
        await pilot.press("r")
        notice = app.query_one("#notice", Static)
        await _wait(pilot, lambda: "retrying" in str(notice.render()))
        assert table.row_count == 4 and "next try in" in str(notice.render())
