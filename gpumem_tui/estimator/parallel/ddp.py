"""DDP (``torch.nn.parallel.DistributedDataParallel``), torch 2.11.

Read from ``torch/nn/parallel/distributed.py`` and ``torch/csrc/distributed/c10d/reducer.cpp``:
the ``Reducer`` groups parameters into buckets of ``bucket_cap_mb`` (25 MiB; the first bucket
1 MiB) and allocates one flat gradient tensor per bucket at construction -- together the size
of every trainable parameter's gradient, alive for the whole job. With
``gradient_as_bucket_view=False`` (default) each ``.grad`` is a separate tensor copied into its
bucket; with ``True`` the ``.grad`` are views of the buckets (no second copy, but they persist).
"""

from gpumem_tui.estimator.parallel.description import Strategy

#: ``bucket_cap_mb`` default (MiB)
BUCKET_CAP_MB = 25

STRATEGY = Strategy(
    kind="ddp",
    title="DDP: every rank a replica; flat gradient buckets (25 MiB each) for the all-reduce",
    source="torch/nn/parallel/distributed.py; torch/csrc/distributed/c10d/reducer.cpp (initialize_buckets)",
    version="torch 2.11",
    flat_grad_buckets=True,
)
