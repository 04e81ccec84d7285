"""Parallel strategies as data (one module per strategy) and the per-rank mechanism.

:data:`STRATEGIES` maps each kind to its :class:`Strategy` description;
:func:`gpumem_tui.estimator.parallel.per_rank.estimate_job` turns a spec and a
:class:`ParallelPlan` into per-rank estimates.
"""

from __future__ import annotations

from gpumem_tui.estimator.parallel import context_parallel, ddp, deepspeed, fsdp1, fsdp2, pipeline, tensor_parallel
from gpumem_tui.estimator.parallel import zero_redundancy
from gpumem_tui.estimator.parallel.description import ParallelPlan, Strategy

__all__ = ["STRATEGIES", "ParallelPlan", "Strategy"]

STRATEGIES: dict[str, Strategy] = {s.kind: s for s in (
    fsdp2.STRATEGY, fsdp1.STRATEGY, ddp.STRATEGY, zero_redundancy.STRATEGY, deepspeed.STRATEGY,
    tensor_parallel.STRATEGY, pipeline.STRATEGY, context_parallel.STRATEGY)}
