"""``gpumem-tui exporter`` (issue 12, part 1): the metrics, their labels, and bad input.

The metrics are read from the dashboard's own telemetry source on the fake NVML with real
processes (this test process and a child), and from a real HTTP server started by the CLI.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpumem_tui.support.cli_support import InputError
from gpumem_tui.estimator.architecture import CATALOGUE_DIR
from gpumem_tui.remote.exporter import (
    COMMAND_LIMIT,
    ExporterState,
    build_registry,
    main,
    parse_listen,
    poll_into,
)
from gpumem_tui.telemetry.live import LiveSource
from gpumem_tui.telemetry.model import (
    DeviceSample,
    Phase,
    PhaseMark,
    PhasePeak,
    ProbeInfo,
    ProbeSample,
    ProcessSample,
    ProcessType,
    Snapshot,
)
from gpumem_tui.support.units import GiB, MiB
from waiting import wait_until


def _samples(registry) -> dict[str, list]:
    text = generate_latest(registry).decode()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_gpu_and_process_metrics_come_from_the_dashboards_source(fake_nvml, tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)  " + "x" * 200])
    try:
        fake_nvml.gpus[0].memory_total, fake_nvml.gpus[0].memory_used = 80 * GiB, 30 * GiB
        fake_nvml.add_process(0, child.pid, used=3 * GiB)
        source = LiveSource(tmp_path / "probes")
        state = ExporterState()
        state.update(source.poll(), 0.012)
        got = _samples(build_registry(state))
    finally:
        child.kill()
        child.wait()
    assert got["gpumem_exporter_nvml_up"] == [({}, 1.0)]
    assert got["gpumem_exporter_poll_duration_seconds"] == [({}, 0.012)]
    used = {labels["gpu"]: value for labels, value in got["gpumem_gpu_memory_used_bytes"]}
    assert used["0"] == 30 * GiB and len(used) == len(fake_nvml.gpus)
    labels, total = got["gpumem_gpu_memory_total_bytes"][0]
    assert total == 80 * GiB and set(labels) == {"gpu", "uuid", "name"} and labels["name"]
    util = got["gpumem_gpu_utilization_ratio"][0][1]
    assert 0.0 <= util <= 1.0 and util == pytest.approx(fake_nvml.gpus[0].util_gpu / 100)
    procs = [(labels, value) for labels, value in got["gpumem_process_memory_used_bytes"] if labels["pid"] == str(child.pid)]
    assert len(procs) == 1 and procs[0][1] == 3 * GiB and procs[0][0]["gpu"] == "0"
    assert procs[0][0]["user"] and len(procs[0][0]["command"]) <= COMMAND_LIMIT


def test_no_driver_still_serves_nvml_up_0():
    state = ExporterState()
    state.update(Snapshot(time=1.0, nvml_error="NVML Shared Library Not Found"), 0.001)
    got = _samples(build_registry(state))
    assert got["gpumem_exporter_nvml_up"] == [({}, 0.0)]
    assert "gpumem_gpu_memory_used_bytes" not in got  # nothing made up


def test_probed_process_measured_predicted_step_and_phase():
    config = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    info = ProbeInfo(4242, config, (("batch", 2), ("seq", 128), ("dtype", "float32")))
    state = ExporterState()
    first = Snapshot(
        time=10.0,
        probes=(ProbeSample(10.0, 4242, "cuda:0", 3 * GiB, 4 * GiB, 5 * GiB),),
        probe_infos=(info,),
        phase_marks=(PhaseMark(9.0, 4242, Phase.FORWARD, 7), PhaseMark(9.5, 4242, Phase.BACKWARD, 7)),
    )
    state.update(first, 0.01)
    state.update(Snapshot(time=11.0, probes=(ProbeSample(11.0, 4242, "cuda:0", 1 * GiB, 4 * GiB),)), 0.01)
    got = _samples(build_registry(state))
    assert got["gpumem_probe_measured_peak_bytes"] == [({"pid": "4242"}, 5 * GiB)]  # the highest seen
    predicted = got["gpumem_probe_predicted_peak_bytes"][0][1]
    assert predicted == state.estimates.get(4242).estimate.peak_bytes and predicted > 500 * MiB  # CUDA: context in
    assert got["gpumem_probe_step"] == [({"pid": "4242"}, 7.0)]
    assert got["gpumem_probe_phase"] == [({"pid": "4242", "phase": "backward"}, 1.0)]
    assert got["gpumem_probe_prediction_available"] == [({"pid": "4242"}, 1.0)]
    # the job ends: it is in no list of the next poll, and its series go away
    state.update(Snapshot(time=12.0), 0.01)
    got = _samples(build_registry(state))
    assert "gpumem_probe_step" not in got and "gpumem_probe_measured_peak_bytes" not in got


def _device(index: int, **figures) -> DeviceSample:
    values = dict(memory_total_bytes=80 * GiB, memory_used_bytes=30 * GiB, utilization_gpu_percent=40.0,
                  temperature_c=55.0, power_draw_w=300.0, power_limit_w=700.0)
    values.update(figures)
    return DeviceSample(index=index, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{index}", **values)


def test_a_figure_nvml_could_not_read_is_left_out_not_exported_as_garbage():
    odd = _device(0, temperature_c=None, power_draw_w=float("nan"), utilization_gpu_percent=float("inf"),
                  memory_used_bytes=None)
    state = ExporterState()
    state.update(Snapshot(time=1.0, devices=(odd, _device(1))), 0.01)
    text = generate_latest(build_registry(state)).decode()
    assert "NaN" not in text and "Inf" not in text
    got = _samples(build_registry(state))
    for name in ("temperature_celsius", "power_watts", "utilization_ratio", "memory_used_bytes"):
        assert [labels["gpu"] for labels, _ in got[f"gpumem_gpu_{name}"]] == ["1"], name  # GPU 0's is missing
    assert got["gpumem_gpu_temperature_celsius"][0][1] == 55.0 and got["gpumem_gpu_power_watts"][0][1] == 300.0
    assert sorted(labels["gpu"] for labels, _ in got["gpumem_gpu_memory_total_bytes"]) == ["0", "1"]


def test_ended_processes_drop_out_and_commands_are_bounded():
    long = "python train.py " + "x" * 500
    procs = tuple(ProcessSample(pid=100 + i, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=MiB,
                                command=long, user="u") for i in range(3))
    state = ExporterState()
    state.update(Snapshot(time=1.0, devices=(_device(0),), processes=procs), 0.01)
    assert len(_samples(build_registry(state))["gpumem_process_memory_used_bytes"]) == 3
    state.update(Snapshot(time=2.0, devices=(_device(0),), processes=procs[:1]), 0.01)
    (labels, value), = _samples(build_registry(state))["gpumem_process_memory_used_bytes"]
    assert labels["pid"] == "100" and value == MiB
    assert len(labels["command"]) <= COMMAND_LIMIT and labels["command"].startswith("python train.py x")


class _ScriptedSource:
    """Answers each poll with the next Snapshot, or raises the next exception."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def poll(self) -> Snapshot:
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_a_poll_that_raises_keeps_the_last_good_data_and_counts_the_error():
    good = Snapshot(time=1.0, devices=(_device(0, memory_used_bytes=30 * GiB),))
    later = Snapshot(time=3.0, devices=(_device(0, memory_used_bytes=31 * GiB),))
    source = _ScriptedSource(good, OSError("proc vanished\nmid-read"), RuntimeError("NVML gave up"), later)
    state = ExporterState()
    assert poll_into(source, state) is None
    duration = _samples(build_registry(state))["gpumem_exporter_poll_duration_seconds"]
    assert poll_into(source, state) == "OSError: proc vanished mid-read"  # one line
    got = _samples(build_registry(state))
    assert got["gpumem_exporter_poll_errors_total"] == [({}, 1.0)]
    assert got["gpumem_gpu_memory_used_bytes"][0][1] == 30 * GiB  # the last good poll, still served
    assert got["gpumem_exporter_nvml_up"] == [({}, 1.0)] and got["gpumem_exporter_poll_duration_seconds"] == duration
    assert poll_into(source, state) == "RuntimeError: NVML gave up"
    assert poll_into(source, state) is None
    got = _samples(build_registry(state))
    assert got["gpumem_exporter_poll_errors_total"] == [({}, 2.0)]
    assert got["gpumem_gpu_memory_used_bytes"][0][1] == 31 * GiB


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--interval", "0"], "--interval"),
        (["--interval", "-1"], "--interval"),
        (["--interval", "abc"], "--interval"),
        (["--interval", "nan"], "--interval"),
        (["--listen"], "--listen"),
        (["--listen", "9835"], "HOST:PORT"),
        (["--probe-dir"], "--probe-dir"),
        (["--no-such-flag"], "--no-such-flag"),
    ],
)
def test_bad_flag_values_are_one_line_exit_2(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpumem-tui exporter: ") and says in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("text", "remote", "problem"),
    [
        ("9835", False, "HOST:PORT"),
        ("127.0.0.1:0", False, "HOST:PORT"),
        ("127.0.0.1:70000", False, "HOST:PORT"),
        ("example.org:9835", False, "not an IP address"),
        ("0.0.0.0:9835", False, "--allow-remote"),
        ("10.1.2.3:9835", False, "--allow-remote"),
    ],
)
def test_listen_addresses_are_checked(text, remote, problem):
    with pytest.raises(InputError, match=problem):
        parse_listen(text, remote)


def test_listen_accepts_loopback_and_asked_for_remote():
    assert parse_listen("127.0.0.1:9835", False) == ("127.0.0.1", 9835)
    assert parse_listen("[::1]:9835", False) == ("::1", 9835)
    assert parse_listen("localhost:1", False) == ("localhost", 1)
    assert parse_listen("0.0.0.0:9835", True) == ("0.0.0.0", 9835)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_cli(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.Popen([sys.executable, "-m", "gpumem_tui", "exporter", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_cli_serves_metrics_over_http_without_a_driver(tmp_path):
    port = _free_port()
    proc = _run_cli("--listen", f"127.0.0.1:{port}", "--interval", "0.2", "--probe-dir", str(tmp_path))
    try:
        def polled() -> str:  # the page once it holds a poll's figures ("" before)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
                text = resp.read().decode()
            return text if "gpumem_exporter_poll_duration_seconds " in text else ""

        text = wait_until(polled, what="the exporter to serve a poll's figures", poll=0.2, ignore=(OSError,))
        assert "gpumem_exporter_nvml_up 0.0" in text  # no NVIDIA driver on this machine: still serving
        assert "gpumem_exporter_poll_duration_seconds " in text
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


def test_cli_port_in_use_and_remote_refusal_are_one_line_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _run_cli("--listen", f"127.0.0.1:{port}")
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in err and err.count("\n") == 1
    proc = _run_cli("--listen", "0.0.0.0:9835")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "--allow-remote" in err and err.count("\n") == 1


# -- the HTTP server: Host check, timeouts, connection cap (DNS rebinding, unbounded threads) ---

from gpumem_tui.remote.exporter import exposition, state_app  # noqa: E402
from gpumem_tui.remote.exporter_http import HostPolicy, host_name, serve_metrics  # noqa: E402


def _parsed(text: str) -> list:
    """Families as prometheus_client's parser reads them: (name, type, help, samples)."""
    return [(f.name, f.type, f.documentation, sorted((s.name, sorted(s.labels.items()), s.value) for s in f.samples))
            for f in text_string_to_metric_families(text)]


@pytest.fixture
def static_state() -> ExporterState:
    state = ExporterState()
    procs = (ProcessSample(pid=100, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=MiB,
                           command="python train.py", user="alice"),)
    state.update(Snapshot(time=1.0, devices=(_device(0),), processes=procs), 0.01)
    return state


@pytest.fixture
def serve(static_state):
    """serve(**limits) -> port of a metrics server on 127.0.0.1 for ``static_state``."""
    servers = []

    def start(policy: HostPolicy | None = None, **limits) -> int:
        server, _ = serve_metrics("127.0.0.1", 0, state_app(static_state),
                                  policy or HostPolicy("127.0.0.1"), **limits)
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _get(port: int, host: str | None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest("GET", "/metrics", skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:{port}", "localhost", "LocalHost:{port}", "localhost.",
                                  "[::1]", "[::1]:{port}"])
def test_a_loopback_host_gets_the_same_series_as_prometheus_client_makes(serve, static_state, host):
    port = serve()
    status, body = _get(port, host.format(port=port))
    assert status == 200
    assert body == exposition(static_state)
    reference = generate_latest(build_registry(static_state)).decode()  # prometheus_client's encoder
    assert _parsed(body.decode()) == _parsed(reference)
    assert b'user="alice"' in body


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil",
                                  "[::2]:{port}", "10.1.2.3", "127.0.0.1:{port}:1", "", None])
def test_a_foreign_or_missing_host_is_refused_with_403_and_no_metrics(serve, host):
    port = serve()
    status, body = _get(port, None if host is None else host.format(port=port))
    assert status == 403
    assert b"gpumem_" not in body and b"alice" not in body


def test_host_header_parsing():
    assert host_name("[::1]:9835") == "::1" and host_name("LocalHost.:80") == "localhost"
    assert host_name("example.org") == "example.org"
    for bad in (None, "", "::1", "[::1", "[::1]x", "a:b", "host:", ":80"):
        assert host_name(bad) is None, bad


def test_remote_policy_allows_this_machines_names_and_addresses_and_named_hosts(monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu-box-7")
    monkeypatch.setattr(socket, "getfqdn", lambda *a: "gpu-box-7.lab.example")
    addresses = {"10.1.2.3", "fe80::1"}
    remote = HostPolicy("0.0.0.0", remote=True, extra=["metrics.lab.example"], addresses=lambda: set(addresses))
    for host in ("gpu-box-7:9835", "GPU-BOX-7.lab.example", "10.1.2.3:9835", "[fe80::1]:9835",
                 "metrics.lab.example", "localhost:9835"):
        assert remote.allows(host), host
    for host in ("evil.example", "10.9.9.9", "gpu-box-7.evil.example", None):
        assert not remote.allows(host), host
    addresses.add("10.9.9.9")  # an interface that came up later is looked up again
    assert remote.allows("10.9.9.9:9835")
    local = HostPolicy("127.0.0.1", addresses=lambda: set(addresses))
    assert not local.allows("gpu-box-7") and not local.allows("10.1.2.3")  # loopback: loopback names only


def test_a_client_that_sends_nothing_is_dropped_after_the_read_timeout(serve):
    port = serve(read_timeout=0.5, connection_seconds=600)
    with socket.create_connection(("127.0.0.1", port)) as stalled:
        stalled.settimeout(60)  # far longer than the server's timeout: only the server ends this
        assert stalled.recv(100) == b""  # closed by the server, nothing sent


def test_a_client_that_trickles_bytes_is_cut_off_at_the_connection_deadline(serve):
    port = serve(read_timeout=30, connection_seconds=1)
    with socket.create_connection(("127.0.0.1", port)) as slow:
        slow.settimeout(0.2)
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        closed = False
        for _ in range(300):  # each read timeout below is one 0.2 s pause between bytes
            try:
                slow.sendall(b"X")
                closed = slow.recv(100) == b""
            except TimeoutError:
                continue
            except OSError:  # reset by the server
                closed = True
            break
        assert closed


def test_connections_over_the_cap_are_refused_at_once_not_queued(serve):
    port = serve(read_timeout=60, connection_seconds=600, max_connections=3)
    stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        with socket.create_connection(("127.0.0.1", port)) as extra:
            extra.settimeout(30)  # the accept loop answers it in turn after the three: no race
            answer = b""
            while chunk := extra.recv(1000):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 503 ")
        stalled.pop().close()  # a place frees up once the server sees this one go
        wait_until(lambda: _get(port, "127.0.0.1")[0] == 200, what="a 200 once a place is free", poll=0.1)
    finally:
        for sock in stalled:
            sock.close()


def test_cli_refuses_a_foreign_host_and_a_bad_allow_host(tmp_path):
    assert main(["--allow-host", "http://evil/"]) == 2
    port = _free_port()
    proc = _run_cli("--listen", f"127.0.0.1:{port}", "--interval", "0.2", "--probe-dir", str(tmp_path),
                    "--allow-host", "gpu-alias.example")
    try:
        statuses = wait_until(lambda: {host: _get(port, host)[0] for host in ("evil.example", "gpu-alias.example:1")},
                              what="the exporter to listen", poll=0.2, ignore=(OSError,))  # OSError: not listening yet
        assert statuses == {"evil.example": 403, "gpu-alias.example:1": 200}
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def _leaky_poll(n: int, pid: int = 4242, rate: int = 12 * MiB) -> Snapshot:
    """Poll ``n`` (1, 2, ...) of a probed CUDA job without a model config: four steps per poll,
    one second each, the per-step peak ``rate`` bytes higher each step; GPU 0 has 20 GiB free."""
    steps = range(4 * n - 3, 4 * n + 1)
    peaks = tuple(PhasePeak(pid=pid, step=s, phase=Phase.BACKWARD, start=100.0 + s, end=101.0 + s,
                            peak_bytes=2 * GiB + rate * s, device="cuda") for s in steps)
    gpu = _device(0, memory_free_bytes=20 * GiB)
    row = ProcessSample(pid=pid, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=6 * GiB)
    return Snapshot(time=101.0 + steps[-1], devices=(gpu,), processes=(row,), phase_peaks=peaks,
                    probes=(ProbeSample(101.0 + steps[-1], pid, "cuda:0", 2 * GiB),),
                    probe_infos=(ProbeInfo(pid, None, (("batch", 4),)),))


def test_seconds_to_oom_of_a_leaking_probed_job_and_none_for_a_flat_one():
    state = ExporterState()
    for n in range(1, 6):  # 20 steps
        state.update(_leaky_poll(n), 0.01)
    got = _samples(build_registry(state))
    # limit: 20 GiB free + 6 GiB own used (no context measured); latest peak: step 20's
    steps_left = (26 * GiB - (2 * GiB + 12 * MiB * 20)) // (12 * MiB)
    assert got["gpumem_process_seconds_to_oom"] == [({"gpu": "0", "uuid": "GPU-0", "pid": "4242"},
                                                      pytest.approx(steps_left * 1.0))]
    assert got["gpumem_probe_drift_bytes_per_step"] == [({"pid": "4242"}, pytest.approx(12 * MiB))]
    # no model config: what was measured is served, and that nothing is predicted
    assert got["gpumem_probe_prediction_available"] == [({"pid": "4242"}, 0.0)]
    assert "gpumem_probe_predicted_peak_bytes" not in got and got["gpumem_probe_measured_peak_bytes"]
    assert b"gpumem_process_seconds_to_oom{" in exposition(state)  # the custom writer has it too
    flat = ExporterState()
    for n in range(1, 6):
        flat.update(_leaky_poll(n, rate=0), 0.01)
    got = _samples(build_registry(flat))
    assert "gpumem_process_seconds_to_oom" not in got and "gpumem_probe_drift_bytes_per_step" not in got  # no drift
