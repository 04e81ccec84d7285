"""Record a framework job (tests/integration_jobs.py) with ``gpumem-tui record`` and compare it
with ``gpumem-tui compare --json``, as a user would: the job streams to a private probe
directory (``GPUMEM_TUI_PROBE_DIR``, mode 0700), the recorder polls that directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from gpumem_tui.telemetry.replay import read_trace
from waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]
JOBS = Path(__file__).resolve().parent / "integration_jobs.py"


def child_env(probe_dir: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), GPUMEM_TUI_PROBE_DIR=str(probe_dir),
                TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")


def run_job(job: str, probe_dir: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run one job of tests/integration_jobs.py to its end; its pid is in the last stdout line."""
    return subprocess.run([sys.executable, str(JOBS), job, *args], capture_output=True, text=True,
                          timeout=timeout, env=child_env(probe_dir), cwd=ROOT)


def _job_pid(proc: subprocess.CompletedProcess) -> int:
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("pid ")][-1]
    return int(line.split()[1])


def _recorded_end(trace: Path, pid: int) -> bool:
    if not trace.exists():
        return False
    snaps, _ = read_trace(trace)
    return any(info.pid == pid and info.ended for snap in snaps for info in snap.probe_infos)


def record_job(job: str, tmp_path: Path, *args: str) -> tuple[Path, int]:
    """``gpumem-tui record`` running while ``job`` trains; returns (trace, the job's pid) once
    the trace holds the job's end record."""
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    trace = tmp_path / "trace.jsonl"
    recorder = subprocess.Popen(
        [sys.executable, "-m", "gpumem_tui", "record", "-o", str(trace), "--probe-dir", str(probe_dir),
         "--interval", "0.2", "--quiet"],
        env=child_env(probe_dir), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        proc = run_job(job, probe_dir, *args)
        assert proc.returncode == 0, proc.stderr[-3000:]
        pid = _job_pid(proc)
        def recorded_end() -> bool:  # the recorder's next polls (a hang guard, not a check of speed)
            assert recorder.poll() is None, recorder.stderr.read() if recorder.stderr else ""
            return _recorded_end(trace, pid)

        wait_until(recorded_end, what=f"the recorder to write job {pid}'s end record", poll=0.2)
    finally:
        recorder.send_signal(signal.SIGINT)
        try:
            recorder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            recorder.kill()
            recorder.wait()
    assert recorder.returncode == 0, recorder.stderr.read() if recorder.stderr else ""
    return trace, pid


def compare_json(trace: Path, pid: int) -> dict:
    """``gpumem-tui compare TRACE --pid PID --json``, parsed."""
    proc = subprocess.run([sys.executable, "-m", "gpumem_tui", "compare", str(trace), "--pid", str(pid), "--json"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def phase_order(trace: Path, pid: int, step: int) -> list[str]:
    """The phases the trace marks for ``step`` of ``pid``, in order."""
    snaps, _ = read_trace(trace)
    return [m.phase.value for s in snaps for m in s.phase_marks if m.pid == pid and m.step == step]


def setup_of(trace: Path, pid: int) -> dict:
    """The last published setup of ``pid`` in the trace."""
    snaps, _ = read_trace(trace)
    infos = [info for s in snaps for info in s.probe_infos if info.pid == pid]
    return dict(infos[-1].setup)
