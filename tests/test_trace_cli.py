"""``gpumem-tui record | replay | compare``: exit codes, one-line errors, what gets recorded."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from gpumem_tui import cli
from gpumem_tui.telemetry import record_cli
from gpumem_tui.telemetry.model import PhaseMark, Phase, ProbeInfo, ProbeSample, Snapshot
from gpumem_tui.telemetry.replay import ReplaySource, TraceRecorder, read_trace
from waiting import wait_until


class CountingSource:
    def __init__(self) -> None:
        self.n = 0
        self.closed = False

    def poll(self) -> Snapshot:
        self.n += 1
        return Snapshot(time=float(self.n), probes=(ProbeSample(float(self.n), 5, "cpu", self.n * 100),),
                        phase_marks=(PhaseMark(float(self.n), 5, Phase.FORWARD, self.n),))

    def close(self) -> None:
        self.closed = True


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_record_function_polls_until_duration_or_stop(tmp_path):
    path = tmp_path / "t.jsonl"
    n = record_cli.record(CountingSource(), path, interval=0.02, duration=0.15)
    snaps, notices = read_trace(path)
    assert len(snaps) == n >= 3 and notices == []
    assert [s.probes[0].allocated_bytes for s in snaps] == [100 * (i + 1) for i in range(n)]
    stop = threading.Event()
    stop.set()
    assert record_cli.record(CountingSource(), tmp_path / "u.jsonl", interval=10, stop=stop) == 0
    assert json.loads((tmp_path / "u.jsonl").read_text())["format"] == "gpumem-tui-trace"


def test_record_cli_without_nvml_records_probes(tmp_path, no_nvml, capsys):
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir()
    info = {"kind": "info", "format": "gpumem-tui-probe", "version": 1, "pid": 1, "time": 1.0,
            "model_config": None, "setup": {"batch": 1}}
    sample = {"kind": "phase", "time": 2.0, "step": 1, "phase": "forward", "device": "cpu",
              "cpu_live_tensors": 4096}
    (probe_dir / "1.jsonl").write_text(json.dumps(info) + "\n" + json.dumps(sample) + "\n")
    out = tmp_path / "t.jsonl"

    def stop_after_two_snapshots() -> None:
        # As a user stops it (Ctrl-C), once the trace holds its header and two whole snapshot
        # lines: a --duration would leave the count to the machine's speed (a first poll slower
        # than the duration under load gave one snapshot)
        wait_until(lambda: out.exists() and out.read_bytes().count(b"\n") >= 3, what="two snapshots recorded")
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=stop_after_two_snapshots, daemon=True).start()
    code = cli.main(["record", "-o", str(out), "--duration", "120", "--interval", "0.1", "--probe-dir",
                     str(probe_dir)])  # the duration is a hang guard
    assert code == 0
    captured = capsys.readouterr()
    assert str(out.resolve()) in captured.out and "no NVML" in captured.err
    snaps, _ = read_trace(out)
    assert len(snaps) >= 2 and all(s.nvml_error for s in snaps)
    probes = [p for s in snaps for p in s.probes]
    assert [(p.pid, p.allocated_bytes) for p in probes] == [(1, 4096)]  # each sample once
    assert snaps[0].phase_marks[0].phase is Phase.FORWARD
    # PID 1 runs and the stream gave no start time to contradict it: not ended; the info is
    # carried in every snapshot, so a trace cut anywhere still knows the setup.
    assert all(s.probe_infos == snaps[0].probe_infos and not s.probe_infos[0].ended for s in snaps)


@pytest.mark.parametrize(
    "argv",
    [
        ["record"],
        ["record", "-o", "x.jsonl", "--interval", "0"],
        ["record", "-o", "x.jsonl", "--duration", "-1"],
        ["replay"],
        ["replay", "t.jsonl", "--speed", "0"],
        ["replay", "t.jsonl", "--speed", "fast"],
        ["compare"],
    ],
)
def test_bad_flags_exit_2_with_one_line(argv, capsys):
    assert cli.main(argv) == 2
    one_line_error(capsys)


@pytest.mark.parametrize("content", [b"", b"not json at all\n", b"\x00\x01\x02", b'{"format": "other"}\n'])
@pytest.mark.parametrize("sub", ["replay", "compare"])
def test_empty_or_non_json_trace_exit_2(tmp_path, capsys, content, sub):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    assert cli.main([sub, str(path)]) == 2
    assert str(path) in one_line_error(capsys)


@pytest.mark.parametrize("sub", ["replay", "compare"])
def test_missing_trace_exit_2(tmp_path, capsys, sub):
    assert cli.main([sub, str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read" in one_line_error(capsys)


@pytest.mark.parametrize("exists", [True, False], ids=["not-a-trace", "missing"])
@pytest.mark.parametrize("sub", ["replay", "compare"])
def test_a_hostile_file_name_is_shown_literally(tmp_path, capsys, sub, exists):
    """A trace named by someone else (a shared directory, a shell glob) with a terminal escape
    in its name: the error line shows the escape as text, it does not colour the terminal."""
    path = tmp_path / "evil\x1b[31mred\x07.jsonl"
    if exists:
        path.write_bytes(b"not json at all\n")
    assert cli.main([sub, str(path)]) == 2
    line = one_line_error(capsys)
    assert "\x1b" not in line and "\x07" not in line
    assert "evil\\x1b[31mred\\x07.jsonl" in line


def test_record_to_a_directory_exit_2(tmp_path, capsys):
    assert cli.main(["record", "-o", str(tmp_path)]) == 2
    one_line_error(capsys)


def test_replay_opens_the_dashboard_on_a_replay_source(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as rec:
        rec.write(Snapshot(time=1.0))
        rec.write(Snapshot(time=3.0))
    seen = {}

    def fake_run_dashboard(source=None, **kwargs):
        seen["source"] = source
        seen.update(kwargs)

    import gpumem_tui.ui.launch as launch

    monkeypatch.setattr(launch, "run_dashboard", fake_run_dashboard)
    assert cli.main(["replay", str(path), "--speed", "4"]) == 0
    source = seen["source"]
    assert isinstance(source, ReplaySource) and source.speed == 4.0 and source.duration == 2.0
    assert seen["readonly"] is True and "t.jsonl" in seen["banner"]


def test_compare_without_a_probed_process_exit_2(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as rec:
        rec.write(Snapshot(time=1.0))
    assert cli.main(["compare", str(path), "--json"]) == 2
    assert "no probed process" in one_line_error(capsys)


def test_compare_json_and_table_on_a_probed_trace(tmp_path, capsys):
    config = {"model_type": "gpt2", "vocab_size": 512, "n_positions": 64, "n_embd": 64, "n_layer": 2,
              "n_head": 2, "tie_word_embeddings": True}
    info = ProbeInfo(7, config, (("batch", 2), ("seq", 32), ("dtype", "float32"), ("optimizer", "AdamW"),
                                 ("task", "train"), ("device", "cpu")))
    cats = (("parameters", 500_000), ("gradients", 500_000), ("optimizer_states", 1_000_000),
            ("activations", 2_000_000), ("temporaries", 10_000))
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as rec:
        for i in range(3):
            rec.write(Snapshot(time=float(i), probe_infos=(info,),
                               probes=(ProbeSample(float(i), 7, "cpu", 4_010_000 - i, None, 4_010_000, cats),)))
    assert cli.main(["compare", str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("predicted", "measured", "error_percent", "peak_predicted_bytes", "peak_measured_bytes"):
        assert key in result
    assert result["measured"]["parameters"] == 500_000
    assert result["peak_measured_bytes"] == 4_010_000
    assert isinstance(result["predicted"]["parameters"], int) and result["predicted"]["parameters"] > 0
    assert cli.main(["compare", str(path)]) == 0
    table = capsys.readouterr().out
    assert "parameters" in table and "peak" in table and "MiB" in table


def test_compare_until_cuts_the_trace_where_a_replay_would_be(tmp_path, capsys):
    config = {"model_type": "gpt2", "vocab_size": 512, "n_positions": 64, "n_embd": 64, "n_layer": 2,
              "n_head": 2, "tie_word_embeddings": True}
    info = ProbeInfo(7, config, (("batch", 2), ("seq", 32), ("device", "cpu")))
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as rec:
        for i in range(5):  # one record per second, the live bytes rising
            rec.write(Snapshot(time=100.0 + i, probe_infos=(info,),
                               probes=(ProbeSample(100.0 + i, 7, "cpu", 1_000_000 * (i + 1)),)))
    assert cli.main(["compare", str(path), "--json", "--until", "2.5"]) == 0
    cut = json.loads(capsys.readouterr().out)
    assert cut["samples"] == 3 and cut["peak_measured_bytes"] == 3_000_000  # records at 0, 1 and 2 s
    assert cli.main(["compare", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["peak_measured_bytes"] == 5_000_000
    assert cli.main(["compare", str(path), "--until", "-1"]) == 2
    assert "--until" in one_line_error(capsys)


def test_record_cli_reads_the_gpus_and_gives_nvml_back(tmp_path, fake_nvml, capsys):
    out = tmp_path / "t.jsonl"
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir()
    code = cli.main(["record", "-o", str(out), "--duration", "0.2", "--interval", "0.1", "--probe-dir", str(probe_dir)])
    assert code == 0
    snaps, _ = read_trace(out)
    assert snaps and [d.name for d in snaps[0].devices] == ["NVIDIA A100-SXM4-80GB"] * 2
    assert fake_nvml.init_count == 0  # its nvmlInit is paired with nvmlShutdown
