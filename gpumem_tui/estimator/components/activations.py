"""Activations of the whole model: the layers' saved tensors times ``L`` (or what checkpointing
keeps of them), the tensors saved outside the layers, and what a frozen LoRA base does not save
(bytes, one micro-batch). The per-layer rules are in :mod:`.activations_per_layer`.

Activation terms are *saved-for-backward* tensors of the Hugging Face ``transformers``
implementation of each model type, counted tensor by tensor (the way Korthikanti et al. 2022,
arXiv 2205.05198, Sec. 4.1 derive ``sbh(34 + 5as/h)`` for a GPT layer) and then checked
against torch's ``MemTracker``.
"""

from __future__ import annotations

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.components.kernels import dropout_mask_bytes
from gpumem_tui.estimator.components.activations_per_layer import layer_activations, mlp_activation_saved_bytes
from gpumem_tui.estimator.components.lora import lora_targets
from gpumem_tui.estimator.precision import precision
from gpumem_tui.estimator.recipes import rules as R
from gpumem_tui.estimator.spec import TrainingSpec


def activation_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """All saved activations at the end of the forward (bytes), excluding logits/loss.

    No checkpointing: ``L`` layers (:func:`layer_activations`) + the fixed part. Full
    checkpointing keeps each layer's input (``bsh e``) only (HF gradient checkpointing wraps
    whole layers; Chen et al. 2016, arXiv 1604.06174). Selective recomputation drops the
    ``s^2`` attention terms (Korthikanti et al. 2022, Sec. 5). Tensor parallelism with
    sequence parallelism divides every layer term by ``t`` (Korthikanti eq. (5)); pipeline
    parallelism (1F1B) keeps ``p`` micro-batches of ``L/p`` layers on the first stage = ``L``
    layers' worth (Korthikanti Sec. 4.2.3).
    """
    layer = layer_activations(arch, spec, b, s)
    per = layer.total
    if spec.grad_ckpt == "selective":
        per -= layer.quadratic
    extra = 0
    if spec.grad_ckpt == "full":
        per = checkpoint_input_bytes(arch, spec, b, s)
        extra = checkpoint_mask_bytes(arch, spec, b, s)
    per = per / spec.tp
    total = per * arch.num_layers
    if arch.dense_layers and spec.grad_ckpt != "full":
        # leading dense layers of a MoE model save a dense MLP's tensors instead of the experts'
        dense = layer_activations(arch.dense_variant(), spec, b, s)
        total += arch.dense_layers * ((dense.total - (dense.quadratic if spec.grad_ckpt == "selective" else 0)) / spec.tp
                                      - per)
    return int(total + extra + fixed_activation_bytes(arch, spec, b, s))


def fixed_activation_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """Saved activations outside the layers (bytes): token ids and shifted labels (int64),
    position ids, embedding LayerNorm/dropout, final norm and the LM-head input, BERT's MLM
    transform; rotary cos/sin tables. Logits and log-probabilities are in
    :func:`.logits_loss.logits_loss_bytes`. Source: the ``transformers`` modules, counted as in
    :func:`layer_activations`."""
    prec = precision(spec)
    e = prec.compute
    h = arch.hidden_size
    bs = b * s
    mask_b = dropout_mask_bytes(spec, e)
    out = bs * 8  # input ids, saved by the embedding backward
    if arch.coarse:
        return out + 2 * bs * h * e
    if arch.kind == "decoder":
        out += bs * 8 + 4  # shifted labels saved by nll_loss, the loss scalar
    else:
        out += 2 * s * 8 + e  # position / token-type id slices, loss in compute dtype
    if arch.learned_positions and arch.family.buffers != "position_ids":
        # position ids (BERT slices its buffer instead; OPT computes one row per sequence)
        out += (bs if arch.family.positions_from_mask else s) * 8
    if arch.embed_width != h:
        # project_in keeps the narrow embedding output, the LM head the narrow project_out output
        out += 2 * bs * arch.embed_width * e
    # under autocast the embeddings (fp32 weights, no autocast op) and the residual stream
    # they start stay fp32: the embedding dropout and the LayerNorms around it see fp32 inputs
    res = 4 if prec.amp else e
    emb_mask = dropout_mask_bytes(spec, res)
    if arch.family.embedding_norm:
        out += bs * h * res + 2 * bs * 4  # embedding LayerNorm input + stats
        if arch.embedding_dropout > 0:
            out += bs * h * emb_mask
        if arch.head == "mlm":
            # transform: dense input (last layer output), GELU input, LayerNorm input + stats,
            # decoder input
            out += 4 * bs * h * e + 2 * bs * 4
        elif arch.head == "classification":
            out += 2 * b * h * e + b * h * mask_b
        return int(out)
    if arch.embedding_dropout > 0:
        out += bs * h * emb_mask
    if arch.norm == "layernorm":
        if arch.final_norm:
            out += bs * h * (res + e) + 2 * bs * 4  # final LayerNorm input + stats, LM-head input
        else:
            out += bs * h * e  # the last layer's (post-norm) output feeds the head
    elif arch.family.norm_offset_fp32:
        # final (1 + w) RMSNorm (no fp32 normalized product when frozen), LM-head input, the
        # embedding scale factor
        lora = spec.task in ("lora", "qlora")
        out += (1 if lora else 2) * bs * h * 4 + bs * 4 + h * 4 + bs * h * e + e
    else:
        # final RMSNorm input (fp32 upcast / fp32 residual), rsqrt, normalized (fp32 under
        # autocast or with an fp32 weight multiply), LM-head input (its 16-bit cast under autocast)
        out += bs * h * 4 + bs * 4 + bs * h * ((4 if arch.family.norm_weight_fp32 else res) + e)
    if arch.learned_positions == 0:
        out += arch.family.rotary_sets * 2 * s * arch.rotary_dims * e  # rotary cos and sin
    if spec.task in ("lora", "qlora"):
        out -= _frozen_savings(arch, spec, b, s)
    return int(out)


def _frozen_savings(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """What a frozen base does not save (LoRA): the LM head keeps no input, the final RMSNorm
    no normalized copy, and nothing before the first adapter needs a gradient -- the
    embedding keeps no ids, its dropout no mask, layer 0's input norm nothing (autograd saves
    only for ops with an input that requires grad)."""
    e = precision(spec).compute
    bs, h = b * s, arch.hidden_size
    saved = bs * h * e + bs * 8  # LM-head input, ids
    if arch.norm == "rmsnorm":
        if not arch.family.norm_offset_fp32:  # (Gemma 2's frozen final norm is counted without it)
            saved += bs * h * (4 if precision(spec).amp else e)  # final norm's normalized copy (weight frozen)
        saved += bs * h * 4 + bs * 4  # layer 0 input norm
    elif spec.grad_ckpt != "full":
        # (under full checkpointing with LoRA ``enable_input_require_grads`` makes the
        # embedding output require grad: layer 0's norm is part of its recompute like the others)
        saved += bs * h * e + 2 * bs * 4  # layer 0 LayerNorm input + stats
        if arch.learned_positions and arch.family.buffers != "position_ids":
            saved += s * 8
    if arch.embedding_dropout > 0:
        saved += bs * h * dropout_mask_bytes(spec, e)
    return saved + _layer0_parallel_mlp_savings(arch, spec, bs)


def _layer0_parallel_mlp_savings(arch: ModelArchitecture, spec: TrainingSpec, bs: int) -> int:
    """Layer 0's MLP activation saves nothing under LoRA in a parallel block (GPT-NeoX, Falcon,
    Phi) when no adapter sits on the MLP's first projection: the MLP reads the frozen
    embedding output through a frozen norm and a frozen Linear, so no input of the activation
    requires grad (autograd saves only for such ops); in a sequential block the MLP reads the
    attention output, which does. Measured, MemTracker on meta (GPT-NeoX, LoRA q/v, 1, 2 and
    4 layers): the backward peak sat ``b s f e`` (the GELU input) below the estimate at every
    depth. Under full checkpointing layer 0 keeps only its input anyway: nothing to take off."""
    targets = {l.role for l in lora_targets(arch, spec)}
    if spec.grad_ckpt == "full" or not arch.family.parallel_residual or arch.gated_mlp or arch.num_experts or targets & {"up", "gate", "gate_up"}:
        return 0
    return mlp_activation_saved_bytes(arch, spec, bs) if arch.activation != "relu" else 0


def final_saved_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """Saved bytes of the final norm and the LM-head input (part of
    :func:`fixed_activation_bytes`), freed before the layers run backward."""
    if arch.coarse:
        return 0
    e = precision(spec).compute
    bs, h = b * s, arch.hidden_size
    lora = spec.task in ("lora", "qlora")
    if arch.kind != "decoder":
        return 4 * bs * h * e + 2 * bs * 4 if arch.head == "mlm" else 0
    if arch.norm == "layernorm":
        return bs * h * e + 2 * bs * 4 + (0 if lora else bs * h * e)
    if arch.family.norm_offset_fp32:
        return (1 if lora else 2) * bs * h * 4 + bs * 4 + h * 4 + (0 if lora else bs * h * e)
    res = 4 if precision(spec).amp or arch.family.norm_weight_fp32 else e
    return bs * h * 4 + bs * 4 + (0 if lora else bs * h * (res + e))


def checkpoint_input_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """What a fully checkpointed layer keeps (bytes): its input hidden state ``b s h``, in the
    compute dtype, or fp32 under autocast (the residual stream stays fp32: fp32 embeddings and
    type-promoting residual adds; measured, MemTracker, CPU autocast Gemma 2 with
    checkpointing: fp32 ``add [b, s, h]`` per layer). HF gradient checkpointing wraps whole
    layers (``torch.utils.checkpoint``, non-reentrant; Chen et al. 2016, arXiv 1604.06174)."""
    e = R.residual_stream_bytes(spec, precision(spec).compute)  # fp32 after k-bit preparation
    return b * s * arch.hidden_size * (4 if precision(spec).amp else e)


def checkpoint_recompute_shared_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """Bytes of a re-run checkpointed layer's saved set that are its checkpointed input itself
    (already counted by :func:`checkpoint_input_bytes`). An RMSNorm saves its fp32 input: a
    new upcast copy of a 16-bit input, but the input tensor itself when that already is fp32
    (fp32 compute, or the fp32 residual stream under autocast): ``hidden_states.to(
    torch.float32)`` is a no-op (transformers ``LlamaRMSNorm`` / ``Gemma2RMSNorm``; measured,
    MemTracker, CPU, Gemma 2 fp32 and autocast with checkpointing: layer backward peaks one
    ``b s h x 4`` below "checkpoint input + full layer set")."""
    if arch.norm != "rmsnorm" or arch.coarse:
        return 0
    prec = precision(spec)
    return b * s * arch.hidden_size * 4 if prec.amp or prec.compute == 4 else 0


def checkpoint_mask_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int,
                          first_layer: bool = False) -> int:
    """Float attention masks kept as inputs of the checkpointed layers until backward (bytes).

    transformers builds a ``(b, 1, s, s)`` float mask for eager attention only
    (``masking_utils``; SDPA without padding gets ``is_causal`` and no mask), in the dtype of
    the embedding output -- fp32 under autocast (measured, MemTracker, CPU: ``where [b, 1, s,
    s]`` f32 under autocast, none with SDPA). Gemma 2 alternates sliding-window and full
    layers and builds one mask per kind: both are alive until the last layer of a kind has run
    backward; ``first_layer`` gives what is left while layer 0 runs backward (measured: two
    ``where`` at the log-softmax and last-layer backward, one at layer 0)."""
    e = 4 if precision(spec).amp else precision(spec).compute
    if arch.kind == "decoder" and arch.alibi:
        # ALiBi (Falcon): the bias folded into one ``(b, a, s, s)`` float mask for every
        # attention path (transformers ``FalconModel.forward``, ``masked_fill``; measured,
        # MemTracker on meta: ``masked_fill [b, a, s, s]`` alive at the log-softmax backward)
        return b * arch.num_heads * s * s * e
    if arch.kind != "decoder" or not (spec.attention == "eager" or not arch.family.sdpa):
        return 0
    both = arch.family.mask_per_attention_kind and 0 < arch.sliding_layers < arch.num_layers and not first_layer
    return (2 if both else 1) * b * s * s * e
