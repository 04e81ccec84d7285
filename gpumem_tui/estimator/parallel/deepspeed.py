"""DeepSpeed ZeRO stages 1-3, DeepSpeed 0.16.

Read from ``deepspeed/runtime/zero/stage_1_and_2.py`` (``ipg_buffer``: with
``contiguous_gradients`` one ``reduce_bucket_size``-element gradient buffer, two with
``overlap_comm``; after the step the updated 16-bit partitions are all-gathered in
``allgather_bucket_size`` pieces), ``deepspeed/runtime/zero/stage3.py`` (the reduce bucket is
allocated at initialisation; parameters are fetched up to ``stage3_max_live_parameters``
elements and prefetched ``stage3_prefetch_bucket_size`` ahead) and
``deepspeed/runtime/zero/config.py`` (defaults: ``reduce_bucket_size`` and
``allgather_bucket_size`` 5e8, ``stage3_max_live_parameters`` 1e9,
``stage3_prefetch_bucket_size`` 5e7, ``overlap_comm`` False, ``contiguous_gradients`` True).
``offload_optimizer`` keeps the fp32 master weights and optimizer states on the CPU;
``offload_param`` (stage 3) the parameters. Not modelled: the stage 1/2 all-gather after the
step (it gathers into the flat 16-bit partitions in place, no buffer beyond them is assumed)
and ``stage3_param_persistence_threshold`` (small parameters kept whole; norms and biases).
"""

from gpumem_tui.estimator.parallel.description import Strategy

STRATEGY = Strategy(
    kind="deepspeed",
    title="DeepSpeed ZeRO 1/2/3: sharded states, fixed-size reduce / all-gather buckets",
    source="deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, config.py",
    version="DeepSpeed 0.16",
    shards_states=True,
    bucketed_collectives=True,
)
