"""Largest micro-batch (or sequence length) that fits a memory budget, by bisection.

Off CUDA the detailed estimate is monotone non-decreasing in ``batch`` and ``seq`` (every term
is a sum of non-negative products of them; a property test checks it), so doubling to an upper
bound and bisecting finds the largest fitting value in ``O(log n)`` estimates. On CUDA it is
not strictly monotone: the simulated caching-allocator reserve depends on where blocks land
(it can fall by tens of MiB from one size to the next), and SDPA changes kernel past a
sliding window. The bisection keeps its invariant (``lo`` fits, ``hi`` does not), so the
answer always fits by the estimate and the next value does not; a larger value beyond such a
dip may fit too.
"""

from __future__ import annotations

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.spec import TrainingSpec

_LIMIT = 1 << 24


def _largest(fits, limit: int) -> int:  # type: ignore[no-untyped-def]
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:  # invariant: fits(lo), not fits(hi) (or hi beyond the limit)
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def max_batch(arch: ModelArchitecture, spec: TrainingSpec, budget_bytes: int) -> int:
    """Largest micro-batch whose estimated ``peak_bytes`` is <= ``budget_bytes`` (0 if even
    batch 1 does not fit; capped at 2**24).

    Raises:
        ValueError: a negative budget.
        SpecError: the spec contradicts the architecture.
    """
    if budget_bytes < 0:
        raise ValueError(f"memory budget must be >= 0, got {budget_bytes}")
    return _largest(lambda b: estimate(arch, spec.replace(batch=b)).peak_bytes <= budget_bytes, _LIMIT)


def max_seq(arch: ModelArchitecture, spec: TrainingSpec, budget_bytes: int) -> int:
    """Largest sequence length whose estimated peak fits ``budget_bytes`` (0 if even 1 token
    does not fit); bounded by ``max_position_embeddings`` when the model has one.

    Raises:
        ValueError: a negative budget.
    """
    if budget_bytes < 0:
        raise ValueError(f"memory budget must be >= 0, got {budget_bytes}")
    limit = arch.max_position_embeddings or _LIMIT
    return _largest(lambda s: estimate(arch, spec.replace(seq=s)).peak_bytes <= budget_bytes, min(limit, _LIMIT))
