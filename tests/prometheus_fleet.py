"""A real Prometheus scraping real exporters, for the fleet tests (issue 12).

``prometheus_fleet`` starts 3 ``gpumem-tui exporter`` servers in this process (each its own
FakeNvml, real child processes holding "GPU memory"), one dcgm-exporter-shaped static
``/metrics`` page, and Debian's ``prometheus`` binary scraping them every second; it waits
until every target is up and stops everything at teardown.
"""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field

import pytest
from fake_pynvml import GiB, MiB, FakeNvml
from prometheus_client import CollectorRegistry, start_http_server

from gpumem_tui.exporter.cli import Poller
from gpumem_tui.exporter.metrics import ExporterState
from gpumem_tui.telemetry.host import HostEnricher
from gpumem_tui.telemetry.live import LiveSource
from gpumem_tui.telemetry.nvml import NvmlSource

DCGM_PAGE = """\
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-dcgm-0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dcgm-node"} 40960
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-dcgm-1",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dcgm-node"} 1024
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-dcgm-0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dcgm-node"} 40960
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-dcgm-1",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dcgm-node"} 80896
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-dcgm-0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dcgm-node"} 90
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-dcgm-1",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dcgm-node"} NaN
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _StaticPage(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):  # noqa: N802 -- http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def serve_static(body: bytes, content_type: str = "text/plain") -> http.server.ThreadingHTTPServer:
    """Serve ``body`` for every GET on a free loopback port (a thread); caller shuts it down."""
    handler = type("Page", (_StaticPage,), {"body": body})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@dataclass
class Fleet:
    url: str
    exporters: dict[str, FakeNvml]  # instance -> its fake NVML
    children: dict[str, list[subprocess.Popen]]  # instance -> real processes on its GPUs
    dcgm_instance: str
    _stop: list = field(default_factory=list)


@pytest.fixture(scope="module")
def prometheus_fleet(tmp_path_factory):
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: scripts/setup.sh installs it (apt-get install prometheus)"
    tmp = tmp_path_factory.mktemp("prom")
    stops = []
    exporters, children = {}, {}
    try:
        for n in range(3):
            fake = FakeNvml(gpus=2 + n)
            procs = []
            for gpu in range(len(fake.gpus)):
                child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", f"job-{n}-{gpu}"],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                procs.append(child)
                fake.add_process(gpu, pid=child.pid, used=(n + 1) * (gpu + 1) * 512 * MiB)
                fake.gpus[gpu].memory_used = (n + 1) * (gpu + 1) * GiB
                fake.gpus[gpu].util_gpu = 10 * (n + gpu)
            stops.extend(lambda p=p: (p.kill(), p.wait()) for p in procs)
            state = ExporterState()
            registry = CollectorRegistry(auto_describe=False)
            registry.register(state)
            server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
            source = LiveSource(nvml=NvmlSource(module=fake.module), host=HostEnricher(in_container=False), probes=False)
            poller = Poller(source, state, interval=0.5)
            poller.start()
            stops.extend([poller.stop, server.shutdown, server.server_close, source.close])
            instance = f"127.0.0.1:{server.server_address[1]}"
            exporters[instance], children[instance] = fake, procs
        dcgm = serve_static(DCGM_PAGE.encode())
        stops.extend([dcgm.shutdown, dcgm.server_close])
        dcgm_instance = f"127.0.0.1:{dcgm.server_address[1]}"
        targets = [*exporters, dcgm_instance]
        config = tmp / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                          "  - job_name: gpumem\n    static_configs:\n"
                          f"      - targets: {json.dumps(targets)}\n")
        port = free_port()
        prom = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(tmp / "prom.log", "w"))
        stops.append(lambda: (prom.terminate(), prom.wait(timeout=20)))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert prom.poll() is None, (tmp / "prom.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=2) as resp:
                    active = json.load(resp)["data"]["activeTargets"]
                if len(active) == len(targets) and all(t["health"] == "up" for t in active):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Prometheus targets did not come up in 60 s"
            time.sleep(0.3)
        yield Fleet(url, exporters, children, dcgm_instance)
    finally:
        for stop in reversed(stops):
            try:
                stop()
            except Exception:
                pass
