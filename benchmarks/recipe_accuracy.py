"""Error per recipe and per parallel strategy on the project's own ground truth; prints the
README table ("Error per recipe and strategy on our own ground truth").

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/recipe_accuracy.py [--cases]`` (no torch needed).

The ground truth (every figure torch "allocated": live tensor storage bytes from torch's
``MemTracker`` / ``FSDPMemTracker``, on the real CPU unless the row says meta):

- recipe ``torch`` (gpumem-tui ``measure``'s own loop): ``benchmarks/data/measured_cpu.json``
  (``benchmarks/collect_ground_truth.py``), split by where it ran (real CPU with SDPA, meta
  device with eager attention);
- ``torch`` with PEFT LoRA, ``hf-trainer`` (transformers ``Trainer.train``), ``hf-trainer``
  with PEFT LoRA: ``tests/data/recipes/`` (``benchmarks/collect_recipes.py``, the real
  frameworks on the CPU);
- the parallel strategies: ``tests/data/ranks/`` (``gpumem-tui measure --nproc N --on cpu``,
  ``benchmarks/collect_ranks.py``), the largest rank's peak against the largest rank role's.

Per row: cases, median |error| and the worst error (signed, the case with the largest |error|).
``tests/test_accuracy_table.py`` checks that README.md carries exactly :func:`markdown_table`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpumem_tui.estimator.architecture import architecture_from_config, load_architecture  # noqa: E402
from gpumem_tui.estimator.estimate import estimate  # noqa: E402
from gpumem_tui.estimator.parallel.configs_read import plan_from_measure  # noqa: E402
from gpumem_tui.estimator.parallel.per_rank import estimate_job  # noqa: E402
from gpumem_tui.estimator.spec import TrainingSpec  # noqa: E402

TORCH_DATA = ROOT / "benchmarks" / "data" / "measured_cpu.json"
RECIPE_DATA = ROOT / "tests" / "data" / "recipes"
RANK_DATA = ROOT / "tests" / "data" / "ranks"
#: README markers around the generated table
START, END = "<!-- accuracy-table:start -->", "<!-- accuracy-table:end -->"


@dataclass(frozen=True)
class Case:
    """One ground-truth case: its row, id, measured and estimated peak (bytes)."""

    row: str
    name: str
    measured: int
    estimated: int

    @property
    def error(self) -> float:
        return self.estimated / self.measured - 1


def _spec(fields: dict) -> TrainingSpec:
    kw = dict(fields)
    if "lora_targets" in kw:
        kw["lora_targets"] = tuple(kw["lora_targets"])
    return TrainingSpec(**kw)


def torch_cases() -> list[Case]:
    """``measure``'s own loop (recipe ``torch``), device profile cpu."""
    data = json.loads(TORCH_DATA.read_text())
    out = []
    for case in data["cases"]:
        arch = load_architecture(str(ROOT / case["config"]))
        est = estimate(arch, _spec(dict(case["spec"], device="cpu")))
        where = "real CPU, SDPA" if case["on"] == "cpu" else "meta device, eager"
        out.append(Case(f"recipe torch (gpumem-tui measure's loop), {where}", case["id"],
                        case["measured"]["peak_bytes"], est.peak_bytes))
    return out


_RECIPE_ROWS = {("torch", "lora"): "recipe torch + PEFT LoRA", ("hf-trainer", "train"): "recipe hf-trainer (Trainer)",
                ("hf-trainer", "lora"): "recipe hf-trainer + PEFT LoRA"}


def recipe_cases() -> list[Case]:
    """The real frameworks on the CPU (``tests/data/recipes``)."""
    out = []
    for path in sorted(RECIPE_DATA.glob("*.json")):
        case = json.loads(path.read_text())
        est = estimate(architecture_from_config(case["model"], name=path.stem), _spec(case["spec"]))
        row = _RECIPE_ROWS[(case["spec"]["recipe"], case["spec"]["task"])]
        out.append(Case(row, path.stem, case["peak_bytes"], est.peak_bytes))
    return out


def _strategy_row(strategy: dict) -> str:
    kind = strategy["kind"]
    if kind == "fsdp1":
        return f"FSDP1 {strategy.get('sharding_strategy', 'FULL_SHARD')}"
    if kind == "fsdp2":
        return "FSDP2 " + ("reshard after forward" if strategy.get("reshard_after_forward", True) else "no reshard")
    return {"ddp": "DDP", "zero-redundancy": "ZeroRedundancyOptimizer", "tp": "DTensor tensor parallel"}.get(kind, kind)


def rank_cases() -> list[Case]:
    """Per-rank ground truth (``tests/data/ranks``): the largest rank against the largest role."""
    out = []
    for path in sorted(RANK_DATA.glob("*.json")):
        case = json.loads(path.read_text())
        arch = architecture_from_config(case["model"], name=path.stem)
        job = estimate_job(arch, _spec(case["spec"]), plan_from_measure(case["strategy"]))
        measured = max(r["peak_bytes"] for r in case["ranks"])
        out.append(Case(f"per rank: {_strategy_row(case['strategy'])}", path.stem, measured,
                        job.largest.estimate.peak_bytes))
    return out


def all_cases() -> list[Case]:
    return torch_cases() + recipe_cases() + rank_cases()


def markdown_table(cases: list[Case] | None = None) -> str:
    """The README table: one row per recipe / strategy, in first-seen order."""
    cases = all_cases() if cases is None else cases
    rows: dict[str, list[Case]] = {}
    for case in cases:
        rows.setdefault(case.row, []).append(case)
    lines = ["| recipe or strategy | cases | median \\|error\\| | worst error | memory figure compared |",
             "|---|---:|---:|---:|---|"]
    for row, group in rows.items():
        worst = max(group, key=lambda c: abs(c.error))
        figure = "torch allocated, meta device" if "meta device" in row else "torch allocated, CPU"
        lines.append(f"| {row} | {len(group)} | {statistics.median(abs(c.error) for c in group):.2%} "
                     f"| {worst.error:+.2%} | {figure} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", action="store_true", help="print every case first")
    args = parser.parse_args()
    cases = all_cases()
    if args.cases:
        for case in cases:
            print(f"{case.name:<48}{case.measured:>14,}{case.estimated:>14,}{case.error:>+9.2%}  {case.row}")
        print()
    print(markdown_table(cases), end="")


if __name__ == "__main__":
    main()
