"""The one mechanism that turns a spec and a :class:`ParallelPlan` into per-rank estimates.

1. The plan's degrees go into the spec (ZeRO stage and shard degree ``d``, ``t``, ``p``,
   ``s / cp``), so the single-device rules shard the model states first-order (ZeRO paper,
   Rajbhandari et al. 2020, arXiv 1910.02054: stage 1 optimizer states, 2 + gradients,
   3 + parameters, each ``1/d``).
2. The strategy description (:mod:`.description`) adds what a rank holds beyond its shard
   at each moment of the step (``estimate(..., moment_extra=...)``): the root unit FSDP keeps
   unsharded, the layers gathered at that moment (the running one, the prefetched next, or
   all of them without resharding), DeepSpeed's fixed-size buckets and gathered parameters,
   ring-attention shards; then DDP's flat gradient buckets (every phase) and CPU offload
   (the offloaded states leave the device).
3. The peak is the largest phase again, per distinct rank role: data-parallel ranks are
   alike; with pipeline parallelism stage 0 and the last stage differ (:func:`_stage_arches`).

Checked against ``gpumem-tui measure --nproc 2|4 --on cpu`` (torch 2.13, FSDPMemTracker /
MemTracker; ``tests/data/ranks``, tiny Llama and GPT-2): DDP, ZeroRedundancyOptimizer, FSDP2
with and without resharding, FSDP1 FULL_SHARD, SHARD_GRAD_OP and NO_SHARD, DTensor tensor
parallel within 0.02 % per rank at the peak (30 cases) and in every phase (forward, backward,
optimizer step; against the largest rank in that phase).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

from gpumem_tui.estimator import components as C
from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.estimate import COMPONENT_KEYS, Estimate, Phase, estimate
from gpumem_tui.estimator.parallel import STRATEGIES
from gpumem_tui.estimator.devices import profile_for
from gpumem_tui.estimator.parallel.description import ParallelPlan, Strategy
from gpumem_tui.estimator.parallel.fsdp1 import flat_parameter_elements, flat_single_tensor_adam_bytes
from gpumem_tui.estimator.parallel.tp_rules import dtensor_tp_extra
from gpumem_tui.estimator.parallel.zero_redundancy import largest_partition, largest_partition_fraction
from gpumem_tui.estimator.spec import TrainingSpec


@dataclass(frozen=True)
class RankEstimate:
    """One rank role: ``ranks`` ranks that each hold ``estimate`` (bytes; the peak is per rank)."""

    role: str
    ranks: int
    estimate: Estimate

    def to_json(self) -> dict[str, Any]:
        est = self.estimate
        return {"role": self.role, "ranks": self.ranks, "peak_bytes": int(est.peak_bytes), "peak_phase": est.peak_phase,
                "allocated_peak_bytes": int(est.allocated_peak_bytes),
                "components_bytes": {k: int(est.components_bytes.get(k, 0)) for k in COMPONENT_KEYS}}


@dataclass(frozen=True)
class JobEstimate:
    """Per-rank estimates of a parallel job; ``largest`` is the rank with the highest peak."""

    plan: ParallelPlan
    strategy: Strategy
    ranks: tuple[RankEstimate, ...]

    @property
    def largest(self) -> RankEstimate:
        return max(self.ranks, key=lambda r: r.estimate.peak_bytes)


def rank_spec(spec: TrainingSpec, plan: ParallelPlan) -> TrainingSpec:
    """The single-device spec of one rank: the plan's ZeRO stage, shard degree, ``t``, ``p``
    and the sequence split of context parallelism. Non-DeepSpeed strategies keep the torch
    optimizer the recipe / device would build (the spec's ``auto`` means DeepSpeed's fused
    Adam once ZeRO is set)."""
    # FSDP shards parameters at rest in every sharded mode (SHARD_GRAD_OP only keeps them
    # unsharded from forward to backward: the per-moment extras), unlike DeepSpeed's ZeRO-2
    stage = 0 if plan.sharding == "none" else 3
    stage = {"deepspeed": plan.zero_stage, "zero-redundancy": 1, "ddp": 0}.get(plan.kind, stage)
    if plan.kind in ("tp", "pp", "cp"):
        stage = spec.zero
    impl = spec.optimizer_impl if plan.kind == "deepspeed" else spec.resolved_optimizer_impl
    tp = plan.tp if plan.sequence_parallel else 1  # DTensor's split: per-moment reductions (tp_rules)
    return spec.replace(zero=stage if spec.task != "inference" or stage in (0, 3) else 0,
                        dp=plan.shard_degree if stage else plan.data_parallel, tp=tp, pp=plan.pp,
                        seq=math.ceil(spec.seq / plan.cp), optimizer_impl=impl)


def _unit_elements(arch: ModelArchitecture, spec: TrainingSpec) -> tuple[float, float]:
    """Elements of one layer unit on this rank (after tensor parallelism) and of the root
    unit (embeddings, final norm, LM head)."""
    parts = arch.param_breakdown()
    layer = parts["layers"] / max(1, arch.num_layers) / spec.tp
    return layer, parts["embeddings"] + parts["final_norm"] + parts["head"]


#: moment labels of :func:`gpumem_tui.estimator.estimate._training_moments` by where the step is
_LOSS_BACKWARD = ("log-softmax backward", "LM head backward", "final norm backward")
_LAYER_BACKWARD = ("last layer backward", "first layer backward")

Extra = Callable[[str, str], dict[str, float]]


def _fsdp_extra(arch: ModelArchitecture, spec: TrainingSpec, plan: ParallelPlan, s: Strategy) -> Extra:
    """FSDP1 / FSDP2 per moment: the root unit kept unsharded and the units gathered at that
    moment (the strategy's counts); with ``grad-op`` sharding (no reshard after forward) every
    layer stays unsharded from its forward to its backward. The running layer's unsharded
    gradients (the reduce-scatter input) are already in the single-device walk of a layer's
    backward (``components.layer_backward_excess``: its weight gradients, not sharded)."""
    if plan.sharding == "none":
        return lambda phase, label: {}
    pb = C.precision(spec).compute  # MixedPrecisionPolicy.param_dtype (the compute dtype)
    layer, root = _unit_elements(arch, spec)
    kept = arch.num_layers if plan.sharding in ("grad-op", "hybrid-grad-op") or not plan.reshard_after_forward else 0
    root_b = root * pb if s.root_stays_gathered else 0

    def extra(phase: str, label: str) -> dict[str, float]:
        if phase == "forward":
            units = s.gathered_forward_end if label == "end of forward" else s.gathered_layer_forward
            return {"parameters": root_b + max(kept, units if not kept else kept + s.gathered_forward_end) * layer * pb}
        if label in _LOSS_BACKWARD:
            return {"parameters": root_b + max(kept, s.gathered_loss_backward) * layer * pb}
        if label in _LAYER_BACKWARD:
            return {"parameters": root_b + max(kept, s.gathered_layer_backward) * layer * pb}
        return {"parameters": root_b} if phase == "backward" else {}
    return extra


def _deepspeed_extra(arch: ModelArchitecture, spec: TrainingSpec, plan: ParallelPlan) -> Extra:
    """DeepSpeed: stage 1/2 allocate the ``ipg`` reduce buffer(s) in backward; stage 3 its
    reduce bucket at initialisation and gathers up to ``stage3_max_live_parameters``
    (the running unit and ``stage3_prefetch_bucket_size`` prefetched) in forward and backward."""
    prec = C.precision(spec)
    if spec.task == "inference" or plan.zero_stage == 0:
        return lambda phase, label: {}
    if plan.zero_stage < 3:
        buffers = (2 if plan.overlap_comm else 1) * plan.reduce_bucket * prec.grad if plan.contiguous_gradients else 0
        return lambda phase, label: {"gradients": buffers} if phase == "backward" else {}
    layer, _root = _unit_elements(arch, spec)
    parts = arch.param_breakdown()
    unit = max(layer, parts["embeddings"], parts["head"])
    gathered = min(plan.max_live_params, unit + plan.prefetch_bucket) * prec.compute
    bucket = plan.reduce_bucket * prec.grad
    return lambda phase, label: ({"gradients": bucket} if phase == "optimizer_step"
                                 else {"parameters": gathered, "gradients": bucket})


def _ring_extra(arch: ModelArchitecture, spec: TrainingSpec, plan: ParallelPlan) -> Extra:
    """Context parallel ring attention while a layer runs: one more ``(k, v)`` shard in flight
    (forward), and their gradients too (backward); ``spec`` already holds ``s / cp``."""
    if plan.cp == 1:
        return lambda phase, label: {}
    kv = 2 * spec.batch * spec.seq * arch.kv_dim * C.precision(spec).compute / spec.tp
    return lambda phase, label: ({"activations": 2 * kv} if label in _LAYER_BACKWARD
                                 else {"activations": kv} if label == "checkpointed layer forward" else {})


def _extras(arch: ModelArchitecture, spec: TrainingSpec, plan: ParallelPlan, s: Strategy) -> Extra:
    if plan.kind in ("fsdp1", "fsdp2"):
        own = _fsdp_extra(arch, spec, plan, s)
    elif plan.kind == "deepspeed":
        own = _deepspeed_extra(arch, spec, plan)
    else:
        own = _ring_extra(arch, spec, plan)
    if plan.tp == 1 or plan.sequence_parallel:
        return own
    split = dtensor_tp_extra(arch, spec, plan.tp)

    def both(phase: str, label: str) -> dict[str, float]:
        out = dict(own(phase, label))
        for key, value in split(phase, label).items():
            out[key] = out.get(key, 0) + value
        return out
    return both


def _plus(extra: Extra, key: str, value: float) -> Extra:
    """``extra`` with ``value`` bytes more of component ``key`` at every moment."""
    def out(phase: str, label: str) -> dict[str, float]:
        parts = dict(extra(phase, label))
        parts[key] = parts.get(key, 0) + value
        return parts
    return out


def _flat_parameter_step(arch: ModelArchitecture, spec: TrainingSpec, plan: ParallelPlan, extra: Extra) -> Extra:
    """FSDP1 with ``use_orig_params=False``: the optimizer steps one flat parameter per unit
    (:func:`.fsdp1.flat_parameter_elements`), not the model's tensors. Adam / AdamW then keep
    ``2 x`` the padded flat shards and one CPU ``step`` tensor per flat parameter, and the
    single-tensor step's temporaries follow the flat sizes
    (:func:`.fsdp1.flat_single_tensor_adam_bytes`); ``extra`` gains the differences from the
    single-device rules (states at every moment, temporaries in the optimizer step)."""
    if spec.task != "train" or spec.optimizer not in ("adam", "adamw"):
        return extra
    state = C.precision(spec).state
    units = flat_parameter_elements(arch, spec, plan.shard_degree if plan.sharding != "none" else 1)
    states = 2 * sum(units) * state + (4 * len(units) if profile_for(spec.device).optimizer_step_tensors else 0)
    extra = _plus(extra, "optimizer_states", states - C.optimizer_state_bytes(arch, spec))
    if spec.resolved_optimizer_impl != "single":
        return extra
    return _at_step(extra, flat_single_tensor_adam_bytes(units, state) - C.optimizer_intermediate_bytes(arch, spec))


def _sharded_tensor_step(arch: ModelArchitecture, spec: TrainingSpec, plan: ParallelPlan, extra: Extra) -> Extra:
    """FSDP2 (``fully_shard``): every parameter is a DTensor sharded on dim 0 over ``d`` ranks
    and the optimizer steps the local shards (``torch/distributed/fsdp/_fully_shard/
    _fsdp_param.py``, ``Shard(0)``; rank 0 holds ``ceil(dim0 / d)`` rows). torch's
    single-tensor Adam / AdamW keeps two temporaries the size of the parameter being stepped
    (``torch/optim/adam.py``, ``_single_tensor_adam``), so the optimizer step holds
    ``2 x`` the largest local shard, not ``2 x`` the largest whole tensor."""
    if (spec.task != "train" or spec.optimizer not in ("adam", "adamw") or spec.resolved_optimizer_impl != "single"
            or plan.sharding == "none"):
        return extra
    d = plan.shard_degree
    rows = arch.vocab_size  # the largest tensor's first dimension: the (V, h) embedding, or a Linear's d_out
    largest = arch.largest_param_elements
    if largest != arch.vocab_size * arch.embed_width:
        # a Linear's weight is (d_out, d_in); a MoE layer's experts one (E, ...) tensor
        rows = next(((lin.count if lin.count > 1 else lin.d_out) for lin in arch.layer_linears()
                     if lin.count * lin.d_in * lin.d_out == largest), d)
    shard = math.ceil(rows / d) * (largest // max(1, rows))
    return _at_step(extra, 2 * shard * C.precision(spec).state - C.optimizer_intermediate_bytes(arch, spec))


def _at_step(extra: Extra, value: float) -> Extra:
    """``extra`` with ``value`` bytes more optimizer temporaries in the optimizer step."""
    def out(phase: str, label: str) -> dict[str, float]:
        parts = dict(extra(phase, label))
        if phase == "optimizer_step":
            parts["optimizer_intermediates"] = parts.get("optimizer_intermediates", 0) + value
        return parts
    return out


def _offloaded(arch: ModelArchitecture, spec: TrainingSpec, plan: ParallelPlan) -> dict[str, int]:
    """Bytes per component CPU offload keeps off the device: the rank's shard of the
    parameters (FSDP ``CPUOffload``, DeepSpeed ``offload_param``), of the gradients (FSDP),
    and the optimizer states and step (FSDP, DeepSpeed ``offload_optimizer``); the units
    gathered for compute stay on the device."""
    big = 1 << 62  # all of it
    out: dict[str, int] = {}
    fsdp = plan.kind in ("fsdp1", "fsdp2") and plan.offload_params
    if fsdp or plan.offload_optimizer:
        out.update(optimizer_states=big, optimizer_intermediates=big)
    if fsdp or (plan.offload_params and plan.zero_stage == 3):
        out["parameters"] = C.parameter_bytes(arch, spec)
    if fsdp:
        out["gradients"] = C.gradient_bytes(arch, spec)
    return out


def _adjust(est: Estimate, buckets: float, views: bool, offloaded: dict[str, int]) -> Estimate:
    """``est`` with DDP's buckets (every phase) and CPU offload (``offloaded``: bytes per
    component that live on the CPU instead) applied, the peak taken again."""
    phases = []
    for p in est.phases:
        parts = dict(p.components)
        if buckets:
            parts["gradients"] = int(buckets) if views else parts["gradients"] + int(buckets)
        for key, moved in offloaded.items():
            parts[key] = max(0, parts[key] - moved)
        phases.append(Phase(p.name, sum(parts.values()), parts))
    peak = max(phases, key=lambda p: p.live_bytes)
    outside = peak.components["cuda_context"] + peak.components["allocator_reserve"]
    return replace(est, components_bytes=dict(peak.components), peak_bytes=peak.live_bytes, peak_phase=peak.name,
                   phases=tuple(phases), allocated_peak_bytes=peak.live_bytes - outside)


def _stage_arches(arch: ModelArchitecture, p: int) -> tuple[ModelArchitecture, ModelArchitecture]:
    """The model pieces of pipeline stage 0 and of the last stage (1F1B, ``p`` stages).

    Stage 0: the embeddings and ``L / p`` layers, no final norm and no LM head; with the spec's
    ``pp = p`` the estimator counts ``p`` micro-batches of ``L / p`` layers' activations, i.e.
    ``L`` layers' worth (Narayanan et al. 2021, Sec. 2.2.1). The last stage: ``L / p`` layers
    for one micro-batch, the LM head and the logits; it is estimated as a model of ``L / p``
    layers on one device, so it also counts the token embedding (what Megatron keeps there
    for a tied head; an over-count for an untied one)."""
    layers = max(1, math.ceil(arch.num_layers / p))
    last = replace(arch, num_layers=layers, dense_layers=0,
                   sliding_layers=math.ceil(arch.sliding_layers * layers / max(1, arch.num_layers)))
    return replace(arch.with_head("none"), final_norm=False), last


def _roles(arch: ModelArchitecture, rs: TrainingSpec, plan: ParallelPlan, simulate: bool,
           extra: Extra) -> list[tuple[str, int, Estimate]]:
    """(role, ranks, single-device estimate) per distinct rank role."""
    if plan.pp == 1 or arch.coarse:
        role = "every rank" if plan.pp == 1 else "every stage (upper bound: stage 0's micro-batches and the head)"
        return [(role, plan.world_size, estimate(arch, rs, simulate_allocator=simulate, moment_extra=extra))]
    first, last = _stage_arches(arch, plan.pp)
    per_stage = plan.world_size // plan.pp
    roles = [("stage 0 (p micro-batches in flight; middle stages hold fewer)", per_stage * (plan.pp - 1),
              estimate(first, rs, simulate_allocator=simulate, moment_extra=extra)),
             (f"stage {plan.pp - 1} (last: LM head and logits)", per_stage,
              estimate(last, rs.replace(pp=1), simulate_allocator=simulate, moment_extra=extra))]
    return roles


def estimate_job(arch: ModelArchitecture, spec: TrainingSpec, plan: ParallelPlan, *,
                 simulate_allocator: bool = False) -> JobEstimate:
    """Per-rank estimates of ``spec`` run with ``plan`` (bytes per rank). The allocator reserve
    is the analytic share by default: the simulated allocation order
    (:mod:`gpumem_tui.estimator.devices.cuda_step_events`) is one device's step, without a
    rank's all-gathers and buckets (``simulate_allocator=True`` replays it anyway). Pipeline stages 1 .. p-2 are given
    stage 0's figure (they hold fewer micro-batches: an upper bound).

    Raises:
        SpecError: the plan's degrees contradict the model (e.g. ``t`` not dividing the heads).
    """
    strategy = STRATEGIES[plan.kind]
    rs = rank_spec(spec, plan)
    extras = _extras(arch, rs, plan, strategy)
    buckets = 0.0
    if strategy.flat_grad_buckets and spec.task != "inference":
        buckets = C.trainable_params(arch, rs) * C.precision(rs).grad / (rs.tp * rs.pp)
    notes = (f"parallel: {strategy.title} ({plan.world_size} ranks, from {plan.source}; read from {strategy.source}, "
             f"{strategy.version})",) + strategy.notes
    if plan.kind == "zero-redundancy" and spec.task == "train" and not arch.coarse:
        # the most loaded rank's optimizer: whole tensors per rank, not an even 1/d
        share = largest_partition_fraction(arch, plan.data_parallel) * plan.data_parallel
        extras = _plus(extras, "optimizer_states", C.optimizer_state_bytes(arch, rs) * (share - 1))
        if rs.optimizer in ("adam", "adamw") and rs.resolved_optimizer_impl == "single":
            # that rank's single-tensor step over its own tensors (largest first)
            step_tmp = flat_single_tensor_adam_bytes(largest_partition(arch, plan.data_parallel), C.precision(rs).state)
            extras = _at_step(extras, step_tmp - C.optimizer_intermediate_bytes(arch, rs))
    if plan.kind == "fsdp1" and not plan.use_orig_params and not arch.coarse and plan.pp == 1:
        extras = _flat_parameter_step(arch, rs, plan, extras)
    elif plan.kind == "fsdp2" and not arch.coarse and plan.pp == 1 and plan.tp == 1:
        extras = _sharded_tensor_step(arch, rs, plan, extras)
    ranks = []
    for role, count, est in _roles(arch, rs, plan, simulate_allocator, extras):
        adjusted = _adjust(est, buckets, plan.grad_as_bucket_view, _offloaded(arch, rs, plan))
        ranks.append(RankEstimate(role, count, replace(adjusted, assumptions=adjusted.assumptions + notes)))
    return JobEstimate(plan, strategy, tuple(ranks))
