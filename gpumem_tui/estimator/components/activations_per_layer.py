"""Activations of one transformer layer: the tensors it saves for backward, per ``transformers``
implementation (bytes, one micro-batch). :mod:`.activations` adds up the layers.

Notation (ESTIMATOR.md): ``b`` micro-batch, ``s`` sequence length, ``h`` hidden size, ``a``
heads, ``k`` KV heads, ``d`` head dim, ``f`` MLP width, ``q = a d`` and ``kv = k d`` the
projection widths, ``r`` LoRA rank, ``e`` bytes per compute element.

Activation terms are *saved-for-backward* tensors of the Hugging Face ``transformers``
implementation of each model type, counted tensor by tensor (the way Korthikanti et al. 2022,
arXiv 2205.05198, Sec. 4.1 derive ``sbh(34 + 5as/h)`` for a GPT layer) and then checked
against torch's ``MemTracker``. The constant 34 is not reused: it assumes GELU 4h MLPs,
LayerNorm, dropout and 16-bit masks; each family here gets its own count, and the device
profile decides kernel details (a CPU dropout keeps a noise tensor in the compute dtype, a
CUDA dropout a 1-byte mask; CPU SDPA with dropout falls back to the math path).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.components.kernels import (
    amp_softmax_fp32, attention_elem, broadcast_kv_copies, dropout_mask_bytes, fused_sdpa, sdpa_math,
    sdpa_output_copied, v_pins_fused_qkv, v_pins_fused_qkv_eager)
from gpumem_tui.estimator.components.kv_cache import training_cache_copies
from gpumem_tui.estimator.components.lora import lora_targets, peft_fp32
from gpumem_tui.estimator.devices import cuda_autocast, peft_lora
from gpumem_tui.estimator.precision import Precision, precision
from gpumem_tui.estimator.recipes import rules as R
from gpumem_tui.estimator.spec import TrainingSpec

#: tensors of the MLP's width that HF ``FastGELUActivation`` (``gelu_fast``: ``0.5 x (1 +
#: tanh(0.7978845608 x (1 + 0.044715 x x)))``, transformers ``activations.py``) keeps for
#: backward, run op by op: ``x`` and ``0.044715 x`` (their product), ``0.7978845608 x`` and
#: ``1 + 0.044715 x x`` (their product), the ``tanh`` output, ``0.5 x`` and ``1 + tanh``
GELU_FAST_SAVED = 7


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Saved-for-backward bytes of one transformer layer for one micro-batch.

    ``replicated``: tensors outside the tensor-parallel regions (norm inputs/outputs,
    residual dropout masks) -- divided by ``t`` only with sequence parallelism;
    ``parallel``: tensors inside attention and MLP (divided by ``t``);
    ``quadratic``: the part of ``parallel`` that grows with ``s^2`` (scores, softmax,
    attention dropout), the part selective recomputation drops.
    """

    replicated: int
    parallel: int
    quadratic: int

    @property
    def total(self) -> int:
        """All saved bytes of the layer: ``replicated + parallel``."""
        return self.replicated + self.parallel


@dataclass(slots=True)  # not frozen: a frozen init costs ~10x, and this is built per call
class _Layer:
    """What every rule of one layer reads: the model, the spec, the shapes and the element
    sizes (``e`` compute bytes, ``mask_b`` dropout-mask bytes per element), which Linears are
    adapted (LoRA; ``d_in_of`` their input widths) and which dropouts are active (training
    only)."""

    arch: ModelArchitecture
    spec: TrainingSpec
    prec: Precision
    e: int
    b: int
    s: int
    bs: int
    lora: bool
    targets: frozenset[str]
    d_in_of: dict[str, int]
    peft32: bool
    mask_b: int
    p_attn: bool
    p_hid: bool

    def saves_input(self, role: str) -> bool:
        """Whether the Linear of ``role`` saves its input: every trained one; with LoRA only
        adapted ones, and none with peft's fp32 adapters (``lora_A`` saves its own fp32 copy
        instead, counted by :meth:`lora_extra`)."""
        return not self.lora or (role in self.targets and not self.peft32)

    def lora_extra(self, role: str) -> int:
        """Bytes an adapted Linear of ``role`` saves beyond the base layer (``peft_lora``)."""
        if not (self.lora and role in self.targets):
            return 0
        return peft_lora.saved_bytes_per_linear(self.bs, self.d_in_of[role], self.spec.lora_rank or 0, self.e,
                                                not self.peft32, R.autocast_over_16bit_weights(self.spec))


def _layer(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> _Layer:
    """The :class:`_Layer` record of one layer of ``arch`` under ``spec`` at ``b x s`` tokens."""
    prec = precision(spec)
    lora = spec.task in ("lora", "qlora")
    train_mode_dropout = spec.task != "inference"
    return _Layer(
        arch=arch, spec=spec, prec=prec, e=prec.compute, b=b, s=s, bs=b * s, lora=lora,
        targets=frozenset(l.role for l in lora_targets(arch, spec)) if lora else frozenset(),
        d_in_of={l.role: l.d_in for l in arch.layer_linears()} if lora else {},
        peft32=peft_fp32(spec), mask_b=dropout_mask_bytes(spec, prec.compute),
        p_attn=arch.attention_dropout > 0 and train_mode_dropout, p_hid=arch.hidden_dropout > 0 and train_mode_dropout)


def layer_activations(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> LayerActivations:
    """Saved activations of one layer (bytes), per ``transformers`` implementation.

    Derivation (each item one saved tensor; Korthikanti et al. 2022, Sec. 4.1 method):

    - LayerNorm (GPT-2, BERT): input ``bsh e`` + mean/rstd ``2 bs x 4``; its output is saved
      by the next Linear. RMSNorm (Llama family): fp32 upcast ``bsh x 4``, normalized
      ``bsh e`` (saved by the weight multiply), output ``bsh e``, rsqrt ``bs x 4``; Gemma 2's
      ``(1 + w)`` RMSNorm keeps its normalized product in fp32 and the fp32 ``1 + w``.
    - Eager attention: q, k, v as matmul operands (``bsq e`` each; GQA keys/values are
      repeated to ``a`` heads by ``repeat_kv``), softmax output (fp32 in the Llama family,
      then cast), dropout mask + output when attention dropout is on, output projection
      input (at ``b = 1`` and short sequences torch sometimes keeps the fused ``c_attn``
      output instead of the copies: up to +2 bsh e per layer, not modelled).
    - Fused SDPA / FlashAttention (Dao et al. 2022, arXiv 2205.14135): q, k, v (k, v at ``k``
      heads), output and the fp32 log-sum-exp ``b a s x 4`` instead of the ``s x s`` terms.
    - MLP: GELU (``gelu_new`` keeps 4 intermediates of its tanh formula + output; exact and
      tanh ``F.gelu`` keep input + output), gated SwiGLU/GeGLU keeps gate, act(gate), up and
      their product (``4 bsf e``; fp32 after k-bit preparation, whose 4-bit Linears return
      their fp32 input's dtype). Residual dropout keeps a mask per sub-block.
    - LoRA / QLoRA: frozen Linears keep no input, adapted ones keep their input and
      ``x A^T`` (``bs r e``); frozen norm weights keep no normalized copy.

    Raises nothing; ``arch.coarse`` models use the GPT formula of Korthikanti eq. (1)
    re-expressed for the dtype.
    """
    if arch.coarse:
        return _coarse_layer(arch, spec, b, s)
    c = _layer(arch, spec, b, s)
    rep = _layernorm_saved(c) if arch.norm == "layernorm" else _rmsnorm_saved(c)
    par, quad = _attention_saved(c)
    par += _qk_norm_saved(c)
    if arch.mla:
        par += _mla_extra(arch, spec, b, s, c.lora)
    if c.p_hid and arch.norm != "layernorm":
        rep += 2 * c.bs * arch.hidden_size * c.mask_b
    par += _mlp_saved(c)
    for role in ("q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up"):
        par += c.lora_extra(role) * (arch.num_experts or 1 if role in ("gate", "up", "down", "gate_up") else 1)
    par += quad
    rep += _amp_layernorm_inputs(c)
    return LayerActivations(replicated=int(rep), parallel=int(par), quadratic=int(quad))


def _coarse_layer(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> LayerActivations:
    """A ``--params`` model without layer shapes: Korthikanti eq. (1) (16-bit, with dropout),
    ``sbh(34 + 5as/h)`` bytes, scaled by ``e/2``; fused attention keeps no ``s x s`` tensors
    (the ``5as/h`` term vanishes)."""
    e = precision(spec).compute
    h, a, bs = arch.hidden_size, arch.num_heads, b * s
    quad = 0 if fused_sdpa(arch, spec) else 5 * a * s * s * b * e // 2
    return LayerActivations(replicated=bs * h * 10 * e // 2, parallel=bs * h * 24 * e // 2 + quad, quadratic=quad)


def _layernorm_saved(c: _Layer) -> int:
    """LayerNorms (two per layer; one shared by attention and MLP in a parallel block): input
    + mean/rstd stats; the output is saved by the following Linear(s); residual dropout masks."""
    arch, bs, h, e = c.arch, c.bs, c.arch.hidden_size, c.e
    # a parallel block's two norms (GPT-NeoX) read the same layer input: saved once
    inputs_read = 1 if arch.family.parallel_residual else arch.norms_per_layer
    rep = inputs_read * bs * h * e + arch.norms_per_layer * 2 * bs * 4
    first_roles = ("qkv",) if arch.fused_qkv else ("q", "k", "v")
    # post-norm (BERT): the attention-block input is the previous layer's LayerNorm output,
    # saved once
    attn_in = any(c.saves_input(role) for role in first_roles) or arch.post_norm
    mlp_in = c.saves_input("up")
    if arch.norms_per_layer == 1:
        rep += bs * h * e if attn_in or mlp_in else 0  # one norm output feeds both blocks
    else:
        rep += bs * h * e * (int(attn_in) + int(mlp_in))
    if c.p_hid:
        rep += 2 * bs * h * c.mask_b
    return rep


def _rmsnorm_saved(c: _Layer) -> int:
    """RMSNorms: fp32 input (upcast), rsqrt, the normalized copy a trained weight's multiply
    saves, and the output the next Linear(s) save; Gemma 2's ``(1 + w)`` norms in fp32."""
    arch, bs, h, e = c.arch, c.bs, c.arch.hidden_size, c.e
    gemma = arch.family.norm_offset_fp32
    amp_rms = c.prec.amp and not gemma
    rep = 0
    for i in range(arch.norms_per_layer):
        feeds_linear = i in (0, 1) if not gemma else i in (0, 2)
        if gemma:
            # fp32 input (or its upcast), rsqrt, fp32 ``1 + w``; the fp32 normalized product
            # only when the weight is trained (``x * (1 + w)``'s backward for w needs x;
            # measured, LoRA with frozen norms: one bsh x 4 per norm, note 15)
            rep += (1 if c.lora else 2) * bs * h * 4 + bs * 4 + h * 4
        else:
            # fp32 input (the upcast copy; under autocast the fp32 residual itself), rsqrt
            rep += bs * h * 4 + bs * 4
            if not c.lora:
                # normalized, saved by the (trainable) weight multiply: in the compute
                # dtype, or fp32 under autocast (``input_dtype`` is the fp32 residual's)
                rep += bs * h * (4 if amp_rms or arch.family.norm_weight_fp32 else e)
        if feeds_linear:
            roles = (("qkv",) if arch.fused_qkv else ("q", "k", "v")) if i == 0 else (
                ("gate_up",) if arch.fused_gate_up else ("gate", "up"))
            saving = sum(1 for role in roles if c.saves_input(role))
            if c.prec.amp:
                # under autocast the fp32 norm output is cast to 16 bits by every Linear
                # that reads it, and each saves its own cast (autocast caches only leaf
                # weight casts: ``cached_cast``, aten/src/ATen/autocast_mode.h); measured,
                # MemTracker, llama CPU autocast: 5 ``_to_copy [b, s, h]`` per layer
                rep += saving * bs * h * e
            elif saving:
                rep += bs * h * e
    return rep


def _attention_saved(c: _Layer) -> tuple[int, int]:
    """The attention core's saved bytes as ``(parallel, quadratic)``: ``quadratic`` (the
    ``s x s`` tensors) is not part of ``parallel`` here."""
    if fused_sdpa(c.arch, c.spec):
        return _fused_attention_saved(c), 0
    if sdpa_math(c.arch, c.spec):
        return _math_attention_saved(c)
    return _eager_attention_saved(c)


def _fused_attention_saved(c: _Layer) -> int:
    """Fused SDPA / FlashAttention (Dao et al. 2022, arXiv 2205.14135): q, k, v, the output
    and the fp32 log-sum-exp ``b a s x 4``, no ``s x s`` terms."""
    arch, spec, b, s, bs, e = c.arch, c.spec, c.b, c.s, c.bs, c.e
    q, kv = arch.q_dim, arch.kv_dim
    # q, k, v: separate projections' outputs (or their rotary / cache copies, same size),
    # or views of a fused projection, which pin its whole b s (q + 2 kv) output
    par = bs * (q + 2 * kv) * e
    par += cuda_masked_sdpa_extra_bytes(arch, spec, b, s)
    if arch.fused_qkv:
        cache = training_cache_copies(arch, spec)
        if not arch.learned_positions and not cache:
            par += bs * (q + kv) * e  # rotary q, k are new tensors; v still pins the fused output
        elif arch.learned_positions and cache:
            par += 2 * bs * kv * e  # q still pins the fused output; k, v are the cache's copies
        # (rotary and a cache: q is new, k and v the cache's copies; the fused output is freed)
    par += bs * q * e + b * arch.num_heads * s * 4  # output (the o-projection input) + log-sum-exp
    if sdpa_output_copied(arch, spec):
        par += bs * q * e  # the o-projection saves a (b, s, a, d) copy of the output
    return par


def _math_attention_saved(c: _Layer) -> tuple[int, int]:
    """SDPA's math path (CPU training with attention dropout, see
    :func:`.kernels.sdpa_math`): scaled q and k^T, v (fp32 for 16-bit inputs), the softmax
    output, the dropout noise and its product; only the output is cast back to the compute
    dtype (:func:`.kernels.attention_elem`). Returns ``(parallel, quadratic)``."""
    arch, b, s, bs, e = c.arch, c.b, c.s, c.bs, c.e
    q, kv = arch.q_dim, arch.kv_dim
    ae = attention_elem(arch, c.spec, e)
    par = (bs * (q + 2 * kv) if arch.family.eager_qkv == "fused_bmm" else 3 * bs * q) * ae
    par += broadcast_kv_copies(arch, b, s, ae)
    if v_pins_fused_qkv(arch, c.spec, b):
        par += bs * (q + kv) * e
    quad = b * arch.num_heads * s * s * ae * (3 if c.p_attn else 1)
    if c.saves_input("o"):
        par += bs * q * e
    return par, quad


def _eager_attention_saved(c: _Layer) -> tuple[int, int]:
    """Eager attention: q, k, v as matmul operands (GQA keys / values repeated to ``a`` heads
    by ``repeat_kv``), the softmax output (fp32 in the Llama family, then cast), dropout mask
    and product, the o-projection input. Returns ``(parallel, quadratic)``."""
    arch, b, s, bs, e = c.arch, c.b, c.s, c.bs, c.e
    q, kv = arch.q_dim, arch.kv_dim
    sq = b * arch.num_heads * s * s
    par = quad = 0
    if arch.family.eager_qkv == "fused_bmm":
        par += bs * (q + 2 * kv) * e  # q, k^T, v copies made by batched matmul
        par += broadcast_kv_copies(arch, b, s, e)
    elif arch.family.eager_qkv == "separate":
        par += 3 * bs * q * e
    else:
        par += 3 * bs * q * e  # q, repeat_kv(k), repeat_kv(v) at a heads
        if v_pins_fused_qkv_eager(arch, b):
            # Phi-3 at b = 1: v is a head-split view of the fused qkv output that the batched
            # matmul can use without a copy (batch and head dims fold into one stride;
            # repeat_kv is a no-op without GQA), so the saved v pins the whole
            # ``b s (q + 2 kv)`` output instead of a ``b s kv`` copy (as
            # :func:`.kernels.v_pins_fused_qkv` for GPT-2; measured, MemTracker: phi-3 fp32 b=1
            # s=2048 LoRA, +2 b s h x 4 per layer)
            par += bs * (q + kv) * e
    amp32 = not arch.family.softmax_fp32 and amp_softmax_fp32(arch, c.spec)
    if amp32:
        # fp32 softmax output (saved by its backward) and a 16-bit copy for the matmul.
        # GPT-2 casts right after the softmax (``attn_weights.type(value.dtype)``), so its
        # dropout keeps a mask and a 16-bit product; BERT's dropout runs on the fp32
        # probabilities and the matmul's autocast makes the 16-bit copy. Either way dropout
        # keeps only its mask (derivatives.yaml ``native_dropout``: ``result1``), so BERT's
        # fp32 dropout output dies at the cast
        quad += sq * (4 + e)
        if c.p_attn:
            quad += sq * c.mask_b
    elif not arch.family.softmax_fp32:
        quad += sq * e  # softmax output
    else:
        quad += sq * 4  # softmax in fp32
        if e != 4:
            quad += sq * e  # cast back to the compute dtype
        if arch.attn_logit_softcapping:
            quad += sq * e  # tanh output of the soft-capping
    if c.p_attn and not amp32:
        quad += sq * (c.mask_b + e)
    if R.softmax_saves_input(c.spec):
        # torch <= 1.10 also kept softmax's input, the scores (fp32 when the softmax runs in
        # fp32); recipes.description.Recipe.softmax_saves_input
        quad += sq * (4 if amp32 or arch.family.softmax_fp32 else e)
    if c.saves_input("o"):
        par += bs * q * e
    return par, quad


def _qk_norm_saved(c: _Layer) -> int:
    """Query / key RMSNorms (Qwen3, Gemma 3 per head; OLMo 2 over the projection): the fp32
    upcast of q and k (the projection output itself when it already is fp32), the normalized
    copy saved by the trained weight's multiply, one rsqrt per normalized row (measured,
    MemTracker: (q + kv) bs (4 + e) + bs (a + k) 4 per layer, Qwen3 fp32/bf16)."""
    arch = c.arch
    if arch.family.qk_norm == "none":
        return 0
    rows = arch.num_heads + arch.num_kv_heads if arch.family.qk_norm == "head" else 2
    normalized = 0 if c.lora else 4 if arch.family.norm_weight_fp32 else c.e
    return c.bs * (arch.q_dim + arch.kv_dim) * (4 + normalized) + c.bs * rows * 4


def _mlp_saved(c: _Layer) -> int:
    """The MLP's saved bytes: gated SwiGLU/GeGLU keeps gate, act(gate), up and their product
    (``4 bsf e``; MoE: per routed expert, plus router logits and the combine's inputs, and a
    shared expert); a plain MLP its activation's saved tensors
    (:func:`mlp_activation_saved_bytes`) and the down projection's input."""
    arch, bs, f, e = c.arch, c.bs, c.arch.intermediate_size, c.e
    h = arch.hidden_size
    if arch.gated_mlp:
        n_tok_mult = arch.experts_per_token if arch.num_experts else 1
        # after k-bit preparation gate and up are Linear4bit outputs in the fp32 stream's
        # dtype, so the activation and the product (not autocast ops) run in fp32 too
        # (measured, H100, tests/data/recipes_cuda QLoRA b2: +1.5 GiB over 16 layers)
        mlp_e = R.residual_stream_bytes(c.spec, e)
        mlp = 3 * bs * f * mlp_e  # act input (gate), act output, up
        if c.saves_input("down"):
            mlp += bs * f * e
        mlp *= n_tok_mult
        if arch.num_experts:
            mlp += bs * arch.num_experts * 4 + 2 * bs * h * e * arch.experts_per_token
        if arch.shared_expert_size:
            # the shared expert is a dense gated MLP on every token (gate, act, up, product);
            # its sigmoid gate keeps the gate's output and the expert's output for the product
            mlp += 4 * bs * arch.shared_expert_size * e
            if arch.family.shared_expert_gate:
                mlp += bs * h * e + 2 * bs * e
        return mlp
    mlp = mlp_activation_saved_bytes(arch, c.spec, bs)
    # ReLU saves its output, which is also the down projection's input: one tensor
    if c.saves_input("down") and arch.activation != "relu":
        mlp += bs * f * e
    return mlp


def mlp_activation_saved_bytes(arch: ModelArchitecture, spec: TrainingSpec, bs: int) -> int:
    """Bytes a plain (not gated) MLP's activation function saves for ``bs`` tokens of width
    ``f``: ``gelu_new`` its tanh formula's intermediates
    (:func:`gpumem_tui.estimator.devices.cuda_autocast.gelu_new_saved_bytes_per_element`),
    ``gelu_fast`` :data:`GELU_FAST_SAVED` tensors, exact / tanh ``F.gelu`` and ReLU one
    ``bsf e`` tensor (input or output)."""
    prec = precision(spec)
    e, f = prec.compute, arch.intermediate_size
    if arch.activation == "gelu_new":
        return bs * f * cuda_autocast.gelu_new_saved_bytes_per_element(e, prec.amp and spec.device == "cuda")
    if arch.activation == "gelu_fast":
        return bs * f * GELU_FAST_SAVED * e
    return bs * f * e


def _amp_layernorm_inputs(c: _Layer) -> int:
    """Under autocast the residual stream is fp32 (fp32 embeddings; ``add`` promotes a 16-bit
    sub-block output with the fp32 residual), so both LayerNorm inputs are fp32: the bytes
    above their compute-dtype count, plus separate q / k / v Linears' own 16-bit casts."""
    arch, bs, h, e = c.arch, c.bs, c.arch.hidden_size, c.e
    if not (c.prec.amp and arch.norm == "layernorm"):
        return 0
    rep = arch.norms_per_layer * (4 - e) * bs * h
    if arch.family.amp_separate_qkv_casts:
        # separate query / key / value Linears each save their own 16-bit cast of the fp32
        # input: autocast caches casts of leaf weights only (``cached_cast``,
        # aten/src/ATen/autocast_mode.h); measured, MemTracker, CPU autocast: 3 casts
        rep += 2 * bs * h * e
    return rep


def cuda_masked_sdpa_extra_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """Saved bytes per layer that an explicit SDPA mask adds on CUDA (bytes; 0 elsewhere).

    A sliding-window layer whose sequence reaches its window (``s >= window``:
    ``masking_utils._ignore_causal_mask_sdpa`` skips the mask only while ``kv_length <
    local_attention_size``) gets an explicit boolean ``(b, 1, s, s)`` mask from transformers
    (``masking_utils.sdpa_mask``; below the window it passes ``is_causal`` and no mask). Then (1) transformers repeats k and v to every query
    head (``repeat_kv``; ``use_gqa_in_sdpa`` is false with a mask): two new ``b s (q - kv)``
    tensors saved by SDPA; (2) flash refuses the mask (``check_for_attn_mask``,
    ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``) and the memory-efficient kernel
    runs: ``scaled_dot_product_attention`` converts the boolean mask to a float bias in the
    query dtype (``convert_boolean_attn_mask``, ``attention.cpp``), a new ``b s s e`` tensor per
    layer call, which ``_scaled_dot_product_efficient_attention`` saves for backward
    (``attn_bias``; ``preprocess_mask`` only expands it, aligned at ``s`` a multiple of 16).
    Measured on the H100 (``dev_truth_h100.jsonl``, Mistral-7B LoRA b1 s8192, window 4096):
    the forward peak was 7756 MiB above the estimate without this rule, 32 x 224 MiB of it
    this rule. Only sliding-window layers are counted (full-attention layers get
    ``is_causal``).
    """
    if (spec.device != "cuda" or spec.attention != "sdpa" or not arch.family.sdpa or arch.kind != "decoder"
            or not arch.sliding_window or s < arch.sliding_window or not arch.sliding_layers
            or sdpa_math(arch, spec)):
        return 0
    e = precision(spec).compute
    share = arch.sliding_layers / max(1, arch.num_layers)
    per = 2 * b * s * (arch.q_dim - arch.kv_dim) * e + b * s * s * e
    return int(per * share)


def _mla_extra(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int, lora: bool) -> int:
    """Saved bytes of one multi-head-latent-attention layer beyond those of an MHA layer with
    ``qk_nope + qk_rope`` heads (transformers ``DeepseekV3Attention.forward``): the RMSNorms of
    the query and KV latents (fp32 upcast -- for fp32 compute the ``kv_a`` output the split
    latent is a view of --, rsqrt, normalized copy, output saved by ``q_b`` / ``kv_b``), the
    value as a view pinning the whole ``kv_b`` output, and an o-projection input of
    ``a v_head_dim``."""
    q_rank, kv_rank, nope, rope, v = arch.mla
    e = precision(spec).compute
    bs, a, qk = b * s, arch.num_heads, nope + rope
    normalized = 0 if lora else e
    out = 0
    for rank in (q_rank, kv_rank):
        if rank:
            out += bs * rank * (4 + normalized + e) + bs * 4
    if e == 4:
        out += bs * rope * 4  # the upcast is a view of the kv_a output: its rope part stays too
    out += bs * a * (nope + v - qk) * e  # v pins kv_b's output (k_nope and v)
    out += bs * a * (v - qk) * e  # o-projection input at the value width
    return out
