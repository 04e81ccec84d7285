"""``gpumem-tui measure MODEL --nproc N --on cpu --strategy KIND ...``: the per-rank flags and output.

The flags are added to ``measure``'s parser by :func:`add_parallel_arguments`; :func:`main_ranks`
runs :func:`gpumem_tui.measure.ranks.measure_ranks` and prints a table per rank and the worst
rank, or with ``--json`` ``{"ranks": [...], "peak_bytes": max over ranks, "world_size",
"strategy", ...}``. Exit codes: 0 measured; 1 a rank failed at run time; 2 bad input (busy
port, too many ranks, an unsupported combination, a rank refusing the request).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpumem_tui.support.text import print_error
from gpumem_tui.support.units import format_bytes

_NOTE = ("Per-rank figures are live tensor storage bytes (comparable to torch 'allocated' on each "
         "GPU, not to 'reserved' or NVML 'used'), measured on the CPU over gloo.")


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_parallel_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --nproc, --strategy and the strategy options to ``measure``'s parser."""
    group = parser.add_argument_group("per-rank measurement (--nproc N --on cpu --strategy KIND)")
    group.add_argument("--nproc", type=int, default=None,
                       help="run the step in N processes over gloo and report each rank's peak")
    group.add_argument("--strategy", default=None,
                       help="fsdp2 | fsdp1 | ddp | zero-redundancy | tp (with --nproc)")
    group.add_argument("--reshard-after-forward", type=_bool, default=True, metavar="true|false",
                       help="fsdp2: free gathered parameters after each block's forward (default true)")
    group.add_argument("--sharding-strategy", default="FULL_SHARD",
                       help="fsdp1: FULL_SHARD | SHARD_GRAD_OP | NO_SHARD (default FULL_SHARD)")
    group.add_argument("--bucket-cap-mb", type=float, default=25.0,
                       help="ddp / zero-redundancy: gradient bucket size in MiB (default 25)")
    group.add_argument("--gradient-as-bucket-view", action="store_true",
                       help="ddp / zero-redundancy: gradients are views into the buckets")
    group.add_argument("--port", type=int, default=None,
                       help="rendezvous over TCP on 127.0.0.1:PORT (default: a file store in a temp dir)")
    group.add_argument("--rank-timeout", type=float, default=300.0,
                       help="seconds before a hung collective or run is stopped (default 300)")


def check_parallel(args: argparse.Namespace, req: Any) -> Any:
    """The validated :class:`~gpumem_tui.measure.parallel.ParallelSpec` the flags describe for
    ``req``, or None when neither --nproc nor --strategy is given (pure Python: runs before
    torch loads).

    Raises:
        MeasureError: --nproc without --strategy or the reverse, a bad --rank-timeout or
            --port, anything :func:`~gpumem_tui.measure.parallel.validate_parallel` refuses.
    """
    from gpumem_tui.measure.parallel import ParallelSpec, validate_parallel
    from gpumem_tui.measure.runner import MeasureError

    if args.nproc is None and args.strategy is None:
        return None
    if args.nproc is None or args.strategy is None:
        raise MeasureError("--nproc and --strategy go together (e.g. --nproc 2 --strategy fsdp2)")
    if not 1 <= args.rank_timeout <= 86400:
        raise MeasureError(f"--rank-timeout must be 1..86400 seconds, got {args.rank_timeout:g}")
    if args.port is not None and not 1 <= args.port <= 65535:
        raise MeasureError(f"--port must be 1..65535, got {args.port}")
    parallel = ParallelSpec(
        kind=args.strategy, world_size=args.nproc, reshard_after_forward=args.reshard_after_forward,
        sharding_strategy=args.sharding_strategy.upper(), bucket_cap_mb=args.bucket_cap_mb,
        gradient_as_bucket_view=args.gradient_as_bucket_view,
    )
    validate_parallel(parallel, req)
    return parallel


def main_ranks(args: argparse.Namespace, req: Any, spec: Any, parallel: Any) -> int:
    """Run the per-rank measurement of ``req`` (a validated MeasureRequest) under ``parallel``
    (from :func:`check_parallel`); ``spec`` is the estimator's TrainingSpec (its warnings are
    passed on). Returns the exit code."""
    from gpumem_tui.measure.ranks import RankFailure, measure_ranks
    from gpumem_tui.measure.runner import MeasureError

    try:
        data = measure_ranks(req, parallel, port=args.port, timeout_s=args.rank_timeout)
    except MeasureError as exc:
        print_error("gpumem-tui measure", exc)
        return 2
    except RankFailure as exc:
        print_error("gpumem-tui measure", exc)
        return 2 if exc.bad_input else 1
    data["assumptions"] = list(spec.warnings) + [
        f"{parallel.world_size} ranks, {parallel.kind}, measured with torch's {data['tracker']}",
        "training forward with use_cache=False; data-parallel ranks draw their own batch, tensor-parallel "
        "ranks the same one",
    ]
    data["note"] = _NOTE
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(table(data))
    return 0


def table(data: dict[str, Any]) -> str:
    """The text report: one row per rank (peak, phase, components) and the worst rank."""
    comps = [k for k in data["ranks"][0]["components_bytes"] if any(r["components_bytes"][k] for r in data["ranks"])]
    width = {c: max(len(c), 10) + 2 for c in comps}
    strategy = ", ".join(f"{k}={v}" for k, v in data["strategy"].items() if k not in ("kind", "world_size"))
    lines = [
        f"measured on cpu over gloo: {data['world_size']} ranks, {data['strategy']['kind']}"
        + (f" ({strategy})" if strategy else "") + f", {data['model_class']}, tracker {data['tracker']}",
        f"parameters: {data['total_params']:,} total, {data['trainable_params']:,} trainable",
        "",
        f"{'rank':<6}{'peak':>12}  {'phase':<16}" + "".join(f"{c:>{width[c]}}" for c in comps),
    ]
    for rank in data["ranks"]:
        lines.append(f"{rank['rank']:<6}{format_bytes(rank['peak_bytes']):>12}  {rank['peak_phase']:<16}"
                     + "".join(f"{format_bytes(rank['components_bytes'][c]):>{width[c]}}" for c in comps))
    lines += ["", f"worst rank {data['worst_rank']}: peak {format_bytes(data['peak_bytes'])} "
              f"({data['peak_bytes']:,} bytes)", "", "notes:"]
    lines += [f"  - {a}" for a in data.get("assumptions", [])] + [f"  - {_NOTE}"]
    return "\n".join(lines)
