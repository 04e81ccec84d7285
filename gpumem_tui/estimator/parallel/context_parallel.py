"""Context parallelism (``torch.distributed.tensor.experimental.context_parallel``, ring
attention), torch 2.11.

Read from ``torch/distributed/tensor/experimental/_attention.py``: the sequence is split over
``cp`` ranks (every activation, the logits and the loss hold ``s / cp`` positions); the ring
passes the key and value shards from rank to rank, so one more ``(k, v)`` shard is in flight
beside the local one in forward, and in backward also their gradients.
"""

from gpumem_tui.estimator.parallel.description import Strategy

STRATEGY = Strategy(
    kind="cp",
    title="context parallel (ring attention): sequence split over cp ranks, one k/v shard in flight",
    source="torch/distributed/tensor/experimental/_attention.py (ring attention)",
    version="torch 2.11",
)
