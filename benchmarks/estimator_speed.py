"""Speed of the estimator: one estimate (target <= 2 ms) and --max-batch (target <= 50 ms);
an estimate with a recipe and a parallel plan (target <= 50 ms) and its --max-batch (target
<= 200 ms).

Run: .venv/bin/python benchmarks/estimator_speed.py
Prints the median and 95th percentile over repeated calls for several models and setups,
plus the import time of ``gpumem_tui.estimator.cli`` in a fresh interpreter. The CUDA
allocator simulation keeps its results per (architecture, spec); every timed call here starts
with that cache cleared, so the figures are those of a spec seen for the first time, and the
repeated (cached) estimate is printed beside them.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from gpumem_tui.estimator.architecture import load_architecture
from gpumem_tui.estimator.devices.cuda_step_events import simulate
from gpumem_tui.estimator.cli_parallel import max_batch_job
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.parallel import ParallelPlan
from gpumem_tui.estimator.parallel.per_rank import estimate_job
from gpumem_tui.estimator.solve import max_batch
from gpumem_tui.estimator.spec import TrainingSpec
from gpumem_tui.estimator.suggest import suggest

CASES = [
    ("gpt2", TrainingSpec(batch=8, seq=1024)),
    ("llama-3.1-8b", TrainingSpec(batch=2, seq=4096, attention="flash", grad_ckpt="full")),
    ("llama-3.1-70b", TrainingSpec(batch=1, seq=8192, zero=3, dp=64, tp=8, mixed_precision=True)),
    ("mixtral-8x7b", TrainingSpec(task="qlora", batch=4, seq=2048)),
    ("qwen2.5-7b", TrainingSpec(task="inference", batch=16, seq=32768)),
]
BUDGET = 80 << 30

#: (model, spec with a recipe, parallel plan) for the recipe + parallelism targets
JOB_CASES = [
    ("llama-3.1-8b", TrainingSpec(batch=1, seq=4096, mixed_precision=True, grad_ckpt="full", recipe="hf-trainer"),
     ParallelPlan("fsdp2", 8)),
    ("llama-3.1-70b", TrainingSpec(batch=1, seq=4096, grad_ckpt="selective", attention="flash", recipe="torchtitan"),
     ParallelPlan("deepspeed", 64, zero_stage=3)),
    ("qwen2.5-7b", TrainingSpec(task="qlora", batch=2, seq=2048, grad_ckpt="full", recipe="peft-kbit"),
     ParallelPlan("ddp", 4)),
    ("mistral-7b", TrainingSpec(batch=2, seq=8192, attention="flash", recipe="torchtune"),
     ParallelPlan("cp", 4, cp=4)),
    ("llama-3.1-8b", TrainingSpec(batch=1, seq=8192, attention="flash"), ParallelPlan("cp", 4, cp=4)),
]


def _time(fn, repeat: int, cold: bool = True) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(repeat):
        if cold:
            simulate.cache_clear()
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def main() -> None:
    print(f"{'model':<16}{'setup':<34}{'estimate ms (p50/p95)':>24}{'cached':>8}{'max-batch ms (p50/p95)':>26}"
          f"{'max b':>7}")
    worst_est = worst_mb = worst_cached = 0.0
    for name, spec in CASES:
        arch = load_architecture(name)
        est_p50, est_p95 = _time(lambda: estimate(arch, spec), 100)
        cached, _ = _time(lambda: estimate(arch, spec), 100, cold=False)
        mb_p50, mb_p95 = _time(lambda: max_batch(arch, spec, BUDGET), 20)
        worst_est, worst_mb = max(worst_est, est_p50), max(worst_mb, mb_p50)
        worst_cached = max(worst_cached, cached)
        setup = f"{spec.task} b={spec.batch} s={spec.seq} {spec.attention}"
        print(f"{name:<16}{setup:<34}{est_p50:>12.3f} / {est_p95:<9.3f}{cached:>8.3f}{mb_p50:>14.2f} / {mb_p95:<9.2f}"
              f"{max_batch(arch, spec, BUDGET):>7}")
    print(f"worst median: one estimate {worst_est:.3f} ms (target <= 2 ms; {worst_cached:.3f} ms repeated), "
          f"max-batch {worst_mb:.2f} ms (target <= 50 ms), budget {BUDGET >> 30} GiB")
    _jobs()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import gpumem_tui.estimator.cli"], check=True)
    print(f"fresh-interpreter import of gpumem_tui.estimator.cli: {(time.perf_counter() - t0) * 1000:.0f} ms")


def _jobs() -> None:
    """Recipe + parallel plan: one per-rank estimate and its --max-batch."""
    print(f"{'model':<16}{'recipe / plan':<34}{'job estimate ms (p50/p95)':>28}{'max-batch ms (p50/p95)':>26}{'max b':>7}")
    worst_est = worst_mb = 0.0
    for name, spec, plan in JOB_CASES:
        arch = load_architecture(name)
        est_p50, est_p95 = _time(lambda: estimate_job(arch, spec, plan), 50)
        mb_p50, mb_p95 = _time(lambda: max_batch_job(arch, spec, plan, BUDGET), 10)
        worst_est, worst_mb = max(worst_est, est_p50), max(worst_mb, mb_p50)
        setup = f"{spec.recipe} / {plan.kind} x{plan.world_size}"
        print(f"{name:<16}{setup:<34}{est_p50:>15.3f} / {est_p95:<9.3f}{mb_p50:>14.2f} / {mb_p95:<9.2f}"
              f"{max_batch_job(arch, spec, plan, BUDGET):>7}")
    print(f"worst median: job estimate {worst_est:.3f} ms (target <= 50 ms), job max-batch {worst_mb:.2f} ms "
          f"(target <= 200 ms), budget {BUDGET >> 30} GiB per rank")
    worst = 0.0
    for name, spec, plan in JOB_CASES:
        arch = load_architecture(name)
        for budget in (24 << 30, 40 << 30):
            p50, p95 = _time(lambda: suggest(arch, spec.replace(batch=4), plan, budget), 10)
            worst = max(worst, p50)
            print(f"--suggest {name:<14} {spec.recipe:<11} {plan.kind:<10} budget {budget >> 30} GiB: "
                  f"{p50:.1f} / {p95:.1f} ms (p50/p95)")
    print(f"worst median --suggest: {worst:.1f} ms (target <= 300 ms)")


if __name__ == "__main__":
    main()
