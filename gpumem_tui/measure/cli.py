"""``gpumem-tui measure``: the estimator's flags, run for real with torch (ground truth).

Same flags as ``gpumem-tui estimate`` (``gpumem_tui.estimator.cli_args``) plus
``--on meta|cpu``. Prints a table of the measured peak split into the estimator's components,
or with ``--json`` the estimate JSON shape plus ``"measured": true``, ``"on"`` and
``"attention"``. torch is imported only after the flags parse (it costs ~1.5 s).

With ``--nproc N --strategy KIND`` (:mod:`gpumem_tui.measure.ranks_cli`) the step runs in N
processes over gloo and each rank's peak is reported.

Exit codes: 0 measured; 1 runtime failure; 2 bad input or torch missing (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpumem_tui.support.cli_support import OneLineParser
from gpumem_tui.support.text import print_error
from gpumem_tui.support.units import format_bytes

_SDPA_NOTE = (
    "On the meta device SDPA takes the math path and stores the s x s attention probabilities, "
    "unlike the CPU and CUDA kernels: measure eager attention on meta (any size, no real memory) "
    "and SDPA on the real CPU (shapes that fit in RAM). (The CPU also falls back to the math path, "
    "in fp32, when attention dropout is active in training, e.g. GPT-2 and BERT.) Figures are live "
    "tensor storage bytes, comparable to torch 'allocated', not to 'reserved' or NVML 'used'."
)
_FIGURES_NOTE = ("Figures are live tensor storage bytes, comparable to torch 'allocated', not to 'reserved' "
                 "or NVML 'used'.")

# estimator LoRA roles -> HF module names per family: a plain name matches the last name
# component, a regex the full module name (GPT-2's attn.c_proj vs mlp.c_proj, BERT's
# attention.output.dense vs layer.N.output.dense).
_LORA_NAMES = {
    # GPT-NeoX / Falcon: fused ``query_key_value``, ``attention.dense`` / ``self_attention.dense``,
    # ``dense_h_to_4h`` / ``dense_4h_to_h`` (transformers modeling_gpt_neox.py, modeling_falcon.py)
    "q": ("q_proj", "query", "c_attn", "qkv_proj", "query_key_value"),
    "k": ("k_proj", "key", "c_attn", "qkv_proj", "query_key_value"),
    "v": ("v_proj", "value", "c_attn", "qkv_proj", "query_key_value"),
    "o": ("o_proj", r"attn\.c_proj$", r"attention\.output\.dense$", r"(self_)?attention\.dense$"),
    "gate": ("gate_proj", "gate_up_proj"),
    "up": ("up_proj", "gate_up_proj", "c_fc", r"intermediate\.dense$", "dense_h_to_4h"),
    "down": ("down_proj", r"mlp\.c_proj$", r"layer\.\d+\.output\.dense$", "dense_4h_to_h"),
}


def build_parser() -> argparse.ArgumentParser:
    """The ``measure`` argument parser (estimate's flags + --on, --json, --steps)."""
    from gpumem_tui.estimator.cli_args import add_spec_arguments

    parser = OneLineParser(
        prog="gpumem-tui measure",
        description="Measure the peak memory of two training steps (or an inference prefill + decode) "
        "with torch's MemTracker, split like the estimator's components. " + _SDPA_NOTE,
    )
    add_spec_arguments(parser)
    parser.add_argument(
        "--on", default="meta",
        help="meta: no real memory, any size (use --attention eager); cpu: real tensors "
        "(SDPA runs its real kernel); cuda: this machine's GPU 0 (torch allocated per phase, reserved, "
        "NVML used, CUDA context) (default meta)",
    )
    parser.add_argument("--steps", type=int, default=2, help="training steps; the last one is reported (default 2)")
    parser.add_argument("--json", action="store_true", help="print JSON (bytes) instead of a table")
    from gpumem_tui.measure.ranks_cli import add_parallel_arguments

    add_parallel_arguments(parser)
    return parser


def _config_for(arch: Any) -> dict[str, Any]:
    """The raw config.json dict behind an architecture loaded by name or path."""
    from gpumem_tui.estimator.architecture import CATALOGUE_DIR

    from gpumem_tui.support.safe_files import read_json  # the file estimate read, read the same way

    path = Path(arch.name)
    if not path.is_file():
        path = CATALOGUE_DIR / f"{arch.name}.json"
    return read_json(path)


def request_from_spec(arch: Any, spec: Any, *, on: str, steps: int = 2) -> Any:
    """Turn the estimator's (ModelArchitecture, TrainingSpec) into a ``MeasureRequest``.

    The optimizer implementation follows ``--optimizer-impl`` (auto: per-tensor loop for cpu,
    torch's CPU default; foreach for cuda, torch's CUDA default); every other kernel is the
    meta/CPU one. ``--grad-accum`` and ``--keep-grads`` are honoured.

    Raises:
        MeasureError: what one process on meta/CPU cannot run (ZeRO, parallel degrees, QLoRA,
            8-bit Adam, FlashAttention, selective recompute, --params, a KV dtype other than the
            compute dtype, quantized weights, classification or bare heads).
    """
    from gpumem_tui.measure.runner import MeasureError, MeasureRequest

    if arch.coarse:
        raise MeasureError("measure needs a model config (catalogue name or config.json), not --params")
    if spec.zero or spec.dp > 1 or spec.tp > 1 or spec.pp > 1:
        raise MeasureError("measure runs one process: --zero, --dp, --tp and --pp are not supported")
    if spec.task == "qlora":
        raise MeasureError("measure cannot run QLoRA (NF4 needs bitsandbytes on CUDA)")
    if spec.optimizer == "adamw-8bit":
        raise MeasureError("measure cannot run --optimizer adamw-8bit (bitsandbytes needs CUDA)")
    if spec.attention == "flash":
        raise MeasureError("measure cannot run --attention flash (no FlashAttention kernel on meta/CPU)")
    if spec.grad_ckpt == "selective":
        raise MeasureError("measure supports --grad-ckpt none|full (transformers has no selective recompute)")
    if spec.kv_dtype is not None and spec.kv_dtype != spec.dtype:
        raise MeasureError("measure keeps the KV cache in the compute dtype: drop --kv-dtype")
    if spec.quant != "none":
        raise MeasureError("measure cannot run quantized weights (--quant)")
    if arch.head not in ("lm", "mlm", "classification"):
        raise MeasureError(f"measure supports LM, masked-LM and classification heads, not {arch.head!r}")
    names: list[str] = []
    for role in spec.lora_targets:
        for name in _LORA_NAMES.get(role, ()):
            if name not in names:
                names.append(name)
    config = _config_for(arch)
    if arch.head == "mlm" and config.get("model_type") not in ("bert",):
        raise MeasureError(f"measure builds a masked-LM head only for BERT, not {config.get('model_type')!r}")
    if arch.head == "lm" and arch.kind == "encoder":
        raise MeasureError("an encoder has no causal-LM head: use --head mlm")
    return MeasureRequest(
        config=config,
        task=spec.task,
        batch=spec.batch,
        seq=spec.seq,
        dtype=spec.dtype,
        mixed_precision=spec.mixed_precision,
        optimizer=spec.optimizer,
        optimizer_impl=_optimizer_impl(spec),
        grad_accum=getattr(spec, "grad_accum", 1),
        keep_grads=bool(getattr(spec, "keep_grads", False)),
        head="classification" if arch.head == "classification" else "lm",
        num_labels=int(getattr(arch, "num_labels", 2) or 2),
        grad_ckpt=spec.grad_ckpt,
        attention=spec.attention,
        on=on,
        steps=steps,
        lora_rank=spec.lora_rank or 8,
        lora_targets=tuple(names),
    )


def _optimizer_impl(spec: Any) -> str:
    """The torch optimizer implementation the spec asks for (torch's device default for auto)."""
    impl = getattr(spec, "resolved_optimizer_impl", None)
    if isinstance(impl, str):
        return impl
    return "foreach" if spec.device == "cuda" else "single"


def _table(data: dict[str, Any]) -> str:
    comps = data["components_bytes"]
    lines = []
    if data["on"] == "meta" and data["attention"] == "sdpa":
        lines += ["WARNING: SDPA on the meta device runs the math path (stores s x s probabilities): "
                  "this overstates CPU/CUDA SDPA memory; use --attention eager on meta", ""]
    lines += [
        f"measured on {data['on']} ({data['model_class']}, attention {data['attention']}): "
        f"peak {format_bytes(data['peak_bytes'])} in {data['peak_phase']}",
        f"parameters: {data['total_params']:,} total, {data['trainable_params']:,} trainable",
        "",
        f"{'component (at the peak)':<26}{'bytes':>16}{'':>4}{'binary units':>12}",
    ]
    for name, value in comps.items():
        lines.append(f"{name:<26}{value:>16,}{'':>4}{format_bytes(value):>12}")
    lines.append(f"{'peak':<26}{data['peak_bytes']:>16,}{'':>4}{format_bytes(data['peak_bytes']):>12}")
    lines += ["", "phase peaks (live bytes):"]
    for ph in data["phases"]:
        lines.append(f"  {ph['name']:<24}{format_bytes(ph['live_bytes']):>12}")
    meta_sdpa = data["on"] == "meta" and data["attention"] == "sdpa"
    # the meta-SDPA warning is printed once, at the top: the runner's copy of it and the
    # note's first sentence are left out of the notes then
    notes = [a for a in data["assumptions"] if not (meta_sdpa and "meta device SDPA" in a)]
    lines += ["", "notes:"] + [f"  - {a}" for a in notes]
    lines.append("  - " + (_FIGURES_NOTE if meta_sdpa else _SDPA_NOTE))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Entry point of ``gpumem-tui measure``; returns the exit code."""
    from gpumem_tui.estimator.cli_args import spec_from_args

    try:
        args = build_parser().parse_args(argv)
        arch, spec = spec_from_args(args)
    except ValueError as exc:  # InputError, ArchitectureError, SpecError
        print_error("gpumem-tui measure", exc)
        return 2
    if args.on not in ("meta", "cpu", "cuda"):
        print(f"gpumem-tui measure: --on must be meta, cpu or cuda, got {args.on!r}", file=sys.stderr)
        return 2
    if args.on != "cuda" and (spec.new_tokens or spec.logits != "last"):
        print("gpumem-tui measure: --new-tokens / --logits run generate() or a kept forward: use --on cuda",
              file=sys.stderr)
        return 2
    from gpumem_tui.measure.ranks_cli import check_parallel, main_ranks
    from gpumem_tui.measure.runner import MeasureError, run, validate

    try:
        req = request_from_spec(arch, spec, on=args.on, steps=args.steps)
        validate(req)
        parallel = check_parallel(args, req)  # None without --nproc / --strategy
    except MeasureError as exc:
        print_error("gpumem-tui measure", exc)
        return 2
    from gpumem_tui.support.import_gc import import_out_of_collector

    try:
        # the collector paused, then torch's and transformers' objects frozen (support/import_gc)
        import_out_of_collector("torch", "transformers")
    except ImportError as exc:
        print(
            f"gpumem-tui measure: needs the torch extra (pip install 'gpumem-tui[torch]'; {exc.name} is missing)",
            file=sys.stderr,
        )
        return 2
    if parallel is not None:
        return main_ranks(args, req, spec, parallel)
    if args.on == "cuda":
        return _main_cuda(req, spec, args.json)
    try:
        result = run(req)
    except MeasureError as exc:
        print_error("gpumem-tui measure", exc)
        return 2
    except MemoryError:
        print("gpumem-tui measure: out of host memory; use --on meta or a smaller shape", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print_error("gpumem-tui measure", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return 1
    data = result.to_json()
    data["assumptions"] = list(spec.warnings) + data["assumptions"]
    data["note"] = _SDPA_NOTE
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(_table(data))
    return 0


def _main_cuda(req: Any, spec: Any, as_json: bool) -> int:
    """``--on cuda``: measure on GPU 0 (:mod:`gpumem_tui.measure.cuda`); exit 2 with one line
    when there is no CUDA build, no GPU or not enough GPU memory."""
    import dataclasses

    from gpumem_tui.measure.cuda import measure_cuda
    from gpumem_tui.measure.runner import MeasureError

    # peft matches plain module names; the regex entries are for the project's own matcher
    plain = tuple(n for n in req.lora_targets if not any(c in n for c in "\\$^|()[]*+?."))
    req = dataclasses.replace(req, lora_targets=plain, optimizer_impl=_optimizer_impl(spec), steps=max(req.steps, 3))
    try:
        data = measure_cuda(req, new_tokens=spec.new_tokens, logits=spec.logits)
    except MeasureError as exc:
        print_error("gpumem-tui measure", exc)
        return 2
    data["assumptions"] = list(spec.warnings)
    if as_json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"measured on {data['device']} (torch {data['torch']}, CUDA {data['cuda']})")
    for name, value in data["phase_peak_allocated"].items():
        if not name.startswith("_"):
            print(f"  {name:<16} torch allocated peak {format_bytes(value):>12}")
    print(f"  torch max reserved {format_bytes(data['max_reserved']):>12}")
    nv = data["nvml_peak_used"]
    print(f"  NVML used (peak)   {format_bytes(nv) if nv is not None else 'unavailable':>12}")
    ctx = data["cuda_context"]
    print(f"  CUDA context       {format_bytes(ctx) if ctx is not None else 'unavailable':>12}")
    return 0
