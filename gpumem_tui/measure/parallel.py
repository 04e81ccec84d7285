"""Parallel strategies for ``gpumem-tui measure --nproc N``: how each rank wraps the model.

torch only at call time (imports are inside the functions); the dataclass and the checks are
pure Python so the CLI can validate flags before torch loads.

Strategies (torch 2.13 APIs, all run on the CPU over gloo):

- ``fsdp2``: ``torch.distributed.fsdp.fully_shard`` on every transformer block (the classes in
  the model's ``_no_split_modules``, transformers' own list of blocks not to split), then on the
  root, each with ``reshard_after_forward``. Measured with ``FSDPMemTracker``.
- ``fsdp1``: ``FullyShardedDataParallel`` with ``ModuleWrapPolicy`` on the same block classes,
  ``sharding_strategy`` FULL_SHARD / SHARD_GRAD_OP / NO_SHARD, ``device_id=cpu`` (without it
  FSDP1 raises "FSDP needs a non-CPU accelerator device") and ``use_orig_params=False``
  (with True, MemTracker's gradient hooks fail: "post accumulate grad hooks cannot be
  registered on non-leaf tensors"). Measured with ``MemTracker``.
- ``ddp``: ``DistributedDataParallel(bucket_cap_mb, gradient_as_bucket_view)``, built inside
  the tracker so the reducer's gradient buckets are seen (tagged ``grad_buckets``).
- ``zero-redundancy``: ``torch.distributed.optim.ZeroRedundancyOptimizer`` (optimizer states
  partitioned by parameter over the ranks) over the same DDP model.
- ``tp``: DTensor tensor parallel, ``parallelize_module`` on a 1-D CPU mesh with
  ``ColwiseParallel`` on q/k/v and gate/up projections and ``RowwiseParallel`` on o and down
  projections (Megatron-LM's split, Shoeybi et al. 2019, arXiv 1909.08053); embeddings, norms
  and the LM head stay replicated. Llama-style blocks only (GPT-2's fused ``c_attn`` Conv1D
  cannot be split column-wise into whole heads). Every rank sees the same batch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from gpumem_tui.measure.runner import MeasureError, MeasureRequest

STRATEGIES = ("fsdp2", "fsdp1", "ddp", "zero-redundancy", "tp")
FSDP1_SHARDING = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD")
MAX_RANKS = 64

# Llama-style projection names -> tensor-parallel style (Megatron-LM column/row split)
_TP_COLWISE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
_TP_ROWWISE = ("self_attn.o_proj", "mlp.down_proj")


def max_ranks() -> int:
    """Most ranks ``measure`` will start: min(64, 4 x the CPU count)."""
    return min(MAX_RANKS, 4 * (os.cpu_count() or 1))


@dataclass(frozen=True)
class ParallelSpec:
    """How ``world_size`` ranks share the training step.

    Attributes:
        kind: one of :data:`STRATEGIES`.
        world_size: number of ranks N (1 .. :func:`max_ranks`).
        reshard_after_forward: fsdp2: free the gathered parameters after each block's forward
            (re-gathered in backward) [True].
        sharding_strategy: fsdp1: FULL_SHARD, SHARD_GRAD_OP or NO_SHARD [FULL_SHARD].
        bucket_cap_mb: ddp / zero-redundancy: DDP gradient bucket size in MiB [25, DDP's default].
        gradient_as_bucket_view: ddp / zero-redundancy: gradients are views into the buckets
            instead of separate tensors [False, DDP's default].
    """

    kind: str
    world_size: int
    reshard_after_forward: bool = True
    sharding_strategy: str = "FULL_SHARD"
    bucket_cap_mb: float = 25.0
    gradient_as_bucket_view: bool = False

    def to_json(self) -> dict[str, Any]:
        """``{"kind", "world_size", ...}`` with only the options that apply to ``kind``."""
        out: dict[str, Any] = {"kind": self.kind, "world_size": self.world_size}
        if self.kind == "fsdp2":
            out["reshard_after_forward"] = self.reshard_after_forward
        elif self.kind == "fsdp1":
            out["sharding_strategy"] = self.sharding_strategy
        elif self.kind in ("ddp", "zero-redundancy"):
            out["bucket_cap_mb"] = self.bucket_cap_mb
            out["gradient_as_bucket_view"] = self.gradient_as_bucket_view
        return out

    @property
    def tracker_name(self) -> str:
        """The torch tracker this strategy is measured with."""
        return "FSDPMemTracker" if self.kind == "fsdp2" else "MemTracker"


def validate_parallel(spec: ParallelSpec, req: MeasureRequest) -> None:
    """Raise ``MeasureError`` (one line, names the flag) for a strategy this runner cannot run.

    Checks: the strategy name, 1 <= N <= :func:`max_ranks`, ``--on cpu``, a training task,
    option values, LoRA only with ddp / zero-redundancy / fsdp2 (FSDP1 flattens frozen and
    trainable parameters together; the TP plan names the bare projections), and for tp that
    the attention and key/value heads divide by N.
    """
    if spec.kind not in STRATEGIES:
        raise MeasureError(f"--strategy {spec.kind!r}: one of {', '.join(STRATEGIES)}")
    limit = max_ranks()
    if isinstance(spec.world_size, bool) or not isinstance(spec.world_size, int) or not 1 <= spec.world_size <= limit:
        raise MeasureError(f"--nproc {spec.world_size!r}: this machine runs 1 to {limit} ranks "
                           f"(min({MAX_RANKS}, 4 x {os.cpu_count() or 1} CPUs))")
    if req.on != "cpu":
        raise MeasureError(f"--nproc runs the ranks on the real CPU over gloo: use --on cpu, not {req.on}")
    if req.task not in ("train", "lora"):
        raise MeasureError(f"--nproc measures training steps: task {req.task!r} is not supported")
    if spec.sharding_strategy not in FSDP1_SHARDING:
        raise MeasureError(f"--sharding-strategy {spec.sharding_strategy!r}: one of {', '.join(FSDP1_SHARDING)}")
    if not 0 < spec.bucket_cap_mb <= 1 << 16:
        raise MeasureError(f"--bucket-cap-mb must be > 0 and <= 65536, got {spec.bucket_cap_mb!r}")
    if req.task == "lora" and spec.kind in ("fsdp1", "tp"):
        raise MeasureError(f"--task lora with --strategy {spec.kind} is not supported (use ddp, zero-redundancy or fsdp2)")
    if spec.kind == "tp":
        cfg = req.config
        heads = cfg.get("num_attention_heads") or cfg.get("n_head")
        kv_heads = cfg.get("num_key_value_heads") or heads
        for name, value in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
            if not isinstance(value, int) or value % spec.world_size:
                raise MeasureError(f"--strategy tp: {name} ({value}) must divide by --nproc {spec.world_size}")


def transformer_blocks(model: Any) -> list[Any]:
    """The model's transformer blocks: modules whose class is in ``model._no_split_modules``
    (transformers' list of the blocks that hold a residual stream, e.g. LlamaDecoderLayer,
    GPT2Block). Raises ``MeasureError`` if there are none."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if not blocks:
        raise MeasureError(f"{type(model).__name__}: no transformer blocks found to wrap (no _no_split_modules)")
    return blocks


def wrap_before_tracker(model: Any, spec: ParallelSpec, torch: Any) -> Any:
    """Apply fsdp2 / fsdp1 / tp to ``model`` (before the tracker is entered: parameters are
    re-categorised when the tracker first sees them in a module's forward). ddp and
    zero-redundancy return ``model`` unchanged (see :func:`wrap_in_tracker`)."""
    if spec.kind == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for block in transformer_blocks(model):
            fully_shard(block, reshard_after_forward=spec.reshard_after_forward)
        fully_shard(model, reshard_after_forward=spec.reshard_after_forward)
        return model
    if spec.kind == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        classes = {type(b) for b in transformer_blocks(model)}
        return FullyShardedDataParallel(
            model, auto_wrap_policy=ModuleWrapPolicy(classes),
            sharding_strategy=getattr(ShardingStrategy, spec.sharding_strategy),
            device_id=torch.device("cpu"), use_orig_params=False,
        )
    if spec.kind == "tp":
        return _tensor_parallel(model, spec)
    return model


def _tensor_parallel(model: Any, spec: ParallelSpec) -> Any:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (spec.world_size,))
    for block in transformer_blocks(model):
        names = {name for name, _ in block.named_modules()}
        missing = [n for n in _TP_COLWISE + _TP_ROWWISE if n not in names]
        if missing:
            raise MeasureError(f"--strategy tp needs Llama-style projections; {type(block).__name__} lacks "
                               f"{', '.join(missing)}")
        plan: dict[str, Any] = {n: ColwiseParallel() for n in _TP_COLWISE}
        plan.update({n: RowwiseParallel() for n in _TP_ROWWISE})
        parallelize_module(block, mesh, plan)
    return model


def wrap_in_tracker(model: Any, spec: ParallelSpec, on_bucket: Callable[[Any], None] | None = None) -> Any:
    """ddp / zero-redundancy: wrap in ``DistributedDataParallel`` (call inside the tracker so
    the reducer's allocations are tracked); other strategies: ``model`` unchanged.

    DDP allocates its flat gradient buckets in C++ (and re-allocates them after the first
    iteration, when it rebuilds the buckets in the order gradients became ready), so they look
    like any new tensor to the tracker. With ``on_bucket`` a communication hook hands each
    bucket's flat buffer (``GradBucket.buffer()``) to ``on_bucket`` and then runs torch's
    ``default_hooks.allreduce_hook`` (divide by the world size, all-reduce: what DDP's built-in
    reduction does).
    """
    if spec.kind not in ("ddp", "zero-redundancy"):
        return model
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(model, bucket_cap_mb=spec.bucket_cap_mb,
                                  gradient_as_bucket_view=spec.gradient_as_bucket_view)
    if on_bucket is not None:
        # no annotations: DDP rejects a hook whose ``bucket`` annotation is not dist.GradBucket
        def tag_then_allreduce(state, bucket):  # type: ignore[no-untyped-def]
            on_bucket(bucket.buffer())
            return allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, tag_then_allreduce)
    return ddp


def make_optimizer(spec: ParallelSpec, req: MeasureRequest, params: list[Any], torch: Any) -> Any:
    """The optimizer ``req`` asks for; for zero-redundancy wrapped in
    ``ZeroRedundancyOptimizer(params, optimizer_class=...)`` with the same arguments (SGD and
    Adam/AdamW only: ZeroRedundancyOptimizer takes the class and its keyword arguments)."""
    from gpumem_tui.measure.runner import _make_optimizer

    if spec.kind != "zero-redundancy":
        return _make_optimizer(req, params, torch)
    from torch.distributed.optim import ZeroRedundancyOptimizer

    foreach = req.optimizer_impl == "foreach"
    fused = True if req.optimizer_impl == "fused" else None
    classes = {
        "adamw": (torch.optim.AdamW, {"lr": 1e-4, "foreach": foreach, "fused": fused}),
        "adam": (torch.optim.Adam, {"lr": 1e-4, "foreach": foreach, "fused": fused}),
        "sgd": (torch.optim.SGD, {"lr": 1e-4, "foreach": foreach}),
        "sgd-momentum": (torch.optim.SGD, {"lr": 1e-4, "momentum": 0.9, "foreach": foreach}),
    }
    if req.optimizer not in classes:
        raise MeasureError(f"--strategy zero-redundancy supports adamw, adam, sgd, sgd-momentum, not {req.optimizer}")
    cls, kwargs = classes[req.optimizer]
    return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kwargs)


def optimizer_state_tensors(optimizer: Any) -> list[Any]:
    """Every tensor in the optimizer's per-parameter state (ZeroRedundancyOptimizer: its local
    optimizer's, i.e. this rank's partition)."""
    inner = getattr(optimizer, "optim", optimizer)
    return [list(st.values()) for st in inner.state.values()]
