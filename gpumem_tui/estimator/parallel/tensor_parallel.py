"""Tensor + sequence parallelism (Megatron; torch ``parallelize_module`` with
``ColwiseParallel`` / ``RowwiseParallel`` and ``SequenceParallel``).

Shoeybi et al. 2019 (arXiv 1909.08053) split each layer's weights over ``t`` ranks;
Korthikanti et al. 2022 (arXiv 2205.05198, eq. 5) divide every layer's activations by ``t``
with sequence parallelism. The estimator's ``tp`` rules (:mod:`..components`) apply.
"""

from gpumem_tui.estimator.parallel.description import Strategy

STRATEGY = Strategy(
    kind="tp",
    title="tensor + sequence parallel: layer weights and activations split over t ranks",
    source="Megatron-LM (arXiv 1909.08053, 2205.05198); torch/distributed/tensor/parallel/style.py",
    version="torch 2.11",
)
