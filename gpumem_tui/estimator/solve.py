"""Largest micro-batch (or sequence length) that fits a memory budget, by bisection.

Off CUDA the detailed estimate is monotone non-decreasing in ``batch`` and ``seq`` (every term
is a sum of non-negative products of them; a property test checks it), so doubling to an upper
bound and bisecting finds the largest fitting value in ``O(log n)`` estimates. On CUDA the
simulated caching-allocator reserve is not monotone (it depends on where blocks land and can
fall by tens of MiB from one size to the next) and costs milliseconds per estimate, so the
bisection runs on the analytic reserve (monotone while the kernels stay the same, and fast)
and the answer is then checked with the simulated one, stepping down (or up) to a value that
fits next to one that does not. SDPA changes kernel past a sliding window, so a larger value
beyond such a dip may fit too.
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


#: How far the check with the simulated reserve walks from the analytic answer before it
#: bisects instead (the two reserves differ by a few values at most on the catalogue models).
_WALK = 8


def _largest_checked(fits, limit: int) -> int:  # type: ignore[no-untyped-def]
    """Largest value by ``fits(v, exact=False)`` (analytic reserve), then moved to a value ``v``
    with ``fits(v, True)`` and not ``fits(v + 1, True)`` (or ``v`` at the limit; 0 when even 1
    does not fit exactly). Off CUDA both predicates are the same and this is one more call."""
    v = _largest(lambda x: fits(x, False), limit)
    if v == 0 or fits(v, True):
        for _ in range(_WALK):  # the simulated reserve may be the smaller one: walk up
            if v >= limit or not fits(v + 1, True):
                return v
            v += 1
    else:
        for _ in range(_WALK):  # walk down to a value that fits exactly (v + 1 did not)
            v -= 1
            if v == 0 or fits(v, True):
                return v
    return _largest(lambda x: fits(x, True), limit)  # far apart: bisect on the exact figure


def max_batch(arch: ModelArchitecture, spec: TrainingSpec, budget_bytes: int) -> int:
    """Largest micro-batch whose estimated ``peak_bytes`` is <= ``budget_bytes`` (0 if even
    batch 1 does not fit; capped at 2**24).

    Raises:
        ValueError: a negative budget.
        SpecError: the spec contradicts the architecture.
    """
    if budget_bytes < 0:
        raise ValueError(f"memory budget must be >= 0, got {budget_bytes}")
    return _largest_checked(lambda b, exact: estimate(arch, spec.replace(batch=b), simulate_allocator=exact)
                            .peak_bytes <= budget_bytes, _LIMIT)


def max_seq(arch: ModelArchitecture, spec: TrainingSpec, budget_bytes: int) -> int:
    """Largest sequence length whose estimated peak fits ``budget_bytes`` (0 if even 1 token
    does not fit); bounded by ``max_position_embeddings`` when the model has one.

    Raises:
        ValueError: a negative budget.
    """
    if budget_bytes < 0:
        raise ValueError(f"memory budget must be >= 0, got {budget_bytes}")
    limit = arch.max_position_embeddings or _LIMIT
    return _largest_checked(lambda s, exact: estimate(arch, spec.replace(seq=s), simulate_allocator=exact)
                            .peak_bytes <= budget_bytes, min(limit, _LIMIT))
