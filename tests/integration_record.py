"""Record a framework job (tests/integration_jobs.py) with ``gpumem-tui record`` and compare it
with ``gpumem-tui compare --json``, as a user would: the job streams to a private probe
directory (``GPUMEM_TUI_PROBE_DIR``, mode 0700), the recorder polls that directory. The job
trains in the test process (a user's training script is a process like any other: the
framework's callbacks and the probe run in it); the recorder and compare are child processes,
``python -m gpumem_tui``. benchmarks/callback_overhead.py runs the jobs as child processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from gpumem_tui.telemetry.replay import read_trace
from gpumem_tui.telemetry.trace_file import TraceError
from waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]


def child_env(probe_dir: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), GPUMEM_TUI_PROBE_DIR=str(probe_dir),
                TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")


def run_job_here(job: str, probe_dir: Path, *args: str) -> int:
    """Run one job of tests/integration_jobs.py in this process, as a user's script runs the
    framework in its own process; returns this process's pid (the probed one).

    Measured: a child job spends ~8 s of CPU, nearly all of it importing torch, transformers
    and the framework, which a test process that imported them already need not pay again. The
    job's environment is a child's (``child_env``: the probe directory); what the job changes
    in the process (warning filters, torch's thread count) is put back afterwards."""
    import warnings

    import torch

    import integration_jobs

    saved_env, threads = dict(os.environ), torch.get_num_threads()
    os.environ.update(child_env(probe_dir))
    _fresh_accelerate_state()  # the job starts from accelerate's state of a fresh process
    try:
        with warnings.catch_warnings(record=True):  # what a child writes to its stderr, unread
            assert integration_jobs.main([job, *args]) == 0
    finally:
        _close_left_probe()
        _fresh_accelerate_state()  # and leaves none behind for the next test
        os.environ.clear()
        os.environ.update(saved_env)
        torch.set_num_threads(threads)
    return os.getpid()


def _close_left_probe() -> None:
    """What the end of a job's process does to a probe its script never closed (the accelerate
    loop leaves it to the probe's ``atexit`` handler): close it, writing its end record, so the
    stream is whole and the next probe in this process can attach."""
    from gpumem_tui.probe import core

    left = core._active
    if left is not None and not left.closed:
        left.close()


def _fresh_accelerate_state() -> None:
    """Forget accelerate's process-wide singletons (``AcceleratorState``, ``PartialState``,
    ``GradientState``), which an ``Accelerator`` -- the Trainer's included -- sets once per
    process; accelerate's own tests reset them the same way between tests."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def _snapshots(trace: Path) -> list:
    """The snapshots the recorder has written so far ([] before its first)."""
    try:
        return read_trace(trace)[0]
    except (OSError, TraceError):  # not created yet, or the header without a snapshot
        return []


def _recorded_end(trace: Path, pid: int) -> bool:
    return any(info.pid == pid and info.ended for snap in _snapshots(trace) for info in snap.probe_infos)


def record_job(job: str, tmp_path: Path, *args: str) -> tuple[Path, int]:
    """``gpumem-tui record`` (a child process) running while ``job`` trains in this process
    (:func:`run_job_here`); returns (trace, the job's pid) once the trace holds the job's end
    record."""
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    trace = tmp_path / "trace.jsonl"
    recorder = subprocess.Popen(
        [sys.executable, "-m", "gpumem_tui", "record", "-o", str(trace), "--probe-dir", str(probe_dir),
         "--interval", "0.2", "--quiet"],
        env=child_env(probe_dir), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    def running(done: bool) -> bool:  # a recorder that died fails the wait at once, with its error
        assert recorder.poll() is None, recorder.stderr.read() if recorder.stderr else ""
        return done

    try:
        # the recorder is recording before the job starts (the job in this process takes
        # well under a second once its framework is imported: it could end before the
        # recorder's first poll); hang guards, not checks of speed
        wait_until(lambda: running(bool(_snapshots(trace))), what="the recorder's first snapshot", poll=0.1)
        pid = run_job_here(job, probe_dir, *args)
        wait_until(lambda: running(_recorded_end(trace, pid)), what=f"the recorder to write job {pid}'s end record",
                   poll=0.2)
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
