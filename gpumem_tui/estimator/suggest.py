"""``estimate --fit SIZE --suggest``: the changes that make a job fit, cheapest first.

Each candidate is one change a user can make to the same job (a flag), with what it costs
(compute, throughput, precision or what is trained), estimated by the same estimator
(per rank for a parallel job). Single changes that fit come first, ordered by cost and then by
peak; when none fits alone, the cheapest changes are combined in cost order until the job
fits. Costs are the usual ones: activation checkpointing re-runs the forward (full: about one
more forward per step, ~33 % more compute; selective: the attention core only), a smaller
micro-batch with more accumulation keeps the global batch at lower throughput, 8-bit Adam
quantizes the optimizer states (Dettmers et al. 2022, arXiv 2110.02861), ZeRO stages add
communication, CPU offload moves the optimizer step over PCIe, LoRA / QLoRA train adapters
only (QLoRA over a 4-bit base).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.parallel import ParallelPlan
from gpumem_tui.estimator.parallel.per_rank import estimate_job
from gpumem_tui.estimator.spec import SpecError, TrainingSpec

Change = Callable[[TrainingSpec, "ParallelPlan | None"], "tuple[TrainingSpec, ParallelPlan | None] | None"]


@dataclass(frozen=True)
class Suggestion:
    """One change (``flags``: what to pass), its cost (``cost_rank``: 0 free .. 9 changes what
    is trained; ``cost``: in words) and the predicted peak per rank (bytes)."""

    flags: str
    cost_rank: int
    cost: str
    peak_bytes: int

    def to_json(self) -> dict[str, object]:
        return {"change": self.flags, "cost_rank": self.cost_rank, "cost": self.cost, "peak_bytes": self.peak_bytes}


def _spec(**changes: object) -> Change:
    def apply(spec: TrainingSpec, plan: ParallelPlan | None):  # type: ignore[no-untyped-def]
        if all(getattr(spec, k) == v for k, v in changes.items()):
            return None
        return spec.replace(**changes), plan
    return apply


def _split_batch(spec: TrainingSpec, plan: ParallelPlan | None):  # type: ignore[no-untyped-def]
    if spec.batch < 2:
        return None
    return spec.replace(batch=spec.batch // 2, grad_accum=spec.grad_accum * 2), plan


def _zero_up(spec: TrainingSpec, plan: ParallelPlan | None):  # type: ignore[no-untyped-def]
    if plan is None or plan.kind != "deepspeed" or plan.zero_stage >= 3:
        return None
    return spec, replace(plan, zero_stage=plan.zero_stage + 1)


def _offload(spec: TrainingSpec, plan: ParallelPlan | None):  # type: ignore[no-untyped-def]
    if plan is None or plan.kind != "deepspeed" or plan.offload_optimizer or not plan.zero_stage:
        return None
    return spec, replace(plan, offload_optimizer=True)


#: (flags, cost rank, cost in words, change) in cost order
CANDIDATES: tuple[tuple[str, int, str, Change], ...] = (
    ("--optimizer-impl fused", 0, "none (one fused kernel, no step temporaries)", _spec(optimizer_impl="fused")),
    ("--attention flash", 0, "none (FlashAttention keeps no s x s scores)", _spec(attention="flash")),
    ("--grad-ckpt selective", 1, "recomputes the attention core (a few % more compute)", _spec(grad_ckpt="selective")),
    ("--batch b/2 --grad-accum 2x", 2, "same global batch, lower throughput", _split_batch),
    ("--grad-ckpt full", 3, "re-runs each layer's forward in backward (~33 % more compute)", _spec(grad_ckpt="full")),
    ("--optimizer adamw-8bit", 4, "8-bit optimizer states (bitsandbytes; small accuracy risk)", _spec(optimizer="adamw-8bit")),
    ("ZeRO stage + 1", 5, "more communication per step", _zero_up),
    ("offload_optimizer cpu", 6, "optimizer step on the CPU over PCIe (slower steps)", _offload),
    ("--task lora", 8, "trains LoRA adapters only, not the full model", _spec(task="lora")),
    ("--task qlora", 9, "LoRA over a 4-bit base model (quantization error)", _spec(task="qlora")),
)


def _peak(arch: ModelArchitecture, spec: TrainingSpec, plan: ParallelPlan | None, simulate: bool) -> int:
    if plan is None:
        return estimate(arch, spec, simulate_allocator=simulate).peak_bytes
    return estimate_job(arch, spec, plan).largest.estimate.peak_bytes


def suggest(arch: ModelArchitecture, spec: TrainingSpec, plan: ParallelPlan | None, budget: int,
            limit: int = 6) -> list[Suggestion]:
    """Changes that bring the peak (per rank) within ``budget`` bytes, cheapest first (at most
    ``limit``); empty when even every change together does not fit. Inference jobs get none of
    the training changes."""
    if spec.task == "inference":
        return []
    fitting: list[Suggestion] = []
    chain: tuple[TrainingSpec, ParallelPlan | None] = (spec, plan)
    chain_flags: list[str] = []
    chain_out: Suggestion | None = None
    for flags, rank, cost, change in CANDIDATES:
        try:
            alone = change(spec, plan)
            if alone is not None:
                peak = _peak(arch, *alone, simulate=False)
                if peak <= budget:
                    fitting.append(Suggestion(flags, rank, cost, peak))
            stacked = change(*chain) if chain_out is None else None
        except (SpecError, ValueError):
            continue  # the change does not apply to this model / job
        if stacked is not None:
            # a later change of the same flag replaces the earlier one (selective -> full)
            chain = stacked
            chain_flags = [f for f in chain_flags if f.split()[0] != flags.split()[0]] + [flags]
            peak = _peak(arch, *chain, simulate=False)
            if peak <= budget and len(chain_flags) > 1:
                chain_out = Suggestion(" + ".join(chain_flags), rank, "all of: " + "; ".join(
                    c for f, _r, c, _ in CANDIDATES if f in chain_flags), peak)
    out = sorted(fitting, key=lambda s: (s.cost_rank, s.peak_bytes))[:limit]
    if not out and chain_out is not None:
        out = [chain_out]
    return out
