"""Traces are read as a stream (issue: compare/replay held a whole trace in memory).

The reader keeps no snapshot it has handed on, compare folds records into bounded state,
ReplaySource holds one record at a time, a record keeps at most LIST_CAPS items per list
(with a notice saying how many were dropped), and the index is sparse.
"""

from __future__ import annotations

import gc
import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumem_tui.telemetry.measured_record import MAX_STEPS, MeasuredFold
from gpumem_tui.analysis.process_estimate import compare_snapshots
from gpumem_tui.telemetry import trace_file
from gpumem_tui.telemetry.capped_json import load_capped
from gpumem_tui.telemetry.model import Phase, PhasePeak, ProbeSample, Snapshot
from gpumem_tui.telemetry.replay import ReplaySource
from gpumem_tui.telemetry.trace_file import LIST_CAPS, iter_snapshots, parse_record, scan_trace
from waiting import wait_until

T0 = 1.7e9
HEADER = json.dumps({"format": "gpumem-tui-trace", "version": 1, "created": T0})
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 1000, "n_positions": 128}


def _record(i: int, processes: int = 3) -> dict:
    pid = 4242
    return {
        "time": T0 + i,
        "processes": [{"pid": pid if k == 0 else 10_000 + k, "device_index": 0, "type": "compute",
                       "used_memory_bytes": (1 << 30) + i} for k in range(processes)],
        "probes": [{"time": T0 + i, "pid": pid, "device": "cuda:0", "allocated_bytes": (100 + i % 7) << 20,
                    "reserved_bytes": 200 << 20, "categories": {"parameters": 50 << 20, "activations": (i % 7) << 20}}],
        "probe_infos": [{"pid": pid, "model_config": GPT2, "setup": {"batch": 2, "seq": 64}}],
        "phase_marks": [{"time": T0 + i, "pid": pid, "phase": "forward", "step": i}],
    }


def _write(path, records) -> None:
    path.write_text(HEADER + "\n" + "".join(json.dumps(r) + "\n" for r in records))


def _live_snapshots() -> int:
    """Live Snapshots of this file's traces (times from T0 on; real clocks and the H100 trace
    are years later): another thread of the worker -- a dashboard a snapshot test keeps
    running, a poller -- makes Snapshots of its own while this counts, and CI saw one."""
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, Snapshot) and T0 <= obj.time < T0 + 1e6)


@pytest.fixture
def young_heap():
    """Freeze what the process holds before the test (gc.freeze: the permanent generation, which
    neither gc.collect nor gc.get_objects visits), so that counting the Snapshots the test makes
    walks only the objects made since, not the whole worker's heap (torch, Textual, every
    collected test: seconds per count). Snapshots made earlier are left out of the count, as the
    baseline subtracted them before. Afterwards the test's own garbage is collected; the heap
    stays frozen when it was frozen before the test (tests/conftest.py freezes it after
    collecting: unfreezing it to collect and freeze it again walked the whole worker's heap,
    0.2-0.5 s of CPU per test), else it is unfrozen."""
    was_frozen = gc.get_freeze_count() > 0
    gc.collect()
    gc.freeze()
    yield
    if was_frozen:
        gc.collect()  # walks only what the test made: the rest stays frozen
    else:
        gc.unfreeze()


def test_the_reader_keeps_no_snapshot_it_handed_on(tmp_path, young_heap):
    path = tmp_path / "t.jsonl"
    _write(path, [_record(i) for i in range(60)])
    baseline = _live_snapshots()
    alive: list[int] = []

    def watched():
        for i, snap in enumerate(iter_snapshots(scan_trace(path))):
            yield snap
            del snap
            if i % 6 == 5:  # while the consumer waits for the next
                alive.append(_live_snapshots() - baseline)

    result = compare_snapshots(watched(), pid=4242)  # the real consumer: compare
    assert result.sample_count == 60 and len(alive) == 10
    assert max(alive) <= 1  # only the consumer's loop variable: nothing kept by reader or compare


def test_replay_holds_one_record_whatever_the_trace_length(tmp_path, young_heap):
    counts = {}
    for n in (20, 200):
        path = tmp_path / f"t{n}.jsonl"
        _write(path, [_record(i) for i in range(n)])
        now = [0.0]
        src = ReplaySource(path, speed=1.0, clock=lambda: now[0])
        # The source's background read of the trace (saving the checkpoints' states) parses
        # records too: let it finish, or its record of the moment is counted with the play's.
        wait_until(lambda: not any(t.name == "replay-checkpoints" for t in threading.enumerate()),
                   what="the replay's checkpoint thread to finish")
        baseline = _live_snapshots()
        live = []
        for step in range(n):
            now[0] = float(step)
            snap = src.poll()
            if step % 10 == 0:
                live.append(_live_snapshots() - baseline)
            del snap
        src.seek(n / 2)  # a seek re-reads from a checkpoint: still one record at a time
        src.poll()
        live.append(_live_snapshots() - baseline)
        counts[n] = max(live)
        assert src.probed.summary(4242).record.sample_count == n // 2 + 1
        src.close()
    assert counts[200] == counts[20] <= 2  # the current record (and the one a poll returns)


def test_the_index_is_sparse_and_seeking_reads_from_a_checkpoint(tmp_path):
    path = tmp_path / "t.jsonl"
    _write(path, [_record(i) for i in range(101)])  # one record per second, 100 s
    scan = scan_trace(path)
    assert scan.count == 101 and scan.duration == 100.0
    assert [cp.position for cp in scan.checkpoints] == [float(10 * k) for k in range(11)]
    assert [cp.index for cp in scan.checkpoints] == [10 * k for k in range(11)]
    long_scan = scan_trace(_long_trace(tmp_path, 5000))
    assert len(long_scan.checkpoints) <= trace_file.MAX_CHECKPOINTS + 1  # a long trace spaces them out


def _long_trace(tmp_path, seconds: int):
    path = tmp_path / "long.jsonl"
    path.write_text(HEADER + "\n" + "".join(json.dumps({"time": T0 + i}) + "\n" for i in range(seconds)))
    return path


@pytest.mark.parametrize("processes", [5000, 40_000])  # a short line (json.loads) and a long one
def test_a_record_keeps_at_most_4096_processes_and_says_how_many_went(tmp_path, processes):
    record = _record(0, processes=processes)
    line = (json.dumps(record) + "\n").encode()
    assert (len(line) > trace_file.SHORT_LINE) == (processes > 10_000)
    snap = parse_record(line)
    assert len(snap.processes) == LIST_CAPS["processes"] == 4096
    assert [p.pid for p in snap.processes[:2]] == [4242, 10_001]  # the first ones, in order
    assert f"{processes - 4096} processes beyond the 4096 kept per snapshot dropped" in snap.notices
    assert len(snap.probes) == 1 and len(snap.probe_infos) == 1  # the other lists are whole

    path = tmp_path / "t.jsonl"
    _write(path, [record, _record(1)])
    first = ReplaySource(path, clock=lambda: 0.0).poll()
    assert len(first.processes) == 4096
    assert any(f"{processes - 4096} processes beyond" in n for n in first.notices)


def test_a_record_at_the_cap_has_no_notice():
    snap = parse_record((json.dumps(_record(0, processes=4096)) + "\n").encode())
    assert len(snap.processes) == 4096 and not any("beyond" in n for n in snap.notices)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    obj=st.dictionaries(st.sampled_from(["processes", "devices", "time", "x", "notices"]),
                        json_values | st.lists(json_values, max_size=8), max_size=5),
    cap=st.integers(0, 4),
    spaces=st.booleans(),
)
def test_load_capped_is_json_loads_with_the_lists_cut(obj, cap, spaces):
    caps = {"processes": cap, "devices": cap, "notices": cap}
    text = json.dumps(obj, indent=1 if spaces else None)
    got, left_out = load_capped(text, caps)
    expected = json.loads(text)
    cut = {k: v[:cap] if k in caps and isinstance(v, list) else v for k, v in expected.items()}
    assert got == cut
    assert left_out == {k: len(v) - cap for k, v in expected.items() if k in caps and isinstance(v, list)
                        and len(v) > cap}


@pytest.mark.parametrize("text", ["", "[1, 2]", '{"a": 1', '{"a": [1, 2}', '{"a": 1} x', '{1: 2}', '{"a" 1}'])
def test_load_capped_rejects_what_is_not_one_json_object(text):
    with pytest.raises(ValueError):
        load_capped(text, {"a": 1})


def test_load_capped_reads_deep_nesting_as_an_error():
    with pytest.raises(ValueError):
        load_capped('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", {})


def test_the_fold_keeps_the_last_steps_and_counts_the_rest():
    fold = MeasuredFold(1)
    fold.add_sample(ProbeSample(time=T0, pid=1, device="cuda", allocated_bytes=10))
    for step in range(MAX_STEPS + 10):
        fold.add_peak(PhasePeak(pid=1, step=step, phase=Phase.FORWARD, start=T0 + step, end=T0 + step + 0.5,
                                peak_bytes=10**9 if step == 3 else 100 + step))
    record = fold.record()
    assert len(record.steps) == MAX_STEPS and record.steps_left_out == 10
    assert record.steps[0].step == 10 and record.steps[-1].step == MAX_STEPS + 9
    assert record.highest_step == 10**9  # a step no longer listed still counts in the peak


def test_a_seek_forward_reads_from_the_state_saved_ahead_by_the_background_pass(tmp_path, monkeypatch):
    import threading

    from gpumem_tui.analysis.process_estimate import compare_probed, compare_trace
    from gpumem_tui.telemetry import replay

    path = tmp_path / "t.jsonl"
    _write(path, [_record(i) for i in range(101)])  # checkpoints every 10 s
    parsed_by_play: list[int] = []
    real_parse = replay.parse_record
    play_thread = threading.current_thread()

    def counting_parse(line: bytes):
        if threading.current_thread() is play_thread:
            parsed_by_play.append(1)
        return real_parse(line)

    monkeypatch.setattr(replay, "parse_record", counting_parse)
    src = ReplaySource(path, clock=lambda: 0.0)
    src.poll()
    # the background pass over 101 records: wait until it saved every checkpoint
    wait_until(lambda: len(src._saved) == len(src._scan.checkpoints), what="every checkpoint's state saved")
    assert len(src._saved) == 11
    parsed_by_play.clear()
    src.seek(95.0)
    src.poll()
    assert len(parsed_by_play) == 6  # records 90..95, from the state saved at 90 s, not 1..95
    expected = compare_trace(path, pid=4242, until=95.0)
    expected.pop("trace_notices")
    assert compare_probed(src.probed, 4242).to_json() == expected
    src.close()


def test_saved_states_stay_within_their_budget_and_seeks_still_equal_compare(tmp_path, monkeypatch):
    from gpumem_tui.analysis.process_estimate import compare_probed, compare_trace
    from gpumem_tui.telemetry import replay

    path = tmp_path / "t.jsonl"
    _write(path, [_record(i, processes=30) for i in range(201)])  # 21 checkpoints, states of ~30-100 items
    monkeypatch.setattr(replay, "SAVED_ITEMS_BUDGET", 600)
    src = ReplaySource(path, clock=lambda: 0.0)
    src.poll()
    # the background pass: wait until it has passed the last checkpoint
    wait_until(lambda: max(src._saved) >= 20 - 20 % src._saved_stride, what="the pass to save the last checkpoint")
    assert src._saved_stride > 1  # the budget thinned the saved states ...
    assert sum(state.size() for state in src._saved.values()) <= 600  # ... to within it
    assert all(k % src._saved_stride == 0 for k in src._saved)
    for target in (195.0, 37.5, 120.0, 3.0):
        src.seek(target)
        src.poll()
        expected = compare_trace(path, pid=4242, until=target)
        expected.pop("trace_notices")
        assert compare_probed(src.probed, 4242).to_json() == expected, target
    src.close()


def test_compare_counts_every_unreadable_line_in_one_notice(tmp_path):
    from gpumem_tui.analysis.process_estimate import compare_trace

    path = tmp_path / "t.jsonl"
    lines = [json.dumps(_record(0)), "not json", json.dumps(_record(1)), '{"time": %r, "devices": "oops"}' % (T0 + 2),
             json.dumps(_record(3))]
    path.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    result = compare_trace(path, pid=4242)
    assert result["samples"] == 3
    unreadable = [n for n in result["trace_notices"] if "unreadable" in n]
    assert unreadable == ["t.jsonl: 2 unreadable lines skipped (first: line 3)"]  # a line without a time, one not a snapshot
