"""Model families as data: one :class:`Family` description per Hugging Face implementation.

A description says how to read a family's ``config.json`` (which field names it uses and
what its defaults are) and what its ``transformers`` implementation builds and saves for
backward: parameter layout (fused projections, biases, norms, learned or rotary positions,
tied head), attention variant (MHA / GQA / MQA, sliding-window layer pattern, soft-capping,
whether an SDPA path exists), MLP kind (GELU, gated, mixture of experts) and the handful of
saved-tensor rules that differ between implementations (the dtype of the eager softmax, the
copies made by batched matmuls, ...). :mod:`gpumem_tui.estimator.components` reads these
fields; it never tests a ``model_type``. The descriptions themselves live in
:mod:`gpumem_tui.estimator.families.known`.
"""

from __future__ import annotations

from gpumem_tui.estimator.families.description import Family
from gpumem_tui.estimator.families.known import BY_MODEL_TYPE

__all__ = ["Family", "family_for"]


def family_for(model_type: str) -> Family | None:
    """The description that reads ``model_type``, or None when no family claims it."""
    return BY_MODEL_TYPE.get(model_type)
