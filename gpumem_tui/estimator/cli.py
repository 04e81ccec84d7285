"""``gpumem-tui estimate``: predicted peak memory of a training or inference step.

Imports neither torch nor textual (a test checks ``sys.modules``): the estimator is pure
Python. NVML is imported only for ``--fit N`` / ``--fit GPU`` (a GPU's free memory).

Exit codes: 0 ok (also when the job does not fit: the answer is printed), 2 bad input (one
line on stderr), 1 a runtime failure (NVML unavailable for ``--fit 0`` / ``--fit GPU``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from gpumem_tui.support.cli_support import InputError, OneLineParser
from gpumem_tui.estimator.cli_args import add_estimate_arguments, add_spec_arguments, spec_from_args
from gpumem_tui.estimator.cli_parallel import add_parallel_arguments, job_json, job_lines, max_batch_job, plan_from_args
from gpumem_tui.estimator.devices import cuda_kernels
from gpumem_tui.estimator.estimate import COMPONENT_KEYS, Estimate
from gpumem_tui.estimator.methods import METHODS, run_method
from gpumem_tui.estimator.parallel.per_rank import RankEstimate, estimate_job
from gpumem_tui.estimator.recipes import recipe_for
from gpumem_tui.estimator.solve import max_batch, max_seq
from gpumem_tui.plots.options import PlotOptions, add_plot_arguments, plot_options
from gpumem_tui.support.text import print_error
from gpumem_tui.support.units import GiB, MiB, parse_bytes


class _RuntimeFailure(RuntimeError):
    pass


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="gpumem-tui estimate",
        description="Predict the peak memory of one training or inference step (bytes; shown in MiB/GiB = 2^20/2^30). "
        f"The CUDA profile models torch {cuda_kernels.TORCH_VERSION_MODELLED}'s kernel selection (SDPA backends, "
        f"autocast op lists, caching allocator) and peft LoRA, rules unchanged since torch "
        f"{cuda_kernels.TORCH_VERSION_MEASURED}, with which they were checked on an H100 (CUDA 13); "
        "its CUDA context figures were measured there.",
    )
    add_spec_arguments(p)
    add_estimate_arguments(p)
    add_parallel_arguments(p)
    p.add_argument("--keep-outputs", action="store_true",
                   help="the training loop keeps the model output through backward and the optimizer step "
                   "(outputs = model(...); outputs.loss.backward()): its logits stay alive")
    p.add_argument("--json", action="store_true", help="print the estimate as JSON (bytes)")
    add_plot_arguments(p, "print one step's predicted memory as a chart: the phases in order, stacked by "
                       "component, the peak marked, the --fit budget as a line (per rank for a parallel job); "
                       "replaces the table of components")
    p.add_argument("--fit", default=None, metavar="SIZE|N|GPU",
                   help="memory budget: a size (24GiB, 80GB); N: the free memory of GPU N on this machine; "
                   "GPU: the GPU here with the most free memory (both read NVML: free = total - used)")
    p.add_argument("--max-batch", action="store_true", help="largest micro-batch that fits --fit (default budget: 24GiB)")
    p.add_argument("--suggest", action="store_true",
                   help="with --fit: the changes that make the job fit, each with its predicted peak and cost, cheapest first")
    p.add_argument("--max-seq", action="store_true", help="largest sequence length that fits --fit at --batch")
    p.add_argument("--method", default="detailed", help=f"{' | '.join(METHODS)} (default detailed)")
    p.add_argument("--compare-methods", action="store_true", help="print every method's peak beside the detailed one")
    p.add_argument("--list-recipes", action="store_true",
                   help="list the training recipes (--recipe) with the source file and version each was read from")
    p.add_argument("--list", action="store_true",
                   help="list the bundled catalogue and the configs in the local Hugging Face cache, then exit")
    from gpumem_tui.estimator.architecture import catalogue_names

    p.epilog = "catalogue: " + ", ".join(catalogue_names()) + " (or any config.json path; see --list)"
    return p


def _list_models() -> str:
    """``--list``: catalogue entries and cached configs with the description that reads them."""
    from gpumem_tui.estimator.models import cached_choices, catalogue_choices, hf_cache_dir

    lines = [f"  {'model':<34}{'model_type':<14}{'parameters':>16}  description"]
    for title, choices in (("catalogue", catalogue_choices()), (f"Hugging Face cache ({hf_cache_dir()})", cached_choices())):
        lines.append(f"{title}:")
        if not choices:
            lines.append("  (none)")
        for c in choices:
            params = f"{c.params:,}" if c.params is not None else "-"
            what = c.error or (c.description + ("" if c.exact else ", not verified"))
            lines.append(f"  {c.name:<34}{c.model_type:<14}{params:>16}  {what}")
    return "\n".join(lines)


def _fmt(n: int) -> str:
    if abs(n) >= GiB:
        return f"{n / GiB:,.2f} GiB"
    return f"{n / MiB:,.1f} MiB"


@dataclass(frozen=True)
class _Budget:
    """What ``--fit`` checks against: ``budget_bytes``, named by ``label``.

    For a GPU on this machine the budget is its FREE memory (NVML total - NVML used, i.e. what
    the other processes on it leave), and ``gpu_index`` / ``total_bytes`` / ``used_bytes`` say
    where that came from; for a typed size they are None.
    """

    budget_bytes: int
    label: str
    gpu_index: int | None = None
    total_bytes: int | None = None
    used_bytes: int | None = None

    def describe(self) -> str:
        """``"GPU 0 (H100): 20.00 GiB free of 80.00 GiB"`` or ``"24GiB (24.00 GiB)"``."""
        if self.total_bytes is None:
            return f"{self.label} ({_fmt(self.budget_bytes)})"
        return f"{self.label}: {_fmt(self.budget_bytes)} free of {_fmt(self.total_bytes)} total"

    def to_json(self) -> dict:
        out: dict = {"budget_bytes": self.budget_bytes, "budget": self.label}
        if self.total_bytes is not None:
            out.update(budget_kind="free", gpu_index=self.gpu_index, total_bytes=self.total_bytes,
                       used_bytes=self.used_bytes)
        return out


def _budget(text: str) -> _Budget:
    """Parse --fit: a size, a GPU index (digits), or ``GPU`` (the GPU here with most free memory).

    Raises:
        InputError: not a size, no such GPU, or a size <= 0.
        _RuntimeFailure: NVML cannot be read (no driver) or the GPU's memory is not readable.
    """
    word = text.strip()
    if word.upper() == "GPU" or (word.isdigit() and len(word) <= 3):
        return _gpu_budget(None if word.upper() == "GPU" else int(word))
    try:
        size = parse_bytes(text)
    except ValueError as exc:
        raise InputError(f"--fit: {exc} (or give a GPU index, or GPU)") from None
    if size <= 0:
        raise InputError(f"--fit must be > 0, got {text!r}")
    return _Budget(size, text)


def _gpu_budget(index: int | None) -> _Budget:
    """The free memory of GPU ``index`` (None: the GPU with the most free memory), from NVML."""
    name = "GPU" if index is None else str(index)
    try:
        from gpumem_tui.telemetry.nvml import NvmlSource  # lazy: only for a GPU
    except ImportError as exc:  # telemetry module absent
        raise _RuntimeFailure(f"--fit {name}: cannot read GPUs ({exc}); give a size such as 24GiB") from None
    source = NvmlSource()
    try:
        reading = source.poll()
    finally:
        source.close()
    if reading.error:
        raise _RuntimeFailure(f"--fit {name}: NVML unavailable ({reading.error}); give a size such as 24GiB")
    readable = [d for d in reading.devices if d.memory_total_bytes is not None and d.memory_used_bytes is not None]
    if index is not None:
        device = next((d for d in reading.devices if d.index == index), None)
        if device is None:
            raise InputError(f"--fit {index}: no GPU {index} (found {len(reading.devices)})")
        if device not in readable:
            raise _RuntimeFailure(f"--fit {index}: GPU {index} memory total/used is not readable")
    else:
        if not readable:
            raise _RuntimeFailure(f"--fit GPU: no GPU with readable memory (found {len(reading.devices)})")
        device = max(readable, key=lambda d: d.memory_total_bytes - d.memory_used_bytes)
    total, used = int(device.memory_total_bytes), int(device.memory_used_bytes)
    label = f"GPU {device.index} ({device.name or 'unknown'})"
    return _Budget(max(total - used, 0), label, device.index, total, used)


def _table(est: Estimate) -> str:
    lines = [f"{est.model}: {est.total_params:,} parameters ({est.trainable_params:,} trainable), method {est.method}"]
    lines.append("Memory in binary units (MiB = 2^20 B, GiB = 2^30 B).")
    lines.append(f"  {'component (at peak)':<26}{'bytes':>18}{'size':>14}")
    for key in COMPONENT_KEYS:
        value = est.components_bytes.get(key, 0)
        lines.append(f"  {key.replace('_', ' '):<26}{value:>18,}{_fmt(value):>14}")
    lines.append(f"  {'PEAK (' + est.peak_phase + ')':<26}{est.peak_bytes:>18,}{_fmt(est.peak_bytes):>14}")
    if len(est.phases) > 1:
        lines.append("  phases: " + ", ".join(f"{p.name} {_fmt(p.live_bytes)}" for p in est.phases))
    if est.device == "cuda" and est.method == "detailed":
        lines.append(f"  torch allocated peak: {_fmt(est.allocated_peak_bytes)} (peak above is NVML-used-like)")
        fig = est.to_json()["figures"]
        lines.append(f"  torch reserved peak: {_fmt(fig['reserved'])} (allocator reserve: {fig['reserve_model']})")
    for note in est.assumptions:
        lines.append(f"  - {note}")
    return "\n".join(lines)


def _suggestions(arch, spec, plan, budget: int | None, out: dict) -> list[str]:  # type: ignore[no-untyped-def]
    """``--suggest``: lines for the text output; ``out["suggestions"]`` for JSON."""
    from gpumem_tui.estimator.suggest import suggest

    if budget is None:
        raise InputError("--suggest needs --fit SIZE (the budget to fit)")
    found = suggest(arch, spec, plan, budget)
    out["suggestions"] = [s.to_json() for s in found]
    if out.get("fit", {}).get("fits"):
        return ["it fits as it is; changes that keep it within the budget:"] + [
            f"  {s.flags:<34}{_fmt(s.peak_bytes):>12}  cost: {s.cost}" for s in found]
    if not found:
        return ["no single change or combination of the listed ones makes it fit"]
    return ["changes that make it fit (per-rank peak, cheapest first):"] + [
        f"  {s.flags:<34}{_fmt(s.peak_bytes):>12}  cost: {s.cost}" for s in found]


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    plot = plot_options(args, sys.stdout)
    if args.list:
        print(_list_models())
        return 0
    if args.list_recipes:
        from gpumem_tui.estimator.recipes import list_recipes

        print(list_recipes())
        return 0
    arch, spec = spec_from_args(args)
    if args.keep_outputs:
        spec = spec.replace(keep_outputs=True)
    if args.method not in METHODS:
        raise InputError(f"unknown --method {args.method!r} (choose from {', '.join(METHODS)})")
    plan, spec = plan_from_args(args, arch, spec)
    if plan is not None and args.method != "detailed":
        raise InputError("a parallel job uses the detailed method; drop --method")
    job = estimate_job(arch, spec, plan) if plan is not None else None
    est = job.largest.estimate if job is not None else run_method(args.method, arch, spec)
    out: dict = est.to_json()
    recipe = recipe_for(spec.recipe)
    out["recipe"] = {"name": recipe.name, "source": recipe.source, "version": recipe.version}
    if spec.quant_format is not None:
        out["quantization"] = spec.quant_format.to_json()
    text = [_table(est)]
    if job is not None:
        out.update(job_json(job))
        text.extend(job_lines(job))
    else:  # one rank: the same "ranks" shape as a parallel job's
        out["ranks"] = [RankEstimate("single device", 1, est).to_json()]
    budget = None
    if args.fit is not None or args.max_batch or args.max_seq:
        fit = _budget(args.fit if args.fit is not None else "24GiB")
        budget = fit.budget_bytes
        margin = budget - est.peak_bytes
        fits = margin >= 0
        out["fit"] = {**fit.to_json(), "fits": fits, "margin_bytes": margin}
        text.append(
            f"fits {fit.describe()}: {'yes' if fits else 'NO'}, "
            f"{'headroom' if fits else 'short by'} {_fmt(abs(margin))}"
        )
    if args.max_batch:
        if args.method != "detailed":
            raise InputError("--max-batch uses the detailed method; drop --method")
        mb = max_batch(arch, spec, budget or 0) if plan is None else max_batch_job(arch, spec, plan, budget or 0)
        out["max_batch"] = mb
        text.append(f"largest micro-batch that fits: {mb}" + (" (even batch 1 does not fit)" if mb == 0 else ""))
    if args.max_seq:
        if plan is not None:
            raise InputError("--max-seq is not modelled for a parallel job yet; use --max-batch")
        if args.method != "detailed":
            raise InputError("--max-seq uses the detailed method; drop --method")
        ms = max_seq(arch, spec, budget or 0)
        out["max_seq"] = ms
        text.append(f"longest sequence that fits at batch {spec.batch}: {ms:,}" + (" (even 1 token does not fit)" if ms == 0 else ""))
    if args.suggest:
        text.extend(_suggestions(arch, spec, plan, budget, out))
    if args.compare_methods and plan is None:
        rows = []
        for name in METHODS:
            other = run_method(name, arch, spec)
            rows.append({"method": name, "peak_bytes": other.peak_bytes, "allocated_peak_bytes": other.allocated_peak_bytes})
        out["methods"] = rows
        text.append("methods (peak; seed rules know no logits, temporaries or context):")
        for row in rows:
            text.append(f"  {row['method']:<12}{_fmt(row['peak_bytes']):>14}")
    if plot is not None:
        text[0] = _plot(est, plot, job, out.get("fit"))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print("\n".join(text))
    return 0


def _plot(est: Estimate, options: PlotOptions, job, fit: dict | None) -> str:  # type: ignore[no-untyped-def]
    """``--plot``: the chart that replaces the table (plotext imported only here)."""
    try:
        from gpumem_tui.plots.estimate_plot import Limit, estimate_plot
    except ImportError as exc:  # a partial installation: say what is missing, no traceback
        raise _RuntimeFailure(f"--plot needs plotext ({exc}); pip install 'plotext>=6.1,<7'") from None

    per_rank = job.largest.role if job is not None else None  # the largest rank role, as the table
    limit = Limit(fit["budget_bytes"], fit["budget"]) if fit is not None else None
    return estimate_plot(est, options, per_rank=per_rank, limit=limit)


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``gpumem-tui estimate``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        build_parser().print_help()
        return 0
    try:
        return run(argv)
    except _RuntimeFailure as exc:
        print_error("gpumem-tui estimate", exc)
        return 1
    except (ValueError, OverflowError) as exc:  # ArchitectureError, SpecError, argparse errors
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print_error("gpumem-tui estimate", msg)
        return 2
