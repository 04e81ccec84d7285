"""Pipeline parallelism with the 1F1B schedule (``torch.distributed.pipelining.Schedule1F1B``,
Megatron's non-interleaved schedule).

Narayanan et al. 2021 (arXiv 2104.04473, Sec. 2.2.1): with ``p`` stages, stage ``i`` (0-based)
holds the activations of ``p - i`` in-flight micro-batches at the end of its warm-up, each of
its ``L / p`` layers, so stage 0 holds ``p`` micro-batches' worth -- as much as one rank
running all ``L`` layers for one micro-batch (Korthikanti et al. 2022, Sec. 4.2.3); the last
stage holds one micro-batch plus the LM head and the logits.
"""

from gpumem_tui.estimator.parallel.description import Strategy

STRATEGY = Strategy(
    kind="pp",
    title="pipeline parallel 1F1B: stage 0 holds p micro-batches in flight",
    source="torch/distributed/pipelining/schedules.py (Schedule1F1B); arXiv 2104.04473 Sec. 2.2.1",
    version="torch 2.11",
)
