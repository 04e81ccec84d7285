"""gpumem-tui: a terminal dashboard for GPU memory, measured and predicted.

Library use (each name is imported on first use, so ``import gpumem_tui`` stays cheap and
imports neither torch, nor Textual, nor any training framework):

- ``gpumem_tui.estimate(model, task=..., batch=..., seq=..., dtype=..., device=..., **spec)``:
  the predicted peak memory of one step (:func:`gpumem_tui.estimator.api.estimate`);
- ``gpumem_tui.probe.attach(model, optimizer, ...)``: the probe inside a training script;
- ``gpumem_tui.integrations.{transformers,lightning,accelerate}``: the probe from a framework.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["estimate", "EstimateResult", "__version__"]

_LAZY = {"estimate": "gpumem_tui.estimator.api", "EstimateResult": "gpumem_tui.estimator.api"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpumem_tui' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
