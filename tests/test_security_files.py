"""Item 18 of issue 13: every file a user names is read bounded -- regular files only, size
and line limits stated, nesting that breaks the parser, huge numbers and malformed fields as
one line with exit 2 -- for estimate, measure, compare and replay."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_inprocess import run_cli

from gpumem_tui.estimator.architecture import CATALOGUE_DIR



def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    # in this process (tests/cli_inprocess.py): a reader that blocks still fails after `timeout`
    return run_cli(*args, timeout=timeout)


def _configs(tmp_path: Path) -> dict[str, Path]:
    base = json.loads((CATALOGUE_DIR / "llama-3.2-1b.json").read_text())
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(base).replace(f'"num_hidden_layers": {base["num_hidden_layers"]}',
                                             '"num_hidden_layers": ' + "9" * 3000))
    rope = tmp_path / "rope.json"
    rope.write_text(json.dumps({**base, "rope_scaling": {"type": [1, 2]}}))
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000 + "]" * 100_000)
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**base, "padding": "x" * (5 << 20)}))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    return {"huge": huge, "rope": rope, "nested": nested, "big": big, "fifo": fifo, "zero": Path("/dev/zero")}


EXPECTED = {
    "huge": "'num_hidden_layers' is implausibly large (3000 digits)",
    "rope": "'rope_scaling.type' must be a string",
    "nested": "JSON nested too deeply",
    "big": "over the 4 MiB limit",
    "fifo": "not a regular file (a FIFO)",
    "zero": "not a regular file (a character device)",
}


@pytest.mark.parametrize("command", ["estimate", "measure"])
def test_hostile_model_configs_are_one_line_exit_2(tmp_path, command):
    extra = ["--batch", "1", "--seq", "16"] + (["--on", "meta"] if command == "measure" else [])
    for name, path in _configs(tmp_path).items():
        try:
            done = _cli(command, str(path), *extra, timeout=30)
        except subprocess.TimeoutExpired:
            if name == "fifo":  # today's reader waits for a writer
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            pytest.fail(f"{command} {name}: hung")
        err = done.stderr.strip()
        assert done.returncode == 2, (name, err[-300:])
        assert "\n" not in err and "Traceback" not in err, (name, err[-300:])
        assert EXPECTED[name] in err, (name, err)


@pytest.mark.parametrize("command", ["compare", "replay"])
def test_hostile_traces_are_one_line_exit_2(tmp_path, command):
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    nested = tmp_path / "nested.jsonl"
    nested.write_text('{"format": "gpumem-tui-trace", "version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    zeros = tmp_path / "zeros.jsonl"
    zeros.write_bytes(b"\0" * (3 << 20))
    cases = {"/dev/zero": "not a regular file (a character device)", str(fifo): "not a regular file (a FIFO)",
             str(nested): "not a gpumem-tui trace", str(zeros): "longer than 1 MiB"}
    for path, expected in cases.items():
        try:
            done = _cli(command, path, timeout=30)
        except subprocess.TimeoutExpired:
            if path == str(fifo):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            pytest.fail(f"{command} {path}: hung")
        err = done.stderr.strip()
        assert done.returncode == 2 and "\n" not in err and expected in err, (path, err[-300:])


def test_an_overlong_trace_line_is_skipped_with_the_limit_said(tmp_path, monkeypatch):
    from gpumem_tui.telemetry import replay, trace_file

    monkeypatch.setattr(trace_file, "LINE_LIMIT", 4096)  # where traces are read
    path = tmp_path / "t.jsonl"
    header = {"format": "gpumem-tui-trace", "version": 1, "created": 1.7e9}
    lines = [header, {"time": 1.7e9}, {"time": 1.7e9 + 1, "notices": ["x" * 10_000]}, {"time": 1.7e9 + 2}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    snapshots, notices = replay.read_trace(path)
    assert [s.time for s in snapshots] == [1.7e9, 1.7e9 + 2]
    assert any("1 line longer than the 4 KiB limit skipped (first: line 3)" in n for n in notices)
    source = replay.ReplaySource(path)
    assert source.snapshot_count == 2


async def test_the_estimator_pane_reads_a_typed_config_path_off_the_ui_thread(tmp_path):
    import threading
    import time

    from test_estimator_panel import Host, _settle
    from waiting import settle

    from gpumem_tui.ui.estimator_panel import EstimatorPanel

    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    config = (CATALOGUE_DIR / "gpt2.json").read_bytes()
    stop = threading.Event()
    wrote = threading.Event()

    def writer() -> None:  # a slow source: answers a reader only once the test let it (or 10 s)
        stop.wait(10.0)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader (any more): nothing waits for us
                time.sleep(0.05)  # retry interval; the pane refusing the FIFO means no reader ever comes
                continue
            os.write(fd, config)
            os.close(fd)
            wrote.set()
            return

    threading.Thread(target=writer, daemon=True).start()
    app = Host()
    try:
        async with app.run_test(size=(120, 60)) as pilot:
            await _settle(app, pilot)
            panel = app.query_one(EstimatorPanel)
            panel.set_form(config=str(fifo))
            # the UI thread did not wait on the file: set_form returned while nothing was written
            assert not wrote.is_set()
            stop.set()  # now the writer may answer a reader
            await settle(pilot, lambda: "reading" not in panel.invalid_fields.get("config", "reading"),
                         what="the pane to finish with the typed config path")
            assert "not a regular file (a FIFO)" in panel.invalid_fields["config"]
    finally:
        stop.set()
