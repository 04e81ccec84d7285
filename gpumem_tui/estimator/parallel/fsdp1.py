"""FSDP1 (``torch.distributed.fsdp.FullyShardedDataParallel``), torch 2.11.

Read from ``torch/distributed/fsdp/_runtime_utils.py``: ``_post_forward_reshard`` does not free
the root's unsharded flat parameter ("with the intention that they are immediately used for
backward computation"); ``forward_prefetch=False`` (default) gathers one unit at a time in
forward; ``backward_prefetch=BACKWARD_PRE`` (default) gathers the next unit before the current
one's gradient computation, so two units are unsharded in backward; each unit's gradient is a
flat unsharded tensor reduce-scattered into the sharded gradient.

Checked with ``MemTracker`` (``gpumem-tui measure --nproc 2 --strategy fsdp1``, torch 2.13 CPU,
``tests/data/ranks``): FULL_SHARD holds the root's flat parameter alone at the end of forward
and the root plus the prefetched last unit at the log-softmax backward; SHARD_GRAD_OP every
unit.
"""

from gpumem_tui.estimator.parallel.description import Strategy

STRATEGY = Strategy(
    kind="fsdp1",
    title="FSDP1 FullyShardedDataParallel: flat-parameter units, root kept unsharded, BACKWARD_PRE prefetch",
    source="torch/distributed/fsdp/_runtime_utils.py (_post_forward_reshard, _prefetch_handle)",
    version="torch 2.11",
    shards_states=True,
    gathered_forward_end=0,
    gathered_layer_forward=1,
    gathered_loss_backward=1,
    gathered_layer_backward=2,
    root_stays_gathered=True,
)
