"""Item 21 of issue 13: traces are written 0600 (they carry the probes' setups)."""

from __future__ import annotations

import os
import stat

from gpumem_tui.telemetry.model import Snapshot
from gpumem_tui.telemetry.replay import TraceRecorder
from gpumem_tui.telemetry.record_cli import record


class _OneSource:
    def poll(self) -> Snapshot:
        return Snapshot(time=1000.0)


def test_record_writes_a_new_trace_0600_whatever_the_umask(tmp_path):
    out = tmp_path / "t.jsonl"
    old = os.umask(0)
    try:
        assert record(_OneSource(), out, interval=0.01, duration=0.0) == 1
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_recording_over_an_existing_world_readable_file_makes_it_0600(tmp_path):
    out = tmp_path / "t.jsonl"
    out.write_text("old")
    out.chmod(0o644)
    with TraceRecorder(out) as rec:
        rec.write(Snapshot(time=1.0))
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert b"old" not in out.read_bytes()
