"""Shared helpers for the UI benchmarks: a synthetic busy-box source and a pty runner.

The synthetic source stands in for NVML (there is no GPU here): 8 GPUs x 64 processes whose
memory moves every poll, so every poll changes every widget -- the worst case for the UI.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time

from gpumem_tui.telemetry.model import DeviceSample, ProcessSample, ProcessType, Snapshot
from gpumem_tui.support.units import GiB


class BusySource:
    """8 GPUs x 64 processes, values changing each poll; deterministic."""

    def __init__(self, gpus: int = 8, per_gpu: int = 8, static: bool = False, prefill: float = 0.0) -> None:
        self.gpus = gpus
        # > 0: the first snapshot is dated this many seconds ago, so the chart's time window is
        # already spanned (the steady state of a dashboard left running), not still growing.
        self.prefill = prefill
        self.per_gpu = per_gpu
        self.static = static  # True: every value stays the same (only time moves)
        self.t = 0
        self.start = time.time()

    def poll(self) -> Snapshot:
        self.t += 0 if self.static else 1
        now = time.time()
        if self.prefill:
            now, self.prefill = now - self.prefill, 0.0
        devices = tuple(
            DeviceSample(i, "NVIDIA H100 80GB HBM3", f"GPU-{i}", 80 * GiB, (20 + (self.t + i) % 40) * GiB,
                         float((self.t * 7 + i) % 100), 55.0, 300.0, 700.0)
            for i in range(self.gpus)
        )
        procs = tuple(
            ProcessSample(10_000 + g * 100 + k, g, ProcessType.COMPUTE, (1 + (self.t + k) % 9) * GiB,
                          float((self.t + k) % 100), f"user{k % 5}", f"python train_{g}_{k}.py --lr 3e-4",
                          float(k), (2 + k % 7) * GiB // 4, None if self.static else self.start - 3600 * k)
            for g in range(self.gpus) for k in range(self.per_gpu)
        )
        return Snapshot(time=now, driver_version="550.54.15", cuda_driver_version="12.4",
                        devices=devices, processes=procs)

    def close(self) -> None:
        pass


def run_in_pty(argv: list[str], seconds: float, cols: int = 160, rows: int = 48) -> tuple[int, float]:
    """Run ``argv`` in a pseudo-terminal for ``seconds`` (draining its output); return (pid, t)."""
    pid, fd = pty.fork()
    if pid == 0:  # child
        os.environ["COLUMNS"], os.environ["LINES"] = str(cols), str(rows)
        os.environ.setdefault("TERM", "xterm-256color")
        os.execv(sys.executable, [sys.executable, *argv])
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return pid, fd  # type: ignore[return-value]


def drain(fd: int, until: float) -> bytes:
    """Read the child's output until ``until`` (monotonic) or EOF."""
    out = bytearray()
    while time.monotonic() < until:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    return bytes(out)


def stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
