"""The strategy interface: what one rank of a parallel job holds and when (data).

A :class:`Strategy` describes a parallel library's behaviour (frozen; one module per strategy
cites the source it was read from); a :class:`ParallelPlan` is one job's choice of strategy,
degrees and options (from flags, an accelerate YAML or a DeepSpeed JSON).
:mod:`gpumem_tui.estimator.parallel.per_rank` is the one mechanism that turns both, with the
spec, into per-rank phases and peaks.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("fsdp2", "fsdp1", "ddp", "zero-redundancy", "deepspeed", "tp", "pp", "cp")
SHARDING = ("full", "grad-op", "hybrid", "hybrid-grad-op", "none")


@dataclass(frozen=True, slots=True)
class Strategy:
    """What a rank of this strategy holds beyond its shard of the model states (frozen).

    Fields:
        kind, title, source, version: name, one line, the library file(s) read and version.
        shards_states: ZeRO-style sharding of optimizer states / gradients / parameters applies.
        gathered_forward_end: unsharded layer units (beyond those kept) at the end of forward,
            when the loss runs (FSDP2: the copy-in all-gather buffer of the last unit).
        gathered_layer_forward: units unsharded while a layer runs forward (the running one
            and the prefetched next).
        gathered_loss_backward: units unsharded while the loss and the LM head run backward
            (the last layer, prefetched for backward).
        gathered_layer_backward: units unsharded while a layer runs backward (it and the
            prefetched next).
        root_stays_gathered: the root unit (embeddings, final norm, LM head) is not resharded
            after forward (FSDP's heuristic), so it stays unsharded from forward to backward.
        flat_grad_buckets: gradients are copied into flat all-reduce buckets that exist for the
            whole job (DDP's ``Reducer``), unless they are bucket views.
        bucketed_collectives: DeepSpeed-style fixed-size reduce / all-gather buckets.
        notes: assumptions the estimate lists.
    """

    kind: str
    title: str
    source: str
    version: str
    shards_states: bool = False
    gathered_forward_end: int = 0
    gathered_layer_forward: int = 0
    gathered_loss_backward: int = 0
    gathered_layer_backward: int = 0
    root_stays_gathered: bool = False
    flat_grad_buckets: bool = False
    bucketed_collectives: bool = False
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ParallelPlan:
    """One job's parallel layout and options (bytes and element counts as named).

    ``world_size``: ranks; ``sharding``: full | grad-op | hybrid | hybrid-grad-op | none
    (FSDP / ZeRO-3, SHARD_GRAD_OP / ZeRO-2, HYBRID_SHARD, _HYBRID_SHARD_ZERO2, NO_SHARD);
    ``zero_stage``: DeepSpeed / ZeroRedundancyOptimizer stage; ``shard_group``: ranks one shard
    spans (hybrid: the ranks of a node); ``reshard_after_forward``; ``use_orig_params``: FSDP1
    steps the original parameters instead of one flat parameter per unit (torch's and
    accelerate's default: False); ``offload_params`` /
    ``offload_optimizer``: kept on the CPU; DeepSpeed buckets in elements:
    ``reduce_bucket``, ``allgather_bucket``, ``max_live_params``, ``prefetch_bucket``,
    ``overlap_comm``, ``contiguous_gradients``; DDP ``grad_as_bucket_view``; ``tp``, ``pp``,
    ``cp`` degrees; ``sequence_parallel``: tensor parallelism with sequence parallelism and a
    vocabulary-parallel head (Megatron; the estimator's ``--tp`` rules) rather than torch
    DTensor's Colwise/Rowwise split with replicated norms, embeddings and head
    (:mod:`.tp_rules`); ``source``: where the plan was read (flags, a file).
    """

    kind: str
    world_size: int
    sharding: str = "full"
    zero_stage: int = 0
    shard_group: int | None = None
    reshard_after_forward: bool = True
    use_orig_params: bool = False
    offload_params: bool = False
    offload_optimizer: bool = False
    reduce_bucket: int = 500_000_000
    allgather_bucket: int = 500_000_000
    max_live_params: int = 1_000_000_000
    prefetch_bucket: int = 50_000_000
    overlap_comm: bool = False
    contiguous_gradients: bool = True
    grad_as_bucket_view: bool = False
    tp: int = 1
    pp: int = 1
    cp: int = 1
    sequence_parallel: bool = False
    source: str = "flags"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown parallel strategy {self.kind!r} (choose from {', '.join(KINDS)})")
        if self.sharding not in SHARDING:
            raise ValueError(f"unknown sharding {self.sharding!r} (choose from {', '.join(SHARDING)})")
        for name in ("world_size", "tp", "pp", "cp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 20:
                raise ValueError(f"{name} must be an integer 1..{1 << 20}, got {value!r}")
        if not 0 <= self.zero_stage <= 3:
            raise ValueError(f"ZeRO stage must be 0..3, got {self.zero_stage!r}")
        if self.shard_group is not None and (self.shard_group < 1 or self.world_size % self.shard_group):
            raise ValueError(f"shard group {self.shard_group} must divide the world size {self.world_size}")
        for name in ("reduce_bucket", "allgather_bucket", "max_live_params", "prefetch_bucket"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 44:
                raise ValueError(f"{name} must be a non-negative element count, got {value!r}")

    @property
    def data_parallel(self) -> int:
        """Ranks that hold replicas (or shards) of the same model piece: world / (t p cp)."""
        return max(1, self.world_size // (self.tp * self.pp * self.cp))

    @property
    def shard_degree(self) -> int:
        """Ranks one shard of the model states spans (``d`` of ZeRO's ``1/d``)."""
        if self.shard_group is not None:
            return self.shard_group
        return self.data_parallel
