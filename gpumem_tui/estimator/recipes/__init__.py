"""Training recipes as data: one :class:`Recipe` description per training framework.

A recipe says what a framework does around the model that changes memory: whether the
training forward fills a KV cache, whether the loop keeps the output through backward, how the
loss treats the logits (fp32 upcast, chunks), the checkpointing flavour and selective policy,
the optimizer implementation it builds, ``zero_grad`` behaviour, and what k-bit preparation
casts and turns on. Each module cites the framework file and version it was read from;
:mod:`gpumem_tui.estimator.recipes.rules` is the one mechanism that reads them.
"""

from __future__ import annotations

from gpumem_tui.estimator.recipes import hf_trainer, hf_trainer_2022, litgpt, peft_kbit, torch_loop, torchtitan, torchtune
from gpumem_tui.estimator.recipes.description import Recipe

__all__ = ["Recipe", "RECIPES", "recipe_for", "list_recipes"]

#: every recipe by its ``--recipe`` name; ``torch`` is the default
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    torch_loop.RECIPE, hf_trainer.RECIPE, hf_trainer_2022.RECIPE, peft_kbit.RECIPE, torchtune.RECIPE, litgpt.RECIPE, torchtitan.RECIPE)}


def recipe_for(name: str) -> Recipe:
    """The recipe named ``name``.

    Raises:
        KeyError: an unknown name (the spec validates names first).
    """
    return RECIPES[name]


def list_recipes() -> str:
    """``--list-recipes``: each recipe's name, what it does, and the source and version read."""
    lines = []
    width = max(len(name) for name in RECIPES) + 2
    for r in RECIPES.values():
        lines.append(f"{r.name:<{width}}{r.title}")
        lines.append(f"{'':<{width}}read from {r.source} ({r.version})")
    return "\n".join(lines)
