"""The recipe interface: what a training framework does around the model that changes memory.

A :class:`Recipe` is data (frozen). :mod:`gpumem_tui.estimator.recipes.rules` is the one
mechanism that reads it; the component rules ask it (never a recipe's name) whether the
training forward fills a KV cache, which loss buffers exist, what a checkpointed layer keeps,
which optimizer implementation runs, and what k-bit preparation casts.
"""

from __future__ import annotations

from dataclasses import dataclass

#: where the loop's ``use_cache`` comes from in a training forward
TRAINING_CACHE = ("config", "off", "device")
#: what a full-checkpointed layer's backward recomputes with
CHECKPOINT_IMPLS = ("non-reentrant", "reentrant")
#: what ``--grad-ckpt selective`` means under this recipe
SELECTIVE_POLICIES = ("attention-core", "op-every-other-mm")
#: how the loss chunks the logits: one piece, a fixed number of pieces, or pieces of N positions
LOSS_CHUNKING = ("none", "count", "positions")


@dataclass(frozen=True, slots=True)
class Recipe:
    """What one training framework does that changes a step's memory (frozen).

    Fields:
        name: the ``--recipe`` name; title: one line for ``--list-recipes``.
        source: the framework file(s) the description was read from; version: their version.
        training_cache: ``config`` (the forward is called without ``use_cache``, so a
            transformers model with ``use_cache=true`` fills a ``DynamicCache`` in training),
            ``off`` (the loop passes ``use_cache=False`` or its models have no HF cache) or
            ``device`` (gpumem-tui's own ``measure`` loop: the device profile's
            ``training_forward_fills_cache``; cuda on, cpu/meta off).
        keep_outputs: the loop holds the model output (its logits) through backward.
        loss_upcast_fp32: the loss upcasts the logits to fp32 before ``log_softmax``.
        loss_chunking, loss_chunk: ``none``; ``count`` (``loss_chunk`` pieces along the
            tokens); ``positions`` (pieces of ``loss_chunk`` positions each).
        checkpoint_impl: ``non-reentrant`` or ``reentrant`` ``torch.utils.checkpoint``.
        selective_policy: ``attention-core`` (Megatron: recompute the attention core, drop the
            ``s^2`` terms) or ``op-every-other-mm`` (torchtitan op-level SAC).
        default_grad_ckpt: checkpointing the recipe turns on when the user names none (None:
            off).
        optimizer_impl: the optimizer implementation the recipe builds by default
            (``single`` | ``foreach`` | ``fused``; None: torch's default for the device).
        zero_grad_set_to_none: ``zero_grad`` frees gradients (False keeps them allocated).
        kbit_fp32_non_quantized: with a quantized base model, every 16-bit parameter that is not
            quantized (embeddings, norms, LM head) is cast to fp32, so the residual stream and
            the logits are fp32 too.
        input_requires_grad: the embedding output is made to require grad (for reentrant
            checkpointing over frozen embeddings).
        autocast_16bit_weights: with 16-bit weights (``--dtype bf16|fp16`` without
            ``--mixed-precision``) the loop still runs the forward under ``torch.autocast`` of
            that dtype (transformers ``Trainer`` with ``bf16=True`` / ``fp16=True``: accelerate's
            native AMP wraps ``model.forward`` whatever the weights' dtype). Ops on 16-bit
            tensors barely change, but an fp32 tensor met in the forward (peft's fp32 LoRA
            adapters, k-bit preparation's fp32 norms and head) is cast back to 16 bits.
        softmax_saves_input: the torch the recipe runs on keeps the input of ``softmax`` for
            backward as well as its output (torch <= 1.10: ``derivatives.yaml`` gave ``_softmax``
            the formula ``_softmax_backward_data(grad, result, dim, self)``, so autograd saved
            ``self``; pytorch/pytorch#64000, fixed by #66018 in torch 1.11).
        notes: assumptions the estimate lists.
    """

    name: str
    title: str
    source: str
    version: str
    training_cache: str = "config"
    keep_outputs: bool = False
    loss_upcast_fp32: bool = True
    loss_chunking: str = "none"
    loss_chunk: int = 1
    checkpoint_impl: str = "non-reentrant"
    selective_policy: str = "attention-core"
    default_grad_ckpt: str | None = None
    optimizer_impl: str | None = None
    zero_grad_set_to_none: bool = True
    kbit_fp32_non_quantized: bool = False
    input_requires_grad: bool = False
    autocast_16bit_weights: bool = False
    softmax_saves_input: bool = False
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for value, allowed, what in (
            (self.training_cache, TRAINING_CACHE, "training_cache"),
            (self.checkpoint_impl, CHECKPOINT_IMPLS, "checkpoint_impl"),
            (self.selective_policy, SELECTIVE_POLICIES, "selective_policy"),
            (self.loss_chunking, LOSS_CHUNKING, "loss_chunking"),
        ):
            if value not in allowed:
                raise ValueError(f"recipe {self.name}: {what} must be one of {', '.join(allowed)}, got {value!r}")
        if self.loss_chunk < 1:
            raise ValueError(f"recipe {self.name}: loss_chunk must be >= 1")
        if self.optimizer_impl not in (None, "single", "foreach", "fused"):
            raise ValueError(f"recipe {self.name}: unknown optimizer_impl {self.optimizer_impl!r}")
        if self.default_grad_ckpt not in (None, "none", "selective", "full"):
            raise ValueError(f"recipe {self.name}: unknown default_grad_ckpt {self.default_grad_ckpt!r}")
