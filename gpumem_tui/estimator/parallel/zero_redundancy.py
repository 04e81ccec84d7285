"""``ZeroRedundancyOptimizer`` over DDP, torch 2.11.

Read from ``torch/distributed/optim/zero_redundancy_optimizer.py``: each rank builds the local
optimizer over its partition of the parameters only (optimizer states and step temporaries
1/d, ZeRO stage 1), then broadcasts its updated parameters in place; the model is wrapped in
DDP, so DDP's flat gradient buckets are there too (:mod:`.ddp`).
"""

from gpumem_tui.estimator.parallel.description import Strategy

STRATEGY = Strategy(
    kind="zero-redundancy",
    title="ZeroRedundancyOptimizer + DDP: optimizer states sharded, DDP gradient buckets",
    source="torch/distributed/optim/zero_redundancy_optimizer.py; torch/nn/parallel/distributed.py",
    version="torch 2.11",
    shards_states=True,
    flat_grad_buckets=True,
)
