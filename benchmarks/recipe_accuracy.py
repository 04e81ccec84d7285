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
- on a CUDA GPU (one H100, ``tests/data/recipes_cuda/``, ``benchmarks/collect_cuda_recipes.py``):
  per recipe torch allocated (``torch.cuda.max_memory_allocated`` against the estimate's
  ``figures.allocated``), and over all its cases torch reserved (``max_memory_reserved``
  against ``figures.reserved``) and NVML used (the process's, context included, against
  ``figures.nvml_used``).

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
CUDA_DATA = ROOT / "tests" / "data" / "recipes_cuda" / "recipes_cuda.jsonl"
#: README markers around the generated table
START, END = "<!-- accuracy-table:start -->", "<!-- accuracy-table:end -->"


@dataclass(frozen=True)
class Case:
    """One ground-truth case: its row, id, measured and estimated peak (bytes)."""

    row: str
    name: str
    measured: int
    estimated: int
    figure: str = ""

    @property
    def error(self) -> float:
        return self.estimated / self.measured - 1


def _spec(fields: dict) -> TrainingSpec:
    return TrainingSpec(**fields)


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


_CUDA_ROWS = {("hf-trainer", "train"): "hf-trainer (Trainer, bf16/fp16 autocast)",
              ("hf-trainer", "lora"): "hf-trainer + PEFT LoRA", ("torch", "lora"): "torch + PEFT LoRA",
              ("peft-kbit", "qlora"): "peft-kbit (QLoRA nf4, Trainer)"}
#: (row suffix, record field, estimate figure, figure column) of the whole-set CUDA rows
_CUDA_FIGURES = (("allocated", "peak_bytes", "allocated", "torch allocated, H100"),
                 ("reserved", "max_reserved", "reserved", "torch reserved, H100"),
                 ("NVML used", "nvml_peak_used", "nvml_used", "NVML used (context included), H100"))


def cuda_spec(record: dict) -> TrainingSpec:
    """The ``TrainingSpec`` of one ``recipes_cuda.jsonl`` record, as
    ``collect_cuda_recipes.estimate_bytes`` builds it: the record's ``spec`` (its
    ``checkpoint_impl`` the one the run saw) plus, for QLoRA, the quantization format of the
    model config's ``quantization_config``."""
    from gpumem_tui.estimator.quantization import format_from_config

    fields = dict(record["spec"])
    if fields["task"] == "qlora":
        fields["quant_format"] = format_from_config(record["model"]["quantization_config"])
    return TrainingSpec(**fields)


def cuda_figures(record: dict) -> dict[str, int]:
    """The estimate's ``figures`` (allocated, reserved, nvml_used; bytes) for one CUDA record."""
    est = estimate(architecture_from_config(record["model"], name=record["case"]), cuda_spec(record))
    return {k: v for k, v in est.to_json()["figures"].items() if isinstance(v, int)}


def cuda_records() -> list[dict]:
    """The CUDA ground truth, one record per case (``tests/data/recipes_cuda``)."""
    return [json.loads(line) for line in CUDA_DATA.read_text().splitlines() if line.strip()]


def cuda_cases() -> list[Case]:
    """Per recipe torch allocated, then reserved and NVML used over all CUDA cases."""
    per_recipe, whole = [], []
    for record in cuda_records():
        figures = cuda_figures(record)
        row = _CUDA_ROWS[(record["spec"]["recipe"], record["spec"]["task"])]
        per_recipe.append(Case(f"H100: recipe {row}", record["case"], record["peak_bytes"], figures["allocated"],
                               "torch allocated, H100"))
        for suffix, field, key, column in _CUDA_FIGURES[1:]:
            whole.append(Case(f"H100: every recipe above, {suffix}", record["case"], record[field],
                              figures[key], column))
    per_recipe.sort(key=lambda c: list(_CUDA_ROWS.values()).index(c.row.removeprefix("H100: recipe ")))
    order = [suffix for suffix, *_ in _CUDA_FIGURES]
    return per_recipe + sorted(whole, key=lambda c: order.index(c.row.rsplit(", ", 1)[1]))


def all_cases() -> list[Case]:
    return torch_cases() + recipe_cases() + rank_cases() + cuda_cases()


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
        figure = group[0].figure or ("torch allocated, meta device" if "meta device" in row else "torch allocated, CPU")
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
            print(f"{case.name:<50}{case.measured:>16,}{case.estimated:>16,}{case.error:>+9.2%}  {case.row}")
        print()
    print(markdown_table(cases), end="")


if __name__ == "__main__":
    main()
