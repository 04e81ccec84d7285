"""Churn soak: poll at 10 Hz for a long time while processes come and go by the thousand.

Issue 5: "a benchmark runs the poller and UI for 10 minutes at 10 Hz while processes appear
and exit (at least 1,000 in all) and prints failures (must be 0), RSS growth (must be
bounded: report MiB per hour) and poll time percentiles."

What runs:
- a fake NVML (tests/fake_pynvml.py) with 4 GPUs that reports the real short-lived child
  processes this script starts (``sleep``, some under hostile names: ANSI escapes, Rich
  markup, invalid UTF-8, a 20 KB argument), each on a random GPU, removed from NVML up to
  0.3 s after they exit (so "exited" rows occur as on a real box);
- fault injection on a cycle: a GPU lost for 2 s, one-shot Unknown/Timeout/NotSupported/
  NoPermission errors on random calls, a GPU hot-added and removed again;
- ``LiveSource`` (NVML + psutil + probe reader) polled at 10 Hz -- by the dashboard itself
  (``GpuMemApp`` under ``App.run_test``, headless, its own poller thread) when the UI is
  installed, else by a plain loop (``--no-app`` forces that).

Failures counted: an exception from ``poll()``, a snapshot breaking an invariant (duplicate
rows, a missing value without a reason, a device still in error 5 s on, 3 s after the last
long fault was cleared), the app's poller reporting a failure, or the app crashing.

RSS growth is the least-squares slope of this process's RSS, sampled every second after a
warm-up of 20 % of the run, in MiB per hour. Poll times are wall-clock per ``poll()``.

Usage: .venv/bin/python benchmarks/churn_soak.py [--seconds 600] [--no-app]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from fake_pynvml import (  # noqa: E402
    MiB,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNKNOWN,
    FakeNvml,
)

HOSTILE_NAMES = [
    "\x1b[31mred\x1b[0m\x1b]0;pwned\x07",
    "[bold red]boom[/] [link=https://evil.example]x[/link]",
    b"bad-\xff\xfe-utf8".decode("utf-8", "surrogateescape"),
    "line\nbreak\ttab\u202eevil",
    "y" * 20_000,
]
FAULT_CALLS = ["nvmlDeviceGetMemoryInfo", "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage",
               "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetProcessUtilization",
               "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex"]
FAULT_CODES = [NVML_ERROR_UNKNOWN, NVML_ERROR_TIMEOUT, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


class Churner(threading.Thread):
    """Starts short-lived processes, mirrors them into the fake NVML, injects faults."""

    def __init__(self, fake: FakeNvml, rate: float, seed: int = 1) -> None:
        super().__init__(daemon=True, name="churner")
        self.fake = fake
        self.rate = rate
        self.rng = random.Random(seed)
        self.stop_event = threading.Event()
        self.spawned = 0
        self.exited = 0
        self.spawn_errors = 0
        self.faults = 0
        self.lost_until: dict[int, float] = {}
        self.clear_time = 0.0  # monotonic time at which the last device fault was cleared
        self.gpu_added_at: float | None = None
        self._children: list[tuple[subprocess.Popen, float | None]] = []

    def _spawn(self) -> None:
        life = self.rng.uniform(0.2, 2.0)
        if self.spawned % 7 == 3:
            name = self.rng.choice(HOSTILE_NAMES)
            argv = ["sh", "-c", f"exec sleep {life:.2f}", name]
        else:
            argv = ["sleep", f"{life:.2f}"]
        try:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        except OSError:
            self.spawn_errors += 1
            return
        self.spawned += 1
        gpu = self.rng.randrange(4)
        kind = self.rng.choice(["compute"] * 6 + ["graphics", "mps"])
        used = None if self.rng.random() < 0.05 else self.rng.randrange(64, 8192) * MiB
        self.fake.add_process(gpu, pid=child.pid, used=used, kind=kind, sm=self.rng.choice([None, 5, 50, 99]))
        self._children.append((child, None))

    def _reap(self, now: float) -> None:
        keep = []
        for child, exited_at in self._children:
            if exited_at is None and child.poll() is not None:
                exited_at = now
                self.exited += 1
            if exited_at is not None and now - exited_at >= self.rng.uniform(0.0, 0.3):
                self.fake.remove_process(child.pid)
                continue
            keep.append((child, exited_at))
        self._children = keep

    def _faults(self, now: float, tick: int) -> None:
        # a GPU is lost for 2 s every 10 s
        if tick % 100 == 50:
            self.fake.lose_gpu(1)
            self.lost_until[1] = now + 2.0
            self.faults += 1
        for index, until in list(self.lost_until.items()):
            if now >= until:
                self.fake.recover_gpu(index)
                del self.lost_until[index]
                self.clear_time = now
        # one-shot errors on random calls
        if tick % 7 == 0:
            self.fake.fail(self.rng.choice(FAULT_CALLS), self.rng.choice(FAULT_CODES),
                           device=self.rng.choice([None, 0, 2]), times=1)
            self.faults += 1
        # hot-add a GPU every 30 s and remove it 5 s later
        if tick % 300 == 150 and self.gpu_added_at is None:
            self.fake.add_gpu(name="NVIDIA H100 80GB HBM3 (hot-added)")
            self.gpu_added_at = now
            self.faults += 1
        elif self.gpu_added_at is not None and now - self.gpu_added_at > 5.0:
            del self.fake.gpus[4:]
            self.gpu_added_at = None
            self.clear_time = now

    def run(self) -> None:
        tick = 0
        next_spawn = time.monotonic()
        while not self.stop_event.is_set():
            now = time.monotonic()
            while next_spawn <= now:
                self._spawn()
                next_spawn += self.rng.expovariate(self.rate)
            self._reap(now)
            self._faults(now, tick)
            tick += 1
            self.stop_event.wait(0.1)

    def faults_active(self, now: float) -> bool:
        return bool(self.lost_until) or self.gpu_added_at is not None or now - self.clear_time < 3.0

    def shutdown(self) -> None:
        self.stop_event.set()
        self.join(timeout=5)
        for child, _ in self._children:
            if child.poll() is None:
                child.kill()
            child.wait()


class TimedSource:
    """Wraps a TelemetrySource: times every poll, checks every snapshot, counts failures."""

    def __init__(self, source, churner: Churner) -> None:
        self.source = source
        self.churner = churner
        self.wall_ms: list[float] = []
        self.cpu_ms: list[float] = []
        self.failures: list[str] = []
        self.rows = 0
        self.states: dict[str, int] = {}
        self.error_since: dict[int, float] = {}

    def poll(self):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            snap = self.source.poll()
        except Exception as exc:  # counted, then re-raised so the app shows it too
            self.failures.append(f"poll raised {type(exc).__name__}: {exc}")
            raise
        self.wall_ms.append((time.perf_counter() - t0) * 1000)
        self.cpu_ms.append((time.thread_time() - c0) * 1000)
        self._check(snap)
        return snap

    def _check(self, snap) -> None:
        keys = [(p.device_index, p.pid) for p in snap.processes]
        if len(keys) != len(set(keys)):
            self.failures.append("duplicate process rows")
        if [d.index for d in snap.devices] != list(range(len(snap.devices))):
            self.failures.append(f"device indices {[d.index for d in snap.devices]}")
        for p in snap.processes:
            self.rows += 1
            self.states[p.status.value] = self.states.get(p.status.value, 0) + 1
            for name in ("used_memory_bytes", "cpu_percent", "rss_bytes"):
                if getattr(p, name) is None and not p.reason(name) and p.type.value != "host":
                    self.failures.append(f"pid {p.pid}: {name} is None without a reason")
        # No injected fault lasts longer than 2 s, so a device in error for 5 s did not recover.
        now = time.monotonic()
        for d in snap.devices:
            if d.error is None:
                self.error_since.pop(d.index, None)
                continue
            since = self.error_since.setdefault(d.index, now)
            if now - since > 5.0 and not self.churner.faults_active(now):
                self.failures.append(f"GPU {d.index} did not recover from: {d.error}")

    def close(self) -> None:
        self.source.close()


class _Tracer:
    """tracemalloc snapshots at the end of the warm-up and at the end; prints the top growth."""

    def __init__(self, warmup: float) -> None:
        import tracemalloc

        self.tracemalloc = tracemalloc
        tracemalloc.start(4)
        self.first = None
        self.timer = threading.Timer(warmup, self._take_first)
        self.timer.daemon = True
        self.timer.start()

    def _take_first(self) -> None:
        self.first = self.tracemalloc.take_snapshot()

    def report(self) -> None:
        self.timer.cancel()
        if self.first is None:
            print("tracemalloc: the run ended before the warm-up did")
            return
        last = self.tracemalloc.take_snapshot()
        stats = last.compare_to(self.first, "traceback")
        grown = sum(s.size_diff for s in stats)
        print(f"tracemalloc: traced memory changed by {grown / MiB:+.2f} MiB after the warm-up; top sites:")
        for stat in stats[:6]:
            frames = [f"{f.filename.rsplit('site-packages/', 1)[-1]}:{f.lineno}" for f in stat.traceback][-4:]
            print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  " + " <- ".join(reversed(frames)))
        print("  (RSS growth beyond this is not live Python objects: allocator high-water marks, tracemalloc itself)")


def _rss_sampler(samples: list[tuple[float, int]], stop: threading.Event) -> None:
    me = psutil.Process()
    while not stop.is_set():
        samples.append((time.monotonic(), me.memory_info().rss))
        stop.wait(1.0)


def _slope_mib_per_hour(samples: list[tuple[float, int]], warmup_fraction: float = 0.2) -> float:
    if len(samples) < 3:
        return float("nan")
    t_start, t_end = samples[0][0], samples[-1][0]
    pts = [(t, r) for t, r in samples if t >= t_start + warmup_fraction * (t_end - t_start)]
    if len(pts) < 2:
        return float("nan")
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mr = sum(r for _, r in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    if var == 0:
        return 0.0
    slope = sum((t - mt) * (r - mr) for t, r in pts) / var  # bytes per second
    return slope * 3600 / MiB


async def _run_app(source: TimedSource, seconds: float, failures: list[str]) -> int:
    from gpumem_tui.ui.app import GpuMemApp

    app = GpuMemApp(source, interval=0.1)
    keys = ["s", "down", "down", "up", "g", "s"]
    async with app.run_test(headless=True, size=(160, 48)) as pilot:
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            await pilot.pause(0.5)
            try:
                await pilot.press(keys[i % len(keys)])  # move the selection, sort, as a user would
            except Exception as exc:  # a key may be unbound; that is not a soak failure
                if i < len(keys):
                    print(f"(key {keys[i % len(keys)]!r}: {type(exc).__name__})")
            i += 1
        polls, poll_failures = app.poller.polls, app.poller.failures
    if poll_failures:
        failures.append(f"app poller reported {poll_failures} failed polls")
    return polls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="duration (default 600)")
    parser.add_argument("--rate", type=float, default=None,
                        help="processes started per second (default: enough for 1,000 in the run, at least 2)")
    parser.add_argument("--no-app", action="store_true", help="poll in a loop instead of running the dashboard")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="also print the allocation sites that grew most between the warm-up and the end "
                             "(slows polling down a lot: fault-recovery timings then fail; use only to hunt leaks)")
    args = parser.parse_args(argv)
    tracer = _Tracer(args.seconds * 0.2) if args.tracemalloc else None
    rate = args.rate or max(2.0, 1200.0 / args.seconds)

    fake = FakeNvml(gpus=4)
    sys.modules["pynvml"] = fake.module
    import tempfile

    from gpumem_tui.telemetry.host import HostEnricher
    from gpumem_tui.telemetry.live import LiveSource

    use_app = not args.no_app
    if use_app:
        try:
            import gpumem_tui.ui.app  # noqa: F401
        except ImportError as exc:
            print(f"(dashboard not available: {exc}; polling in a loop)")
            use_app = False

    churner = Churner(fake, rate)
    probe_dir = tempfile.mkdtemp(prefix="gpumem-soak-probes-")
    source = TimedSource(LiveSource(probe_dir, host=HostEnricher(in_container=False)), churner)
    rss: list[tuple[float, int]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_rss_sampler, args=(rss, stop), daemon=True)
    failures = source.failures
    started = time.monotonic()
    churner.start()
    sampler.start()
    polls = 0
    try:
        if use_app:
            try:
                polls = asyncio.run(_run_app(source, args.seconds, failures))
            except Exception as exc:
                failures.append(f"dashboard crashed: {type(exc).__name__}: {exc}")
        else:
            next_poll = time.monotonic()
            end = next_poll + args.seconds
            while time.monotonic() < end:
                try:
                    source.poll()
                except Exception:
                    pass  # already counted
                polls += 1
                next_poll += 0.1
                time.sleep(max(0.0, next_poll - time.monotonic()))
    finally:
        stop.set()
        churner.shutdown()
        sampler.join(timeout=5)
        source.close()
    elapsed = time.monotonic() - started

    print(f"churn soak: {elapsed:.1f} s at 10 Hz, driver: {'GpuMemApp (run_test, headless)' if use_app else 'poll loop'}, "
          f"pid {os.getpid()}")
    print(f"processes started: {churner.spawned} (exited {churner.exited}), spawn errors {churner.spawn_errors}, "
          f"faults injected: {churner.faults}")
    print(f"polls: {len(source.wall_ms)} ({len(source.wall_ms) / elapsed:.1f}/s), process rows seen: {source.rows}, "
          f"states: {dict(sorted(source.states.items()))}")
    print(f"poll wall time ms: p50 {_percentile(source.wall_ms, 0.5):.2f}  p95 {_percentile(source.wall_ms, 0.95):.2f}"
          f"  p99 {_percentile(source.wall_ms, 0.99):.2f}  max {max(source.wall_ms, default=float('nan')):.2f}")
    print(f"poll CPU time ms (poller thread): p50 {_percentile(source.cpu_ms, 0.5):.2f}  "
          f"p95 {_percentile(source.cpu_ms, 0.95):.2f}  p99 {_percentile(source.cpu_ms, 0.99):.2f}")
    if rss:
        warm = next((r for t, r in rss if t >= rss[0][0] + 0.2 * (rss[-1][0] - rss[0][0])), rss[-1][1])
        print(f"RSS: start {rss[0][1] / MiB:.1f} MiB, after 20 % warm-up {warm / MiB:.1f} MiB, "
              f"end {rss[-1][1] / MiB:.1f} MiB, growth {_slope_mib_per_hour(rss):+.1f} MiB/hour "
              f"(slope after the warm-up)")
    if tracer is not None:
        tracer.report()
    unique = sorted(set(failures))
    print(f"failures: {len(failures)}")
    for text in unique[:20]:
        print(f"  {failures.count(text)} x {text}")
    return 1 if failures or churner.spawned < 1000 and args.seconds >= 600 else 0


if __name__ == "__main__":
    raise SystemExit(main())
