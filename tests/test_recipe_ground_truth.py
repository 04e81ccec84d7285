"""Recipe estimates against the real frameworks on the CPU: transformers' ``Trainer`` and PEFT
LoRA, measured by ``benchmarks/collect_recipes.py`` (MemTracker, torch allocated) and saved
under ``tests/data/recipes``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpumem_tui.estimator.architecture import architecture_from_config
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.spec import TrainingSpec

CASES = sorted((Path(__file__).parent / "data" / "recipes").glob("*.json"))
#: each case within 0.5 % (the per-rank target's median; the worst allowed there is 2 %)
_TOLERANCE = 0.005


def test_every_cpu_recipe_has_ground_truth() -> None:
    """hf-trainer with and without PEFT LoRA, and torch with PEFT LoRA, each on two models
    (Llama-style and GPT-2's fused c_attn); every case says how it was taken."""
    seen: dict[tuple[str, str], set[str]] = {}
    for path in CASES:
        case = json.loads(path.read_text())
        assert "collect_recipes.py" in case["how"] and "torch allocated" in case["measured"]
        key = (case["spec"]["recipe"], case["spec"]["task"])
        seen.setdefault(key, set()).add(case["model"]["model_type"])
    for key in (("hf-trainer", "train"), ("hf-trainer", "lora"), ("torch", "lora")):
        assert seen.get(key) == {"llama", "gpt2"}, key


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_recipe_estimate_matches_the_framework(path: Path) -> None:
    case = json.loads(path.read_text())
    fields = dict(case["spec"])
    if "lora_targets" in fields:
        fields["lora_targets"] = tuple(fields["lora_targets"])
    est = estimate(architecture_from_config(case["model"], name=path.stem), TrainingSpec(**fields))
    error = est.peak_bytes / case["peak_bytes"] - 1
    assert abs(error) <= _TOLERANCE, f"{path.stem}: {error:+.2%}"
