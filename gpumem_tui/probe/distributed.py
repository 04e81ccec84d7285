"""What the probe reads of a distributed job: this rank's place and the model's parallel state.

Read in the live job, on the objects the training script built (torch only; nothing here
imports DeepSpeed, bitsandbytes or any other library the job may not have). Every reader
returns plain JSON values and never raises: a job is never stopped because the probe could
not describe it.

Sources read (torch 2.13 unless said):

- rank / world size: ``torch.distributed.is_initialized`` / ``get_rank`` / ``get_world_size``
  (torch/distributed/distributed_c10d.py); else the launcher's environment, as torchrun sets
  it (torch/distributed/run.py, torch/distributed/elastic/agent/server/api.py: ``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``TORCHELASTIC_RUN_ID``, ``MASTER_ADDR``, ``MASTER_PORT``).
- FSDP2 (``fully_shard``): ``FSDPModule._get_fsdp_state()._fsdp_param_groups``, each group's
  ``mesh_info`` (``FSDPMeshInfo.shard_mesh_size``, ``HSDPMeshInfo.replicate_mesh_size``),
  ``post_forward_mesh_info`` (None: no resharding after forward), ``mp_policy``
  (``MixedPrecisionPolicy.param_dtype`` / ``reduce_dtype``) and ``offload_policy``
  (``CPUOffloadPolicy``) -- torch/distributed/fsdp/_fully_shard/_fully_shard.py,
  _fsdp_state.py, _fsdp_param_group.py, _fsdp_common.py, _fsdp_api.py.
- FSDP1: ``FullyShardedDataParallel.sharding_strategy`` (``ShardingStrategy``),
  ``mixed_precision``, ``cpu_offload``, ``world_size`` (the shard group's size) --
  torch/distributed/fsdp/_init_utils.py (``_init_core_state``); the original parameters' numels
  of a ``FlatParameter`` (``_numels``, torch/distributed/fsdp/_flat_param.py).
- DDP: ``DistributedDataParallel.bucket_bytes_cap``, ``gradient_as_bucket_view``
  (torch/nn/parallel/distributed.py); ``ZeroRedundancyOptimizer`` by its class
  (torch/distributed/optim/zero_redundancy_optimizer.py).
- DTensor parameters (tensor parallel): ``placements`` and ``device_mesh``
  (torch/distributed/tensor/_api.py); a ``Shard`` placement on a mesh dimension of size t
  splits the parameter t ways.
- DeepSpeed: a class named ``DeepSpeedEngine`` in the model's MRO, asked
  ``zero_optimization_stage()``, ``zero_offload_optimizer()``, ``zero_offload_param()``
  (deepspeed/runtime/engine.py) -- by name, without importing deepspeed.

The published ``parallel`` dict uses the estimator's strategy names
(:data:`gpumem_tui.estimator.parallel.description.KINDS`) and ParallelPlan's option names.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

from gpumem_tui.support.text import printable

#: most ranks a value may claim (the estimator's ParallelPlan limit)
MAX_WORLD = 1 << 20
_MAX_JOB_ID = 128
#: FSDP1 ShardingStrategy name -> ParallelPlan.sharding (torch/distributed/fsdp/api.py)
FSDP1_SHARDING = {"FULL_SHARD": "full", "SHARD_GRAD_OP": "grad-op", "NO_SHARD": "none",
                  "HYBRID_SHARD": "hybrid", "_HYBRID_SHARD_ZERO2": "hybrid-grad-op"}
_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _env_int(environ: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    """``environ[name]`` as an int in ``low..high``, else None (absent, not an int, out of range)."""
    raw = environ.get(name)
    if not isinstance(raw, str) or len(raw) > 12:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        return None
    return value if low <= value <= high else None


def job_id(environ: Mapping[str, str]) -> str | None:
    """The job's identity shared by its ranks: ``TORCHELASTIC_RUN_ID`` unless unset or torchrun's
    default ``"none"``; else ``"MASTER_ADDR:MASTER_PORT"`` when both are set; else None.
    Printable, at most 128 characters."""
    run_id = environ.get("TORCHELASTIC_RUN_ID")
    if isinstance(run_id, str) and run_id.strip() and run_id.strip().lower() != "none":
        return printable(run_id.strip(), limit=_MAX_JOB_ID)
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    if isinstance(addr, str) and addr.strip() and _env_int(environ, "MASTER_PORT", 1, 65535) is not None:
        return printable(f"{addr.strip()}:{str(port).strip()}", limit=_MAX_JOB_ID)
    return None


def rank_setup(torch: Any, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``{"rank", "world_size", "local_rank"[, "job_id"]}`` of this process, or ``{}`` when it
    is not part of a distributed job.

    torch.distributed, when initialized, gives rank and world size; else the environment's
    ``RANK`` / ``WORLD_SIZE`` (both valid: ``0 <= RANK < WORLD_SIZE <= 2**20``). ``LOCAL_RANK``
    is used when valid (``0 <= LOCAL_RANK < WORLD_SIZE``), else the rank (one node). Published
    when torch.distributed is initialized or the environment names a world size > 1.
    Invalid environment values are ignored, never raised.
    """
    environ = os.environ if environ is None else environ
    rank = world = None
    initialized = False
    with contextlib.suppress(Exception):
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            rank, world, initialized = int(dist.get_rank()), int(dist.get_world_size()), True
    if not initialized:
        world = _env_int(environ, "WORLD_SIZE", 1, MAX_WORLD)
        rank = _env_int(environ, "RANK", 0, MAX_WORLD - 1)
        if world is None or rank is None or rank >= world or world == 1:
            return {}
    if world is None or rank is None or not 1 <= world <= MAX_WORLD or not 0 <= rank < world:
        return {}
    local = _env_int(environ, "LOCAL_RANK", 0, world - 1)
    out: dict[str, Any] = {"rank": rank, "world_size": world, "local_rank": rank if local is None else local}
    ident = job_id(environ)
    if ident is not None:
        out["job_id"] = ident
    return out


def _dtype(value: Any) -> str | None:
    name = str(value).removeprefix("torch.") if value is not None else None
    return _DTYPES.get(name) if name else None


def _fsdp2_groups(module: Any) -> list[Any]:
    state = module._get_fsdp_state()
    groups = list(getattr(state, "_fsdp_param_groups", None) or ())
    if not groups:
        group = getattr(state, "_fsdp_param_group", None)
        groups = [group] if group is not None else []
    return groups


def _fsdp2(model: Any, units: list[Any]) -> dict[str, Any]:
    """The ``parallel`` dict of a model sharded with ``fully_shard`` (``units``: its FSDPModules)."""
    found: list[tuple[bool, Any]] = []  # (is the root, param group)
    for unit in units:
        for group in _fsdp2_groups(unit):
            found.append((unit is model, group))
    if not found:
        return {"strategy": "fsdp2", "units": len(units)}
    blocks = [g for root, g in found if not root] or [g for _, g in found]
    group = blocks[0]
    mesh = group.mesh_info
    shard = int(getattr(mesh, "shard_mesh_size", 1))
    replicate = int(getattr(mesh, "replicate_mesh_size", 1) or 1)
    out: dict[str, Any] = {
        "strategy": "fsdp2", "units": len(units), "shard_degree": shard, "replicate_degree": replicate,
        "world_size": shard * replicate, "sharding": "hybrid" if replicate > 1 else "full",
        # torch's rule: the root is not resharded after forward; the blocks decide
        "reshard_after_forward": all(g.post_forward_mesh_info is not None for g in blocks),
        "offload_params": type(getattr(group, "offload_policy", None)).__name__ == "CPUOffloadPolicy",
    }
    policy = getattr(group, "mp_policy", None)
    for key in ("param_dtype", "reduce_dtype"):
        name = _dtype(getattr(policy, key, None))
        if name is not None:
            out[key] = name
    return out


def _fsdp1(root: Any) -> dict[str, Any]:
    """The ``parallel`` dict of an FSDP1 root (``FullyShardedDataParallel``)."""
    strategy = getattr(getattr(root, "sharding_strategy", None), "name", None)
    out: dict[str, Any] = {"strategy": "fsdp1", "sharding_strategy": str(strategy)}
    if strategy in FSDP1_SHARDING:
        out["sharding"] = FSDP1_SHARDING[strategy]
    shard = getattr(root, "world_size", None)
    if isinstance(shard, int) and shard >= 1:
        out["shard_degree"] = shard
    mp = getattr(root, "mixed_precision", None)
    for key in ("param_dtype", "reduce_dtype"):
        name = _dtype(getattr(mp, key, None))
        if name is not None:
            out[key] = name
    out["offload_params"] = bool(getattr(getattr(root, "cpu_offload", None), "offload_params", False))
    return out


def _ddp(wrapper: Any, optimizer: Any) -> dict[str, Any]:
    zero = any(c.__name__ == "ZeroRedundancyOptimizer" for c in type(optimizer).__mro__) if optimizer is not None else False
    out: dict[str, Any] = {"strategy": "zero-redundancy" if zero else "ddp",
                           "gradient_as_bucket_view": bool(getattr(wrapper, "gradient_as_bucket_view", False))}
    cap = getattr(wrapper, "bucket_bytes_cap", None)
    if isinstance(cap, int) and cap > 0:
        out["bucket_cap_bytes"] = cap
    return out


def _deepspeed(engine: Any) -> dict[str, Any]:
    """A DeepSpeedEngine's ZeRO stage and offloads, asked through its own methods."""
    out: dict[str, Any] = {"strategy": "deepspeed"}
    with contextlib.suppress(Exception):
        stage = engine.zero_optimization_stage()
        if isinstance(stage, int) and 0 <= stage <= 3:
            out["zero_stage"] = int(stage)
    for key, ask in (("offload_optimizer", "zero_offload_optimizer"), ("offload_params", "zero_offload_param")):
        with contextlib.suppress(Exception):
            out[key] = _offloaded(getattr(engine, ask)())
    return out


def _offloaded(config: Any) -> bool:
    """A DeepSpeed offload config (None: no offload) sends the states to the CPU or NVMe
    (``device``: an ``OffloadDeviceEnum`` whose ``value`` is "cpu" / "nvme" / "none")."""
    if config is None:
        return False
    device = getattr(config, "device", None)
    return str(getattr(device, "value", device)) in ("cpu", "nvme")


def tensor_parallel_degree(params: list[Any], torch: Any, skip_dims: int = 0) -> int:
    """The largest mesh-dimension size over which a DTensor parameter is ``Shard``-placed
    (1: no DTensor parameter, or all replicated). ``skip_dims``: leading mesh dimensions that
    belong to FSDP (its data-parallel shard), not to tensor parallelism."""
    try:
        from torch.distributed.tensor import DTensor, Shard
    except Exception:  # noqa: BLE001 - a torch without distributed
        return 1
    degree = 1
    for param in params:
        if not isinstance(param, DTensor):
            continue
        with contextlib.suppress(Exception):
            mesh = param.device_mesh
            for dim, placement in enumerate(param.placements):
                if dim >= skip_dims and isinstance(placement, Shard):
                    degree = max(degree, int(mesh.size(dim)))
    return degree


def unwrap(model: Any) -> Any:
    """The user's model inside DDP, FSDP1 or a DeepSpeed engine (their ``.module``), at most
    4 levels; FSDP2 and checkpoint wrappers keep the model's own class or are found inside."""
    for _ in range(4):
        names = {c.__name__ for c in type(model).__mro__}
        if not names & {"DistributedDataParallel", "FullyShardedDataParallel", "DeepSpeedEngine"}:
            break
        inner = getattr(model, "module", None)
        if inner is None or inner is model:
            break
        model = inner
    return model


def local_optimizer(optimizer: Any) -> Any:
    """The optimizer that holds this rank's states: a ``ZeroRedundancyOptimizer``'s local
    ``optim`` (built from its ``optimizer_class``; torch/distributed/optim/zero_redundancy_optimizer.py),
    else ``optimizer`` itself."""
    if type(optimizer).__name__ == "ZeroRedundancyOptimizer":
        inner = getattr(optimizer, "optim", None)
        if inner is not None and inner is not optimizer:
            return inner
    return optimizer


def original_class_name(model: Any) -> str:
    """The class the user built: FSDP2 makes ``FSDP<Class>`` (``FSDPModule._orig_cls_mro_index``)."""
    cls = type(model)
    index = getattr(cls, "_orig_cls_mro_index", None)
    if any(c.__name__ == "FSDPModule" for c in cls.__mro__) and isinstance(index, int) and index < len(cls.__mro__):
        return cls.__mro__[index].__name__
    return cls.__name__


def logical_param_count(params: list[Any]) -> int:
    """Parameters of the model as built: FSDP1's flat parameters count their original
    parameters' numels (``_numels``), not this rank's padded shard; DTensors their global size."""
    total = 0
    for param in params:
        numels = getattr(param, "_numels", None)
        if isinstance(numels, (tuple, list)) and getattr(param, "_is_flat_param", False):
            total += sum(int(n) for n in numels)
        else:
            total += int(param.numel())
    return total


def parallel_setup(model: Any, optimizer: Any, torch: Any, world_size: int | None) -> dict[str, Any] | None:
    """The ``parallel`` setup dict of ``model`` (the object given to the probe) or None when no
    parallel wrapper or sharded parameter is seen. Keys: ``strategy`` (an estimator kind), and
    as they apply ``world_size``, ``sharding``, ``shard_degree``, ``replicate_degree``,
    ``reshard_after_forward``, ``param_dtype`` / ``reduce_dtype`` (fp32|bf16|fp16),
    ``offload_params``, ``offload_optimizer``, ``zero_stage``, ``bucket_cap_bytes``,
    ``gradient_as_bucket_view``, ``tp``, ``units``. Never raises."""
    try:
        return _parallel_setup(model, optimizer, torch, world_size)
    except Exception:  # noqa: BLE001 - an exotic wrapper must not stop the job
        return None


def _parallel_setup(model: Any, optimizer: Any, torch: Any, world_size: int | None) -> dict[str, Any] | None:
    names = {c.__name__ for c in type(model).__mro__}
    if "DeepSpeedEngine" in names:
        out = _deepspeed(model)
    else:
        modules = list(model.modules())
        fsdp2 = [m for m in modules if any(c.__name__ == "FSDPModule" for c in type(m).__mro__)
                 and callable(getattr(m, "_get_fsdp_state", None))]
        fsdp1 = [m for m in modules if type(m).__name__ == "FullyShardedDataParallel"]
        ddp = [m for m in modules if type(m).__name__ == "DistributedDataParallel"]
        if fsdp2:
            out = _fsdp2(model, fsdp2)
        elif fsdp1:
            out = _fsdp1(fsdp1[0])
        elif ddp:
            out = _ddp(ddp[0], optimizer)
        else:
            out = None
        skip = 1 if out is not None and out["strategy"] == "fsdp2" else 0
        tp = tensor_parallel_degree(list(model.parameters()), torch, skip_dims=skip)
        if tp > 1:
            out = out if out is not None else {"strategy": "tp"}
            out["tp"] = tp
    if out is None:
        return None
    if world_size is not None and "world_size" not in out:
        out["world_size"] = world_size
    return out


__all__ = ["job_id", "local_optimizer", "logical_param_count", "original_class_name", "parallel_setup", "rank_setup",
           "tensor_parallel_degree", "unwrap"]
