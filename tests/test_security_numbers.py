"""Item 17 of issue 13: hostile numbers in probe streams and traces never reach the chart,
out-of-order records do not hold the curves, and a dashboard that dies says so in one line
(exit 1) and where its traceback is."""

from __future__ import annotations

import json
import stat
import time

import pytest
from textual.app import App
from waiting import next_polls, settle

from gpumem_tui.telemetry.probe_source import ProbeSource
from gpumem_tui.telemetry.replay import ReplaySource, read_trace
from gpumem_tui.telemetry.serialize import SerializeError, snapshot_from_dict

T0 = 1_700_000_000.0
GiB = 1 << 30


def _line(record: dict) -> bytes:
    return json.dumps(record).encode() + b"\n"


def _sample(when, allocated=GiB) -> dict:
    return {"kind": "sample", "time": when, "step": 1, "phase": "forward", "device": "cuda:0",
            "torch_allocated": allocated}


def test_probe_lines_with_implausible_times_or_bytes_are_counted_not_charted(tmp_path):
    now = time.time()
    info = {"kind": "info", "format": "gpumem-tui-probe", "version": 1, "pid": 4242, "create_time": None}
    (tmp_path / "4242.jsonl").write_bytes(
        _line(info)
        + _line(_sample(1e308))               # OverflowError in the chart today
        + b'{"kind":"sample","time":1' + b"0" * 400 + b',"device":"cuda:0","torch_allocated":1}\n'
        + _line(_sample(now + 86400))         # a day ahead: plotext fills 86 400 s of axis
        + _line(_sample(now, allocated=2**62))  # more bytes than any machine has
        + _line(_sample(now - 1.0))           # the one good line
    )
    reading = ProbeSource(tmp_path, alive=lambda pid, created: True).poll()
    assert [p.time for p in reading.probes] == [now - 1.0]
    assert any("4 unreadable lines" in n for n in reading.notices)


def test_trace_records_with_implausible_figures(tmp_path):
    with pytest.raises(SerializeError, match="epoch time"):
        snapshot_from_dict({"time": 1e308})
    snap = snapshot_from_dict({
        "time": T0,
        "probes": [{"time": T0 + 86400, "pid": 7, "device": "cuda", "allocated_bytes": GiB},
                   {"time": T0 - 1, "pid": 7, "device": "cuda", "allocated_bytes": GiB}],
        "phase_marks": [{"time": T0 + 86400, "pid": 7, "phase": "forward", "step": 1}],
        "devices": [{"index": 0, "memory_total_bytes": 2**64 - 2, "memory_used_bytes": GiB,
                     "utilization_gpu_percent": 2.0**31, "temperature_c": 4294967294.0,
                     "power_draw_w": 18446744073709552.0}],
    })
    assert [p.time for p in snap.probes] == [T0 - 1] and snap.phase_marks == ()
    (dev,) = snap.devices
    assert (dev.memory_total_bytes, dev.utilization_gpu_percent, dev.temperature_c, dev.power_draw_w) == (
        None, None, None, None)
    assert dev.memory_used_bytes == GiB
    assert any("time after its snapshot" in n for n in snap.notices)


def _trace(path, times, extra=None) -> None:
    lines = [_line({"format": "gpumem-tui-trace", "version": 1, "created": T0})]
    for i, when in enumerate(times):
        record = {"time": when, "devices": [{"index": 0, "memory_total_bytes": 40 * GiB,
                                             "memory_used_bytes": (i + 1) * GiB}]}
        record.update((extra or {}).get(i, {}))
        lines.append(_line(record))
    path.write_bytes(b"".join(lines))


def test_a_record_a_day_out_of_order_is_skipped_on_replay(tmp_path):
    path = tmp_path / "t.jsonl"
    _trace(path, [T0, T0 + 1, T0 + 86400, T0 + 2, T0 + 3])
    source = ReplaySource(path)
    assert source.snapshot_count == 4 and source.duration == 3.0
    first = source.poll()
    assert any("1 record out of time order skipped" in n for n in first.notices)


def test_a_record_with_time_1e308_is_an_unreadable_line(tmp_path):
    path = tmp_path / "t.jsonl"
    _trace(path, [T0, 1e308, T0 + 1])
    snapshots, notices = read_trace(path)
    assert [s.time for s in snapshots] == [T0, T0 + 1]
    assert any("1 unreadable line" in n for n in notices)


async def test_replaying_hostile_figures_keeps_the_dashboard_alive(tmp_path):
    from gpumem_tui.ui.app import GpuMemApp

    path = tmp_path / "t.jsonl"
    proc = [{"pid": 7, "device_index": 0, "type": "compute", "used_memory_bytes": GiB}]
    records = {i: {"processes": proc,
                   "probes": [{"time": T0 + i, "pid": 7, "device": "cuda", "allocated_bytes": GiB}]}
               for i in range(6)}
    records[3]["probes"] = [{"time": 1e308, "pid": 7, "device": "cuda", "allocated_bytes": GiB}]
    _trace(path, [T0 + i for i in range(6)], records)
    source = ReplaySource(path, speed=50.0)
    app = GpuMemApp(source, interval=0.05, side_pane=False, select_pid=7)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: source.finished and app.chart_pid() == 7, what="the replay to reach its end, charted")
        await next_polls(pilot, app)  # the dashboard has drawn the end too
        assert source.finished and app.chart_pid() == 7
        assert getattr(app, "crash_line", None) is None and app.is_running and not app.return_code


def test_a_dashboard_that_dies_raises_one_line_naming_the_traceback_file(tmp_path, monkeypatch, capsys):
    from gpumem_tui.support.crash import DashboardCrashed
    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.launch import run_dashboard
    from gpumem_tui.ui.memory_chart import MemoryChart
    from ui_fakes import FakeSource

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(GpuMemApp, "run", lambda self: App.run(self, headless=True, size=(120, 40)))

    def broken_replot(self):
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(MemoryChart, "replot", broken_replot)
    with pytest.raises(DashboardCrashed) as caught:
        run_dashboard(FakeSource(), interval=0.05)
    line = str(caught.value)
    assert "\n" not in line and "OverflowError: int too large to convert to float" in line
    report = tmp_path / "cache" / "gpumem-tui" / line.rsplit("traceback: ", 1)[1].rstrip(")").rsplit("/", 1)[1]
    assert "Traceback (most recent call last)" in report.read_text() and "in broken_replot" in report.read_text()
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    assert "Traceback" not in capsys.readouterr().err


def test_the_dashboard_command_exits_1_with_that_line(monkeypatch, capsys, tmp_path):
    from gpumem_tui.support.crash import DashboardCrashed
    from gpumem_tui.ui import launch

    def crash(**kwargs):
        raise DashboardCrashed("the dashboard stopped on an unexpected error: E: x (traceback: /x)")

    monkeypatch.setenv("GPUMEM_TUI_CONFIG_DIR", str(tmp_path))
    monkeypatch.setattr(launch, "run_dashboard", crash)
    assert launch.main(["--no-demo"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "traceback: /x" in err
