"""CPU time of one telemetry poll: 8 GPUs x 64 processes per GPU against the fake NVML.

Target (issue 2): one poll <= 5 ms of CPU time.

Two figures are printed:
- NvmlSource.poll alone: 8 devices, 512 process rows (compute, with SM % samples);
- LiveSource.poll (NVML + psutil enrichment + probe reader): the same 512 rows whose PIDs
  are 64 real sleeping processes started here (each on all 8 GPUs, as a data-parallel job
  would be), so psutil really reads /proc for them.

CPU time is ``time.process_time`` (user + system of this process) per poll; the median and
p95 of ``--polls`` polls are printed, after warm-up polls that fill the caches (steady state).

Usage: .venv/bin/python benchmarks/poll_speed.py [--polls 200]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fake_pynvml import MiB, FakeNvml  # noqa: E402

GPUS = 8
PER_GPU = 64


def _measure(poll, polls: int) -> list[float]:
    import time

    for _ in range(5):
        poll()
    times = []
    for _ in range(polls):
        t0 = time.process_time()
        poll()
        times.append((time.process_time() - t0) * 1000.0)
    return times


def _report(label: str, times: list[float]) -> None:
    times = sorted(times)
    p95 = times[int(0.95 * (len(times) - 1))]
    print(f"{label:<58} median {statistics.median(times):6.2f} ms  p95 {p95:6.2f} ms  CPU time per poll")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=200)
    args = parser.parse_args(argv)

    fake = FakeNvml(gpus=GPUS)
    sys.modules["pynvml"] = fake.module
    children = [subprocess.Popen(["sleep", "600"]) for _ in range(PER_GPU)]
    try:
        for gpu in range(GPUS):
            for i, child in enumerate(children):
                fake.add_process(gpu, pid=child.pid, used=(100 + i) * MiB, sm=i % 100)

        from gpumem_tui.telemetry.host import HostEnricher
        from gpumem_tui.telemetry.live import LiveSource
        from gpumem_tui.telemetry.nvml import NvmlSource

        nvml = NvmlSource()
        rows = len(nvml.poll().processes)
        assert rows == GPUS * PER_GPU, rows
        _report(f"NvmlSource.poll, {GPUS} GPUs x {PER_GPU} processes ({rows} rows)", _measure(nvml.poll, args.polls))

        with tempfile.TemporaryDirectory() as probe_dir:
            live = LiveSource(probe_dir, host=HostEnricher(in_container=False))
            snap = live.poll()
            assert len(snap.processes) == rows and all(p.command for p in snap.processes)
            _report(f"LiveSource.poll, same + psutil for {PER_GPU} real PIDs", _measure(live.poll, args.polls))
            live.close()
        print("target: <= 5 ms CPU time per poll (issue 2)")
    finally:
        for child in children:
            child.kill()
            child.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
