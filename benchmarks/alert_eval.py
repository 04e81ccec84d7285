"""Cost of evaluating alert rules per poll (gpumem_tui.alerts.evaluate), printed in microseconds.

A busy box: 8 GPUs, 64 probed jobs, one rule of each kind (5 rules), the GPUs over the memory
threshold on every poll (so every poll walks the rate-limit state too). Run:

    PYTHONPATH=$PWD python benchmarks/alert_eval.py
"""

from __future__ import annotations

import time

from gpumem_tui.alerts.rules import parse_rule
from gpumem_tui.alerts.evaluate import AlertEngine, JobInput
from gpumem_tui.telemetry.model import DeviceSample, Snapshot
from gpumem_tui.support.units import GiB, MiB

GPUS, JOBS, POLLS = 8, 64, 2000


def main() -> None:
    rules = [parse_rule({"rule": "memory_above", "percent": 50, "repeat": 60}),
             parse_rule({"rule": "will_not_fit", "repeat": 60}),
             parse_rule({"rule": "time_to_oom_below", "seconds": 600, "repeat": 60}),
             parse_rule({"rule": "drift", "repeat": 60}),
             parse_rule({"rule": "gpu_lost", "repeat": 60})]
    engine = AlertEngine(rules)
    devices = tuple(DeviceSample(i, "GPU", f"GPU-{i}", 80 * GiB, 60 * GiB, None, None, None, None) for i in range(GPUS))
    jobs = [JobInput(pid=1000 + j, gpu=j % GPUS, predicted_peak_bytes=(5 + j % 30) * GiB, used_bytes=7 * GiB,
                     seconds_to_oom=300.0 + j, drift_bytes_per_step=float(j * MiB), label=f"job-{j}")
            for j in range(JOBS)]
    fired = 0
    start = time.perf_counter()
    for poll in range(POLLS):
        fired += len(engine.evaluate(Snapshot(time=1e9 + poll, devices=devices), jobs))
    seconds = time.perf_counter() - start
    print(f"{GPUS} GPUs, {JOBS} jobs, {len(rules)} rules: {seconds / POLLS * 1e6:.0f} us per poll "
          f"({POLLS} polls, {fired} alerts fired)")


if __name__ == "__main__":
    main()
