"""The fleet over a real Prometheus (issue 12): Debian's ``prometheus`` scrapes three of our
exporters (each on the fake NVML, with a real process; ``c`` is there to be killed) and a
dcgm-exporter-shaped page, and ``gpumem_tui.remote.fleet`` reads the hosts back through the HTTP API.

``scripts/setup.sh`` installs ``prometheus`` when it is missing; a machine without it fails
here rather than skipping.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from gpumem_tui.remote.fleet import LAST_UP_QUERY, PrometheusClient, PrometheusError, read_fleet
from gpumem_tui.support.units import GiB, MiB
from waiting import HANG_TIMEOUT, wait_until

TESTS = Path(__file__).resolve().parent
DCGM_PAGE = """\
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aaaa",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-1"} 40960
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-bbbb",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-1"} NaN
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-aaaa",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-1"} 40960
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaaa",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-1",extra="x"} 75
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Page(http.server.BaseHTTPRequestHandler):
    body = b""
    gate: threading.Event | None = None  # set: a slow server, answering only once the test opens it

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.gate is not None:
            self.gate.wait(HANG_TIMEOUT)
        code = 200 if self.path.startswith("/metrics") else 404
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body if code == 200 else b"not found")

    def log_message(self, *args: object) -> None:
        pass


def _serve(body: str, gate: threading.Event | None = None) -> tuple[http.server.ThreadingHTTPServer, int]:
    handler = type("Page", (_Page,), {"body": body.encode(), "gate": gate})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def _wait(cond, timeout: float, what: str) -> None:
    # ``timeout`` is kept by the callers as a floor: the hang guard is at least HANG_TIMEOUT
    wait_until(cond, what=what, timeout=max(timeout, HANG_TIMEOUT), poll=0.25, ignore=(OSError, PrometheusError))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """Prometheus scraping exporters A (2 GPUs), B (1 GPU), C (1 GPU; ``procs["c"]`` to kill)
    and a dcgm page, every 1 s."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("the 'prometheus' binary is missing: scripts/setup.sh installs it (apt-get install prometheus)")
    tmp = tmp_path_factory.mktemp("prom")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])  # killed at the end
    started: list[subprocess.Popen] = [sleeper]
    dcgm, dcgm_port = _serve(DCGM_PAGE)
    try:
        exporters, procs = {}, {}
        for name, gpus in (("a", 2), ("b", 1), ("c", 1)):
            port = _free_port()
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS / "fleet_shim"), str(TESTS.parent)]),
                   "GPUMEM_FAKE_NVML": str(gpus), "GPUMEM_FAKE_PID": str(sleeper.pid)}
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "gpumem_tui", "exporter", "--listen", f"127.0.0.1:{port}", "--interval", "0.5",
                 "--probe-dir", str(tmp / f"probes-{name}")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            started.append(procs[name])
            exporters[name] = f"127.0.0.1:{port}"
        web = _free_port()
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            f"  - job_name: gpumem\n    static_configs:\n      - targets: ['{exporters['a']}', '{exporters['b']}', '{exporters['c']}']\n"
            f"  - job_name: dcgm\n    static_configs:\n      - targets: ['127.0.0.1:{dcgm_port}']\n"
        )
        started.append(subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{web}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        url = f"http://127.0.0.1:{web}"
        client = PrometheusClient(url)

        def ready() -> bool:
            hosts = {r.host for r in read_fleet(client).hosts if r.gpus}
            return hosts >= {*exporters.values(), f"127.0.0.1:{dcgm_port}"}

        _wait(ready, 60, "Prometheus to scrape both exporters and the dcgm page")
        yield {"url": url, **exporters, "dcgm": f"127.0.0.1:{dcgm_port}", "pid": sleeper.pid, "procs": procs}
    finally:
        for proc in reversed(started):
            proc.terminate()
        for proc in started:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        dcgm.shutdown()


def test_hosts_from_our_exporters_and_from_dcgm(prometheus):
    reading = read_fleet(PrometheusClient(prometheus["url"]))
    rows = {r.host: r for r in reading.hosts}
    a, b, dcgm = rows[prometheus["a"]], rows[prometheus["b"]], rows[prometheus["dcgm"]]
    assert (a.source, len(a.gpus)) == ("gpumem", 2) and (b.source, len(b.gpus)) == ("gpumem", 1)
    # the fake NVML's GPUs: 80 GiB each, 1 GiB used
    assert a.total_bytes == 160 * GiB and a.used_bytes == 2 * GiB
    assert a.utilization is not None and 0 <= a.utilization <= 1
    # the biggest process is the real sleeper the fake NVML puts on GPU 0
    assert a.biggest is not None and a.biggest[0] == str(prometheus["pid"]) and a.biggest[2] == 3 * GiB
    # dcgm-exporter: MiB, total = used + free, utilization in percent; the NaN GPU is N/A, said once
    assert dcgm.source == "dcgm" and len(dcgm.gpus) == 2 and dcgm.gpus[1].used_bytes is None
    assert dcgm.used_bytes == 40960 * MiB and dcgm.total_bytes == 81920 * MiB and dcgm.utilization == 0.75
    assert reading.notices == [f"shown as N/A: DCGM_FI_DEV_FB_USED = nan on {prometheus['dcgm']} (not a finite number)"]
    assert all(r.up for r in reading.hosts)
    assert dcgm.gpus[0].name == "NVIDIA H100 80GB HBM3"


def test_history_through_query_range(prometheus):
    client = PrometheusClient(prometheus["url"])
    now = time.time()
    series = client.query_range(f'gpumem_gpu_memory_used_bytes{{instance="{prometheus["a"]}"}}', now - 30, now, 1)
    assert len(series) == 2 and all(points and all(v == 1 * GiB for _, v in points) for _, points in series)


def test_fleet_once_json_for_scripts(prometheus):
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    proc = subprocess.run([sys.executable, "-m", "gpumem_tui", "fleet", "--prometheus", prometheus["url"], "--once", "--json"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    hosts = {row["host"]: row for row in json.loads(proc.stdout)}
    assert hosts[prometheus["b"]]["gpus"] == 1 and hosts[prometheus["dcgm"]]["utilization"] == 0.75


def test_prometheus_down_slow_or_not_prometheus_is_one_clear_line():
    closed = _free_port()
    with pytest.raises(PrometheusError, match="cannot connect"):
        PrometheusClient(f"http://127.0.0.1:{closed}", timeout=2).query("up")
    page, port = _serve(DCGM_PAGE)
    gate = threading.Event()  # the slow server answers after the client gave up, whatever the load
    slow, slow_port = _serve(DCGM_PAGE, gate=gate)
    try:
        with pytest.raises(PrometheusError, match="answered HTTP 404.*Prometheus"):
            PrometheusClient(f"http://127.0.0.1:{port}").query("up")
        with pytest.raises(PrometheusError, match="no answer within 0.5 s"):
            PrometheusClient(f"http://127.0.0.1:{slow_port}", timeout=0.5).query("up")
    finally:
        gate.set()
        page.shutdown()
        slow.shutdown()
    with pytest.raises(PrometheusError, match="http"):
        PrometheusClient("127.0.0.1:9090")


def test_prometheus_error_answer_is_reported(prometheus):
    with pytest.raises(PrometheusError, match="Prometheus error: bad_data"):
        PrometheusClient(prometheus["url"]).query("sum(")
    with urllib.request.urlopen(f"{prometheus['url']}/api/v1/targets", timeout=5) as resp:
        targets = json.loads(resp.read())["data"]["activeTargets"]
    assert {t["health"] for t in targets if t["labels"]["instance"] != prometheus["c"]} == {"up"}


def test_killed_exporter_is_a_down_row_with_its_last_seen_age(prometheus):
    """Last in this file: it kills exporter C."""
    client = PrometheusClient(prometheus["url"])
    seen_up = f'max_over_time(timestamp(up{{instance="{prometheus["c"]}"}} == 1)[1h:15s])'
    _wait(lambda: client.query(seen_up), 30, "a subquery step to see C up")
    assert LAST_UP_QUERY.startswith("max_over_time(timestamp(up == 1)[1h:15s])")
    prometheus["procs"]["c"].kill()
    killed_at = time.time()
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}

    def c_row() -> dict | None:
        proc = subprocess.run([sys.executable, "-m", "gpumem_tui", "fleet", "--prometheus", prometheus["url"], "--once",
                               "--json"], capture_output=True, text=True, timeout=60, env=env)
        row = {r["host"]: r for r in json.loads(proc.stdout)}[prometheus["c"]]
        return row if not row["up"] else None

    # wait in this process (read_fleet is what ``fleet --once --json`` prints): a child per poll
    # cost ~0.2 s of CPU each, seven or eight of them while Prometheus noticed; the command
    # itself then runs once, as a child, on a fleet where C stays down
    def c_down() -> bool:
        row = {r.host: r for r in read_fleet(client).hosts}.get(prometheus["c"])
        return row is not None and not row.up

    _wait(c_down, 30, "Prometheus to see exporter C down")
    row = c_row()
    assert row is not None, "fleet --once --json shows C up after read_fleet saw it down"
    assert row["gpus"] == 0 and row["last_seen"] is not None
    assert row["last_seen"] <= killed_at + 1 and 0 <= row["last_seen_age_s"] <= time.time() - killed_at + 20
