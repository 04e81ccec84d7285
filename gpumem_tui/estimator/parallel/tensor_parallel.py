"""Tensor parallelism, two layouts (``ParallelPlan.sequence_parallel``).

- Default: torch DTensor ``parallelize_module`` with ``ColwiseParallel`` / ``RowwiseParallel``
  on the layer Linears (Shoeybi et al. 2019, arXiv 1909.08053), norms, embeddings and the LM
  head replicated (:mod:`.tp_rules`; measured to the byte on the CPU, ``tests/data/ranks``).
- ``--sequence-parallel``: Megatron's tensor + sequence parallelism with a vocabulary-parallel
  head: every layer's activations divided by ``t`` (Korthikanti et al. 2022, arXiv
  2205.05198, eq. 5), the estimator's ``--tp`` rules (:mod:`..components`).
"""

from gpumem_tui.estimator.parallel.description import Strategy

STRATEGY = Strategy(
    kind="tp",
    title="tensor parallel: layer Linears and their attention / MLP regions split over t ranks",
    source="Megatron-LM (arXiv 1909.08053, 2205.05198); torch/distributed/tensor/parallel/style.py",
    version="torch 2.11",
)
