"""Traces: serialize round trip, tolerant reading, ReplaySource controls, kill -9 of a recorder."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumem_tui.telemetry.model import (
    DeviceSample,
    Phase,
    PhaseMark,
    ProbeInfo,
    ProbeSample,
    ProcessSample,
    ProcessStatus,
    ProcessType,
    Snapshot,
)
from gpumem_tui.telemetry.replay import ReplaySource, TraceError, TraceRecorder, read_trace
from gpumem_tui.telemetry.serialize import SerializeError, snapshot_from_dict, snapshot_to_dict
from waiting import wait_until

HOSTILE = "python train.py [bold red]x[/] \x1b[31mred\x1b[0m \udcff\udcfe \u202e" + "A" * 1000


def make_snapshot(t: float, n: int = 1) -> Snapshot:
    return Snapshot(
        time=t,
        driver_version="550.1",
        cuda_driver_version="12.4",
        devices=(
            DeviceSample(0, "Fake GPU", "GPU-0", 24 << 30, (1 << 30) + n, 50.0, 61.0, 120.5, 300.0),
            DeviceSample(1, None, None, None, None, None, None, None, None, error="GPU is lost",
                         field_errors=(("name", "N/A"),)),
        ),
        processes=(
            ProcessSample(pid=100 + n, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=512 << 20,
                          user="alice", command=HOSTILE, cpu_percent=12.5, rss_bytes=1 << 30, start_time=1.5),
            ProcessSample(pid=7, device_index=None, type=ProcessType.HOST, status=ProcessStatus.NO_PERMISSION,
                          field_errors=(("rss_bytes", "no permission"),)),
        ),
        probes=(ProbeSample(t, 100 + n, "cpu", 1000 * n, None, 2000 * n, (("parameters", 10), ("activations", 5))),),
        probe_infos=(ProbeInfo(100 + n, {"n_layer": 2, "betas": [0.9, 0.99]}, (("batch", 4), ("dtype", "float32"))),),
        phase_marks=(PhaseMark(t, 100 + n, Phase.BACKWARD, n),),
        notices=("hello",),
    )


def write_trace(path: Path, snapshots: list[Snapshot]) -> None:
    with TraceRecorder(path) as rec:
        for snap in snapshots:
            rec.write(snap)


def test_snapshot_round_trip_is_exact_including_hostile_text():
    snap = make_snapshot(12.25, 3)
    text = json.dumps(snapshot_to_dict(snap))
    assert "\x1b" not in text  # escaped in the file
    assert snapshot_from_dict(json.loads(text)) == snap


names = st.text(alphabet=st.characters(blacklist_categories=()), max_size=40)


@settings(max_examples=60, deadline=None)
@given(
    t=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    used=st.one_of(st.none(), st.integers(min_value=0, max_value=2**50)),  # plausible.MAX_BYTES
    command=st.one_of(st.none(), names),
    cats=st.lists(st.tuples(st.text(max_size=10), st.integers(0, 2**50)), max_size=4, unique_by=lambda c: c[0]),
)
def test_round_trip_property(t, used, command, cats):
    snap = Snapshot(
        time=t,
        processes=(ProcessSample(pid=1, device_index=0, type=ProcessType.GRAPHICS, used_memory_bytes=used,
                                 command=command),),
        probes=(ProbeSample(t, 1, "cuda", 5, 6, 7, tuple(cats)),),
    )
    assert snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(snap)))) == snap


def test_non_finite_floats_become_null():
    snap = Snapshot(time=1.0, devices=(DeviceSample(0, "g", "u", 1, 1, float("nan"), float("inf"), None, None),))
    d = snapshot_to_dict(snap)
    json.dumps(d, allow_nan=False)
    assert d["devices"][0]["utilization_gpu_percent"] is None


def test_unknown_fields_ignored_and_unreadable_items_skipped_with_notice():
    d = snapshot_to_dict(make_snapshot(5.0))
    d["future_field"] = {"x": 1}
    d["devices"][0]["fan_speed"] = 40
    d["processes"].append({"pid": 9, "type": "quantum", "device_index": 0})
    d["phase_marks"].append({"time": 5.0, "pid": 9, "phase": "warmup", "step": 1})
    snap = snapshot_from_dict(d)
    assert len(snap.devices) == 2 and snap.devices[0].name == "Fake GPU"
    assert [p.pid for p in snap.processes] == [101, 7]
    assert len(snap.phase_marks) == 1
    assert any("processes: unknown process type 'quantum'" in n for n in snap.notices)
    assert any("unknown phase 'warmup'" in n for n in snap.notices)


@pytest.mark.parametrize("bad", [[], "x", {"devices": []}, {"time": "now"}, {"time": 1, "devices": {}}])
def test_records_that_are_not_snapshots_raise(bad):
    with pytest.raises(SerializeError):
        snapshot_from_dict(bad)


def test_trace_round_trip(tmp_path):
    path = tmp_path / "t.jsonl"
    snaps = [make_snapshot(100.0 + i, i) for i in range(5)]
    write_trace(path, snaps)
    lines = path.read_bytes().split(b"\n")
    header = json.loads(lines[0])
    assert header["format"] == "gpumem-tui-trace" and header["version"] == 1
    got, notices = read_trace(path)
    assert got == snaps and notices == []


def test_torn_last_line_replays_up_to_the_tear(tmp_path):
    path = tmp_path / "t.jsonl"
    snaps = [make_snapshot(100.0 + i, i) for i in range(3)]
    write_trace(path, snaps)
    whole = json.dumps(snapshot_to_dict(make_snapshot(200.0))).encode()
    with open(path, "ab") as f:
        f.write(whole[: len(whole) // 2])
    got, notices = read_trace(path)
    assert got == snaps
    assert len(notices) == 1 and "torn" in notices[0]


def test_bad_middle_line_skipped_with_notice(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(path, [make_snapshot(1.0)])
    with open(path, "ab") as f:
        f.write(b"garbage\n" + json.dumps(snapshot_to_dict(make_snapshot(2.0))).encode() + b"\n")
    got, notices = read_trace(path)
    assert [s.time for s in got] == [1.0, 2.0]
    assert notices == ["t.jsonl: 1 unreadable line skipped (first: line 3)"]


def test_newer_version_is_read_with_notice(tmp_path):
    path = tmp_path / "t.jsonl"
    header = {"format": "gpumem-tui-trace", "version": 7, "created": 0}
    rec = snapshot_to_dict(make_snapshot(1.0))
    rec["hologram"] = True
    path.write_text(json.dumps(header) + "\n" + json.dumps(rec) + "\n")
    got, notices = read_trace(path)
    assert len(got) == 1 and "version 7" in notices[0]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty trace"),
        (b"\n\n  \n", "empty trace"),
        (b"this is not json\n", "not JSON"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not JSON"),
        (b'{"format": "something-else"}\n', "not a gpumem-tui trace"),
        # a trace gzipped after recording (as tests/data/probed_h100/*.jsonl.gz): said so
        pytest.param(gzip.compress(b'{"format": "gpumem-tui-trace", "version": 1}\n' * 1000, mtime=0),
                     "gzip-compressed", id="gzip"),
        (b'{"format": "gpumem-tui-trace", "version": "one"}\n', "version"),
        (b'{"format": "gpumem-tui-trace", "version": 1}\n', "no snapshots"),
        (b'{"format": "gpumem-tui-trace", "version": 1}\n{"time": "x"}\n', "no snapshots"),
    ],
)
def test_unusable_traces_raise_trace_error(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as info:
        read_trace(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_replay_source_plays_in_time_and_never_drops_samples(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(path, [make_snapshot(1000.0 + i, i) for i in range(10)])  # one record per second
    clock = Clock()
    src = ReplaySource(path, clock=clock)
    assert src.duration == 9.0 and src.position == 0.0
    first = src.poll()
    assert first.time == 1000.0 and [p.pid for p in first.probes] == [100]
    clock.now = 3.5
    s = src.poll()
    assert s.time == 1003.0  # state of the last record reached
    assert [p.pid for p in s.probes] == [101, 102, 103]  # all passed records' samples
    assert [m.step for m in s.phase_marks] == [1, 2, 3]
    again = src.poll()
    assert again.time == 1003.0 and again.probes == () and again.phase_marks == ()

    src.pause()
    clock.now = 100.0
    assert src.poll().time == 1003.0 and src.paused
    src.resume()
    src.set_speed(2.0)
    clock.now = 101.0  # 1 s wall at x2 -> +2 s
    assert src.poll().time == 1005.0 and src.position == pytest.approx(5.5)

    src.seek(1.2)
    s = src.poll()
    assert s.time == 1001.0 and [p.pid for p in s.probes] == [101]
    assert any("replay at 1.2 s of 9.0 s" in n for n in s.notices)
    src.seek(-5)
    assert src.position == 0.0
    src.seek(1e9)
    end = src.poll()
    assert end.time == 1009.0 and src.finished
    assert any("replay finished" in n for n in end.notices)
    assert not any("replay finished" in n for n in src.poll().notices)  # once
    with pytest.raises(ValueError):
        src.set_speed(0)
    with pytest.raises(ValueError):
        src.set_speed(float("nan"))


def test_replay_source_carries_trace_notices_first(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(path, [make_snapshot(1.0), make_snapshot(2.0)])
    with open(path, "ab") as f:
        f.write(b'{"time": 3')
    src = ReplaySource(path, clock=Clock())
    assert any("torn" in n for n in src.poll().notices)


RECORDER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from gpumem_tui.telemetry.model import Snapshot, ProcessSample, ProcessType
    from gpumem_tui.telemetry.replay import TraceRecorder
    rec = TraceRecorder(sys.argv[1])
    procs = tuple(ProcessSample(pid=i, device_index=0, type=ProcessType.COMPUTE, command="x" * 3000)
                  for i in range(40))
    i = 0
    while True:
        rec.write(Snapshot(time=float(i), processes=procs))
        i += 1
    """
)


def test_kill_9_of_a_recorder_loses_at_most_the_last_line(tmp_path):
    root = str(Path(__file__).resolve().parents[1])
    script = tmp_path / "rec.py"
    script.write_text(RECORDER.format(root=root))
    path = tmp_path / "t.jsonl"
    for attempt in range(3):  # kill at different moments
        proc = subprocess.Popen([sys.executable, str(script), str(path)])
        # killed once the trace has grown past a size that differs per attempt (not after a time)
        wait_until(lambda: path.exists() and path.stat().st_size >= (2 + attempt) << 20,  # noqa: B023
                   what=f"the recorder to write {2 + attempt} MiB")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        data = path.read_bytes()
        lines = data.split(b"\n")
        complete = lines[:-1]
        for line in complete:  # every finished line is intact
            json.loads(line)
        snaps, notices = read_trace(path)
        assert len(snaps) == len(complete) - 1  # all but the header
        assert [s.time for s in snaps] == [float(i) for i in range(len(snaps))]
        assert len(snaps) > 10
        if lines[-1]:
            assert any("torn" in n for n in notices)
        else:
            assert notices == []


def test_replay_skips_a_record_that_fails_late_with_a_notice(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(path, [make_snapshot(1.0, 1)])
    with open(path, "ab") as f:
        f.write(b'{"time":2.0,"devices":"oops"}\n')  # has a time, is not a snapshot
        f.write(json.dumps(snapshot_to_dict(make_snapshot(3.0, 3))).encode() + b"\n")
    clock = Clock()
    src = ReplaySource(path, clock=clock)
    src.poll()
    clock.now = 10.0
    s = src.poll()
    assert s.time == 3.0 and [p.pid for p in s.probes] == [103]
    assert any("1 record(s) could not be read" in n for n in s.notices)
    src.close()
    src.close()


def test_replay_memory_does_not_grow_with_trace_content(tmp_path):
    import tracemalloc

    path = tmp_path / "big.jsonl"
    procs = tuple(ProcessSample(pid=i, device_index=0, type=ProcessType.COMPUTE, command="python " * 20)
                  for i in range(50))
    with TraceRecorder(path) as rec:
        rec.write(Snapshot(time=0.0, processes=procs))
    line = path.read_bytes().split(b"\n")[1]
    with open(path, "ab") as f:
        for i in range(1, 1500):
            f.write(line.replace(b'{"time":0.0', b'{"time":%d.0' % i, 1) + b"\n")
    assert path.stat().st_size > 20 << 20
    tracemalloc.start()
    src = ReplaySource(path, clock=Clock())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert src.duration == 1499.0 and src.snapshot_count == 1500
    assert peak < 4 << 20, peak  # parsing every record would hold far more than the index
    assert len(src.poll().processes) == 50
    src.close()
