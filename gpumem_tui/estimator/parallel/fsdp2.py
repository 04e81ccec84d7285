"""FSDP2 (``torch.distributed.fsdp.fully_shard``), torch 2.11.

Read from ``torch/distributed/fsdp/_fully_shard/_fully_shard.py`` (``reshard_after_forward``:
"the root FSDP state has its value specially set to False as a heuristic since its parameters
would typically be immediately all-gathered for backward") and ``_fsdp_param_group.py`` /
``_fsdp_collectives.py``: each ``fully_shard`` unit all-gathers its parameters into an
unsharded buffer in the ``MixedPrecisionPolicy.param_dtype``; the next unit's all-gather is
issued early (implicit forward prefetch through the all-gather stream, explicit backward
prefetch of the next unit), so two units are unsharded at once; backward reduce-scatters each
unit's unsharded gradients (``reduce_dtype``, default the param dtype) into the sharded
``.grad`` (DTensor).

Checked with ``FSDPMemTracker`` (``gpumem-tui measure --nproc 2 --strategy fsdp2``, torch 2.13
CPU, a 2-layer Llama, ``tests/data/ranks``): at the end of forward the root's unsharded
parameters and one unit's ``All Gather`` buffer are live; at the log-softmax backward the root
and the prefetched last unit; without resharding every unit stays unsharded.
"""

from gpumem_tui.estimator.parallel.description import Strategy

STRATEGY = Strategy(
    kind="fsdp2",
    title="FSDP2 fully_shard: per-layer units, root kept unsharded, one unit prefetched",
    source="torch/distributed/fsdp/_fully_shard/_fully_shard.py, _fsdp_param_group.py, _fsdp_collectives.py",
    version="torch 2.11",
    shards_states=True,
    gathered_forward_end=1,
    gathered_layer_forward=2,
    gathered_loss_backward=1,
    gathered_layer_backward=2,
    root_stays_gathered=True,
)
