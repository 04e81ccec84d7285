"""The estimator's component names, in the order it reports them (ESTIMATOR.md).

A module of its own so that readers of results (the comparison, the dashboard) can name the
components without importing the estimator's formulas (gpumem_tui.estimator.estimate).
"""

COMPONENT_KEYS = (
    "parameters",
    "gradients",
    "optimizer_states",
    "optimizer_intermediates",
    "activations",
    "logits_and_loss",
    "kv_cache",
    "cuda_context",
    "allocator_reserve",
)
