"""Command-line flags that describe a job, shared by ``gpumem-tui estimate`` and ``measure``.

``add_spec_arguments(parser)`` adds the flags; ``spec_from_args(args)`` turns the parsed
namespace into ``(ModelArchitecture, TrainingSpec)`` or raises a ``ValueError``
(:class:`ArchitectureError` / :class:`SpecError`) whose message is one line for stderr.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from gpumem_tui.estimator.architecture import (
    HEADS,
    ArchitectureError,
    ModelArchitecture,
    architecture_from_config,
    architecture_from_params,
    load_config,
)
from gpumem_tui.estimator.quantization import QuantConfigError, QuantFormat, apply_flags, format_from_config
from gpumem_tui.estimator.recipes import RECIPES
from gpumem_tui.estimator.recipes.rules import grad_ckpt_default
from gpumem_tui.estimator.spec import (
    ATTENTION,
    DEVICES,
    DTYPES,
    GRAD_CKPT,
    KV_DTYPES,
    OPTIMIZERS,
    QUANT,
    TASKS,
    SpecError,
    TrainingSpec,
    check_spec_for,
    parse_lora_targets,
)


def _number(text: str) -> float:
    try:
        return float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the model and job flags to ``parser`` (model positional, --params, --task, ...).

    Choice flags are validated by :func:`spec_from_args` (not by argparse) so that every
    error reads the same and names its flag.
    """
    parser.add_argument(
        "model", nargs="?", default=None,
        help="catalogue name (e.g. llama-3.1-8b, gpt2) or path to a Hugging Face config.json",
    )
    parser.add_argument("--params", type=_number, default=None, help="bare parameter count, e.g. 7e9 (coarse)")
    parser.add_argument("--task", default="train", help=f"{' | '.join(TASKS)} (default train)")
    parser.add_argument("--batch", type=int, default=1, help="micro-batch size per device (default 1)")
    parser.add_argument("--seq", type=int, default=512, help="sequence length in tokens (default 512)")
    parser.add_argument("--dtype", default="bf16", help=f"{' | '.join(DTYPES)} (default bf16)")
    parser.add_argument(
        "--mixed-precision", action="store_true", help="fp32 master weights + optimizer states, 16-bit compute"
    )
    parser.add_argument("--optimizer", default="adamw", help=f"{' | '.join(OPTIMIZERS)} (default adamw)")
    parser.add_argument("--grad-ckpt", default=None,
                        help=f"{' | '.join(GRAD_CKPT)} (default none, or what --recipe turns on)")
    parser.add_argument("--attention", default="sdpa", help=f"{' | '.join(ATTENTION)} (default sdpa)")
    parser.add_argument("--zero", type=int, default=0, help="ZeRO stage 0-3 (default 0)")
    parser.add_argument("--dp", type=int, default=1, help="data-parallel degree (default 1)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    parser.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree (default 1)")
    parser.add_argument("--lora-rank", type=int, default=None, help="LoRA rank r (lora/qlora; default 8)")
    parser.add_argument(
        "--lora-targets", default="q,v", help="all-linear | attention | mlp | comma list of q,k,v,o,gate,up,down"
    )
    parser.add_argument("--kv-dtype", default=None, help=f"KV-cache dtype for inference: {' | '.join(KV_DTYPES)}")
    parser.add_argument("--quant", default="none", help=f"inference weight quantization: {' | '.join(QUANT)}")
    parser.add_argument("--head", default=None, help=f"model head: {' | '.join(HEADS)} (default from config)")
    parser.add_argument("--num-labels", type=int, default=2, help="labels of a classification head (default 2)")
    parser.add_argument(
        "--optimizer-impl", default="auto",
        help="torch optimizer implementation: auto (single on cpu, foreach on cuda) | single | foreach | fused",
    )
    parser.add_argument("--grad-accum", type=int, default=1, help="gradient-accumulation micro-batches (default 1)")
    parser.add_argument("--new-tokens", type=int, default=0,
                        help="inference with generate(): --seq is the prompt, the KV cache grows by N tokens (default 0)")
    parser.add_argument("--logits", default="last",
                        help="inference without --new-tokens: last (generate's prefill) | all (a plain forward "
                        "whose output stays alive: every position's logits) (default last)")
    parser.add_argument(
        "--keep-grads", action="store_true", help="gradients stay allocated between steps (zero_grad set_to_none=False)"
    )
    parser.add_argument(
        "--device", default="cuda",
        help=f"kernel profile: {' | '.join(DEVICES)} (cuda adds CUDA context + allocator reserve; default cuda)",
    )


def add_estimate_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags only ``estimate`` has (``measure`` runs its own loop and loads its own
    weights): ``--recipe`` and the quantization format's details."""
    parser.add_argument("--recipe", default="torch",
                        help="training framework around the model (see --list-recipes; default torch)")
    parser.add_argument("--double-quant", dest="double_quant", action="store_true", default=None,
                        help="bitsandbytes 4-bit with double quantization (bnb_4bit_use_double_quant)")
    parser.add_argument("--no-double-quant", dest="double_quant", action="store_false",
                        help="bitsandbytes 4-bit without double quantization")
    parser.add_argument("--quant-bits", type=int, default=None, help="GPTQ / AWQ bits (default 4)")
    parser.add_argument("--group-size", type=int, default=None, help="GPTQ / AWQ group size (default 128; -1: one group)")


def _quantization(args: argparse.Namespace, config: object) -> tuple[str, QuantFormat | None]:
    """``--quant`` and its format from the config's ``quantization_config`` and the flags.

    Raises:
        QuantConfigError: a config the estimator cannot size, or a flag contradicting it.
    """
    qc = config.get("quantization_config") if isinstance(config, dict) else None
    fmt = format_from_config(qc) if qc is not None else None
    quant = args.quant
    fmt = apply_flags(fmt, quant, getattr(args, "double_quant", None), getattr(args, "quant_bits", None),
                      getattr(args, "group_size", None))
    if fmt is not None and qc is None and fmt.method in ("nf4", "fp4"):
        fmt = replace(fmt, compute_dtype=args.dtype)  # flags only: bitsandbytes computes in --dtype
    if fmt is not None and quant == "none":
        quant = fmt.method
    if fmt is not None and args.task == "qlora" and fmt.method == "int8":
        raise QuantConfigError("load_in_8bit", "an 8-bit (load_in_8bit) model trains as --task lora, not --task qlora")
    return quant, fmt


def spec_from_args(args: argparse.Namespace) -> tuple[ModelArchitecture, TrainingSpec]:
    """Build the architecture and spec from parsed flags.

    Raises:
        ArchitectureError: no model / both model and --params, unknown name, bad config.
        SpecError: an invalid or contradictory flag (``.field`` names it).
    """
    if args.model is None and args.params is None:
        raise ArchitectureError("give a model (catalogue name or config.json path) or --params N")
    if args.model is not None and args.params is not None:
        raise ArchitectureError("give either a model or --params, not both")
    if args.params is not None:
        arch, config = architecture_from_params(args.params), None
    else:
        config, name = load_config(args.model)
        arch = architecture_from_config(config, name=name)
    head = getattr(args, "head", None)
    if head is not None:
        if arch.coarse:
            raise SpecError("head", "--head needs a model config, not --params")
        labels = getattr(args, "num_labels", 2)
        if not isinstance(labels, int) or labels < 1:
            raise SpecError("num_labels", f"--num-labels must be >= 1, got {labels!r}")
        arch = arch.with_head(head, labels)
    targets = parse_lora_targets(args.lora_targets)
    recipe = getattr(args, "recipe", "torch")
    if recipe not in RECIPES:
        raise SpecError("recipe", f"unknown --recipe {recipe!r} (choose from {', '.join(RECIPES)})")
    grad_ckpt = args.grad_ckpt
    if grad_ckpt is None:  # the recipe's default (peft-kbit turns checkpointing on), never for inference
        grad_ckpt = grad_ckpt_default(recipe) if args.task != "inference" else "none"
    # estimate reads the config's quantization_config and the format flags; measure loads its own
    quant, fmt = _quantization(args, config) if hasattr(args, "quant_bits") else (args.quant, None)
    spec = TrainingSpec(
        task=args.task, batch=args.batch, seq=args.seq, dtype=args.dtype, mixed_precision=bool(args.mixed_precision),
        optimizer=args.optimizer, grad_ckpt=grad_ckpt, attention=args.attention, zero=args.zero, dp=args.dp,
        tp=args.tp, pp=args.pp, lora_rank=args.lora_rank, lora_targets=targets, kv_dtype=args.kv_dtype,
        quant=quant, quant_format=fmt, device=args.device, optimizer_impl=getattr(args, "optimizer_impl", "auto"),
        grad_accum=getattr(args, "grad_accum", 1), keep_grads=bool(getattr(args, "keep_grads", False)),
        new_tokens=getattr(args, "new_tokens", 0), logits=getattr(args, "logits", "last"), recipe=recipe,
    )
    check_spec_for(arch, spec)  # raises on tp/pp/LoRA-target contradictions with this model
    return arch, spec


__all__ = ["add_spec_arguments", "add_estimate_arguments", "spec_from_args", "ArchitectureError", "SpecError"]
