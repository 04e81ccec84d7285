"""The exporter's per-GPU and per-process series (issue: "the exporter's series, beside its
peers'"): values and units from the fake NVML through the exporter's own source, and a figure
NVML cannot read left out, never invented."""

from __future__ import annotations

import time

import psutil
import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fake_pynvml import (
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
)
from gpumem_tui.remote.exporter import ExporterState, build_registry
from gpumem_tui.telemetry.host import MIN_CPU_SECONDS
from gpumem_tui.telemetry.live import LiveSource
from gpumem_tui.telemetry.model import ProcessSample, ProcessType, Snapshot
from gpumem_tui.telemetry.nvml import NvmlSource
from gpumem_tui.support.units import GiB, MiB
from waiting import wait_until

EXTRA_CALLS = ("nvmlDeviceGetClockInfo", "nvmlDeviceGetFanSpeed", "nvmlDeviceGetPcieThroughput",
               "nvmlDeviceGetFieldValues", "nvmlDeviceGetMigMode")


def _scrape(source: LiveSource, polls: int = 1, state: ExporterState | None = None) -> dict[str, dict[tuple, float]]:
    """metric name -> {sorted label items: value} after ``polls`` polls of ``source``."""
    state = state if state is not None else ExporterState()
    for poll in range(polls):
        if poll:
            time.sleep(MIN_CPU_SECONDS)  # host CPU % is measured over at least this long
        state.update(source.poll(), 0.01)
    text = generate_latest(build_registry(state)).decode()
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _by(series: dict[tuple, float], **match: str) -> list[float]:
    return [v for labels, v in series.items() if all((k, val) in labels for k, val in match.items())]


def test_gpu_series_have_nvml_values_in_base_units(fake_nvml, tmp_path):
    gpu = fake_nvml.gpus[0]
    gpu.memory_total, gpu.memory_used = 80 * GiB, 30 * GiB
    gpu.util_mem, gpu.power_limit_mw, gpu.fan_percent = 61, 350_000, 130
    gpu.clock_sm_mhz, gpu.clock_mem_mhz = 1980, 2619
    gpu.pcie_tx_kbps, gpu.pcie_rx_kbps = 3_000, 250_000
    gpu.nvlink_tx_kib, gpu.nvlink_rx_kib = 5_000, 6_000
    fake_nvml.gpus[1].mig_mode = 1
    source = LiveSource(tmp_path, nvml=NvmlSource(extended=True), probes=False)
    got = _scrape(source)
    uuid0 = gpu.uuid

    def one(name: str, index: str = "0") -> float:
        (value,) = _by(got[name], gpu=index)
        return value

    assert one("gpumem_gpu_memory_free_bytes") == 50 * GiB
    assert one("gpumem_gpu_memory_utilization_ratio") == pytest.approx(0.61)
    assert one("gpumem_gpu_power_limit_watts") == 350.0  # mW -> W
    assert one("gpumem_gpu_sm_clock_hertz") == 1980e6 and one("gpumem_gpu_memory_clock_hertz") == 2619e6  # MHz -> Hz
    assert one("gpumem_gpu_fan_speed_ratio") == pytest.approx(1.30)  # NVML: % of rated speed, may pass 100
    assert one("gpumem_gpu_pcie_transmit_bytes_per_second") == 3_000 * 1024  # KB/s -> B/s
    assert one("gpumem_gpu_pcie_receive_bytes_per_second") == 250_000 * 1024
    assert one("gpumem_gpu_nvlink_transmit_bytes_total") == 5_000 * 1024  # KiB counter -> bytes
    assert one("gpumem_gpu_nvlink_receive_bytes_total") == 6_000 * 1024
    assert one("gpumem_gpu_mig_enabled") == 0.0 and one("gpumem_gpu_mig_enabled", "1") == 1.0
    assert _by(got["gpumem_gpu_memory_free_bytes"], gpu="0", uuid=uuid0)  # the uuid label is the GPU's


def test_process_series_sm_memory_bandwidth_host_cpu_rss_and_labels(fake_nvml, spawn, tmp_path):
    ready = tmp_path / "started"
    child = spawn(argv=["python3", "-c", f"open({str(ready)!r}, 'w').close()\nwhile True: sum(range(10**6))  # " + "y" * 300])
    # python has started (it wrote the file just before its loop): its resident memory no longer grows
    wait_until(ready.exists, what="the child to start its loop")
    idle = spawn()
    fake_nvml.add_process(0, child.pid, used=3 * GiB, sm=40, mem=25)
    fake_nvml.add_process(1, child.pid, used=1 * GiB, sm=5, mem=1)  # the same PID on both GPUs
    fake_nvml.add_process(1, idle.pid, used=512 * MiB, sm=None, gpu_instance=3, compute_instance=0)
    source = LiveSource(tmp_path, nvml=NvmlSource(extended=True), probes=False)
    state = ExporterState()
    got = _scrape(source, polls=2, state=state)  # host CPU % needs two readings
    pid = str(child.pid)
    (sm,) = _by(got["gpumem_process_sm_utilization_ratio"], pid=pid, gpu="0", uuid=fake_nvml.gpus[0].uuid)
    (mem,) = _by(got["gpumem_process_memory_utilization_ratio"], pid=pid, gpu="0")
    assert (sm, mem) == (pytest.approx(0.40), pytest.approx(0.25))
    assert _by(got["gpumem_process_sm_utilization_ratio"], pid=pid, gpu="1") == [pytest.approx(0.05)]
    # an idle process (no utilisation sample) ran 0 % -- NVML answered, it just did not run
    assert _by(got["gpumem_process_sm_utilization_ratio"], pid=str(idle.pid)) == [0.0]
    # host figures: once per PID, not once per GPU; CPU as a ratio of one core
    (row,) = {p.pid: p for p in state.snapshot.processes if p.pid == child.pid}.values()
    assert row.cpu_percent is not None and row.rss_bytes is not None  # what the dashboard shows
    assert _by(got["gpumem_process_host_cpu_ratio"], pid=pid) == [pytest.approx(row.cpu_percent / 100)]
    assert 0.0 <= row.cpu_percent / 100 <= psutil.cpu_count()
    assert _by(got["gpumem_process_host_rss_bytes"], pid=pid) == [row.rss_bytes]
    # the child's own resident memory, as psutil reads it now (started before the scrape: within 20 %)
    assert row.rss_bytes == pytest.approx(psutil.Process(child.pid).memory_info().rss, rel=0.2)
    labels = dict(next(k for k in got["gpumem_process_host_rss_bytes"] if ("pid", pid) in k))
    assert set(labels) == {"pid", "user", "command"} and len(labels["command"]) <= 80
    # MIG instance labels where the process rows carry them, empty (absent) elsewhere
    (mig,) = [dict(k) for k in got["gpumem_process_memory_used_bytes"] if ("pid", str(idle.pid)) in k]
    assert (mig["gpu_instance"], mig["compute_instance"]) == ("3", "0")
    (plain,) = [dict(k) for k in got["gpumem_process_memory_used_bytes"] if ("pid", pid) in k and ("gpu", "0") in k]
    assert (plain["gpu_instance"], plain["compute_instance"]) == ("", "")  # Prometheus: an empty label is no label


def test_not_supported_or_no_permission_leaves_the_series_out(fake_nvml, tmp_path):
    fake_nvml.fail("nvmlDeviceGetFanSpeed", NVML_ERROR_NOT_SUPPORTED)  # data-centre boards have no fan
    fake_nvml.fail("nvmlDeviceGetClockInfo", NVML_ERROR_NO_PERMISSION, device=1)
    fake_nvml.fail("nvmlDeviceGetPcieThroughput", NVML_ERROR_NOT_SUPPORTED, device=0)
    fake_nvml.gpus[1].nvlink_tx_kib = fake_nvml.gpus[1].nvlink_rx_kib = None  # no NVLink: per-field NOT_SUPPORTED
    fake_nvml.gpus[0].mig_mode = None  # a board without MIG
    source = LiveSource(tmp_path, nvml=NvmlSource(extended=True), probes=False)
    got = _scrape(source)
    assert "gpumem_gpu_fan_speed_ratio" not in got
    assert [dict(k)["gpu"] for k in got["gpumem_gpu_sm_clock_hertz"]] == ["0"]
    assert [dict(k)["gpu"] for k in got["gpumem_gpu_pcie_transmit_bytes_per_second"]] == ["1"]
    assert [dict(k)["gpu"] for k in got["gpumem_gpu_nvlink_transmit_bytes_total"]] == ["0"]
    assert [dict(k)["gpu"] for k in got["gpumem_gpu_mig_enabled"]] == ["1"]
    # what could be read is still there, for both GPUs
    assert sorted(dict(k)["gpu"] for k in got["gpumem_gpu_memory_free_bytes"]) == ["0", "1"]


def test_implausible_or_missing_function_is_left_out_with_a_notice(fake_nvml, tmp_path):
    fake_nvml.gpus[0].clock_sm_mhz = 2**32 - 1  # NVML's "not available" unsigned int
    fake_nvml.gpus[0].pcie_rx_kbps = 2**31  # 2 TB/s: not a PCIe link
    fake_nvml.remove_function("nvmlDeviceGetFieldValues")  # an old binding
    source = LiveSource(tmp_path, nvml=NvmlSource(extended=True), probes=False)
    snap = source.poll()
    state = ExporterState()
    state.update(snap, 0.01)
    text = generate_latest(build_registry(state)).decode()
    assert 'gpumem_gpu_sm_clock_hertz{gpu="0"' not in text and 'gpumem_gpu_sm_clock_hertz{gpu="1"' in text
    assert 'gpumem_gpu_pcie_receive_bytes_per_second{gpu="0"' not in text
    assert "gpumem_gpu_nvlink_transmit_bytes_total{" not in text
    assert any("nvmlDeviceGetFieldValues" in n for n in snap.notices)


def test_the_dashboards_source_makes_none_of_the_extra_calls(fake_nvml, tmp_path):
    fake_nvml.add_process(0, 4242, sm=10, mem=7)
    snap = LiveSource(tmp_path, probes=False).poll()
    assert not any(fake_nvml.calls[name] for name in EXTRA_CALLS)
    assert snap.devices[0].clock_sm_hz is None and snap.devices[0].memory_free_bytes == 79 * GiB
    (row,) = [p for p in snap.processes if p.pid == 4242]
    assert (row.sm_percent, row.mem_percent) == (10.0, 7.0)  # the same NVML sample, no extra call


def test_nan_host_figures_are_left_out_and_host_rows_without_gpu_have_only_host_series():
    rows = (ProcessSample(pid=7, device_index=None, type=ProcessType.HOST, cpu_percent=float("nan"), rss_bytes=MiB),
            ProcessSample(pid=8, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=None, sm_percent=None,
                          cpu_percent=250.0, rss_bytes=None))
    state = ExporterState()
    state.update(Snapshot(time=1.0, processes=rows), 0.01)
    text = generate_latest(build_registry(state)).decode()
    assert 'gpumem_process_host_rss_bytes{command="",pid="7",user=""} 1.048576e+06' in text
    assert 'gpumem_process_host_cpu_ratio{command="",pid="8",user=""} 2.5' in text
    assert 'pid="7"' not in text.split("gpumem_process_host_cpu_ratio", 1)[1].split("# HELP")[0]
    assert "gpumem_process_memory_used_bytes{" not in text and "gpumem_process_sm_utilization_ratio{" not in text


# -- the fast text encoder: the same series as prometheus_client's own encoder -----------------

import gzip  # noqa: E402
import urllib.request  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gpumem_tui.remote.exporter import exposition, metric_families, state_app  # noqa: E402
from gpumem_tui.remote.exporter_http import HostPolicy, serve_metrics  # noqa: E402
from gpumem_tui.telemetry.model import DeviceSample  # noqa: E402


def _parsed(text: str) -> list:
    return [(f.name, f.type, f.documentation, sorted((s.name, sorted(s.labels.items()), s.value) for s in f.samples))
            for f in text_string_to_metric_families(text)]


def _state(user: str, command: str, name: str, used: int) -> ExporterState:
    devices = tuple(DeviceSample(index=i, name=name, uuid=f"GPU-{i}", memory_total_bytes=80 * GiB,
                                 memory_used_bytes=used, utilization_gpu_percent=12.5 + i, temperature_c=50.0,
                                 power_draw_w=99.5, power_limit_w=None, nvlink_tx_bytes=7 * GiB) for i in range(4))
    rows = tuple(ProcessSample(pid=100 + i, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=used // 2,
                               sm_percent=33.0, mem_percent=4.0, user=user, command=command, cpu_percent=150.0,
                               rss_bytes=MiB, gpu_instance_id=i or None) for i in range(3))
    state = ExporterState()
    state.update(Snapshot(time=1.0, devices=devices, processes=rows), 0.25)
    return state


@settings(max_examples=60, deadline=None)
@given(user=st.text(max_size=20), command=st.text(max_size=120), name=st.text(max_size=70),
       used=st.integers(0, 2**60))
def test_the_fast_exposition_parses_to_prometheus_clients_series(user, command, name, used):
    state = _state(user, command, name, used)
    reference = generate_latest(build_registry(state)).decode()
    ours = exposition(state).decode()
    assert _parsed(ours) == _parsed(reference)


def test_the_served_body_is_encoded_once_per_poll_and_gzipped_when_asked():
    state = _state('al"ice', "python train.py \\ --x", "H100", 30 * GiB)
    server, _ = serve_metrics("127.0.0.1", 0, state_app(state), HostPolicy("127.0.0.1"))
    port = server.server_address[1]

    def get(gzip_ok: bool) -> tuple[bytes, str | None]:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                         headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.read(), resp.headers.get("Content-Encoding")

    try:
        plain, encoding = get(False)
        assert encoding is None and plain == exposition(state)
        packed, encoding = get(True)
        assert encoding == "gzip" and gzip.decompress(packed) == plain
        state.update(Snapshot(time=2.0, devices=_state("u", "c", "H100", 31 * GiB).snapshot.devices), 0.1)
        fresh, _ = get(False)  # a new poll: new bytes
        assert b"gpumem_gpu_memory_used_bytes" in fresh and str(float(31 * GiB)).encode() in fresh
        assert b"gpumem_process_memory_used_bytes{" not in fresh  # its processes ended
    finally:
        server.shutdown()
        server.server_close()


def test_an_implausible_memory_bandwidth_sample_is_none_while_its_sm_figure_stands(fake_nvml):
    fake_nvml.add_process(0, 4242, sm=30, mem=2**31)  # a garbage memUtil in an otherwise good sample
    fake_nvml.gpus[1].memory_used = fake_nvml.gpus[1].memory_total + 1  # free would be negative
    reading = NvmlSource().poll()
    (row,) = reading.processes
    assert (row.sm_percent, row.mem_percent) == (30.0, None)
    assert reading.devices[0].memory_free_bytes == fake_nvml.gpus[0].memory_total - fake_nvml.gpus[0].memory_used
    assert reading.devices[1].memory_free_bytes is None  # not invented from total - used


def test_the_polling_loop_encodes_ahead_only_while_somebody_scrapes():
    from gpumem_tui.remote.exporter_text import MetricsApp

    encoded: list[int] = []
    version = [0]

    def render():
        def families():
            encoded.append(version[0])  # runs only when the encoder reads the families
            yield from metric_families(state)
        return version[0], families()

    state = _state("u", "c", "H100", GiB)
    app = MetricsApp(render)
    app.prepare()
    assert encoded == []  # nobody scraped: nothing encoded ahead

    def scrape(headers: dict) -> tuple[str, dict, bytes]:
        got = {}
        body = b"".join(app({"PATH_INFO": "/metrics", **headers}, lambda status, hdrs: got.update(status=status,
                                                                                              headers=dict(hdrs))))
        return got["status"], got["headers"], body

    status, headers, body = scrape({"HTTP_ACCEPT_ENCODING": "gzip"})
    assert status == "200 OK" and headers["Content-Encoding"] == "gzip" and encoded == [0]
    assert gzip.decompress(body) == exposition(state)
    version[0] = 1  # a poll
    app.prepare()
    assert encoded == [0, 1]  # encoded by the loop, in the form last asked for
    _, _, again = scrape({"HTTP_ACCEPT_ENCODING": "gzip"})
    assert encoded == [0, 1] and gzip.decompress(again) == exposition(state)  # the scrape only sent bytes
    version[0] = 2
    app.prepare()
    app.prepare()
    assert encoded == [0, 1, 2]  # no scrape since: the second prepare does nothing
