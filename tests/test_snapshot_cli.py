"""`gpumem-tui snapshot [--json]` against the fake NVML, hostile command lines included."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fake_pynvml import GiB, MiB, NVML_ERROR_NOT_SUPPORTED, ULLONG_MAX

from gpumem_tui.telemetry import snapshot_cli
from gpumem_tui.telemetry.model import ProcessSample, ProcessType, Snapshot

DEVICE_KEYS = {"index", "name", "uuid", "memory_total_bytes", "memory_used_bytes", "utilization_gpu_percent",
               "temperature_c", "power_draw_w", "power_limit_w"}
PROCESS_KEYS = {"pid", "device_index", "type", "used_memory_bytes", "sm_percent", "user", "command",
                "cpu_percent", "rss_bytes"}

HOSTILE_ARGS = [b"bad-\xff\xfe-utf8", "\x1b[31m\x1b]0;pwned\x07[bold red]boom[/][link=https://x]y[/link]",
                "line\nbreak", "x" * 100_000]


def _run(capsys, *argv):
    code = snapshot_cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_shape_and_values(fake_nvml, spawn, capsys):
    a = spawn()
    fake_nvml.gpus[0].memory_used = 10 * GiB
    fake_nvml.add_process(0, pid=a.pid, used=2 * GiB, sm=33)
    fake_nvml.add_process(1, pid=a.pid, used=64 * MiB, kind="graphics")
    code, out, err = _run(capsys, "--json", "--cpu-interval", "0.05")
    assert code == 0 and err == ""
    assert fake_nvml.init_count == 0  # nvmlInit paired with nvmlShutdown
    doc = json.loads(out)
    assert set(doc) == {"driver_version", "cuda_driver_version", "devices", "processes"}
    assert doc["driver_version"] == "550.54.15" and doc["cuda_driver_version"] == "12.4"
    assert [set(d) for d in doc["devices"]] == [DEVICE_KEYS, DEVICE_KEYS]
    d0 = doc["devices"][0]
    assert d0["memory_used_bytes"] == 10 * GiB and d0["memory_total_bytes"] == 80 * GiB
    assert d0["power_draw_w"] == pytest.approx(123.456) and d0["power_limit_w"] == pytest.approx(400.0)
    procs = sorted(doc["processes"], key=lambda p: p["device_index"])
    assert all(set(p) == PROCESS_KEYS for p in procs)
    assert [(p["device_index"], p["type"], p["used_memory_bytes"]) for p in procs] == [
        (0, "compute", 2 * GiB), (1, "graphics", 64 * MiB)]
    assert procs[0]["sm_percent"] == 33.0
    assert procs[0]["pid"] == a.pid and "time.sleep" in procs[0]["command"]
    assert isinstance(procs[0]["cpu_percent"], float)  # measured over the interval
    assert procs[0]["rss_bytes"] > 0 and procs[0]["user"]


def test_unknown_values_are_null(fake_nvml, capsys):
    fake_nvml.fail("nvmlDeviceGetPowerUsage", NVML_ERROR_NOT_SUPPORTED)
    fake_nvml.fail("nvmlDeviceGetTemperature", NVML_ERROR_NOT_SUPPORTED, device=1)
    fake_nvml.add_process(1, pid=4_000_001, used=ULLONG_MAX)
    code, out, _ = _run(capsys, "--json", "--cpu-interval", "0")
    doc = json.loads(out)
    assert code == 0
    assert doc["devices"][0]["power_draw_w"] is None and doc["devices"][1]["temperature_c"] is None
    assert doc["devices"][0]["temperature_c"] == 55.0
    (proc,) = doc["processes"]
    assert proc["used_memory_bytes"] is None
    assert proc["user"] is None and proc["command"] is None and proc["cpu_percent"] is None


def test_hostile_command_lines_are_valid_json(fake_nvml, spawn, capsys):
    child = spawn(argv=[sys.executable, "-c", "import time; time.sleep(600)", *HOSTILE_ARGS])
    fake_nvml.add_process(0, pid=child.pid, used=1 * MiB)
    code, out, _ = _run(capsys, "--json", "--cpu-interval", "0")
    assert code == 0
    out.encode("ascii")  # ensure_ascii: no raw control bytes, no surrogates
    assert "\x1b" not in out and "\x07" not in out
    (proc,) = json.loads(out)["processes"]
    command = proc["command"]
    assert "bad-\ufffd\ufffd-utf8" in command  # invalid UTF-8 -> U+FFFD
    assert "\x1b[31m\x1b]0;pwned\x07[bold red]boom[/]" in command  # kept literally, escaped by JSON
    assert "line\nbreak" in command
    assert command.endswith("x" * 100_000)  # JSON keeps the whole command


def test_hostile_command_lines_in_text_table():
    hostile = " ".join(a.decode("utf-8", "surrogateescape") if isinstance(a, bytes) else a for a in HOSTILE_ARGS)
    snap = Snapshot(time=0.0, driver_version="1", devices=(), processes=(
        ProcessSample(pid=4242, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=MiB,
                      user="[red]eve\x1b", command=hostile),))
    out = snapshot_cli.format_table(snap, width=160)
    assert "\x1b" not in out and "\x07" not in out
    row = [line for line in out.splitlines() if "4242" in line]
    assert len(row) == 1  # the newline inside the command did not split the row
    assert "bad-\\xff\\xfe-utf8 \\x1b[31m\\x1b]0;pwned\\x07[bold red]" in row[0]
    assert "[red]eve…" in row[0]
    assert len(row[0]) <= 160 and row[0].endswith(f"({len(hostile.encode('utf-8', 'surrogateescape'))} bytes)")


def test_text_table_lists_devices_and_reasons(fake_nvml, capsys):
    fake_nvml.lose_gpu(1)
    fake_nvml.fail("nvmlDeviceGetPowerUsage", NVML_ERROR_NOT_SUPPORTED, device=0)
    code, out, _ = _run(capsys, "--cpu-interval", "0")
    assert code == 0
    lines = out.splitlines()
    assert "550.54.15" in lines[0] and "12.4" in lines[0]
    gpu0 = next(line for line in lines if line.lstrip().startswith("0  NVIDIA"))
    assert "1.0 GiB / 80.0 GiB" in gpu0 and "N/A / 400W" in gpu0
    gpu1 = next(line for line in lines if line.lstrip().startswith("1  "))
    assert "GPU is lost" in gpu1
    assert "(no processes on any GPU)" in out


def test_without_nvml_exit_1_one_line(no_nvml, capsys):
    code, out, err = _run(capsys, "--json")
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert "NVML Shared Library Not Found" in err


@pytest.mark.parametrize("argv", [["--bogus"], ["--cpu-interval", "abc"], ["--cpu-interval", "-1"],
                                  ["--cpu-interval", "0.01"]])  # shorter than a CPU % can be measured over
def test_bad_arguments_exit_2(fake_nvml, capsys, argv):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err


def test_real_cli_without_driver():
    """On this machine there is no NVIDIA driver: the real binding's error is named."""
    import pynvml  # a dependency: missing is a failure

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("a real NVIDIA driver is present")
    proc = subprocess.run([sys.executable, "-m", "gpumem_tui", "snapshot", "--json"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("gpumem-tui snapshot: NVML is not available: ")
    assert proc.stderr.count("\n") == 1


def test_json_names_the_container_and_the_pid_inside_it():
    from gpumem_tui.telemetry.model import ProcessSample, ProcessType
    from gpumem_tui.telemetry.snapshot_cli import process_to_json

    boxed = ProcessSample(pid=48213, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=1 << 30,
                          container="docker cdcdcdcdcdcd", container_pid=42)
    doc = process_to_json(boxed)
    assert doc["container"] == "docker cdcdcdcdcdcd" and doc["container_pid"] == 42 and doc["pid"] == 48213
    plain = process_to_json(ProcessSample(pid=7, device_index=0, type=ProcessType.COMPUTE))
    assert set(plain) == PROCESS_KEYS  # issue 2's shape when there is no container
