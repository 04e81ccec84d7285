"""Item 19 of issue 13: a hung NVML call never keeps the dashboard from quitting, NVML that
fails on every call after init says so (snapshot exits 1), implausible readings are N/A."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from fake_pynvml import NVML_ERROR_UNKNOWN, ULLONG_MAX, FakeGpu, FakeNvml
from waiting import HANG_TIMEOUT

from gpumem_tui.telemetry import snapshot_cli
from gpumem_tui.telemetry.nvml import NvmlSource

REPO = Path(__file__).resolve().parents[1]

HUNG_DASHBOARD = textwrap.dedent("""
    import sys, threading, time
    sys.path.insert(0, {tests!r})
    from fake_pynvml import FakeNvml
    from textual.app import App
    from waiting import settle
    from gpumem_tui.telemetry.live import LiveSource
    from gpumem_tui.telemetry.nvml import NvmlSource
    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.launch import run_dashboard

    fake = FakeNvml(gpus=1)
    never = threading.Event()
    real = fake.module.nvmlDeviceGetMemoryInfo
    polls = []

    def memory_info(handle, *args):
        polls.append(1)
        if len(polls) > 2:
            never.wait()  # a wedged driver: this call never returns
        return real(handle, *args)

    fake.module.nvmlDeviceGetMemoryInfo = memory_info

    async def press_q_once_hung(pilot):
        await settle(pilot, lambda: len(polls) >= 3, what="the third NVML memory call")
        # the third call counted itself before it hung: the poll is stuck in NVML now
        await pilot.pause()
        print("hung; pressing q", flush=True)
        await pilot.press("q")

    GpuMemApp.run = lambda self: App.run(self, headless=True, size=(120, 40), auto_pilot=press_q_once_hung)
    source = LiveSource(nvml=NvmlSource(fake.module), probes=False)
    run_dashboard(source, interval=0.1)
    print("exited", flush=True)
""")


def test_q_quits_while_an_nvml_call_never_returns(tmp_path):
    script = tmp_path / "hung.py"
    script.write_text(HUNG_DASHBOARD.format(tests=str(REPO / "tests")))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env=env, text=True)
    try:
        out, _ = child.communicate(timeout=HANG_TIMEOUT)  # a hang guard (the bug hangs), not a speed check
    except subprocess.TimeoutExpired:
        child.kill()
        out, _ = child.communicate()
        raise AssertionError(f"the dashboard did not exit after q while NVML hung:\n{out[-2000:]}") from None
    assert "hung; pressing q" in out and "exited" in out, out[-2000:]
    assert child.returncode == 0


def _fail_after_init(fake: FakeNvml) -> None:
    init = fake.module.nvmlInit

    def nvml_init():
        init()
        fake.fail("*", NVML_ERROR_UNKNOWN)

    fake.module.nvmlInit = nvml_init


def test_every_call_failing_after_init_is_an_error_not_zero_gpus(fake_nvml):
    _fail_after_init(fake_nvml)
    reading = NvmlSource(fake_nvml.module).poll()
    assert reading.error is not None and "fails after init (nvmlDeviceGetCount: unknown NVML error)" in reading.error


def test_snapshot_exits_1_with_the_error_when_every_call_fails(fake_nvml, capsys):
    _fail_after_init(fake_nvml)
    assert snapshot_cli.main(["--cpu-interval", "0"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "every NVML call fails after init (nvmlDeviceGetCount: unknown NVML error)" in captured.err


def test_implausible_readings_show_as_na(monkeypatch):
    fake = FakeNvml(gpus=0)
    fake.gpus.append(FakeGpu(uuid="GPU-x", memory_total=ULLONG_MAX - 1, memory_used=ULLONG_MAX - 1,
                             util_gpu=2**31, temperature=4294967294, power_mw=ULLONG_MAX))
    fake.add_process(0, pid=4242, used=ULLONG_MAX - 1, sm=2**31)
    fake.add_process(0, pid=4243, used=1 << 30, sm=40)
    fake.install(monkeypatch)
    reading = NvmlSource(fake.module).poll()
    (dev,) = reading.devices
    assert (dev.memory_total_bytes, dev.memory_used_bytes, dev.utilization_gpu_percent, dev.temperature_c,
            dev.power_draw_w) == (None, None, None, None, None)
    errors = dict(dev.field_errors)
    for name in ("memory_total_bytes", "utilization_gpu_percent", "temperature_c", "power_draw_w"):
        assert errors[name] == "N/A"
    procs = {p.pid: p for p in reading.processes}
    assert procs[4242].used_memory_bytes is None and procs[4242].sm_percent == 0.0
    assert procs[4243].used_memory_bytes == 1 << 30 and procs[4243].sm_percent == 40.0
    table = snapshot_cli.format_table(__import__("gpumem_tui.telemetry.model", fromlist=["Snapshot"]).Snapshot(
        time=time.time(), devices=reading.devices, processes=reading.processes))
    for figure in ("4294967294", "2147483648", "18446744073709552", "16384.0 PiB", "17179869184"):
        assert figure not in table
    assert any("implausible temperature (4294967294)" in n for n in reading.notices)
