"""Items 15 and 20 of issue 13: the probe reader trusts only regular files owned by the user
who runs the process they name (or root), never blocks on a FIFO, never follows a link, and
reads only the streams it keeps."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from local_users import run_as, shared_dir, two_users  # noqa: F401 - fixtures
from waiting import HANG_TIMEOUT, next_polls, settle

from gpumem_tui.telemetry.probe_source import ProbeSource

GiB = 1 << 30


def _stream(pid: int, gib: int = 72) -> bytes:
    info = {"kind": "info", "format": "gpumem-tui-probe", "version": 1, "pid": pid, "time": time.time(),
            "create_time": None, "model_config": {"model_type": "llama"}, "setup": {"batch": 8}}
    sample = {"kind": "sample", "time": time.time(), "step": 1, "phase": "forward", "device": "cuda:0",
              "torch_allocated": gib * GiB}
    return (json.dumps(info) + "\n" + json.dumps(sample) + "\n").encode()


def _write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


def test_another_users_stream_naming_a_root_process_is_refused(two_users, shared_dir, spawn):
    attacker, victim = two_users
    probes = shared_dir / "probes"
    probes.mkdir()
    probes.chmod(0o1777)  # a team's shared probe directory
    root_job = spawn(seconds=600)  # runs as root
    victim_job = spawn(seconds=600, user=victim.uid)
    run_as(attacker, _write_file, str(probes / f"{root_job.pid}.jsonl"), _stream(root_job.pid))
    run_as(victim, _write_file, str(probes / f"{victim_job.pid}.jsonl"), _stream(victim_job.pid, gib=3))

    reading = ProbeSource(probes).poll()

    assert [i.pid for i in reading.probe_infos] == [victim_job.pid]  # the honest one is read
    assert [p.pid for p in reading.probes] == [victim_job.pid]
    (notice,) = [n for n in reading.notices if f"{root_job.pid}.jsonl" in n]
    assert f"owned by {attacker.name}" in notice and f"PID {root_job.pid} runs as root" in notice


def test_another_users_stream_of_a_process_that_is_gone_is_refused(two_users, tmp_path):
    attacker, _ = two_users
    path = tmp_path / "999999999.jsonl"  # no such PID
    path.write_bytes(_stream(999999999))
    os.chown(path, attacker.uid, attacker.gid)
    reading = ProbeSource(tmp_path).poll()
    assert reading.probe_infos == () and reading.probes == ()
    assert any("is not running" in n for n in reading.notices)


def test_a_fifo_named_like_a_stream_does_not_block_the_reader(tmp_path):
    fifo = tmp_path / f"{os.getpid()}.jsonl"
    os.mkfifo(fifo)
    result: dict = {}
    poller = threading.Thread(target=lambda: result.setdefault("r", ProbeSource(tmp_path).poll()), daemon=True)
    poller.start()
    poller.join(timeout=HANG_TIMEOUT)  # a hang guard: the bug blocks for ever
    if poller.is_alive():  # today's reader waits in open() for a writer: give it one and fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        poller.join(timeout=5)
        pytest.fail("ProbeSource.poll() blocked on a FIFO")
    assert result["r"].probe_infos == ()
    assert any("a FIFO" in n for n in result["r"].notices)


def test_a_link_to_dev_zero_is_refused_not_read(tmp_path):
    (tmp_path / f"{os.getpid()}.jsonl").symlink_to("/dev/zero")
    src = ProbeSource(tmp_path)
    first = src.poll()
    assert any("symbolic link" in n for n in first.notices)
    reads = []
    original = src._read
    src._read = lambda *a, **k: reads.append(1) or original(*a, **k)
    for _ in range(3):
        again = src.poll()
        assert again.notices == () and again.probe_infos == ()
    assert reads == []  # refused once, not re-read every poll


def test_only_the_kept_streams_are_read_when_more_are_live(tmp_path):
    cap, live = 16, 200
    for pid in range(100000, 100000 + live):
        (tmp_path / f"{pid}.jsonl").write_bytes(_stream(pid, gib=1))
    src = ProbeSource(tmp_path, max_probes=cap, alive=lambda pid, created: True)
    reads: list[int] = []
    original = src._read
    src._read = lambda stream, *a, **k: reads.append(stream.pid) or original(stream, *a, **k)
    first = src.poll()
    assert len(first.probe_infos) == cap
    assert any(f"at most {cap} are followed" in n for n in first.notices)
    kept = {i.pid for i in first.probe_infos}
    for _ in range(3):  # every stream keeps appending
        for pid in range(100000, 100000 + live):
            with open(tmp_path / f"{pid}.jsonl", "ab") as handle:
                handle.write(_stream(pid, gib=2).split(b"\n", 1)[1])
        reads.clear()
        reading = src.poll()
        assert set(reads) == kept  # the other 184 files are not opened
        assert {p.pid for p in reading.probes} == kept


async def test_the_table_lists_a_bounded_number_of_rows_and_says_how_many_are_not():

    from gpumem_tui.telemetry.model import DeviceSample, ProcessSample, ProcessType, Snapshot
    from gpumem_tui.ui.app import GpuMemApp

    devices = tuple(DeviceSample(i, "H100", f"GPU-{i}", 80 * GiB, GiB, 1.0, 40.0, 100.0, 700.0) for i in range(3))
    procs = tuple(ProcessSample(10_000 + g * 600 + k, g, ProcessType.COMPUTE, (k + 1) << 20, 1.0, "u", "python x.py",
                                1.0, GiB, 1.69e9) for g in range(3) for k in range(600))

    class Source:
        def poll(self):
            return Snapshot(time=time.time(), devices=devices, processes=procs)

        def close(self):
            pass

    app = GpuMemApp(Source(), interval=0.2, side_pane=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: app.snapshot is not None and app.table.row_count, what="the first rows")
        await next_polls(pilot, app)  # the table and status line are rebuilt with every snapshot
        assert app.table.row_count == 500  # the first 500 in sort order, not all 1800
        assert min(p.used_memory_bytes for p in app.table.shown) > (400 << 20)
        assert "1300 not listed: / filters" in app.status_text().plain
        app.table.set_filter("gpu:2")
        assert app.table.row_count == 500 and {p.device_index for p in app.table.shown} == {2}
        app.table.set_filter("gpu:2 python 11799")
        assert [p.pid for p in app.table.shown] == [11_799]


async def test_rows_entering_and_leaving_the_listed_rows_keep_table_and_order_in_step():
    from gpumem_tui.telemetry.model import DeviceSample, ProcessSample, ProcessType, Snapshot
    from gpumem_tui.ui.app import GpuMemApp

    devices = (DeviceSample(0, "H100", "GPU-0", 80 * GiB, GiB, 1.0, 40.0, 100.0, 700.0),)
    state = {"poll": 0}

    class Source:
        def poll(self):
            state["poll"] += 1
            shift = state["poll"] * 7  # every poll 7 processes rise above the cut, 7 fall below
            procs = tuple(ProcessSample(20_000 + k, 0, ProcessType.COMPUTE, (((k + shift) % 600) + 1) << 20, 1.0,
                                        "u", "python x.py", 1.0, GiB, 1.69e9) for k in range(600))
            return Snapshot(time=time.time(), devices=devices, processes=procs)

        def close(self):
            pass

    app = GpuMemApp(Source(), interval=0.1, side_pane=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: state["poll"] >= 6, what="six polls")
        # a snapshot is applied to the table in one go on the UI loop, where this test runs too:
        # whenever the test looks, the table is between two snapshots, never half-way through one
        await next_polls(pilot, app)
        table = app.table
        assert table.row_count == len(table.shown) in (500, 501)  # + the selected row if it fell out
        pid_column = table.visible_columns.index("pid")
        listed = [table.get_row_at(i)[pid_column].plain for i in range(table.row_count)]
        assert listed == [str(p.pid) for p in table.shown]  # the rows drawn are the rows sorted
        memory = [p.used_memory_bytes for p in table.shown[:500]]
        assert memory == sorted(memory, reverse=True) and memory[0] == 600 << 20


@pytest.mark.parametrize(
    "gap",
    [
        {"dropped": 0},
        {"dropped": -3},
        {"dropped": True},
        {"dropped": "7"},
        {"dropped": 1 << 62},
        {"start": "yesterday"},
        {"start": None},
        {"start": -5.0},
        {"start_offset": 10.0},  # starts after it ended
        {"time_offset": 1e9},  # in the future
    ],
)
def test_a_gap_record_that_is_not_valid_is_a_skipped_line_not_a_notice_of_loss(tmp_path, gap):
    pid = os.getpid()
    now = time.time()
    record = {"kind": "gap", "time": now + gap.pop("time_offset", 0.0), "start": now - 5 + gap.pop("start_offset", 0.0),
              "dropped": 3, **gap}
    path = tmp_path / f"{pid}.jsonl"
    path.write_bytes(_stream(pid) + json.dumps(record).encode() + b"\n")
    reading = ProbeSource(tmp_path).poll()
    assert not any("lost" in n for n in reading.notices)
    assert any("1 unreadable line skipped" in n for n in reading.notices)
    assert len(reading.probes) == 1  # the sample before it is still read


def test_a_valid_gap_record_is_one_notice_naming_the_records_lost_and_when(tmp_path):
    pid = os.getpid()
    start, end = time.time() - 60, time.time() - 30
    gap = {"kind": "gap", "time": end, "start": start, "dropped": 1}
    (tmp_path / f"{pid}.jsonl").write_bytes(_stream(pid) + json.dumps(gap).encode() + b"\n")
    source = ProbeSource(tmp_path)
    (notice,) = [n for n in source.poll().notices if "lost" in n]
    when = f"{time.strftime('%H:%M:%S', time.localtime(start))}-{time.strftime('%H:%M:%S', time.localtime(end))}"
    assert f"{pid}.jsonl: 1 record lost {when}" in notice
    assert not any("lost" in n for n in source.poll().notices)  # said once
