"""README's "Error per recipe and strategy on our own ground truth" table is what the data gives:
``benchmarks/recipe_accuracy.py`` recomputes it from the saved ground truth (so the table
cannot go stale when the estimator or the data change)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _benchmark():
    spec = importlib.util.spec_from_file_location("recipe_accuracy", ROOT / "benchmarks" / "recipe_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_readme_table_matches_the_ground_truth() -> None:
    bench = _benchmark()
    readme = (ROOT / "README.md").read_text()
    assert readme.count(bench.START) == 1 and readme.count(bench.END) == 1
    shown = readme.split(bench.START, 1)[1].split(bench.END, 1)[0].strip("\n") + "\n"
    assert shown == bench.markdown_table()


def test_table_rows_cover_every_recipe_and_strategy_measured() -> None:
    bench = _benchmark()
    rows = {case.row for case in bench.all_cases()}
    for needle in ("hf-trainer (Trainer)", "hf-trainer + PEFT LoRA", "torch + PEFT LoRA", "DDP", "FSDP1 NO_SHARD",
                   "FSDP1 FULL_SHARD", "FSDP1 SHARD_GRAD_OP", "FSDP2 reshard", "FSDP2 no reshard",
                   "ZeroRedundancyOptimizer", "DTensor tensor parallel"):
        assert any(needle in row for row in rows), needle
