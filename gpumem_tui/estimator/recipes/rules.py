"""The one mechanism that reads a :class:`~.description.Recipe` for the estimator.

Component rules ask these functions, never a recipe's name. Each answer is the spec's own
choice where the user made one, else the recipe's. Sizes are bytes per element.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpumem_tui.estimator.recipes import recipe_for
from gpumem_tui.estimator.recipes.description import Recipe

if TYPE_CHECKING:
    from gpumem_tui.estimator.spec import TrainingSpec


def recipe(spec: TrainingSpec) -> Recipe:
    """The spec's recipe."""
    return recipe_for(spec.recipe)


def training_fills_cache(spec: TrainingSpec, device_default: bool) -> bool:
    """Whether the training forward runs with ``use_cache`` from the config (so a transformers
    model with ``use_cache=true`` fills a cache). ``device_default``: the device profile's
    ``training_forward_fills_cache`` (what gpumem-tui's own loop does there)."""
    where = recipe(spec).training_cache
    return device_default if where == "device" else where == "config"


def keeps_outputs(spec: TrainingSpec) -> bool:
    """The loop holds the model output (its logits) through backward: the spec's
    ``keep_outputs`` or the recipe's."""
    return spec.keep_outputs or recipe(spec).keep_outputs


def grads_freed_by_zero_grad(spec: TrainingSpec) -> bool:
    """``zero_grad`` sets gradients to None under this recipe."""
    return recipe(spec).zero_grad_set_to_none


def default_optimizer_impl(spec: TrainingSpec) -> str | None:
    """The optimizer implementation the recipe builds (None: torch's device default)."""
    return recipe(spec).optimizer_impl


def quantized_base(spec: TrainingSpec) -> bool:
    """The base model's Linear weights are quantized (QLoRA or ``--quant``)."""
    return spec.task == "qlora" or spec.quant != "none"


def kbit_fp32(spec: TrainingSpec) -> bool:
    """k-bit preparation cast the non-quantized 16-bit parameters to fp32 (training only)."""
    return recipe(spec).kbit_fp32_non_quantized and quantized_base(spec) and spec.task != "inference"


def non_quantized_param_bytes(spec: TrainingSpec, default: int) -> int:
    """Bytes per element of the parameters a quantized model leaves unquantized (embeddings,
    norms, LM head): fp32 after k-bit preparation, else ``default``."""
    return 4 if kbit_fp32(spec) else default


def residual_stream_bytes(spec: TrainingSpec, default: int) -> int:
    """Bytes per element of the hidden states between layers (what a checkpointed layer
    keeps) and of a quantized Linear's output: fp32 after k-bit preparation (fp32 embedding
    output, norms with fp32 weights return fp32, and bitsandbytes ``Linear4bit.forward``
    returns ``matmul_4bit(x.to(compute_dtype), ...).to(inp_dtype)``, its input's dtype:
    ``bitsandbytes/nn/modules.py``, 0.50; ``MatMul8bitLt`` likewise returns ``A.dtype``,
    ``bitsandbytes/autograd/_functions.py``), else ``default``."""
    return 4 if kbit_fp32(spec) else default


def logits_bytes(spec: TrainingSpec, default: int) -> int:
    """Bytes per logits element: fp32 from an fp32 LM head over an fp32 stream after k-bit
    preparation, else ``default`` (the compute dtype). Under autocast
    (:func:`autocast_over_16bit_weights`) the fp32 head is an autocast ``linear``
    (``aten/src/ATen/autocast_mode.cpp``, ``lower_precision_fp``): 16-bit logits."""
    return 4 if kbit_fp32(spec) and not autocast_over_16bit_weights(spec) else default


def kbit_head_autocast(spec: TrainingSpec) -> bool:
    """k-bit preparation left the LM head fp32 and the forward runs under autocast: autocast
    casts the head weight to 16 bits (a cached cast of a leaf weight, ``cached_cast`` in
    ``aten/src/ATen/autocast_mode.h``) which the head's ``linear`` saves until its backward."""
    return kbit_fp32(spec) and autocast_over_16bit_weights(spec)


def autocast_over_16bit_weights(spec: TrainingSpec) -> bool:
    """The training forward runs under ``torch.autocast`` although the weights are already 16-bit
    (``--dtype bf16|fp16`` without ``--mixed-precision``): the recipe's
    ``autocast_16bit_weights`` (:class:`~.description.Recipe`)."""
    return (recipe(spec).autocast_16bit_weights and spec.task != "inference" and not spec.mixed_precision
            and spec.dtype in ("bf16", "fp16"))


def loss_chunks(spec: TrainingSpec, seq: int) -> int:
    """Pieces the loss splits the ``b x s x V`` logits into (1: whole)."""
    r = recipe(spec)
    if r.loss_chunking == "count":
        return max(1, min(r.loss_chunk, seq))
    if r.loss_chunking == "positions":
        return max(1, math.ceil(seq / r.loss_chunk))
    return 1


def loss_upcasts(spec: TrainingSpec) -> bool:
    """The loss upcasts the logits to fp32 before ``log_softmax``."""
    return recipe(spec).loss_upcast_fp32


def grad_ckpt_default(recipe_name: str) -> str:
    """The checkpointing a recipe turns on when the user names none ("none" if it turns none on)."""
    return recipe_for(recipe_name).default_grad_ckpt or "none"


def selective_policy(spec: TrainingSpec) -> str:
    """What ``--grad-ckpt selective`` means: ``attention-core`` or ``op-every-other-mm``."""
    return recipe(spec).selective_policy


def reentrant_checkpoint(spec: TrainingSpec) -> bool:
    """Full checkpointing runs ``torch.utils.checkpoint`` with ``use_reentrant=True``: the
    spec's ``checkpoint_impl`` when set (what the probe saw), else the recipe's."""
    impl = spec.checkpoint_impl if spec.checkpoint_impl != "auto" else recipe(spec).checkpoint_impl
    return spec.grad_ckpt == "full" and impl == "reentrant"


def softmax_saves_input(spec: TrainingSpec) -> bool:
    """Eager attention's ``softmax`` keeps its input (the scores) for backward besides its
    output: the recipe's torch predates 1.11 (:class:`~.description.Recipe`)."""
    return recipe(spec).softmax_saves_input


def follows_measured_order(spec: TrainingSpec, kbit: bool = False) -> bool:
    """Whether the step's allocation order is the plain loop's (what the CUDA allocator
    simulation replays): no chunked or non-upcast loss, no kept output from the recipe, no
    k-bit preparation (unless ``kbit``: the caller replays its order), no op-level selective
    policy, non-reentrant checkpointing."""
    r = recipe(spec)
    return (r.loss_chunking == "none" and r.loss_upcast_fp32 and not r.keep_outputs and (kbit or not kbit_fp32(spec))
            and not reentrant_checkpoint(spec) and r.zero_grad_set_to_none
            and not (spec.grad_ckpt == "selective" and r.selective_policy != "attention-core"))
