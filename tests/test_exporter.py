"""gpumem-tui exporter: /metrics scraped over HTTP from fake NVML + real processes + probes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

import pytest
from fake_pynvml import GiB, MiB
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from gpumem_tui.estimator.architecture import CATALOGUE_DIR
from gpumem_tui.exporter.cli import Poller, is_loopback, parse_listen
from gpumem_tui.exporter.metrics import COMMAND_LIMIT, ExporterState
from gpumem_tui.process_estimate import from_probe_info
from gpumem_tui.telemetry.host import HostEnricher
from gpumem_tui.telemetry.live import LiveSource
from gpumem_tui.telemetry.model import Phase, PhaseMark, ProbeInfo, ProbeSample


@dataclass
class _Reading:
    probes: tuple = ()
    probe_infos: tuple = ()
    phase_marks: tuple = ()
    notices: tuple = ()
    phase_peaks: tuple = ()


class _Probes:
    """Stands in for ProbeSource: ``next`` is what the next poll reports."""

    def __init__(self):
        self.next = _Reading()

    def poll(self):
        reading, self.next = self.next, _Reading(probe_infos=self.next.probe_infos)
        return reading

    def close(self):
        pass


def scrape(port: int) -> dict[str, list[tuple[dict, float]]]:
    """GET /metrics -> {sample name: [(labels, value)]}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict, float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def one(metrics, metric, **labels) -> float:
    hits = [v for lab, v in metrics.get(metric, []) if all(lab.get(k) == str(w) for k, w in labels.items())]
    assert len(hits) == 1, (metric, labels, metrics.get(metric))
    return hits[0]


@pytest.fixture
def served():
    """Start an exporter on a free loopback port: ``served(source) -> (poller, port)``."""
    started = []

    def _serve(source):
        state = ExporterState()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(state)
        server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
        poller = Poller(source, state, interval=3600)
        started.append((server, source))
        return poller, server.server_address[1]

    yield _serve
    for server, source in started:
        server.shutdown()
        server.server_close()
        source.close()


def test_gpu_process_and_probe_metrics(fake_nvml, spawn, served):
    long_arg = "x" * 500
    a = spawn(argv=[sys.executable, "-c", "import time; time.sleep(30)", long_arg])
    b = spawn()
    fake_nvml.gpus[0].memory_used = 3 * GiB
    fake_nvml.gpus[1].util_gpu = 64
    fake_nvml.add_process(0, pid=a.pid, used=700 * MiB)
    fake_nvml.add_process(1, pid=b.pid, used=300 * MiB)
    probes = _Probes()
    gpt2 = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    info = ProbeInfo(a.pid, gpt2, (("batch", 2), ("seq", 128), ("dtype", "float32")))
    probes.next = _Reading(probes=(ProbeSample(1.0, a.pid, "cuda:0", 600 * MiB),), probe_infos=(info,),
                           phase_marks=(PhaseMark(1.0, a.pid, Phase.FORWARD, 7), PhaseMark(2.0, a.pid, Phase.BACKWARD, 7)))
    source = LiveSource(host=HostEnricher(in_container=False), probe_source=probes)
    poller, port = served(source)
    poller.poll_once()
    m = scrape(port)

    assert one(m, "gpumem_exporter_nvml_up") == 1
    assert one(m, "gpumem_exporter_poll_duration_seconds") > 0
    assert one(m, "gpumem_gpu_memory_used_bytes", gpu=0) == 3 * GiB
    assert one(m, "gpumem_gpu_memory_total_bytes", gpu=1, uuid=fake_nvml.gpus[1].uuid, name=fake_nvml.gpus[1].name) == 80 * GiB
    assert one(m, "gpumem_gpu_utilization_ratio", gpu=1) == pytest.approx(0.64)
    assert one(m, "gpumem_gpu_temperature_celsius", gpu=0) == fake_nvml.gpus[0].temperature
    assert one(m, "gpumem_gpu_power_watts", gpu=0) == pytest.approx(fake_nvml.gpus[0].power_mw / 1000)
    assert one(m, "gpumem_process_memory_used_bytes", gpu=1, pid=b.pid) == 300 * MiB
    rows = [lab for lab, _ in m["gpumem_process_memory_used_bytes"] if lab["pid"] == str(a.pid)]
    assert len(rows) == 1 and len(rows[0]["command"]) <= COMMAND_LIMIT and rows[0]["command"].startswith(sys.executable)
    assert rows[0]["user"]  # the real process's owner
    # probe: NVML-used scope on both sides, the estimator's peak for the probe's setup
    expected = from_probe_info(info, "cuda:0").estimate.peak_bytes
    assert one(m, "gpumem_probe_predicted_peak_bytes", pid=a.pid, device="cuda") == expected
    assert one(m, "gpumem_probe_measured_peak_bytes", pid=a.pid, device="cuda") == 700 * MiB
    assert one(m, "gpumem_probe_step", pid=a.pid) == 7
    assert one(m, "gpumem_probe_phase", pid=a.pid, phase="backward") == 1
    assert [lab["phase"] for lab, _ in m["gpumem_probe_phase"]] == ["backward"]

    # the measured peak is a high-water mark; an ended process's series disappear
    fake_nvml.gpus[0].processes[0].used = 900 * MiB
    poller.poll_once()
    fake_nvml.gpus[0].processes[0].used = 500 * MiB
    b.kill()
    b.wait()
    fake_nvml.remove_process(b.pid)
    poller.poll_once()
    m = scrape(port)
    assert one(m, "gpumem_probe_measured_peak_bytes", pid=a.pid, device="cuda") == 900 * MiB
    assert one(m, "gpumem_process_memory_used_bytes", pid=a.pid) == 500 * MiB
    assert [lab["pid"] for lab, _ in m["gpumem_process_memory_used_bytes"]] == [str(a.pid)]
    assert one(m, "gpumem_exporter_polls_total") == 3


def test_nan_readings_are_not_exported(fake_nvml, served):
    fake_nvml.gpus[0].temperature = float("nan")
    poller, port = served(LiveSource(host=HostEnricher(in_container=False), probe_source=_Probes()))
    poller.poll_once()
    m = scrape(port)
    temps = {lab["gpu"]: v for lab, v in m["gpumem_gpu_temperature_celsius"]}
    assert "0" not in temps and temps["1"] == fake_nvml.gpus[1].temperature


def test_without_a_driver_it_serves_nvml_up_0(no_nvml, spawn, served):
    poller, port = served(LiveSource(host=HostEnricher(in_container=False), probe_source=_Probes()))
    poller.poll_once()
    m = scrape(port)
    assert one(m, "gpumem_exporter_nvml_up") == 0
    assert "gpumem_gpu_memory_used_bytes" not in m and "gpumem_process_memory_used_bytes" not in m


def test_a_raising_source_keeps_the_last_data(fake_nvml, served):
    source = LiveSource(host=HostEnricher(in_container=False), probe_source=_Probes())
    poller, port = served(source)
    poller.poll_once()
    source.poll = lambda: 1 / 0
    poller.poll_once()
    m = scrape(port)
    assert one(m, "gpumem_exporter_poll_errors_total") == 1
    assert one(m, "gpumem_gpu_memory_total_bytes", gpu=0) == 80 * GiB


def test_listen_parsing_and_loopback():
    assert parse_listen("127.0.0.1:9835") == ("127.0.0.1", 9835)
    assert parse_listen("[::1]:80") == ("::1", 80)
    for bad in ("9835", "host:x", "h:70000"):
        with pytest.raises(ValueError):
            parse_listen(bad)
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("example.org")


def _run_cli(*args, timeout=20):
    return subprocess.run([sys.executable, "-m", "gpumem_tui", "exporter", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_cli_port_in_use_and_remote_bind_are_one_line_exit_2():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = _run_cli("--listen", f"127.0.0.1:{port}")
    assert r.returncode == 2 and "cannot listen" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = _run_cli("--listen", "0.0.0.0:9835")
    assert r.returncode == 2 and "--allow-remote" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = _run_cli("--help")
    assert r.returncode == 0 and "--allow-remote" in r.stdout and "loopback" in r.stdout


def test_cli_serves_until_terminated():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "gpumem_tui", "exporter", "--listen", f"127.0.0.1:{port}",
                             "--interval", "0.2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                m = scrape(port)
                if one(m, "gpumem_exporter_polls_total") >= 2:
                    break
            except (OSError, AssertionError, KeyError):
                pass
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        assert one(m, "gpumem_exporter_nvml_up") in (0, 1)
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
