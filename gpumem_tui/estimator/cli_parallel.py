"""``estimate`` flags for a parallel job: ``--parallel``, ``--world-size``, ``--sharding``,
``--accelerate-config FILE``, ``--deepspeed FILE``; the per-rank output (text and JSON).

A config file sets the plan and the spec fields it names (micro-batch, accumulation, 16-bit
mode); a flag given with a value other than its default that contradicts the file is an error
naming the file's key (exit 2).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.parallel import ParallelPlan
from gpumem_tui.estimator.parallel.configs import ConfigFileError, JobConfig
from gpumem_tui.estimator.parallel.description import KINDS, SHARDING
from gpumem_tui.estimator.parallel.per_rank import JobEstimate, estimate_job
from gpumem_tui.estimator.spec import TrainingSpec
from gpumem_tui.support.units import GiB, MiB

#: spec field -> (flag default, the file's key named in a contradiction)
_FIELDS = {"batch": (1, "train_micro_batch_size_per_gpu"), "grad_accum": (1, "gradient_accumulation_steps"),
           "dtype": ("bf16", "mixed_precision"), "mixed_precision": (False, "mixed_precision")}


def add_parallel_arguments(parser: argparse.ArgumentParser) -> None:
    """The parallel-job flags of ``gpumem-tui estimate``."""
    parser.add_argument("--parallel", default=None, help=f"per-rank estimate of a parallel job: {' | '.join(KINDS)}")
    parser.add_argument("--world-size", type=int, default=None, help="ranks of the job (default: dp x tp x pp x cp)")
    parser.add_argument("--sharding", default="full", help=f"FSDP sharding: {' | '.join(SHARDING)} (default full)")
    parser.add_argument("--shard-group", type=int, default=None, help="ranks one shard spans (hybrid sharding)")
    parser.add_argument("--cp", type=int, default=1, help="context-parallel degree (default 1)")
    parser.add_argument("--sequence-parallel", action="store_true",
                        help="--parallel tp with sequence parallelism and a vocabulary-parallel head (Megatron); "
                        "default: torch DTensor's Colwise/Rowwise split, norms, embeddings and head replicated")
    parser.add_argument("--accelerate-config", default=None, metavar="FILE", help="accelerate config YAML of the job")
    parser.add_argument("--deepspeed", default=None, metavar="FILE", help="DeepSpeed JSON config of the job")


def _from_flags(args: argparse.Namespace, spec: TrainingSpec) -> ParallelPlan:
    kind = args.parallel
    cp = args.cp
    tp = spec.tp if kind != "tp" or spec.tp > 1 else (args.world_size or 1)
    pp = spec.pp if kind != "pp" or spec.pp > 1 else (args.world_size or 1)
    if kind == "cp" and cp == 1:
        cp = args.world_size or 1
    world = args.world_size or spec.dp * tp * pp * cp
    if spec.dp > 1 and world != spec.dp * tp * pp * cp:
        raise ValueError(f"--world-size {world} is not --dp x --tp x --pp x --cp = {spec.dp * tp * pp * cp}")
    if spec.zero and kind not in ("deepspeed", "tp", "pp", "cp"):
        raise ValueError(f"--zero applies to --parallel deepspeed; {kind} shards with --sharding")
    # --tp given with another kind keeps the estimator's own (Megatron, sequence-parallel) rules
    # (and so does tensor parallelism inside a pipeline: Megatron's 3-D layout)
    sp = bool(getattr(args, "sequence_parallel", False)) or (kind != "tp" and spec.tp > 1) or (tp > 1 and pp > 1)
    return ParallelPlan(kind=kind, world_size=world, sharding=args.sharding, zero_stage=spec.zero,
                        shard_group=args.shard_group, tp=tp, pp=pp, cp=cp, sequence_parallel=sp)


def _from_file(args: argparse.Namespace, arch: ModelArchitecture) -> JobConfig:
    from gpumem_tui.estimator.parallel import configs_read

    if args.accelerate_config is not None:
        job = configs_read.read_accelerate(args.accelerate_config, arch.hidden_size)
        if args.deepspeed is not None:
            raise ConfigFileError("deepspeed_config_file", "give the DeepSpeed JSON in the accelerate config or "
                                  "--deepspeed, not both")
        return job
    return configs_read.read_deepspeed(args.deepspeed, args.world_size, arch.hidden_size)


def _merge(job: JobConfig, args: argparse.Namespace, spec: TrainingSpec) -> tuple[ParallelPlan, TrainingSpec]:
    """The file's plan and spec fields, refusing a flag that contradicts them."""
    plan = job.plan
    if args.parallel is not None and args.parallel != plan.kind:
        raise ConfigFileError("distributed_type", f"--parallel {args.parallel} contradicts the config file ({plan.kind})")
    if args.world_size is not None and args.world_size != plan.world_size:
        raise ConfigFileError("num_processes", f"--world-size {args.world_size} contradicts num_processes {plan.world_size}")
    if spec.zero and plan.kind == "deepspeed" and spec.zero != plan.zero_stage:
        raise ConfigFileError("zero_stage", f"--zero {spec.zero} contradicts the config's ZeRO stage {plan.zero_stage}")
    changes: dict[str, Any] = {}
    for name, value in job.spec_fields.items():
        default, key = _FIELDS[name]
        current = getattr(spec, name)
        if current != default and current != value:
            raise ConfigFileError(key, f"--{name.replace('_', '-')} {current} contradicts the config's {key} ({value})")
        changes[name] = value
    if plan.tp == 1 and spec.tp > 1 or plan.pp == 1 and spec.pp > 1:
        plan = replace(plan, tp=spec.tp, pp=spec.pp, sequence_parallel=spec.tp > 1)
    return plan, spec.replace(**changes) if changes else spec


def plan_from_args(args: argparse.Namespace, arch: ModelArchitecture,
                   spec: TrainingSpec) -> tuple[ParallelPlan | None, TrainingSpec]:
    """The job's plan (None: one device) and the spec with the config file's fields.

    Raises:
        ConfigFileError: a bad file or a flag contradicting it (names the key).
        ValueError: an invalid flag value (the message names it).
    """
    if args.accelerate_config is not None or args.deepspeed is not None:
        return _merge(_from_file(args, arch), args, spec)
    if args.parallel is None:
        if args.world_size is not None or args.cp != 1:
            raise ValueError("--world-size / --cp need --parallel (or a config file)")
        return None, spec
    return _from_flags(args, spec), spec


def max_batch_job(arch: ModelArchitecture, spec: TrainingSpec, plan: ParallelPlan, budget: int) -> int:
    """The largest micro-batch whose largest rank fits ``budget`` bytes (0: none): doubling
    then bisection on :func:`estimate_job` (analytic reserve: monotone in the batch)."""
    def fits(b: int) -> bool:
        return estimate_job(arch, spec.replace(batch=b), plan).largest.estimate.peak_bytes <= budget

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= 1 << 16 and fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def job_json(job: JobEstimate) -> dict[str, Any]:
    """``ranks`` (one entry per rank role) and ``parallel`` (the plan) for ``--json``."""
    p = job.plan
    total = sum(r.estimate.peak_bytes * r.ranks for r in job.ranks)
    return {"ranks": [r.to_json() for r in job.ranks], "peak_bytes_is_per_rank": True,
            "parallel": {"kind": p.kind, "world_size": p.world_size, "sharding": p.sharding, "zero_stage": p.zero_stage,
                         "shard_degree": p.shard_degree, "tp": p.tp, "pp": p.pp, "cp": p.cp, "source": p.source,
                         "job_total_bytes": int(total)}}


def job_lines(job: JobEstimate) -> list[str]:
    """Text lines: per rank vs for the job."""
    def fmt(n: int) -> str:
        return f"{n / GiB:,.2f} GiB" if n >= GiB else f"{n / MiB:,.1f} MiB"

    p = job.plan
    shard = f", states sharded over {p.shard_degree}" if job.ranks[0].estimate and p.kind in (
        "fsdp1", "fsdp2", "deepspeed", "zero-redundancy") and p.sharding != "none" else ""
    lines = [f"PER RANK above (the largest rank role); {p.kind}, {p.world_size} ranks: d={p.data_parallel} "
             f"t={p.tp} p={p.pp} cp={p.cp}{shard} (from {p.source})"]
    for r in job.ranks:
        lines.append(f"  {r.role}: {r.ranks} rank(s), peak {fmt(r.estimate.peak_bytes)} each ({r.estimate.peak_phase})")
    total = sum(r.estimate.peak_bytes * r.ranks for r in job.ranks)
    lines.append(f"  for the job: {fmt(total)} over {p.world_size} ranks (sum of per-rank peaks)")
    return lines
