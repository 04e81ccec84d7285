"""The two readers of :mod:`.configs`: accelerate YAML -> plan, DeepSpeed JSON -> plan."""

from __future__ import annotations

from typing import Any

from gpumem_tui.estimator.parallel.configs import (
    _ACC_DS_KEYS, _ACCELERATE_TOP, _DS_TOP, _FSDP_KEYS, _SHARDING, _ZERO_KEYS, ConfigFileError, JobConfig, _check_keys,
    _count, _device, _flag, _read_text,
)
from gpumem_tui.estimator.parallel.description import ParallelPlan

_MP = {"no": None, "fp16": "fp16", "bf16": "bf16"}


def read_deepspeed(path: str, world_size: int | None, hidden: int) -> JobConfig:
    """A DeepSpeed JSON config -> plan (ZeRO stage, buckets, offload) and spec fields
    (micro-batch, accumulation, 16-bit mode). ``world_size`` from the launcher (flags or the
    accelerate YAML); else from ``train_batch_size / (micro x accumulation)``.

    Raises:
        ConfigFileError: malformed JSON, an unknown key, a bad value, no way to know the world size.
    """
    from gpumem_tui.support.safe_files import loads_json

    try:
        cfg = loads_json(_read_text(path))
    except ValueError as exc:
        raise ConfigFileError("file", f"{path}: not valid JSON ({exc})") from None
    return deepspeed_from_dict(cfg, world_size, hidden, source=path)


def _ds_precision(cfg: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("fp16", "bf16"):
        table = cfg.get(key)
        if table is None:
            continue
        if not isinstance(table, dict):
            raise ConfigFileError(key, f"{key} must be an object")
        enabled = table.get("enabled", False)
        if enabled == "auto":
            continue
        if _flag(enabled, f"{key}.enabled", False):
            out.update(dtype=key, mixed_precision=True)
    return out


def deepspeed_from_dict(cfg: Any, world_size: int | None, hidden: int, source: str = "deepspeed config") -> JobConfig:
    """:func:`read_deepspeed` on an already parsed object (also accelerate's inline form)."""
    cfg = _check_keys(cfg, _DS_TOP, "")
    zero = _check_keys(cfg.get("zero_optimization", {}), _ZERO_KEYS, "zero_optimization")
    stage = _count(zero.get("stage"), "zero_optimization.stage", 0)
    if stage > 3:
        raise ConfigFileError("zero_optimization.stage", f"zero_optimization.stage must be 0..3, got {stage}")
    off_opt = _check_keys(zero.get("offload_optimizer", {}) or {}, {"device", "pin_memory", "nvme_path", "buffer_count",
                                                                    "fast_init", "ratio", "pipeline_read", "pipeline_write"},
                          "zero_optimization.offload_optimizer")
    off_par = _check_keys(zero.get("offload_param", {}) or {}, {"device", "pin_memory", "nvme_path", "buffer_count",
                                                                "buffer_size", "max_in_cpu"}, "zero_optimization.offload_param")
    fields: dict[str, Any] = _ds_precision(cfg)
    micro = cfg.get("train_micro_batch_size_per_gpu")
    accum = cfg.get("gradient_accumulation_steps")
    if micro not in (None, "auto"):
        fields["batch"] = _count(micro, "train_micro_batch_size_per_gpu", 1)
    if accum not in (None, "auto"):
        fields["grad_accum"] = _count(accum, "gradient_accumulation_steps", 1)
    total = cfg.get("train_batch_size")
    if world_size is None and total not in (None, "auto") and "batch" in fields:
        world_size = _count(total, "train_batch_size", 1) // (fields["batch"] * fields.get("grad_accum", 1))
    if not world_size:
        raise ConfigFileError("train_batch_size", "the DeepSpeed config does not say how many ranks: give --world-size")
    plan = ParallelPlan(
        kind="deepspeed", world_size=world_size, zero_stage=stage,
        offload_optimizer=_device(off_opt.get("device"), "zero_optimization.offload_optimizer.device"),
        offload_params=_device(off_par.get("device"), "zero_optimization.offload_param.device"),
        reduce_bucket=_count(zero.get("reduce_bucket_size"), "zero_optimization.reduce_bucket_size", 500_000_000, hidden * hidden),
        allgather_bucket=_count(zero.get("allgather_bucket_size"), "zero_optimization.allgather_bucket_size", 500_000_000),
        max_live_params=_count(zero.get("stage3_max_live_parameters"), "zero_optimization.stage3_max_live_parameters",
                               1_000_000_000),
        prefetch_bucket=_count(zero.get("stage3_prefetch_bucket_size"), "zero_optimization.stage3_prefetch_bucket_size",
                               50_000_000, int(0.9 * hidden * hidden)),
        overlap_comm=_flag(zero.get("overlap_comm"), "zero_optimization.overlap_comm", False),
        contiguous_gradients=_flag(zero.get("contiguous_gradients"), "zero_optimization.contiguous_gradients", True),
        source=source,
    )
    return JobConfig(plan, fields)


def _fsdp_plan(fsdp: dict[str, Any], world: int, machines: int, source: str) -> ParallelPlan:
    version = _count(fsdp.get("fsdp_version"), "fsdp_config.fsdp_version", 1)
    if version not in (1, 2):
        raise ConfigFileError("fsdp_version", f"fsdp_config.fsdp_version must be 1 or 2, got {version}")
    raw = fsdp.get("fsdp_sharding_strategy", "FULL_SHARD")
    reshard = fsdp.get("fsdp_reshard_after_forward")
    if isinstance(reshard, str) and reshard in _SHARDING:  # accelerate >= 1.6 spells FSDP1's strategy here
        raw, reshard = reshard, None
    if raw not in _SHARDING:
        raise ConfigFileError("fsdp_sharding_strategy", f"fsdp_config.fsdp_sharding_strategy {raw!r} unknown "
                              "(FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2)")
    sharding = _SHARDING[raw]
    hybrid = sharding.startswith("hybrid")
    return ParallelPlan(
        kind=f"fsdp{version}", world_size=world, sharding=sharding,
        shard_group=world // machines if hybrid and machines > 1 else None,
        reshard_after_forward=_flag(reshard, "fsdp_config.fsdp_reshard_after_forward", True),
        use_orig_params=_flag(fsdp.get("fsdp_use_orig_params"), "fsdp_config.fsdp_use_orig_params", False),
        offload_params=_flag(fsdp.get("fsdp_offload_params"), "fsdp_config.fsdp_offload_params", False), source=source)


def read_accelerate(path: str, hidden: int) -> JobConfig:
    """An accelerate config YAML -> plan and spec fields (16-bit mode from ``mixed_precision``).

    Raises:
        ConfigFileError: malformed YAML, an unknown key, a bad value, an unmodelled
            ``distributed_type`` (the message names the key).
    """
    import yaml

    try:
        cfg = yaml.safe_load(_read_text(path))
    except yaml.YAMLError as exc:
        raise ConfigFileError("file", f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    cfg = _check_keys(cfg, _ACCELERATE_TOP, "")
    world = _count(cfg.get("num_processes"), "num_processes", 1)
    if world < 1:
        raise ConfigFileError("num_processes", f"num_processes must be >= 1, got {world}")
    machines = max(1, _count(cfg.get("num_machines"), "num_machines", 1))
    mp = cfg.get("mixed_precision", "no")
    if mp not in _MP:
        raise ConfigFileError("mixed_precision", f"mixed_precision must be no, fp16 or bf16, got {mp!r}")
    fields: dict[str, Any] = {"dtype": _MP[mp], "mixed_precision": True} if _MP[mp] else {}
    kind = cfg.get("distributed_type", "NO")
    if kind == "FSDP":
        plan = _fsdp_plan(_check_keys(cfg.get("fsdp_config", {}), _FSDP_KEYS, "fsdp_config"), world, machines, path)
    elif kind == "DEEPSPEED":
        return _accelerate_deepspeed(cfg, world, hidden, fields, path)
    elif kind in ("MULTI_GPU", "NO"):
        plan = ParallelPlan(kind="ddp", world_size=world, source=path)
    else:
        raise ConfigFileError("distributed_type", f"distributed_type {kind!r} is not modelled (FSDP, DEEPSPEED, MULTI_GPU, NO)")
    return JobConfig(plan, fields)


def _accelerate_deepspeed(cfg: dict[str, Any], world: int, hidden: int, fields: dict[str, Any], path: str) -> JobConfig:
    ds = _check_keys(cfg.get("deepspeed_config", {}), _ACC_DS_KEYS, "deepspeed_config")
    if ds.get("deepspeed_config_file"):
        inner = read_deepspeed(str(ds["deepspeed_config_file"]), world, hidden)
        return JobConfig(inner.plan, {**fields, **inner.spec_fields})
    zero = {"stage": ds.get("zero_stage", 2),
            "offload_optimizer": {"device": ds.get("offload_optimizer_device", "none")},
            "offload_param": {"device": ds.get("offload_param_device", "none")}}
    out = deepspeed_from_dict({"zero_optimization": zero}, world, hidden, source=path)
    accum = ds.get("gradient_accumulation_steps")
    extra = {"grad_accum": _count(accum, "gradient_accumulation_steps", 1)} if accum not in (None, "auto") else {}
    return JobConfig(out.plan, {**fields, **extra})


_FSDP1_SHARDING = {"FULL_SHARD": "full", "SHARD_GRAD_OP": "grad-op", "NO_SHARD": "none", "HYBRID_SHARD": "hybrid"}


def plan_from_measure(strategy: Any) -> ParallelPlan:
    """The plan of a ``gpumem-tui measure --nproc N`` result's ``strategy`` object
    (``{"kind", "world_size", ...options}``: ``reshard_after_forward`` for fsdp2,
    ``sharding_strategy`` for fsdp1, ``gradient_as_bucket_view`` for ddp / zero-redundancy).

    Raises:
        ConfigFileError: not an object, an unknown kind or option value (names the key).
    """
    if not isinstance(strategy, dict):
        raise ConfigFileError("strategy", "strategy must be an object")
    kind = strategy.get("kind")
    world = _count(strategy.get("world_size"), "world_size", 1)
    if kind == "tp":
        return ParallelPlan("tp", world, tp=world, source="measure")
    if kind == "fsdp2":
        return ParallelPlan(kind, world, source="measure", reshard_after_forward=_flag(
            strategy.get("reshard_after_forward"), "reshard_after_forward", True))
    if kind == "fsdp1":
        sharding = strategy.get("sharding_strategy", "FULL_SHARD")
        if sharding not in _FSDP1_SHARDING:
            raise ConfigFileError("sharding_strategy", f"sharding_strategy {sharding!r} unknown")
        return ParallelPlan(kind, world, sharding=_FSDP1_SHARDING[sharding], source="measure")
    if kind in ("ddp", "zero-redundancy"):
        return ParallelPlan(kind, world, source="measure", grad_as_bucket_view=_flag(
            strategy.get("gradient_as_bucket_view"), "gradient_as_bucket_view", False))
    raise ConfigFileError("kind", f"strategy kind {kind!r} unknown")
