"""Cost of ``gpumem-tui exporter`` at 512 process rows: CPU share of one core and time per scrape.

The setup of benchmarks/poll_speed.py: the fake NVML (tests/fake_pynvml.py, through
tests/fleet_shim) with 8 GPUs, and 64 real sleeping processes started here, each on all 8
GPUs (512 process rows, with SM % and memory-bandwidth % samples), so psutil really reads
/proc for them. The exporter is the real CLI in its own process, with the extended NVML reads
(clocks, fan, PCIe, NVLink, MIG) its ``main`` turns on.

Figures:
- CPU: user + system CPU time of the exporter process over ``--seconds`` of polling every
  ``--interval`` s and scraping every ``--scrape-every`` s, as a share of one core (after a
  warm-up that covers imports and the first polls);
- per scrape: wall time of one ``GET /metrics`` as the client sees it (median and p95), and
  the exposition's size and series count;
- in process: CPU time to build one exposition (the families and their text, as the served
  app does after a new poll; a scrape before the next poll reuses the bytes) from a
  512-row poll, median of ``--renders`` (no HTTP), beside prometheus_client's own
  ``generate_latest`` of the same families for comparison.

Target (issue): under 2 % of a core and 10 ms a scrape. The machine's load (shared CPUs)
inflates wall times: the in-process CPU figure is the steadier one.

``--code DIR`` runs another checkout's exporter (e.g. the main branch, for a baseline on the same
machine; the fake NVML shim stays this one's) and skips the in-process figure.

Usage: .venv/bin/python benchmarks/exporter_cost.py [--seconds 60] [--interval 5] [--scrape-every 5] [--code DIR]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

GPUS = 8
PER_GPU = 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(url: str) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = resp.read()
    return (time.perf_counter() - t0) * 1000.0, body


def _cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _in_process_render(pids: list[int], renders: int) -> tuple[float, float, int]:
    """Median CPU ms of one exposition built from a 512-row poll of the fake NVML (ours, then
    prometheus_client's), and the rows."""
    from fake_pynvml import MiB, FakeNvml
    from prometheus_client.exposition import generate_latest

    fake = FakeNvml(gpus=GPUS)
    sys.modules["pynvml"] = fake.module
    for gpu in range(GPUS):
        for i, pid in enumerate(pids):
            fake.add_process(gpu, pid=pid, used=(100 + i) * MiB, sm=i % 100, mem=i % 50)
    from gpumem_tui.remote.exporter import ExporterState, build_registry, metric_families
    from gpumem_tui.remote.exporter_text import TextEncoder
    from gpumem_tui.telemetry.live import LiveSource
    from gpumem_tui.telemetry.nvml import NvmlSource

    with tempfile.TemporaryDirectory() as probe_dir:
        source = LiveSource(probe_dir, nvml=NvmlSource(extended=True))
        state = ExporterState()
        for _ in range(2):  # the second poll has host CPU %
            state.update(source.poll(), 0.0)
        source.close()
    registry = build_registry(state)
    encoder = TextEncoder()  # as the served app keeps it: label text reused from the last scrape
    medians = []
    for render in (lambda: encoder.encode(metric_families(state)), lambda: generate_latest(registry)):
        times = []
        for _ in range(renders):
            t0 = time.process_time()
            render()
            times.append((time.process_time() - t0) * 1000.0)
        medians.append(statistics.median(times))
    return medians[0], medians[1], len(state.snapshot.processes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measuring window (default 60)")
    parser.add_argument("--interval", type=float, default=5.0, help="exporter --interval (default 5, its default)")
    parser.add_argument("--scrape-every", type=float, default=5.0, help="seconds between scrapes (default 5)")
    parser.add_argument("--warmup", type=float, default=12.0, help="seconds before measuring (default 12)")
    parser.add_argument("--renders", type=int, default=50, help="in-process expositions timed (default 50)")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout whose exporter runs (default: this one)")
    args = parser.parse_args(argv)

    children = [subprocess.Popen(["sleep", "3600"]) for _ in range(PER_GPU)]
    exporter = None
    try:
        pids = [c.pid for c in children]
        port = _free_port()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "fleet_shim"), str(args.code)]),
               "GPUMEM_FAKE_NVML": str(GPUS), "GPUMEM_FAKE_PIDS": ",".join(map(str, pids))}
        with tempfile.TemporaryDirectory() as probe_dir:
            exporter = subprocess.Popen(
                [sys.executable, "-m", "gpumem_tui", "exporter", "--listen", f"127.0.0.1:{port}",
                 "--interval", str(args.interval), "--probe-dir", probe_dir],
                env=env, cwd=args.code, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # -m imports from cwd
            url = f"http://127.0.0.1:{port}/metrics"
            deadline = time.monotonic() + 60
            body = b""
            while time.monotonic() < deadline and body.count(b"\ngpumem_process_memory_used_bytes{") < GPUS * PER_GPU:
                try:
                    body = _scrape(url)[1]
                except OSError:
                    pass
                time.sleep(0.5)
            rows = body.count(b"\ngpumem_process_memory_used_bytes{")
            assert rows == GPUS * PER_GPU, f"{rows} process rows, not {GPUS * PER_GPU}"
            time.sleep(args.warmup)
            cpu0, wall0 = _cpu_seconds(exporter.pid), time.monotonic()
            scrape_ms = []
            while time.monotonic() - wall0 < args.seconds:
                ms, body = _scrape(url)
                scrape_ms.append(ms)
                time.sleep(max(0.0, args.scrape_every - ms / 1000.0))
            cpu1, wall1 = _cpu_seconds(exporter.pid), time.monotonic()
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        scrape_ms.sort()
        print(f"exporter of {args.code}, {GPUS} GPUs x {PER_GPU} processes ({rows} process rows), --interval {args.interval:g} s, "
              f"a scrape every {args.scrape_every:g} s, {wall1 - wall0:.0f} s measured:")
        print(f"  CPU: {100.0 * (cpu1 - cpu0) / (wall1 - wall0):.2f} % of one core")
        print(f"  scrape wall time: median {statistics.median(scrape_ms):.1f} ms, "
              f"p95 {scrape_ms[int(0.95 * (len(scrape_ms) - 1))]:.1f} ms over {len(scrape_ms)} scrapes; "
              f"{len(body) / 1024:.0f} KiB, {series} series")
        if args.code.resolve() != ROOT:
            return 0
        render_ms, client_ms, in_rows = _in_process_render(pids, args.renders)
        print(f"  in process: {render_ms:.1f} ms CPU to build one exposition ({in_rows} rows, median of {args.renders}); "
              f"prometheus_client's generate_latest of the same: {client_ms:.1f} ms")
        print("target: < 2 % of a core and < 10 ms a scrape (issue)")
    finally:
        if exporter is not None:
            exporter.terminate()
            exporter.wait(timeout=10)
        for child in children:
            child.kill()
            child.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
