"""Per-rank estimates against ``gpumem-tui measure --nproc N --on cpu`` ground truth.

Run: .venv/bin/python benchmarks/per_rank_accuracy.py [tests/data/ranks]
Prints, for every saved case, the measured peak of the largest rank (live tensor bytes,
FSDPMemTracker / MemTracker), the estimate of the largest rank role, and the error; then the
median and worst absolute error over the modelled cases, overall and per strategy (target,
issue 21: median <= 0.5 %, worst <= 2 % for every strategy). Cases the estimator refuses
(a ``SpecError``) are listed, not scored.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from gpumem_tui.estimator.architecture import architecture_from_config
from gpumem_tui.estimator.parallel.configs_read import plan_from_measure
from gpumem_tui.estimator.parallel.per_rank import estimate_job
from gpumem_tui.estimator.spec import SpecError, TrainingSpec

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "ranks"


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA
    errors = []
    by_strategy: dict[str, list[float]] = {}
    print(f"{'case':<42}{'measured B':>12}{'estimate B':>12}{'error':>9}  peak phase (measured / estimate)")
    for path in sorted(folder.glob("*.json")):
        case = json.loads(path.read_text())
        arch = architecture_from_config(case["model"], name=path.stem)
        fields = dict(case["spec"])
        measured = max(case["ranks"], key=lambda r: r["peak_bytes"])
        try:
            job = estimate_job(arch, TrainingSpec(**fields), plan_from_measure(case["strategy"]))
        except SpecError as exc:
            print(f"{path.stem:<42}{measured['peak_bytes']:>12,}{'-':>12}{'-':>9}  not modelled: {exc}")
            continue
        est = job.largest.estimate
        err = est.peak_bytes / measured["peak_bytes"] - 1
        errors.append(abs(err))
        options = ",".join(f"{k}={v}" for k, v in sorted(case["strategy"].items()) if k not in ("kind", "world_size"))
        by_strategy.setdefault(f"{case['strategy']['kind']} {options}".strip(), []).append(abs(err))
        print(f"{path.stem:<42}{measured['peak_bytes']:>12,}{est.peak_bytes:>12,}{err:>+9.2%}  "
              f"{measured['peak_phase']} / {est.peak_phase}")
    for name, errs in sorted(by_strategy.items()):
        print(f"  {name:<60}{len(errs):>3} cases: median |error| {statistics.median(errs):.3%}, worst {max(errs):.3%}")
    if errors:
        print(f"{len(errors)} cases: median |error| {statistics.median(errors):.2%}, worst {max(errors):.2%}")


if __name__ == "__main__":
    main()
