"""Read the parallel setup users already have: accelerate's YAML and DeepSpeed's JSON.

Both are untrusted files: size-limited reads (:mod:`gpumem_tui.support.safe_files`), every key
checked against the keys the projects document, every value checked; a malformed file, an
unknown key or a value the estimator cannot use raises :class:`ConfigFileError` naming the key
(one line, exit 2 in the CLI).

Sources: accelerate ``src/accelerate/commands/config/config_args.py`` (``ClusterConfig``) and
``utils/dataclasses.py`` (``FullyShardedDataParallelPlugin``: ``fsdp_sharding_strategy``
FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD | HYBRID_SHARD_ZERO2 or 1-5,
``fsdp_reshard_after_forward``, ``fsdp_version``, ``fsdp_offload_params``;
``DeepSpeedPlugin``: ``zero_stage``, ``offload_optimizer_device``, ``offload_param_device``,
``deepspeed_config_file``), accelerate 1.10; DeepSpeed ``deepspeed/runtime/config.py`` and
``runtime/zero/config.py`` (0.16) for the JSON; ``"auto"`` values as transformers fills them
(``integrations/deepspeed.py``, ``HfTrainerDeepSpeedConfig``: ``reduce_bucket_size`` = h^2,
``stage3_prefetch_bucket_size`` = 0.9 h^2; batch and accumulation from the job's flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumem_tui.estimator.parallel.description import ParallelPlan

_LIMIT = 1 << 20

_ACCELERATE_TOP = {
    "compute_environment", "debug", "distributed_type", "downcast_bf16", "enable_cpu_affinity", "fsdp_config",
    "deepspeed_config", "machine_rank", "main_process_ip", "main_process_port", "main_training_function",
    "megatron_lm_config", "mixed_precision", "num_machines", "num_processes", "rdzv_backend", "same_network",
    "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "tpu_name", "tpu_zone", "use_cpu", "gpu_ids", "dynamo_config",
    "ipex_config", "mpirun_config", "parallelism_config", "fp8_config", "commands", "command_file", "dynamo_backend",
}
_FSDP_KEYS = {
    "fsdp_activation_checkpointing", "fsdp_auto_wrap_policy", "fsdp_backward_prefetch", "fsdp_backward_prefetch_policy",
    "fsdp_cpu_ram_efficient_loading", "fsdp_forward_prefetch", "fsdp_min_num_params", "fsdp_offload_params",
    "fsdp_reshard_after_forward", "fsdp_sharding_strategy", "fsdp_state_dict_type", "fsdp_sync_module_states",
    "fsdp_transformer_layer_cls_to_wrap", "fsdp_use_orig_params", "fsdp_version",
}
_ACC_DS_KEYS = {
    "deepspeed_config_file", "deepspeed_hostfile", "deepspeed_multinode_launcher", "gradient_accumulation_steps",
    "gradient_clipping", "offload_optimizer_device", "offload_param_device", "offload_optimizer_nvme_path",
    "offload_param_nvme_path", "zero3_init_flag", "zero3_save_16bit_model", "zero_stage",
    "deepspeed_moe_layer_cls_names",
}
_SHARDING = {"FULL_SHARD": "full", "SHARD_GRAD_OP": "grad-op", "NO_SHARD": "none", "HYBRID_SHARD": "hybrid",
             "HYBRID_SHARD_ZERO2": "hybrid-grad-op", 1: "full", 2: "grad-op", 3: "none", 4: "hybrid", 5: "hybrid-grad-op"}
_DS_TOP = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping", "fp16",
    "bf16", "zero_optimization", "optimizer", "scheduler", "steps_per_print", "wall_clock_breakdown",
    "activation_checkpointing", "zero_allow_untested_optimizer", "communication_data_type", "prescale_gradients",
    "gradient_predivide_factor", "sparse_gradients", "amp", "flops_profiler", "tensorboard", "wandb", "csv_monitor",
    "comms_logger", "data_types", "checkpoint", "elasticity", "aio", "zero_force_ds_cpu_optimizer", "memory_breakdown",
    "dump_state", "seq_parallel_communication_data_type", "torch_autocast", "compile", "monitor_config",
}
_ZERO_KEYS = {
    "stage", "offload_optimizer", "offload_param", "overlap_comm", "contiguous_gradients", "reduce_bucket_size",
    "allgather_bucket_size", "allgather_partitions", "reduce_scatter", "stage3_max_live_parameters",
    "stage3_max_reuse_distance", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
    "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save", "sub_group_size",
    "round_robin_gradients", "cpu_offload", "load_from_fp32_weights", "elastic_checkpoint", "ignore_unused_parameters",
    "legacy_stage1", "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients", "mics_shard_size",
    "mics_hierarchical_params_gather", "memory_efficient_linear", "use_multi_rank_bucket_allreduce",
    "stage3_module_granularity_threshold", "log_trace_cache_warnings", "pipeline_loading_checkpoint",
    "override_module_apply",
}


class ConfigFileError(ValueError):
    """A parallel config file that cannot be used; ``key`` names the offending key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class JobConfig:
    """What a config file says: the plan, and the spec fields it sets (``None``: not set;
    ``batch`` / ``grad_accum`` / ``dtype`` / ``mixed_precision``)."""

    plan: ParallelPlan
    spec_fields: dict[str, Any]


def _read_text(path: str) -> str:
    from gpumem_tui.support.safe_files import read_bytes

    try:
        return read_bytes(Path(path).expanduser(), _LIMIT).decode("utf-8")
    except FileNotFoundError:
        raise ConfigFileError("file", f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigFileError("file", f"cannot read {path}: {exc}") from None


def _check_keys(table: Any, known: set[str], where: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigFileError(where, f"{where} must be a mapping, got {type(table).__name__}")
    for key in table:
        if key not in known:
            raise ConfigFileError(str(key), f"unknown key {where}.{key}" if where else f"unknown key {key}")
    return table


def _count(value: Any, key: str, default: int, auto: int | None = None) -> int:
    """An element / rank count: an int, a float such as 5e8, or ``"auto"`` (-> ``auto``)."""
    if value is None:
        return default
    if value == "auto":
        return default if auto is None else auto
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or not 0 <= value <= 1 << 44:
        raise ConfigFileError(key, f"{key} must be a non-negative whole number or \"auto\", got {value!r}")
    return int(value)


def _flag(value: Any, key: str, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ConfigFileError(key, f"{key} must be true or false, got {value!r}")
    return value


def _device(value: Any, key: str) -> bool:
    """``offload_*_device``: True for cpu / nvme, False for none."""
    if value in (None, "none"):
        return False
    if value in ("cpu", "nvme"):
        return True
    raise ConfigFileError(key, f"{key} must be none, cpu or nvme, got {value!r}")
