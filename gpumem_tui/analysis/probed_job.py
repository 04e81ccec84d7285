"""What a probed process said about its job, checked and turned into estimator inputs.

The probe (:mod:`gpumem_tui.probe.job_setup`) publishes, in its setup: ``rank``,
``world_size``, ``local_rank``, ``job_id``; ``parallel`` (``strategy`` and its degrees and
options); ``grad_ckpt`` / ``checkpoint_impl`` / ``checkpointed_layers`` /
``checkpoint_every_layer`` / ``checkpoint_impl_mixed``; ``quantized_linears``; ``fp32_cast``;
``use_cache``. The stream is another process's file: every value is untrusted.
:func:`read_probed_job` checks each (types, ranges, known names) and returns the
:class:`~gpumem_tui.estimator.parallel.ParallelPlan` of the job, the TrainingSpec fields to
set, and one assumption line for each thing the probe could not see or that was not usable.
It never raises. Headless: no torch, no Textual.

Mappings (the estimator's names): the strategy names of
:data:`gpumem_tui.estimator.parallel.description.KINDS`; FSDP sharding as
:func:`gpumem_tui.estimator.parallel.configs_read.plan_from_measure` reads a measured job
(FSDP2 ``reshard_after_forward`` kept as the plan's option; FSDP1 ``ShardingStrategy`` to
full / grad-op / none / hybrid / hybrid-grad-op); HSDP's shard degree as the plan's
``shard_group``; an FSDP ``MixedPrecisionPolicy.param_dtype`` of 16 bits over fp32
parameters as the spec's ``mixed_precision`` with that compute dtype; quantized Linears as
:class:`~gpumem_tui.estimator.quantization.QuantFormat`; fp32 casts of k-bit preparation over a
quantized model as the ``peft-kbit`` recipe (:mod:`gpumem_tui.estimator.recipes.peft_kbit`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpumem_tui.support.text import printable

_MAX_WORLD = 1 << 20
_KEYS_CONSUMED = ("checkpoint_impl",)  # TrainingSpec fields the probe sends that are checked here
_FSDP1_SHARDING = {"FULL_SHARD": "full", "SHARD_GRAD_OP": "grad-op", "NO_SHARD": "none",
                   "HYBRID_SHARD": "hybrid", "_HYBRID_SHARD_ZERO2": "hybrid-grad-op"}
_SIXTEEN = ("bf16", "fp16")
_FP32 = ("fp32", "float32", "torch.float32", "float")


@dataclass(frozen=True)
class ProbedJob:
    """The checked job facts of one probed process.

    Attributes:
        rank, world_size, local_rank: ints, or None when not published or not valid.
        job_id: the ranks' shared job identity (printable, <= 128 characters), or None.
        plan: the parallel plan (None: one device, or not usable: see ``assumptions``).
        spec_fields: TrainingSpec fields to set (``dtype``, ``mixed_precision``,
            ``checkpoint_impl``, ``quant``, ``quant_format``, ``recipe``).
        setup: the setup without the keys checked here that TrainingSpec would read raw.
        assumptions: one line each, what the estimate assumes that the probe did not see.
    """

    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    job_id: str | None = None
    plan: Any = None
    spec_fields: dict[str, Any] = field(default_factory=dict)
    setup: dict[str, Any] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()


def _int(value: object, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def _show(value: object) -> str:
    return printable(repr(value), limit=40)


def _ranks(setup: Mapping[str, Any], notes: list[str]) -> tuple[int | None, int | None, int | None, str | None]:
    world = _int(setup.get("world_size"), 1, _MAX_WORLD)
    rank = _int(setup.get("rank"), 0, _MAX_WORLD - 1)
    local = _int(setup.get("local_rank"), 0, _MAX_WORLD - 1)
    if "world_size" in setup and world is None:
        notes.append(f"the probe's world_size {_show(setup.get('world_size'))} is not a rank count: ignored")
    if world is not None and rank is not None and rank >= world:
        notes.append(f"the probe's rank {rank} is not below its world_size {world}: rank ignored")
        rank = None
    elif "rank" in setup and rank is None:
        notes.append(f"the probe's rank {_show(setup.get('rank'))} is not a rank: ignored")
    if local is not None and world is not None and local >= world:
        local = None
    ident = setup.get("job_id")
    job = printable(ident, limit=128) if isinstance(ident, str) and ident.strip() else None
    return rank, world, local, job


def _flag(options: Mapping[str, Any], key: str, default: bool) -> bool:
    value = options.get(key, default)
    return value if isinstance(value, bool) else default


def _plan_kwargs(kind: str, options: Mapping[str, Any], world: int, notes: list[str]) -> dict[str, Any] | None:
    """ParallelPlan keyword arguments for ``kind`` from the probe's ``parallel`` options."""
    from gpumem_tui.estimator.parallel.description import SHARDING

    kwargs: dict[str, Any] = {"kind": kind, "world_size": world, "source": "probe"}
    if kind in ("fsdp1", "fsdp2"):
        sharding = options.get("sharding")
        if sharding is None and kind == "fsdp1":
            sharding = _FSDP1_SHARDING.get(str(options.get("sharding_strategy")))
        if sharding is None:
            sharding = "full"
        if sharding not in SHARDING:
            notes.append(f"the probe's {kind} sharding {_show(sharding)} is unknown: estimated as full sharding")
            sharding = "full"
        kwargs["sharding"] = sharding
        shard = _int(options.get("shard_degree"), 1, world)
        if sharding.startswith("hybrid") and shard is not None and world % shard == 0:
            kwargs["shard_group"] = shard
        kwargs["reshard_after_forward"] = _flag(options, "reshard_after_forward", True)
        kwargs["offload_params"] = _flag(options, "offload_params", False)
    elif kind in ("ddp", "zero-redundancy"):
        kwargs["grad_as_bucket_view"] = _flag(options, "gradient_as_bucket_view", False)
    elif kind == "deepspeed":
        stage = _int(options.get("zero_stage"), 0, 3)
        if stage is None:
            notes.append("the probe saw a DeepSpeed engine but not its ZeRO stage: estimated as one device's")
            return None
        kwargs.update(zero_stage=stage, offload_params=_flag(options, "offload_params", False),
                      offload_optimizer=_flag(options, "offload_optimizer", False))
    tp = _int(options.get("tp"), 1, world)
    if tp is not None and tp > 1:
        if world % tp:
            notes.append(f"the probe's tensor-parallel degree {tp} does not divide its {world} ranks: tp ignored")
        else:
            kwargs["tp"] = tp
    elif kind == "tp":
        kwargs["tp"] = world
    return kwargs


def _plan(setup: Mapping[str, Any], world: int | None, notes: list[str]) -> Any:
    """The job's ParallelPlan, or None (one device, or not usable: a note says why)."""
    from gpumem_tui.estimator.parallel import ParallelPlan
    from gpumem_tui.estimator.parallel.description import KINDS

    options = setup.get("parallel")
    if options is None:
        if world is not None and world > 1:
            notes.append(f"the probe saw {world} ranks but no parallel wrapper on the model it was given "
                         "(attach the probe to the wrapped model): estimated as one device's memory")
        return None
    if not isinstance(options, Mapping):
        notes.append("the probe's parallel setup is not an object: estimated as one device's memory")
        return None
    kind = options.get("strategy")
    if kind not in KINDS:
        notes.append(f"parallel strategy {_show(kind)} is not one the estimator models "
                     f"({', '.join(KINDS)}): estimated as one device's memory")
        return None
    ranks = _int(options.get("world_size"), 1, _MAX_WORLD) or world
    if ranks is None:
        notes.append(f"the probe saw {kind} but no world size: estimated as one device's memory")
        return None
    kwargs = _plan_kwargs(str(kind), options, ranks, notes)
    if kwargs is None:
        return None
    try:
        return ParallelPlan(**kwargs)
    except (TypeError, ValueError) as exc:
        notes.append(f"the probe's {kind} setup is not usable ({printable(str(exc), limit=120)}): "
                     "estimated as one device's memory")
        return None


def _precision(setup: Mapping[str, Any], fields: dict[str, Any]) -> None:
    """FSDP's MixedPrecisionPolicy.param_dtype (16-bit) over fp32 parameters: mixed precision."""
    options = setup.get("parallel")
    param = options.get("param_dtype") if isinstance(options, Mapping) else None
    dtype = str(setup.get("dtype", "")).lower()
    if param in _SIXTEEN and dtype in _FP32:
        fields.update(dtype=param, mixed_precision=True)


def _checkpointing(setup: Mapping[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    impl = setup.get("checkpoint_impl")
    if impl in ("reentrant", "non-reentrant"):
        fields["checkpoint_impl"] = impl
    elif impl is not None:
        notes.append(f"the probe's checkpoint flavour {_show(impl)} is unknown: the recipe's flavour is assumed")
    if setup.get("checkpoint_impl_mixed") is True:
        notes.append(f"layers checkpoint with both flavours; estimated as {fields.get('checkpoint_impl', 'the recipe')}'s")
    if setup.get("checkpoint_every_layer") is False:
        count = _int(setup.get("checkpointed_layers"), 1, 1 << 20)
        notes.append(f"only {count if count else 'some'} layers are checkpointed; the estimate checkpoints every layer")


def _quant_format(linears: Mapping[str, Any]) -> Any:
    """The QuantFormat of the probe's ``quantized_linears`` (raises ValueError / TypeError)."""
    from gpumem_tui.estimator.quantization import QuantFormat

    method = linears.get("method")
    if method in ("nf4", "fp4"):
        storage = _int(linears.get("storage_bytes", 1), 1, 4)
        compute = linears.get("compute_dtype")
        return QuantFormat(method, double_quant=linears.get("double_quant") is True, storage_bytes=storage or 1,
                           compute_dtype=compute if compute in ("fp32", "bf16", "fp16") else None)
    if method == "int8":
        return QuantFormat("int8", bits=8)
    if method in ("gptq", "awq"):
        bits = linears.get("bits")
        group = linears.get("group_size")
        if bits not in ((2, 3, 4, 8) if method == "gptq" else (4,)) or isinstance(bits, bool):
            raise ValueError(f"{method} bits {_show(bits)} cannot be sized")
        if isinstance(group, bool) or not isinstance(group, int) or not (group == -1 or 1 <= group <= 1 << 20):
            raise ValueError(f"{method} group_size {_show(group)} cannot be sized")
        return QuantFormat(method, bits=bits, group_size=group)
    raise ValueError(f"quantization {_show(method)} is not one the estimator sizes")


def _quantization(setup: Mapping[str, Any], fields: dict[str, Any], notes: list[str]) -> None:
    linears = setup.get("quantized_linears")
    if linears is None:
        return
    if not isinstance(linears, Mapping):
        notes.append("the probe's quantized_linears is not an object: ignored")
        return
    try:
        fmt = _quant_format(linears)
    except (TypeError, ValueError) as exc:
        notes.append(f"the probe saw quantized Linears but {printable(str(exc), limit=100)}: counted as unquantized")
        return
    task = setup.get("task", "train")
    usable = task == "inference" or (task == "qlora" and fmt.method != "int8") or (task == "lora" and fmt.method == "int8")
    if not usable:
        notes.append(f"the model has {fmt.method} quantized Linears but the task is {_show(task)} "
                     "(attach with task='qlora' or 'lora'): they are counted unquantized")
        return
    fields.update(quant=fmt.method, quant_format=fmt)
    cast = setup.get("fp32_cast")
    if isinstance(cast, Mapping) and task != "inference":
        recipe = setup.get("recipe")
        if recipe is None:
            fields["recipe"] = "peft-kbit"
        elif recipe != "peft-kbit":
            notes.append(f"non-quantized parameters were cast to fp32 (k-bit preparation) but recipe {_show(recipe)} "
                         "does not cast them")


def rank_estimate(arch: Any, spec: Any, plan: Any) -> Any:
    """The :class:`~gpumem_tui.estimator.parallel.per_rank.RankEstimate` of one probed rank of
    ``plan`` (per-rank bytes): the job's only rank role, or its largest (data-parallel ranks
    are alike; a pipeline's stage is not published). The dashboard's comparison and the
    estimator pane's what-ifs of a probed rank both use it.

    Raises:
        ValueError: the estimator rejects the spec or the plan (SpecError, ArchitectureError).
    """
    from gpumem_tui.estimator.parallel.per_rank import estimate_job

    ranked = estimate_job(arch, spec, plan)
    return ranked.ranks[0] if len(ranked.ranks) == 1 else ranked.largest


def read_probed_job(setup: Mapping[str, Any]) -> ProbedJob:
    """Check a probe's published ``setup`` (see the module docstring). Never raises."""
    if not isinstance(setup, Mapping):
        return ProbedJob(assumptions=("the probe's setup is not an object",))
    notes: list[str] = []
    try:
        rank, world, local, job = _ranks(setup, notes)
        plan = _plan(setup, world, notes)
        fields: dict[str, Any] = {}
        _precision(setup, fields)
        _checkpointing(setup, fields, notes)
        _quantization(setup, fields, notes)
        flag = setup.get("use_cache")
        if flag is not None and not isinstance(flag, bool) and str(flag).strip().lower() not in ("true", "false"):
            notes.append(f"the probe's use_cache {_show(flag)} is not true/false: the config's use_cache applies")
    except Exception as exc:  # noqa: BLE001 - a setup shape nobody foresaw must not stop the estimate
        return ProbedJob(setup={k: v for k, v in setup.items() if k not in _KEYS_CONSUMED},
                         assumptions=(f"the probe's job setup was not readable ({printable(str(exc), limit=80)})",))
    cleaned = {k: v for k, v in setup.items() if k not in _KEYS_CONSUMED}
    return ProbedJob(rank, world, local, job, plan, fields, cleaned, tuple(notes))


__all__ = ["ProbedJob", "rank_estimate", "read_probed_job"]
