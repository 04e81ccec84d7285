"""ProbeSource: incremental tail of probe streams, torn lines, dead processes, bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gpumem_tui.telemetry.model import Phase
from gpumem_tui.telemetry.probe_source import ENV_PROBE_DIR, ProbeSource, default_probe_dir


def _line(record: dict) -> bytes:
    return json.dumps(record).encode() + b"\n"


def _info(pid: int, **setup) -> dict:
    return {"kind": "info", "format": "gpumem-tui-probe", "version": 1, "pid": pid, "time": 1.0,
            "create_time": None, "model_config": {"n_layer": 2}, "setup": {"batch": 4, "seq": 64, **setup}}


def _cpu(kind: str, t: float, live: int, phase: str = "forward", step: int = 1, **extra) -> dict:
    rec = {"kind": kind, "time": t, "step": step, "phase": phase, "device": "cpu",
           "cpu_live_tensors": live, "cpu_live_tensors_peak": live + 10,
           "categories": {"parameters": min(100, max(live, 0)), "activations": max(0, live - 100)}}
    rec.update(extra)
    return rec


class Alive:
    """Controllable liveness check."""

    def __init__(self) -> None:
        self.dead: set[int] = set()

    def __call__(self, pid: int, create_time: float | None) -> bool:
        return pid not in self.dead


def test_default_probe_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_PROBE_DIR, str(tmp_path / "x"))
    assert default_probe_dir() == tmp_path / "x"
    monkeypatch.delenv(ENV_PROBE_DIR)
    assert default_probe_dir().name == "probes"
    assert "gpumem-tui" in str(default_probe_dir())


def test_missing_directory_is_not_an_error(tmp_path):
    reading = ProbeSource(tmp_path / "nope").poll()
    assert reading.probes == () and reading.probe_infos == () and reading.notices == ()


def test_incremental_tail_returns_each_sample_once(tmp_path):
    alive = Alive()
    path = tmp_path / "4242.jsonl"
    path.write_bytes(_line(_info(4242)) + _line(_cpu("phase", 2.0, 1000, "init", 0)))
    src = ProbeSource(tmp_path, alive=alive)
    first = src.poll()
    assert [p.allocated_bytes for p in first.probes] == [1000]
    assert [(m.phase, m.step) for m in first.phase_marks] == [(Phase.INIT, 0)]
    (info,) = first.probe_infos
    assert info.pid == 4242 and not info.ended
    assert dict(info.setup)["batch"] == 4 and info.model_config == {"n_layer": 2}

    assert src.poll().probes == ()  # nothing new, nothing repeated
    with open(path, "ab") as f:
        f.write(_line(_cpu("sample", 3.0, 2000)) + _line(_cpu("phase", 4.0, 3000, "backward")))
    second = src.poll()
    assert [p.allocated_bytes for p in second.probes] == [2000, 3000]
    assert [m.phase for m in second.phase_marks] == [Phase.BACKWARD]
    sample = second.probes[0]
    assert sample.device == "cpu" and sample.reserved_bytes is None
    assert sample.peak_allocated_bytes == 2010
    assert dict(sample.categories) == {"parameters": 100, "activations": 1900}
    # The infos are still reported (current state), once per process.
    assert [i.pid for i in second.probe_infos] == [4242]


def test_partial_last_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "77.jsonl"
    whole = _line(_cpu("sample", 5.0, 4096))
    path.write_bytes(_line(_info(77)) + whole[:20])
    src = ProbeSource(tmp_path, alive=Alive())
    r1 = src.poll()
    assert r1.probes == () and r1.notices == ()  # not an error: the writer is mid-line
    with open(path, "ab") as f:
        f.write(whole[20:])
    r2 = src.poll()
    assert [p.allocated_bytes for p in r2.probes] == [4096]
    assert r2.notices == ()


def test_bad_lines_are_counted_in_notices_not_raised(tmp_path):
    path = tmp_path / "88.jsonl"
    path.write_bytes(
        _line(_info(88))
        + b"{not json\n"
        + _line({"kind": "sample", "time": "yesterday", "device": "cpu", "cpu_live_tensors": 1})
        + _line(_cpu("sample", 6.0, -5))  # negative bytes
        + _line({"kind": "from-the-future", "time": 1.0})  # unknown kind: ignored, not bad
        + _line(_cpu("sample", 7.0, 500, new_field={"x": 1}))  # unknown field: ignored
    )
    r = ProbeSource(tmp_path, alive=Alive()).poll()
    assert [p.allocated_bytes for p in r.probes] == [500]
    assert len(r.notices) == 1 and "3 unreadable lines" in r.notices[0] and "88.jsonl" in r.notices[0]


def test_dead_process_is_marked_ended_and_torn_line_counted(tmp_path):
    alive = Alive()
    path = tmp_path / "99.jsonl"
    path.write_bytes(_line(_info(99)) + _line(_cpu("sample", 1.5, 10)) + b'{"kind": "sam')
    src = ProbeSource(tmp_path, alive=alive)
    r1 = src.poll()
    assert r1.probe_infos[0].ended is False and len(r1.probes) == 1
    alive.dead.add(99)
    r2 = src.poll()
    assert r2.probe_infos[0].ended is True
    assert any("1 unreadable line" in n for n in r2.notices)  # the torn line of the dead writer
    assert src.poll().probe_infos[0].ended is True


def test_end_record_marks_ended_even_if_pid_alive(tmp_path):
    path = tmp_path / "55.jsonl"
    path.write_bytes(_line(_info(55)) + _line(_cpu("sample", 1.0, 10)) + _line({"kind": "end", "time": 2.0}))
    r = ProbeSource(tmp_path, alive=Alive()).poll()
    assert r.probe_infos[0].ended is True and len(r.probes) == 1


def test_real_dead_process_and_reused_pid(tmp_path):
    """With the real liveness check: a finished child is ended; a live PID with another
    start time (PID reuse) is ended too."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    (tmp_path / f"{child.pid}.jsonl").write_bytes(_line(_info(child.pid)) + _line(_cpu("sample", 1.0, 10)))
    me = os.getpid()
    reused = _info(me)
    reused["create_time"] = 12345.0  # not this process's start time
    (tmp_path / f"{me}.jsonl").write_bytes(_line(reused))
    mine_ok = tmp_path / "sub"
    mine_ok.mkdir()
    (mine_ok / f"{me}.jsonl").write_bytes(_line(_info(me)))  # no create_time: alive is alive
    r = ProbeSource(tmp_path).poll()
    ended = {i.pid: i.ended for i in r.probe_infos}
    assert ended == {child.pid: True, me: True}
    assert ProbeSource(mine_ok).poll().probe_infos[0].ended is False


def test_cuda_fields_map_to_allocated_and_reserved(tmp_path):
    rec = {"kind": "phase", "time": 3.0, "step": 2, "phase": "optimizer_step", "device": "cuda:1",
           "torch_allocated": 5 << 20, "torch_reserved": 8 << 20, "torch_max_allocated": 6 << 20,
           "categories": {"parameters": 1 << 20}}
    (tmp_path / "123.jsonl").write_bytes(_line(_info(123)) + _line(rec))
    r = ProbeSource(tmp_path, alive=Alive()).poll()
    (p,) = r.probes
    assert (p.device, p.allocated_bytes, p.reserved_bytes, p.peak_allocated_bytes) == (
        "cuda", 5 << 20, 8 << 20, 6 << 20)
    assert r.phase_marks[0].phase is Phase.OPTIMIZER_STEP and r.phase_marks[0].step == 2


def test_large_backlog_reads_info_and_only_recent_history(tmp_path):
    path = tmp_path / "321.jsonl"
    lines = [_line(_info(321))] + [_line(_cpu("sample", float(i), 1000 + i)) for i in range(3000)]
    path.write_bytes(b"".join(lines))
    src = ProbeSource(tmp_path, alive=Alive(), backlog_bytes=8192, max_read_bytes=1 << 20)
    r = src.poll()
    assert r.probe_infos[0].pid == 321 and dict(r.probe_infos[0].setup)["seq"] == 64
    assert 0 < len(r.probes) < 100  # only the last ~8 KiB
    assert r.probes[-1].allocated_bytes == 1000 + 2999
    assert r.notices == ()  # the cut at the backlog boundary is not a bad line


def test_reads_are_bounded_per_poll_and_resume(tmp_path):
    path = tmp_path / "11.jsonl"
    src = ProbeSource(tmp_path, alive=Alive(), backlog_bytes=1 << 20, max_read_bytes=4096)
    path.write_bytes(_line(_info(11)))
    src.poll()
    with open(path, "ab") as f:
        for i in range(200):
            f.write(_line(_cpu("sample", float(i), i + 1)))
    got: list[int] = []
    polls = 0
    while len(got) < 200 and polls < 100:
        chunk = src.poll().probes
        assert len(chunk) < 200 or polls > 0
        got += [p.allocated_bytes for p in chunk]
        polls += 1
    assert got == list(range(1, 201)) and polls > 1


def test_rotated_stream_is_reread_from_start(tmp_path):
    path = tmp_path / "66.jsonl"
    path.write_bytes(_line(_info(66)) + _line(_cpu("sample", 1.0, 10)))
    src = ProbeSource(tmp_path, alive=Alive())
    assert len(src.poll().probes) == 1
    new = tmp_path / "66.jsonl.new"
    new.write_bytes(_line(_info(66)) + _line(_cpu("sample", 2.0, 20)))
    os.replace(new, path)
    r = src.poll()
    assert [p.allocated_bytes for p in r.probes] == [20]
    assert any("restarted" in n for n in r.notices)
    assert len(r.probe_infos) == 1


def test_probe_count_and_ended_history_are_bounded(tmp_path):
    clock = [1000.0]
    alive = Alive()
    for pid in range(1, 11):
        (tmp_path / f"{pid}.jsonl").write_bytes(_line(_info(pid)) + _line(_cpu("sample", 1.0, pid)))
    src = ProbeSource(tmp_path, alive=alive, max_probes=4, keep_ended_seconds=60, clock=lambda: clock[0])
    assert len(src.poll().probe_infos) == 4
    alive.dead.update(range(1, 11))
    assert all(i.ended for i in src.poll().probe_infos)
    clock[0] += 120  # past keep_ended_seconds: the ended streams are dropped
    assert src.poll().probe_infos == ()
    assert src.poll().probe_infos == ()  # and not picked up again


def test_ignores_other_files_and_survives_deleted_file(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "abc.jsonl").write_text("{}\n")
    path = tmp_path / "5.jsonl"
    path.write_bytes(_line(_info(5)))
    src = ProbeSource(tmp_path, alive=Alive())
    assert [i.pid for i in src.poll().probe_infos] == [5]
    path.unlink()
    r = src.poll()
    assert r.probe_infos[0].ended is True and r.notices == ()


def test_probe_reader_traces_and_clis_import_no_torch_no_textual():
    """The dashboard side of the probe never loads torch; the headless trace tools no Textual."""
    code = (
        "import json, sys\n"
        "import gpumem_tui.telemetry.probe_source, gpumem_tui.telemetry.serialize\n"
        "import gpumem_tui.telemetry.replay, gpumem_tui.telemetry.record_cli, gpumem_tui.analysis.compare_cli, gpumem_tui.ui.replay_cli, gpumem_tui.demo.cli, gpumem_tui.probe\n"
        "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'textual', 'rich', 'pynvml')"
        " if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_replaced_file_with_the_same_inode_is_detected_by_its_first_line(tmp_path):
    path = tmp_path / "67.jsonl"
    path.write_bytes(_line(_info(67)) + _line(_cpu("sample", 1.0, 10)))
    src = ProbeSource(tmp_path, alive=Alive())
    assert len(src.poll().probes) == 1
    inode = path.stat().st_ino
    newer = dict(_info(67), generation=1)
    path.write_bytes(_line(newer) + b"".join(_line(_cpu("sample", 2.0 + i, 20 + i)) for i in range(5)))
    assert path.stat().st_ino == inode  # rewritten in place: only the content tells
    r = src.poll()
    assert [p.allocated_bytes for p in r.probes] == [20, 21, 22, 23, 24]
    assert r.notices == ("probe stream 67.jsonl was restarted",)
