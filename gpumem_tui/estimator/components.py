"""One function per memory term, in bytes. Each docstring gives the term's source.

Notation (ESTIMATOR.md): ``N`` parameters, ``b`` micro-batch, ``s`` sequence length, ``h``
hidden size, ``a`` heads, ``k`` KV heads, ``d`` head dim, ``f`` MLP width, ``L`` layers,
``V`` vocabulary, ``t``/``p``/``dp`` tensor / pipeline / data parallel degrees, ``e`` bytes
per compute element.

Activation terms are *saved-for-backward* tensors of the Hugging Face ``transformers``
implementation of each model type, counted tensor by tensor (the way Korthikanti et al. 2022,
arXiv 2205.05198, Sec. 4.1 derive ``sbh(34 + 5as/h)`` for a GPT layer) and then checked
against torch's ``MemTracker``. The constant 34 is not reused: it assumes GELU 4h MLPs,
LayerNorm, dropout and 16-bit masks; each family here gets its own count, and the device
profile decides kernel details (a CPU dropout keeps a noise tensor in the compute dtype, a
CUDA dropout a 1-byte mask; CPU SDPA with dropout falls back to the math path).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.devices import cuda_autocast, cuda_context, cuda_kernels, peft_lora, profile_for
from gpumem_tui.estimator.devices.cuda import CUDA_CONTEXT_BYTES  # noqa: F401  (re-exported)
from gpumem_tui.estimator.loss import LogitsLoss, logits_loss_bytes  # noqa: F401  (re-exported)
from gpumem_tui.estimator.precision import Precision, precision  # noqa: F401  (re-exported)
from gpumem_tui.estimator import quantization as Q
from gpumem_tui.estimator.recipes import rules as R
from gpumem_tui.estimator.spec import DTYPE_BYTES, TrainingSpec

MiB = 1 << 20


# ----- shared helpers ---------------------------------------------------------------------


def _peft_fp32(spec: TrainingSpec) -> bool:
    """peft LoRA with a 16-bit base: fp32 adapters and fp32 input copies
    (:mod:`gpumem_tui.estimator.devices.peft_lora`). Applied on the CUDA profile, whose ground
    truth (``../shared/validation/gpu``) was measured with peft; the CPU/meta ground truth of
    ``benchmarks/data`` was measured with the project's own 16-bit adapter."""
    prec = precision(spec)
    return spec.task in ("lora", "qlora") and spec.device == "cuda" and peft_lora.upcasts_input(prec.compute, prec.amp)


def _adapter_bytes(spec: TrainingSpec, default: int) -> int:
    """Bytes per LoRA adapter element (parameter, gradient, optimizer state)."""
    return peft_lora.PEFT_ADAPTER_BYTES if _peft_fp32(spec) else default


def trainable_params(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """Trainable parameter elements: all for full training, the LoRA adapters for LoRA/QLoRA
    (Hu et al. 2021, arXiv 2106.09685: ``r (d_in + d_out)`` per adapted Linear), 0 for inference."""
    if spec.task == "inference":
        return 0
    if spec.task in ("lora", "qlora"):
        return lora_params(arch, spec)
    return arch.total_params


def _targets(arch: ModelArchitecture, spec: TrainingSpec) -> list:
    wanted = set(spec.lora_targets)
    fused = {"qkv": {"q", "k", "v"}, "gate_up": {"gate", "up"}}
    out = []
    for lin in arch.layer_linears():
        roles = fused.get(lin.role, {lin.role})
        if roles & wanted:
            out.append(lin)
    return out


def lora_params(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """LoRA adapter elements: ``L * sum(r (d_in + d_out))`` over targeted Linears (fused
    projections such as GPT-2's ``c_attn`` are adapted as one Linear, as PEFT does); experts
    each get their own adapter. Source: Hu et al. 2021, arXiv 2106.09685, Sec. 4.1."""
    r = spec.lora_rank or 0
    return arch.num_layers * sum(lin.count * r * (lin.d_in + lin.d_out) for lin in _targets(arch, spec))


# ----- model states ------------------------------------------------------------------------


def parameter_bytes(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """Bytes of the stored weights on one device.

    - dtype bytes x N; LoRA adds the adapters in the same dtype.
    - QLoRA (``--task qlora``) or ``--quant nf4``: the layers' Linear weights in NF4 (4 bits)
      plus blocksize-64 quantization constants with double quantization, 0.127 bit/param
      (Dettmers et al. 2023, arXiv 2305.14314, Sec. 2); embeddings, head and norms stay 16-bit.
    - ``--quant int8``: LLM.int8() Linear weights 1 byte + one fp32 scale per row
      (Dettmers et al. 2022, arXiv 2208.07339).
    - ZeRO-3 divides by ``dp`` (Rajbhandari et al. 2020, Sec. 5.3); tensor parallelism divides
      the layer weights by ``t`` (Megatron, Shoeybi et al. 2019, arXiv 1909.08053), pipeline
      parallelism the layers by ``p`` (embeddings and head counted whole, as on the first or
      last stage).
    """
    prec = precision(spec)
    n = arch.total_params
    lin = arch.linear_weight_params
    layer_elems = arch.param_breakdown()["layers"]
    quant = Q.effective_method(spec.task, spec.quant)
    lin_bytes = Q.layer_linears_bytes(arch, spec.task, spec.quant, spec.quant_format) if quant != "none" else lin * prec.param
    # k-bit preparation (recipe) casts the unquantized 16-bit parameters to fp32
    other_b = prec.param if quant == "none" else R.non_quantized_param_bytes(spec, DTYPE_BYTES[spec.dtype])
    layer_bytes = lin_bytes + max(0, layer_elems - lin) * other_b
    rest_bytes = (n - layer_elems) * other_b
    total = rest_bytes + layer_bytes / (spec.tp * spec.pp)
    if spec.task in ("lora", "qlora"):
        total += lora_params(arch, spec) * _adapter_bytes(spec, prec.param) / (spec.tp * spec.pp)
    if spec.zero == 3:
        total /= spec.dp
    return int(math.ceil(total)) + buffer_bytes(arch)


def dequant_bytes(arch: ModelArchitecture, spec: TrainingSpec, backward: bool = False) -> int:
    """Transient 16-bit copy of one quantized weight: bitsandbytes dequantizes an NF4 Linear's
    weight to the compute dtype for each matmul, forward and backward (QLoRA, Dettmers et
    al. 2023, Sec. 3: "we dequantize the storage data type to the computation data type"); an
    LLM.int8() Linear only in backward, for its input gradient (``MatMul8bitLt.backward``:
    ``state.CB.to(ctx.dtype_A, copy=True).mul_(SCB / 127)``, bitsandbytes
    ``autograd/_functions.py``). The largest layer Linear (one expert for MoE); 0 without
    quantized weights. The 4-bit copy is in bitsandbytes' ``bnb_4bit_compute_dtype`` when the
    format is known (:func:`gpumem_tui.estimator.quantization.dequant_bytes_per_element`)."""
    method = Q.effective_method(spec.task, spec.quant)
    if arch.coarse or method not in ("nf4", "fp4", "gptq", "awq") and not (method == "int8" and backward):
        return 0
    e = precision(spec).compute if method == "int8" else Q.dequant_bytes_per_element(
        spec.quant_format, precision(spec).compute)
    return int(max(l.d_in * l.d_out for l in arch.layer_linears()) * e / spec.tp)


def buffer_bytes(arch: ModelArchitecture) -> int:
    """Non-parameter buffers that live with the weights: rotary ``inv_freq`` and
    ``original_inv_freq`` (``d/2`` fp32 each, transformers' RotaryEmbedding), BERT's
    ``position_ids`` and ``token_type_ids`` (``max_positions`` int64 each)."""
    if arch.coarse:
        return 0
    if arch.family.buffers == "position_ids":
        return 2 * 8 * (arch.max_position_embeddings or 0)
    if arch.family.buffers == "rotary" and not arch.learned_positions:
        return arch.family.rotary_sets * 2 * (arch.rotary_dims // 2) * 4
    return 0


def gradient_bytes(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """Bytes of all gradients after backward: one per trainable parameter in the gradient
    dtype; divided by ``dp`` from ZeRO-2 on (Rajbhandari et al. 2020, Sec. 5.2) and by
    ``t * p`` for model parallelism. ``zero_grad(set_to_none=True)`` frees them, so they are
    absent during the next forward (PyTorch ``Optimizer.zero_grad`` docs)."""
    if spec.task == "inference":
        return 0
    g = trainable_params(arch, spec) * _adapter_bytes(spec, precision(spec).grad) / (spec.tp * spec.pp)
    if spec.zero >= 2:
        g /= spec.dp
    return int(math.ceil(g))


def _adafactor_state_elements(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """torch.optim.Adafactor: 2-D weights keep a row (d_out) and a column (d_in) second-moment
    factor; 1-D tensors a full one (Shazeer & Stern 2018, arXiv 1804.04235, Alg. 4; PyTorch
    ``torch.optim.Adafactor`` docs)."""
    if spec.task in ("lora", "qlora"):
        r = spec.lora_rank or 0
        return arch.num_layers * sum(l.count * (r + l.d_in + l.d_out + r) for l in _targets(arch, spec))
    if arch.coarse:
        return 2 * int(math.sqrt(max(1, arch.total_params))) * (8 * arch.num_layers + 2)
    h, V = arch.hidden_size, arch.vocab_size
    elems = V + h  # token embedding
    if arch.learned_positions:
        elems += arch.learned_positions + h
    if arch.type_vocab_size:
        elems += arch.type_vocab_size + h
    per_layer = 0
    for lin in arch.layer_linears():
        if lin.count > 1:  # a 3-D expert tensor: factors over its last two dims per expert
            per_layer += lin.count * (lin.d_out + lin.d_in)
        else:
            per_layer += lin.d_out + lin.d_in
        if lin.bias:
            per_layer += lin.d_out * lin.count
    norm_1d = (2 if arch.norm == "layernorm" else 1) * h
    per_layer += arch.norms_per_layer * norm_1d + arch.qk_norm_params
    if arch.family.embedding_norm:
        elems += 2 * h  # embeddings LayerNorm
    head = arch.param_breakdown()["head"]
    if head == 0:
        head_elems = 0
    elif arch.head == "lm":
        head_elems = (0 if arch.tie_word_embeddings else V + h) + (V if arch.family.head_bias else 0)
    elif arch.head == "mlm":
        # transform dense (factored) + bias, LayerNorm, decoder bias (+ an untied decoder weight)
        head_elems = 2 * h + h + 2 * h + V + (0 if arch.tie_word_embeddings else V + h)
    elif arch.head == "classification" and arch.kind == "decoder":
        head_elems = max(1, arch.num_labels) + h  # score Linear, no bias, no pooler
    elif arch.head == "classification":
        nl = max(1, arch.num_labels)
        head_elems = (2 * h + h) + (nl + h + nl)  # pooler dense + bias, classifier + bias
    else:
        head_elems = 2 * h + h  # BERT's pooler
    final = norm_1d if arch.final_norm else 0
    return elems + arch.num_layers * per_layer + final + head_elems


def optimizer_state_bytes(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """Optimizer states per device, in bytes.

    - AdamW / Adam: ``exp_avg`` and ``exp_avg_sq`` per trainable parameter (Loshchilov &
      Hutter 2019; PyTorch ``torch.optim.AdamW``), in the parameter dtype, or fp32 with a
      4-byte master copy under DeepSpeed mixed precision: (2+2+K)Psi, K=12 (ZeRO paper Sec 3.1).
    - SGD with momentum: one ``momentum_buffer``; plain SGD: none.
    - Adafactor: factored second moment (see ``_adafactor_state_elements``).
    - 8-bit AdamW (bitsandbytes): 2 bytes/param plus one fp32 absmax per 256-element block for
      each of the two states, tensors under 4096 elements stay 32-bit (Dettmers et al. 2022,
      arXiv 2110.02861, Sec. 2; bitsandbytes ``min_8bit_size``).
    - ``--device cpu``: torch keeps each parameter's ``step`` as a 0-d fp32 tensor (4 B; on
      CUDA it lives on the host unless ``capturable``/``fused``).
    ZeRO-1+ divides by ``dp``; model parallelism by ``t * p``.
    """
    if spec.task == "inference":
        return 0
    prec = precision(spec)
    if _peft_fp32(spec):
        prec = dataclasses.replace(prec, state=peft_lora.PEFT_ADAPTER_BYTES)
    n = trainable_params(arch, spec)
    opt = spec.optimizer
    tensors = _trainable_tensor_count(arch, spec)
    if opt in ("adamw", "adam"):
        states = 2 * n * prec.state
    elif opt == "sgd-momentum":
        states = n * prec.state
    elif opt == "sgd":
        states = 0
    elif opt == "adafactor":
        states = _adafactor_state_elements(arch, spec) * prec.state
    else:  # adamw-8bit
        states = 2 * n + 2 * 4 * math.ceil(n / 256)
    states += n * prec.master
    if profile_for(spec.device).optimizer_step_tensors and opt != "sgd" and opt != "sgd-momentum":
        states += 4 * tensors
    states /= spec.tp * spec.pp
    if spec.zero >= 1:
        states /= spec.dp
    return int(math.ceil(states))


def _trainable_tensor_count(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    if spec.task in ("lora", "qlora"):
        return 2 * arch.num_layers * sum(1 for _ in _targets(arch, spec))
    return arch.param_tensor_count


def optimizer_intermediate_bytes(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """Temporaries allocated inside ``optimizer.step()``.

    torch's single-tensor AdamW (the CPU default) computes
    ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` per parameter: two
    parameter-sized temporaries, so 2 x the largest tensor. The ``foreach`` implementation
    (the CUDA default) calls ``torch._foreach_sqrt`` on the whole list: one state-sized copy of
    every trainable parameter (PyTorch ``torch/optim/adamw.py``, ``_single_tensor_adamw`` and
    ``_multi_tensor_adamw``). SGD updates in place (no temporaries); Adafactor builds the
    full-size variance estimate and update (2 x the largest tensor, or the whole list with
    foreach); bitsandbytes 8-bit AdamW and ``fused=True`` run fused kernels (no temporaries).
    ``spec.optimizer_impl`` picks the implementation (auto = torch's device default).
    """
    if spec.task == "inference":
        return 0
    prec = precision(spec)
    if _peft_fp32(spec):
        prec = dataclasses.replace(prec, state=peft_lora.PEFT_ADAPTER_BYTES)
    opt = spec.optimizer
    if opt in ("sgd", "sgd-momentum", "adamw-8bit"):
        return 0
    if spec.task in ("lora", "qlora"):
        largest = max(((spec.lora_rank or 0) * max(l.d_in, l.d_out) for l in _targets(arch, spec)), default=0)
    else:
        largest = arch.largest_param_elements
    n = trainable_params(arch, spec) / (spec.tp * spec.pp)
    if spec.zero >= 1:
        n /= spec.dp
    impl = spec.resolved_optimizer_impl
    if impl == "fused":
        return 0
    if impl == "single":
        # Adafactor keeps one full-size temporary (the row x column outer product), AdamW two
        # (MemTracker, torch 2.13 CPU)
        return int((1 if opt == "adafactor" else 2) * min(largest, n) * prec.state)
    return int(n * prec.state)


# ----- activations -------------------------------------------------------------------------


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
        return self.replicated + self.parallel


def _dropout_mask_bytes(spec: TrainingSpec, e: int) -> int:
    # the device profile: CUDA's fused dropout keeps a bool mask, the CPU path a scaled noise
    # tensor in the input dtype (ATen Dropout.cpp: _dropout_impl vs native_dropout)
    return profile_for(spec.device).dropout_mask_bytes(e)


def _fused_sdpa(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
    """Whether attention runs a fused kernel that keeps output + log-sum-exp, not s x s.

    Eager never does. SDPA on the CPU falls back to the math path when dropout is on, i.e.
    in training with attention dropout (see :func:`_sdpa_math`); in inference (``eval()``)
    dropout is off and the CPU flash kernel runs. A family without an SDPA path in
    transformers (Gemma 2) falls back to eager.
    """
    if spec.attention == "eager" or not arch.family.sdpa and spec.attention == "sdpa":
        return False
    return not _sdpa_math(arch, spec)


def _sdpa_math(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
    """Whether SDPA runs torch's math path (``_scaled_dot_product_attention_math``).

    torch's CPU dispatcher (``select_sdp_backend_cpp``, ``aten/src/ATen/native/transformers/
    sdp_utils_cpp.cpp``) chooses the CPU flash kernel only when ``check_for_dropout`` passes
    (``dropout_p == 0``, declared in ``sdp_utils_cpp.h``); measured on torch 2.13 CPU:
    ``torch._fused_sdp_choice(q, k, v, None, 0.1, True)`` is MATH, with 0.0 FLASH_ATTENTION.
    transformers passes ``dropout_p = attention_dropout`` only in training. CUDA's flash and
    memory-efficient kernels support dropout, so this is a CPU fact (device profile). The meta
    device always runs the math path.
    """
    if spec.attention != "sdpa" or not arch.family.sdpa:
        return False
    if arch.mla and arch.mla[4] != arch.head_dim:
        # fused kernels need one head size for q, k and v (torch ``sdp_utils_cpp``:
        # ``check_head_dim_size_cpp``); MLA's values are narrower than its keys
        return True
    if arch.family.sdpa_broadcast_kv and arch.num_kv_heads != arch.num_heads and not arch.kv_expanded:
        # fused kernels need as many KV heads as query heads unless ``enable_gqa`` is passed
        # (torch ``sdp_utils``: ``check_batch_size_and_num_heads_dense``); measured, MemTracker,
        # Falcon-7B shape on CPU SDPA: fp32 s x s probabilities per layer
        return True
    if spec.device == "cuda":
        return _cuda_sdpa_backend(arch, spec) == "math"
    profile = profile_for(spec.device)
    return profile.sdpa_always_math or (
        profile.sdpa_math_with_dropout and arch.attention_dropout > 0 and spec.task != "inference"
    )


def training_cache_copies(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
    """Whether a training forward reads k and v from a ``DynamicCache`` (copies, not views).

    transformers fills a cache whenever ``use_cache`` is on, in training too (the config's
    value unless the call passes one), and turns it off under gradient checkpointing
    (``GradientCheckpointingLayer``). ``DynamicLayer.update`` stores ``torch.cat([empty, k])``
    and returns that copy, which attention then saves. The device profile says whether its
    ground truth's loop leaves ``use_cache`` at the config's value
    (``training_forward_fills_cache``: the CUDA ground truth and ``measure --on cuda`` do,
    ``measure --on cpu`` passes ``use_cache=False``). It matters where k and v would
    otherwise be views of a fused projection (GPT-2, GPT-NeoX): measured on the H100
    (``dev_truth_h100.jsonl``): GPT-2 keeps two more ``b s kv e`` per layer (q still pins
    the fused ``c_attn`` output), Pythia-410M two fewer ``b s h e`` (q and k are rotary
    copies, so nothing pins the fused output once v is copied).
    """
    return (R.training_fills_cache(spec, profile_for(spec.device).training_forward_fills_cache)
            and arch.use_cache and arch.kind == "decoder"
            and spec.task != "inference" and spec.grad_ckpt != "full")


def training_cache_forward_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """The training cache's k and v copies alive until the forward's output is dropped (bytes).

    With :func:`training_cache_copies`, the ``DynamicCache`` in the model output holds every
    layer's ``b s kv e`` k and v copies until the loop drops the output (``del out`` after
    taking the loss), i.e. through the end of forward, not through backward. Where attention
    saves those copies they are already counted as activations; where it saves repeated
    copies instead, the cache's are extra: grouped-query layers repeated by ``repeat_kv``
    (eager attention; SDPA with an explicit sliding-window mask, ``use_gqa_in_sdpa``) or by
    the math path's ``enable_gqa`` (``repeat_interleave`` in ``_scaled_dot_product_attention_math``).
    Measured on the H100 (``dev_truth_h100.jsonl``, Mistral-7B LoRA b1 s8192, window 4096):
    the forward peak was 1.14 GB above the estimate without this term, 32 layers x 33.5 MB.
    """
    if not training_cache_copies(arch, spec) or arch.num_kv_heads == arch.num_heads or arch.mla:
        return 0
    if arch.family.eager_qkv != "repeat_kv" or arch.family.sdpa_broadcast_kv:
        return 0  # families with their own attention (GPT-2 style fused bmm, Falcon) repeat nothing
    if spec.attention == "eager" or not arch.family.sdpa or _sdpa_math(arch, spec):
        layers = arch.num_layers
    elif _cuda_sdpa_window_mask(arch, spec):
        layers = arch.sliding_layers
    else:
        return 0  # enable_gqa: the fused kernel reads (and saves) the cache's copies
    return layers * 2 * b * s * arch.kv_dim * precision(spec).compute // spec.tp


def _sdpa_output_copied(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
    """Whether the o-projection saves a copy of the fused SDPA output, not the output itself.

    transformers transposes the ``(b, a, s, d)`` output back with ``transpose(1, 2)
    .contiguous()``: free when the kernel wrote it in ``(b, s, a, d)`` memory, a copy when it
    followed a ``(b, a, s, d)``-contiguous query (families whose rotary concatenates,
    ``Family.rotary_concat``). Which kernels follow the query is a device rule
    (``DeviceProfile.sdpa_output_in_query_layout``). Measured, MemTracker on CPU, Phi-2 and
    StableLM-2 shapes: one ``b s q e`` per layer.
    """
    if not arch.family.rotary_concat:
        return False
    backend = _cuda_sdpa_backend(arch, spec) if spec.device == "cuda" else "flash"
    return profile_for(spec.device).sdpa_output_in_query_layout(backend)


def _cuda_sdpa_window_mask(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
    """Whether transformers passes an explicit (sliding-window) mask to SDPA: a sliding-window
    layer whose sequence reaches its window (``masking_utils._ignore_causal_mask_sdpa``
    returns False once ``kv_length >= local_attention_size``, transformers 5.x; a sequence of
    exactly the window gets a mask equal to the causal one, materialised all the same; below
    the window it passes ``is_causal``)."""
    return bool(arch.kind == "decoder" and arch.sliding_window and arch.sliding_layers
                and spec.seq >= arch.sliding_window)


def _cuda_sdpa_backend(arch: ModelArchitecture, spec: TrainingSpec) -> str:
    """The kernel CUDA's SDPA picks for this model (:func:`cuda_kernels.sdpa_backend`):
    transformers passes k and v at the KV head count with ``enable_gqa=True`` when there is no
    mask (``use_gqa_in_sdpa``), which the memory-efficient kernel rejects
    (``check_batch_size_and_num_heads_dense<false /*supports_grouped_query_attention*/>``
    in ``use_mem_efficient_attention``, ``sdp_utils.cpp``); with a mask it repeats them
    (``repeat_kv``). So fp32 GQA models (no flash for fp32) run the math path. Measured on the
    H100 (``dev_truth_h100.jsonl``, Llama-3.2-1B fp32 b2 s512): the forward peak was 1278 MiB
    (80 MiB per layer) above the fused-kernel estimate; the math path's ``s x s`` fp32
    probabilities, scaled q / k and repeated v are 76 MiB per layer."""
    mask = _cuda_sdpa_window_mask(arch, spec)
    gqa = cuda_kernels.uses_gqa_flag(mask, arch.num_kv_heads, arch.num_heads)
    return cuda_kernels.sdpa_backend(precision(spec).compute, arch.head_dim, arch.attention_dropout > 0, mask, gqa)


def _v_pins_fused_qkv(arch: ModelArchitecture, spec: TrainingSpec, b: int) -> bool:
    """GPT-2 on the math path at ``b = 1`` in fp32: ``v`` (a head-split view of the fused
    ``c_attn`` output) needs no copy for the batched matmul (batch and head dims fold into
    one stride), so the saved ``v`` keeps the whole ``b s (q + 2 kv)`` projection output
    alive; at ``b > 1`` (or upcast to fp32) it is a copy (measured, torch 2.13 CPU:
    +2 bsh e per layer at b = 1)."""
    return (
        b == 1
        and arch.family.math_v_view_pins_fused_qkv
        and arch.fused_qkv
        and _attention_elem(arch, spec, precision(spec).compute) == precision(spec).compute
    )


def _v_pins_fused_qkv_eager(arch: ModelArchitecture, b: int) -> bool:
    """Phi-3 eager attention at ``b = 1`` without GQA: the saved ``v`` is a view of the fused
    qkv output (see :func:`layer_activations`), released when the attention's second matmul
    has run backward."""
    return b == 1 and arch.fused_qkv and not arch.learned_positions and arch.num_kv_heads == arch.num_heads


def _broadcast_kv_copies(arch: ModelArchitecture, b: int, s: int, e: int) -> int:
    """Extra bytes when single-head keys / values are broadcast against ``a`` query heads by
    ``torch.matmul`` (Falcon's own attention): for ``b > 1`` matmul expands them and saves the
    ``a``-head copies for backward (k and v: ``2 b s (q - kv) e``); at ``b = 1`` it folds the
    query heads into the matrix rows and copies nothing (``torch.matmul`` folding, ATen
    ``LinearAlgebra.cpp``; measured, MemTracker, Falcon-7B shapes: exact at b = 1, one
    ``2 b s (q - kv) e`` per layer more at b = 2 and 4)."""
    if arch.kv_expanded:
        # Falcon's new decoder architecture copies k and v to every query head itself
        # (``broadcast_to`` + ``flatten`` in ``_split_heads``), at any batch size (measured,
        # MemTracker on meta: 2 b s (q - kv) e per layer, benchmarks/data/measured_neox_falcon.json)
        return 2 * b * s * (arch.q_dim - arch.kv_dim) * e
    if not arch.family.sdpa_broadcast_kv or arch.num_kv_heads != 1 or arch.num_heads == 1 or b == 1:
        return 0
    return 2 * b * s * (arch.q_dim - arch.kv_dim) * e


def _attention_elem(arch: ModelArchitecture, spec: TrainingSpec, e: int) -> int:
    """Element size of the attention core's saved tensors: 4 on the math path for 16-bit
    inputs, else ``e``. ``_scaled_dot_product_attention_math`` (``aten/src/ATen/native/
    transformers/attention.cpp``) upcasts half / bfloat16 q, k, v to fp32 (unless
    ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)``), so the scaled q, k, the
    fp32 v, the scores, softmax, dropout noise and product are fp32, and only the output is
    cast back (measured with a TorchDispatchMode, torch 2.13 CPU). Under CPU autocast the same
    holds: the Linear outputs q, k, v are 16-bit, and the math path upcasts them (measured,
    MemTracker: BERT and GPT-2 with ``torch.autocast("cpu")`` save fp32 q/k/v clones and fp32
    softmax / dropout noise / product; notes/accuracy.md note 19)."""
    return 4 if _sdpa_math(arch, spec) else e


def _amp_softmax_fp32(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
    """Whether eager attention's softmax runs in fp32 under autocast (GPT-2 / BERT layers).

    On CUDA ``softmax`` is on autocast's fp32 list (PyTorch "Automatic Mixed Precision
    package", CUDA ops that autocast to float32); on the CPU it is not, so the probabilities
    stay in the 16-bit dtype of the scores -- unless the scores meet an fp32 float mask:
    GPT-2's causal mask is built in the dtype of the (fp32) embedding output, and ``scores +
    mask`` promotes to fp32 (transformers ``GPT2Attention`` eager path; measured, MemTracker,
    torch 2.13 CPU autocast bf16: GPT-2 ``_softmax`` fp32, BERT without a padding mask
    ``_softmax`` bf16).
    """
    return precision(spec).amp and (profile_for(spec.device).autocast_softmax_fp32
                                    or arch.family.amp_mask_promotes_softmax)


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
      their product (``4 bsf e``). Residual dropout keeps a mask per sub-block.
    - LoRA / QLoRA: frozen Linears keep no input, adapted ones keep their input and
      ``x A^T`` (``bs r e``); frozen norm weights keep no normalized copy.

    Raises nothing; ``arch.coarse`` models use the GPT formula of Korthikanti eq. (1)
    re-expressed for the dtype.
    """
    prec = precision(spec)
    e = prec.compute
    h, f = arch.hidden_size, arch.intermediate_size
    a = arch.num_heads
    q, kv = arch.q_dim, arch.kv_dim
    bs = b * s
    if arch.coarse:
        # Korthikanti eq. (1) (16-bit, with dropout): sbh(34 + 5as/h) bytes -> scale by e/2;
        # fused attention keeps no s x s tensors (the 5as/h term vanishes)
        quad = 0 if _fused_sdpa(arch, spec) else 5 * a * s * s * b * e // 2
        return LayerActivations(replicated=bs * h * 10 * e // 2, parallel=bs * h * 24 * e // 2 + quad, quadratic=quad)
    lora = spec.task in ("lora", "qlora")
    targets = {l.role for l in _targets(arch, spec)} if lora else set()
    r = spec.lora_rank or 0

    peft32 = _peft_fp32(spec)
    d_in_of = {l.role: l.d_in for l in arch.layer_linears()}

    def linear_saves_input(role: str) -> bool:
        # peft with a 16-bit input: lora_A saves its own fp32 copy instead (lora_extra)
        return not lora or (role in targets and not peft32)

    def lora_extra(role: str) -> int:
        if not (lora and role in targets):
            return 0
        return peft_lora.saved_bytes_per_linear(bs, d_in_of[role], r, e, not peft32)

    train_mode_dropout = spec.task != "inference"
    mask_b = _dropout_mask_bytes(spec, e)
    p_attn = arch.attention_dropout > 0 and train_mode_dropout
    p_hid = arch.hidden_dropout > 0 and train_mode_dropout
    fused = _fused_sdpa(arch, spec)
    quad = 0
    rep = 0
    par = 0
    if arch.norm == "layernorm":
        # LayerNorms (two per layer; one shared by attention and MLP in a parallel block): input
        # + stats; the output is saved by the following Linear(s)
        # a parallel block's two norms (GPT-NeoX) read the same layer input: saved once
        inputs_read = 1 if arch.family.parallel_residual else arch.norms_per_layer
        rep += inputs_read * bs * h * e + arch.norms_per_layer * 2 * bs * 4
        first_roles = ("qkv",) if arch.fused_qkv else ("q", "k", "v")
        # post-norm (BERT): the attention-block input is the previous layer's LayerNorm output,
        # saved once
        attn_in = any(linear_saves_input(role) for role in first_roles) or arch.post_norm
        mlp_in = linear_saves_input("up")
        if arch.norms_per_layer == 1:
            rep += bs * h * e if attn_in or mlp_in else 0  # one norm output feeds both blocks
        else:
            rep += bs * h * e * (int(attn_in) + int(mlp_in))
        if p_hid:
            rep += 2 * bs * h * mask_b
    else:
        gemma = arch.family.norm_offset_fp32
        norms = arch.norms_per_layer
        amp_rms = prec.amp and not gemma
        for i in range(norms):
            feeds_linear = i in (0, 1) if not gemma else i in (0, 2)
            if gemma:
                # fp32 input (or its upcast), rsqrt, fp32 ``1 + w``; the fp32 normalized product
                # only when the weight is trained (``x * (1 + w)``'s backward for w needs x;
                # measured, LoRA with frozen norms: one bsh x 4 per norm, note 15)
                rep += (1 if lora else 2) * bs * h * 4 + bs * 4 + h * 4
            else:
                # fp32 input (the upcast copy; under autocast the fp32 residual itself), rsqrt
                rep += bs * h * 4 + bs * 4
                if not lora:
                    # normalized, saved by the (trainable) weight multiply: in the compute
                    # dtype, or fp32 under autocast (``input_dtype`` is the fp32 residual's)
                    rep += bs * h * (4 if amp_rms or arch.family.norm_weight_fp32 else e)
            if feeds_linear:
                roles = (("qkv",) if arch.fused_qkv else ("q", "k", "v")) if i == 0 else (
                    ("gate_up",) if arch.fused_gate_up else ("gate", "up"))
                saving = sum(1 for role in roles if linear_saves_input(role))
                if prec.amp:
                    # under autocast the fp32 norm output is cast to 16 bits by every Linear
                    # that reads it, and each saves its own cast (autocast caches only leaf
                    # weight casts: ``cached_cast``, aten/src/ATen/autocast_mode.h); measured,
                    # MemTracker, llama CPU autocast: 5 ``_to_copy [b, s, h]`` per layer
                    rep += saving * bs * h * e
                elif saving:
                    rep += bs * h * e
    # attention core
    if fused:
        # q, k, v: separate projections' outputs (or their rotary / cache copies, same size),
        # or views of a fused projection, which pin its whole b s (q + 2 kv) output
        par += bs * (q + 2 * kv) * e
        par += cuda_masked_sdpa_extra_bytes(arch, spec, b, s)
        if arch.fused_qkv:
            cache = training_cache_copies(arch, spec)
            if not arch.learned_positions and not cache:
                par += bs * (q + kv) * e  # rotary q, k are new tensors; v still pins the fused output
            elif arch.learned_positions and cache:
                par += 2 * bs * kv * e  # q still pins the fused output; k, v are the cache's copies
            # (rotary and a cache: q is new, k and v the cache's copies; the fused output is freed)
        par += bs * q * e + b * a * s * 4  # output (the o-projection input) + log-sum-exp
        if _sdpa_output_copied(arch, spec):
            par += bs * q * e  # the o-projection saves a (b, s, a, d) copy of the output
    elif _sdpa_math(arch, spec):
        # CPU SDPA math path (training with attention dropout): scaled q and k^T, v (fp32 for
        # 16-bit inputs), the softmax output, the dropout noise and its product; only the
        # output is cast back to the compute dtype (see _sdpa_math, _attention_elem)
        ae = _attention_elem(arch, spec, e)
        par += (bs * (q + 2 * kv) if arch.family.eager_qkv == "fused_bmm" else 3 * bs * q) * ae
        par += _broadcast_kv_copies(arch, b, s, ae)
        if _v_pins_fused_qkv(arch, spec, b):
            par += bs * (q + kv) * e
        quad += b * a * s * s * ae * (3 if p_attn else 1)
        if linear_saves_input("o"):
            par += bs * q * e
    else:
        if arch.family.eager_qkv == "fused_bmm":
            par += bs * (q + 2 * kv) * e  # q, k^T, v copies made by batched matmul
            par += _broadcast_kv_copies(arch, b, s, e)
        elif arch.family.eager_qkv == "separate":
            par += 3 * bs * q * e
        else:
            par += 3 * bs * q * e  # q, repeat_kv(k), repeat_kv(v) at a heads
            if _v_pins_fused_qkv_eager(arch, b):
                # Phi-3 at b = 1: v is a head-split view of the fused qkv output that the batched
                # matmul can use without a copy (batch and head dims fold into one stride;
                # repeat_kv is a no-op without GQA), so the saved v pins the whole
                # ``b s (q + 2 kv)`` output instead of a ``b s kv`` copy (as
                # :func:`_v_pins_fused_qkv` for GPT-2; measured, MemTracker: phi-3 fp32 b=1
                # s=2048 LoRA, +2 b s h x 4 per layer)
                par += bs * (q + kv) * e
        amp32 = not arch.family.softmax_fp32 and _amp_softmax_fp32(arch, spec)
        if amp32:
            # fp32 softmax output (saved by its backward) and a 16-bit copy for the matmul.
            # GPT-2 casts right after the softmax (``attn_weights.type(value.dtype)``), so its
            # dropout keeps a mask and a 16-bit product; BERT's dropout runs on the fp32
            # probabilities and the matmul's autocast makes the 16-bit copy. Either way dropout
            # keeps only its mask (derivatives.yaml ``native_dropout``: ``result1``), so BERT's
            # fp32 dropout output dies at the cast
            quad += b * a * s * s * (4 + e)
            if p_attn:
                quad += b * a * s * s * mask_b
        elif not arch.family.softmax_fp32:
            quad += b * a * s * s * e  # softmax output
        else:
            quad += b * a * s * s * 4  # softmax in fp32
            if e != 4:
                quad += b * a * s * s * e  # cast back to the compute dtype
            if arch.attn_logit_softcapping:
                quad += b * a * s * s * e  # tanh output of the soft-capping
        if p_attn and not amp32:
            quad += b * a * s * s * (mask_b + e)
        if R.softmax_saves_input(spec):
            # torch <= 1.10 also kept softmax's input, the scores (fp32 when the softmax runs in
            # fp32); recipes.description.Recipe.softmax_saves_input
            quad += b * a * s * s * (4 if amp32 or arch.family.softmax_fp32 else e)
        if linear_saves_input("o"):
            par += bs * q * e
    if arch.family.qk_norm != "none":
        # query / key RMSNorms (Qwen3, Gemma 3 per head; OLMo 2 over the projection): the fp32
        # upcast of q and k (the projection output itself when it already is fp32), the
        # normalized copy saved by the trained weight's multiply, one rsqrt per normalized row
        # (measured, MemTracker: (q + kv) bs (4 + e) + bs (a + k) 4 per layer, Qwen3 fp32/bf16)
        rows = a + arch.num_kv_heads if arch.family.qk_norm == "head" else 2
        normalized = 0 if lora else 4 if arch.family.norm_weight_fp32 else e
        par += bs * (q + kv) * (4 + normalized) + bs * rows * 4
    if arch.mla:
        par += _mla_extra(arch, spec, b, s, lora)
    if p_hid and arch.norm != "layernorm":
        rep += 2 * bs * h * mask_b
    # MLP
    n_tok_mult = arch.experts_per_token if arch.num_experts else 1
    if arch.gated_mlp:
        mlp = 3 * bs * f * e  # act input (gate), act output, up
        if linear_saves_input("down"):
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
    else:
        if arch.activation == "gelu_new":
            cuda_amp = prec.amp and spec.device == "cuda"
            mlp = bs * f * cuda_autocast.gelu_new_saved_bytes_per_element(e, cuda_amp)
        elif arch.activation == "gelu_fast":
            mlp = bs * f * GELU_FAST_SAVED * e
        else:
            mlp = bs * f * e
        # ReLU saves its output, which is also the down projection's input: one tensor
        if linear_saves_input("down") and arch.activation != "relu":
            mlp += bs * f * e
    par += mlp
    for role in ("q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up"):
        par += lora_extra(role) * (arch.num_experts or 1 if role in ("gate", "up", "down", "gate_up") else 1)
    par += quad
    if prec.amp and arch.norm == "layernorm":
        # the residual stream is fp32 under autocast (fp32 embeddings; ``add`` promotes a
        # 16-bit sub-block output with the fp32 residual), so both LayerNorm inputs are fp32
        rep += arch.norms_per_layer * (4 - e) * bs * h
        if arch.family.amp_separate_qkv_casts:
            # separate query / key / value Linears each save their own 16-bit cast of the fp32
            # input: autocast caches casts of leaf weights only (``cached_cast``,
            # aten/src/ATen/autocast_mode.h); measured, MemTracker, CPU autocast: 3 casts
            rep += 2 * bs * h * e
    return LayerActivations(replicated=int(rep), parallel=int(par), quadratic=int(quad))


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
            or _sdpa_math(arch, spec)):
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


def fixed_activation_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """Saved activations outside the layers (bytes): token ids and shifted labels (int64),
    position ids, embedding LayerNorm/dropout, final norm and the LM-head input, BERT's MLM
    transform; rotary cos/sin tables. Logits and log-probabilities are in
    :func:`logits_loss_bytes`. Source: the ``transformers`` modules, counted as in
    :func:`layer_activations`."""
    prec = precision(spec)
    e = prec.compute
    h = arch.hidden_size
    bs = b * s
    mask_b = _dropout_mask_bytes(spec, e)
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
    emb_mask = _dropout_mask_bytes(spec, res)
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
        saved += bs * h * _dropout_mask_bytes(spec, e)
    return saved + _layer0_parallel_mlp_savings(arch, spec, bs)


#: tensors of the MLP's width that HF ``FastGELUActivation`` (``gelu_fast``: ``0.5 x (1 +
#: tanh(0.7978845608 x (1 + 0.044715 x x)))``, transformers ``activations.py``) keeps for
#: backward, run op by op: ``x`` and ``0.044715 x`` (their product), ``0.7978845608 x`` and
#: ``1 + 0.044715 x x`` (their product), the ``tanh`` output, ``0.5 x`` and ``1 + tanh``
GELU_FAST_SAVED = 7


def _layer0_parallel_mlp_savings(arch: ModelArchitecture, spec: TrainingSpec, bs: int) -> int:
    """Layer 0's MLP activation saves nothing under LoRA in a parallel block (GPT-NeoX, Falcon,
    Phi) when no adapter sits on the MLP's first projection: the MLP reads the frozen
    embedding output through a frozen norm and a frozen Linear, so no input of the activation
    requires grad (autograd saves only for such ops); in a sequential block the MLP reads the
    attention output, which does. Measured, MemTracker on meta (GPT-NeoX, LoRA q/v, 1, 2 and
    4 layers): the backward peak sat ``b s f e`` (the GELU input) below the estimate at every
    depth. Under full checkpointing layer 0 keeps only its input anyway: nothing to take off."""
    targets = {l.role for l in _targets(arch, spec)}
    if spec.grad_ckpt == "full" or not arch.family.parallel_residual or arch.gated_mlp or arch.num_experts or targets & {"up", "gate", "gate_up"}:
        return 0
    e = precision(spec).compute
    f = arch.intermediate_size
    if arch.activation == "gelu_new":
        return bs * f * cuda_autocast.gelu_new_saved_bytes_per_element(e, precision(spec).amp and spec.device == "cuda")
    if arch.activation == "gelu_fast":
        return bs * f * GELU_FAST_SAVED * e
    return bs * f * e if arch.activation != "relu" else 0


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


def kept_output_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """Logits the training loop keeps alive by holding the model output (``spec.keep_outputs``):
    ``b s V`` in the compute dtype (bytes); 0 otherwise, without an LM/MLM head, or for
    inference. transformers' causal-LM loss upcasts a copy and ``log_softmax`` saves its own
    output, so without the loop's reference the logits are freed before backward (measured:
    demo GPT-2, b=4, s=128, V=8192, fp32: +16.0 MiB at the backward peak when the output is
    kept). A KV cache the output also holds (``use_cache=True`` in training) is not counted."""
    if not R.keeps_outputs(spec) or spec.task == "inference" or arch.head not in ("lm", "mlm"):
        return 0
    return int(b * s * arch.vocab_size * R.logits_bytes(spec, precision(spec).compute) / spec.tp)


@dataclass(frozen=True, slots=True)
class HeadGradTemps:
    """Backward temporaries of the vocabulary-sized weights (bytes, one device).

    ``pending``: the LM head's ``(V, h)`` weight-gradient contribution of a *tied* embedding,
    held by autograd from the LM-head backward until the embedding backward (reported with the
    activations); ``head_new``: an *untied* LM head's new weight gradient at the LM-head
    backward when a ``.grad`` already exists (accumulated in place right after);
    ``embedding``: what the embedding backward adds on top of the stored gradients.
    """

    pending: int
    head_new: int
    embedding: int


def head_gradient_temporaries(arch: ModelArchitecture, spec: TrainingSpec) -> HeadGradTemps:
    """Temporaries of the ``(V, h)`` gradients in backward (bytes), with and without stored
    gradients (``spec.grads_persist``: micro-batch >= 2 of ``--grad-accum``, or
    ``--keep-grads``).

    A tied weight is used twice (embedding and LM head); autograd's ``InputBuffer::add``
    (``torch/csrc/autograd/input_buffer.cpp``) holds the first contribution (the LM head's
    ``mm``) until the second arrives (``embedding_dense_backward``) and sums them out of place
    (``add``); ``AccumulateGrad::accumulateGrad`` (``torch/csrc/autograd/functions/
    accumulate_grad.h``) then *steals* the sum when no ``.grad`` exists, or adds it in place
    (``variable_grad += new_grad``) when one does. So the embedding backward holds
    mm + dense + sum = 2 V h more than the stored gradients without a ``.grad`` (the sum
    becomes it), and 3 V h more with one (measured, MemTracker on meta, torch 2.13:
    llama-3.2-1b L1 fp32 accum 4: ``mm``, ``embedding_dense_backward`` and two ``add
    [128256, 2048]`` live with the stored ``.grad``; notes 22-23 of notes/accuracy.md). Untied
    weights with a stored ``.grad``: each new weight gradient (LM-head ``mm``, the embedding's
    dense gradient) is a temporary of its own size before the in-place add.
    """
    if spec.task != "train" or arch.head not in ("lm", "mlm"):
        return HeadGradTemps(0, 0, 0)
    prec = precision(spec)
    # autograd builds each (V, h) gradient whole; ZeRO-2/3 and FSDP shard it only after the
    # backward of the parameter (measured, MemTracker / FSDPMemTracker, tied tiny GPT-2 under
    # FSDP on 2 and 4 ranks: the missing bytes were V h 4 (1 - 1/d))
    vh = arch.vocab_size * arch.embed_width * prec.grad / (spec.tp * spec.pp)
    if arch.tie_word_embeddings:
        return HeadGradTemps(pending=int(vh), head_new=0, embedding=int((3 if spec.grads_persist else 2) * vh))
    if spec.grads_persist:
        return HeadGradTemps(pending=0, head_new=int(vh), embedding=int(vh))
    return HeadGradTemps(0, 0, 0)


class _Walk:
    """Running live bytes through a sequence of allocations and frees; keeps the maximum
    and how much of it was weight gradients."""

    def __init__(self) -> None:
        self.cur = 0.0
        self.grads = 0.0
        self.peak = 0.0
        self.peak_grads = 0.0

    def alloc(self, n: float, grad: bool = False) -> None:
        self.cur += n
        if grad:
            self.grads += n
        if self.cur > self.peak:
            self.peak, self.peak_grads = self.cur, self.grads

    def free(self, n: float) -> None:
        self.cur -= n


@dataclass(frozen=True, slots=True)
class LayerBackward:
    """Peak above a layer's saved activations during its backward: ``total`` bytes, of which
    ``grads`` are the layer's weight gradients allocated by then."""

    total: int
    grads: int


def layer_backward_excess(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> LayerBackward:
    """Peak bytes above the saved activations while one layer runs backward (bytes),
    including the layer's weight gradients as autograd allocates them.

    A walk through the layer's backward in autograd order (the reverse of the
    ``transformers`` forward): each node allocates its input gradients (and weight gradient)
    and then frees its saved tensors and its output gradient (PyTorch autograd releases saved
    variables once a node has run, ``retain_graph=False``). The incoming gradient of the
    hidden state is counted by the caller. GPT-2 measured (MemTracker, ESTIMATOR.md method):
    the MLP peak holds the c_proj input gradient + two ``gelu_new`` product gradients
    (3 bsf e); the attention peak one ``b a s^2`` temporary after the MLP's saved tensors are
    gone.
    """
    prec = precision(spec)
    e, g = prec.compute, prec.grad
    bs = b * s
    h, f = arch.hidden_size, arch.intermediate_size
    q, kv = arch.q_dim, arch.kv_dim
    sq = b * arch.num_heads * s * s
    lora = spec.task in ("lora", "qlora")
    w = _Walk()
    # MoE experts run backward one at a time, each on ~k/E of the tokens (uniform routing)
    mult = arch.experts_per_token / arch.num_experts if arch.num_experts else 1
    n_exp = max(1, arch.num_experts)

    persist = spec.grads_persist

    def wgrad(d_in: int, d_out: int, count: int = 1) -> None:
        n = 0 if lora else d_in * d_out * g * count
        if persist:
            # a .grad already exists: the new gradient is a temporary that AccumulateGrad adds
            # in place and frees (torch/csrc/autograd/functions/accumulate_grad.h)
            w.alloc(n)
            w.free(n)
        else:
            w.alloc(n, grad=True)

    if arch.coarse:
        return LayerBackward(total=int(2 * bs * f * e + 12 * h * h * g), grads=int(12 * h * h * g))
    fused = _fused_sdpa(arch, spec)
    targets = {l.role for l in _targets(arch, spec)} if lora else set()

    def saves_input(role: str) -> bool:
        return not lora or role in targets

    mb = _dropout_mask_bytes(spec, e)
    p_hid = arch.hidden_dropout > 0 and spec.task != "inference"
    # a Gemma-2 RMSNorm keeps x and (trained weight only) x*rsqrt in fp32
    gemma_norm = (1 if lora else 2) * bs * h * 4 + bs * 4
    if arch.norms_per_layer == 4:  # Gemma 2: post-feedforward norm runs backward first
        w.alloc(4 * bs * h * 4)
        w.free(4 * bs * h * 4 + gemma_norm)
    if arch.gated_mlp:
        bsf = bs * f * e * mult
        w.alloc(bsf)  # grad of the down-projection input
        wgrad(f, h, n_exp)
        w.free(bsf if saves_input("down") else 0)  # saved product
        w.alloc(2 * bsf)
        w.free(3 * bsf)  # product grad, saved act output and up output
        w.alloc(bs * h * e)
        wgrad(h, f, n_exp)
        w.free(bsf)  # up grad
        w.alloc(bsf)
        w.free(2 * bsf)  # act grad, saved gate output
        w.alloc(bs * h * e)
        wgrad(h, f, n_exp)
        w.free(bsf)
        w.alloc(bs * h * e)
        w.free(2 * bs * h * e)
    else:
        bsf = bs * f * e
        if p_hid:  # residual dropout backward: grad x mask, then the mask is freed
            w.alloc(bs * h * e)
            w.free(bs * h * mb)
        wgrad(f, h)
        w.alloc(bsf)  # c_proj / output dense input gradient
        w.free((bs * h * e if p_hid else 0) + (bsf if saves_input("down") else 0))
        if arch.activation == "gelu_new":
            # gelu_new = 0.5 x (1 + tanh(c (x + 0.044715 x^3))): product backward (2 grads),
            # then tanh / polynomial backward; 4 saved intermediates + the input
            w.alloc(2 * bsf)
            w.free(3 * bsf)  # incoming grad, saved 0.5x and (1 + tanh)
            w.alloc(bsf)
            w.free(2 * bsf)  # tanh grad path, saved tanh
            w.alloc(bsf)
            w.free(bsf)
        else:
            w.alloc(bsf)
            w.free(2 * bsf)  # incoming grad, saved GELU input... (input freed below)
        w.alloc(bs * h * e)
        wgrad(h, f)
        w.free(2 * bsf if arch.activation == "gelu_new" else 0)
        # norm between the blocks: a few fp32 (RMSNorm) or compute-dtype temporaries
    norm_tmp = (4 * bs * h * 4) if arch.norm == "rmsnorm" else 2 * bs * h * e
    w.alloc(norm_tmp)
    w.free(norm_tmp)
    if arch.norms_per_layer == 4:  # pre-feedforward norm (+ its output) and post-attention norm
        w.free(2 * gemma_norm + bs * h * e)
    elif arch.norm == "rmsnorm":
        w.free(bs * h * 4 + bs * 4 + (0 if lora else bs * h * e) + bs * h * e)  # norm's saved tensors
        # the residual add sums the norm's input gradient with the incoming one: the two are
        # freed for their sum (measured: 2 bsh e fewer than without this step, Llama family)
        w.free(2 * bs * h * e)
    else:
        w.free(2 * bs * h * e + 2 * bs * 4)
    # attention
    wgrad(q, h)
    w.alloc(bs * q * e)
    # o-projection input (fused: it is the kept attention output)
    w.free(bs * q * e if not fused and saves_input("o") else 0)
    if fused:
        extra = bs * q * 4 if e != 4 else 0  # fp32 accumulators of the CPU/CUDA flash backward
        w.alloc(bs * (q + 2 * kv) * e + extra)
        w.free(extra + bs * q * e)
    elif _sdpa_math(arch, spec):
        # CPU SDPA math path, autograd order (TorchDispatchMode trace, torch 2.13 CPU):
        # cast of the output gradient to fp32 (16-bit inputs), bmm backward, dropout, softmax,
        # bmm backward, unscaling, casts of the q/k/v gradients back; tensors at ``a`` heads
        ae = _attention_elem(arch, spec, e)
        p_attn = arch.attention_dropout > 0
        v_saved = bs * q * ae + (bs * (q + kv) * e if _v_pins_fused_qkv(arch, spec, b) else 0)
        if ae != e:
            w.alloc(bs * q * ae)
            w.free(bs * q * e)
        w.alloc(sq * ae + bs * q * ae)  # grads of the (dropped) probabilities and of v
        w.free(bs * q * ae + sq * ae + v_saved)  # output grad, saved product and v
        if p_attn:
            w.alloc(sq * ae)  # grad x noise
            w.free(2 * sq * ae)
        w.alloc(sq * ae)  # softmax backward
        w.free(2 * sq * ae)
        w.alloc(2 * bs * q * ae)  # grads of the scaled q and k^T
        w.free(sq * ae + 2 * bs * q * ae)  # scores grad, saved scaled q and k^T
        w.alloc(bs * q * ae)  # unscaling
        w.free(bs * q * ae)
        if ae != e:
            w.alloc(3 * bs * q * e)
            w.free(3 * bs * q * ae)
    else:
        mb = _dropout_mask_bytes(spec, e)
        p_attn = arch.attention_dropout > 0 and spec.task != "inference"
        pinned = bs * (q + kv) * e if _v_pins_fused_qkv_eager(arch, b) else 0  # freed with v
        if arch.family.softmax_fp32 and e != 4:  # fp32 softmax, cast to the compute dtype
            w.alloc(sq * e + bs * q * e)  # grads of the probabilities and of v
            w.free(sq * e + bs * q * e + pinned)  # saved probabilities (cast) and v
            w.alloc(sq * 4)  # cast backward
            w.free(sq * e)
            w.alloc(sq * 4)  # softmax backward
            w.free(2 * sq * 4)  # its input gradient and the saved softmax output
            w.alloc(sq * e)  # back to the scores' dtype
            w.free(sq * 4)
        elif arch.family.softmax_fp32:
            w.alloc(sq * 4 + bs * q * e)
            w.free(bs * q * e + pinned)
            w.alloc(sq * 4)
            w.free(2 * sq * 4)
        else:
            w.alloc(sq * e + bs * q * e)  # grads of the (dropped) probabilities and of v
            w.free(sq * e + bs * q * e)
            if p_attn:
                w.alloc(sq * e)  # grad x mask
                w.free(sq * e + sq * mb)
            w.alloc(sq * e)  # softmax backward
            w.free(2 * sq * e)
            w.alloc(sq * e)  # scale backward
            w.free(sq * e)
        w.alloc(2 * bs * q * e)  # grads of q and k
        w.free(sq * e + 2 * bs * q * e)
    wgrad(h, q + 2 * kv)
    w.alloc(bs * h * e)
    w.alloc(norm_tmp)
    return LayerBackward(total=int(w.peak), grads=int(w.peak_grads))


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


# ----- inference -----------------------------------------------------------------------------


def kv_cache_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int, prefill: bool = False) -> int:
    """KV cache: ``2 L k d s b`` elements in the KV dtype; sliding-window layers keep
    ``min(window, s)`` positions (Mistral / Gemma 2 reports; transformers' sliding-window
    cache layers). Check: Llama-3.1-8B at 1K tokens in bf16 = 0.125 GiB (HF Llama 3.1 post).
    Tensor parallelism splits the heads: divided by ``t`` (at least one head per device)."""
    if arch.kind != "decoder":
        return 0
    kv_heads = max(1, arch.num_kv_heads // spec.tp) if arch.num_kv_heads >= spec.tp else 1
    per_pos = 2 * kv_heads * arch.head_dim * spec.kv_bytes * b
    full = arch.num_layers - arch.sliding_layers
    slide = arch.sliding_layers
    # during the prefill a sliding-window layer keeps a view of the whole prompt's keys and
    # values (the storage of all s positions) until the first decode step trims it
    window = min(s, arch.sliding_window) if arch.sliding_window and not prefill else s
    return int(per_pos * (full * s + slide * window) / spec.pp)


def inference_working_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """Peak transient activations of a no-grad forward over ``s`` new tokens (bytes).

    Only one layer's temporaries live at a time without autograd. Live at the peak: the token
    embeddings (``transformers`` keeps ``inputs_embeds`` for the whole forward), the residual
    stream and the norm output (``3 bsh e``), learned position embeddings, the float causal
    mask of eager attention (``b s^2 e``), and the larger of
    - attention: eager Llama family -- q, the ``repeat_kv`` copies of k and v (GQA only) and the
      masked scores (``e``) with their fp32 copy and fp32 softmax (``b a s^2 (e + 8)``); eager
      GPT-2/BERT -- the q/k/v projections and two ``b a s^2 e`` score tensors (matmul output and
      its scaled copy); fused kernels -- q, k, v and the output;
    - MLP: gate, up and their product (``3 bsf e``; plain MLP: ``2 bsf e``) plus the
      post-attention residual.
    Measured with MemTracker on the meta device (gpumem-tui measure, prefill peaks).
    """
    e = precision(spec).compute
    bs = b * s
    h, f = arch.hidden_size, arch.intermediate_size
    q, kv = arch.q_dim, arch.kv_dim
    base = 3 * bs * h * e + (s * h * e if arch.learned_positions and arch.kind == "decoder" else 0)
    if not arch.learned_positions and arch.kind == "decoder":
        # rotary cos and sin (``(1, s, d)`` in the compute dtype) and the position ids, made
        # once per forward and passed to every layer (transformers ``LlamaModel.forward``;
        # measured, MemTracker, CPU SDPA prefill: 2 s d x 4 + s x 8 in fp32)
        base += arch.family.rotary_sets * 2 * s * arch.rotary_dims * e + s * 8
    if arch.num_layers == 1 and arch.kind == "decoder" and not arch.learned_positions and not arch.family.embedding_scaled:
        # the only layer's input is the embedding output itself (Llama-style models pass
        # ``inputs_embeds`` on unchanged; GPT-2 adds positions and Gemma 2 scales: new tensors)
        base -= bs * h * e
    fused = _fused_sdpa(arch, spec)
    sq = b * arch.num_heads * s * s
    if fused:
        attn = bs * (q + 2 * kv) * e + bs * q * e
        mask = 0
    else:
        # one float mask per attention kind (Gemma 2: sliding-window and full layers; see
        # checkpoint_mask_bytes), alive through the whole forward
        kinds = 2 if arch.family.mask_per_attention_kind and 0 < arch.sliding_layers < arch.num_layers else 1
        mask = kinds * b * s * s * e if arch.kind == "decoder" else 0
        if arch.family.softmax_fp32:
            rep = 2 * bs * q * e if arch.num_kv_heads != arch.num_heads else 0
            # rotated q, the repeat_kv copies of k and v (GQA), the masked scores, their fp32
            # copy and the fp32 softmax (pre-rotary k and the v projection are dropped once
            # the cache holds its copies; measured, MemTracker prefill, Llama MHA and GQA)
            attn = bs * q * e + rep + sq * (e + 4 + (4 if e != 4 else 0))
            if arch.fused_qkv:
                # Phi-3's fused ``qkv_proj`` output stays bound (``qkv``) through the attention,
                # q/k/v being slices of it (transformers ``Phi3Attention.forward``; measured,
                # MemTracker prefill: ``mm [b s, q + 2 kv]`` next to the rotated q)
                attn += bs * (q + 2 * kv) * e
        else:
            attn = bs * (q + 2 * kv) * e + 2 * sq * e
    # MoE: transformers runs the experts one after another, each on its share of the tokens
    # (k/E of them with uniform routing), into an accumulator of the layer output
    mult = arch.experts_per_token / arch.num_experts if arch.num_experts else 1
    moe_acc = bs * h * e if arch.num_experts else 0
    # during the MLP the layer input (still bound in the model's layer loop) and the
    # post-attention residual are both alive: one more bsh e than during attention
    # gelu_new (GPT-2) runs its tanh formula op by op: the Linear output, 0.5 x and two
    # intermediates are alive at once (4 bsf; measured, CPU SDPA prefill)
    # a fused gate_up projection (Phi-3) keeps its whole 2 bsf output (gate and up are chunks
    # of it) next to act(gate) and the product: 4 bsf (``Phi3MLP.forward``; note 18)
    n_mlp = (4 if arch.fused_gate_up else 3) if arch.gated_mlp else (4 if arch.activation == "gelu_new" else 2)
    mlp = n_mlp * bs * f * e * mult + bs * h * e * spec.tp + moe_acc
    if arch.family.attn_output_alive_in_mlp:
        # GPT2Block keeps the attention output bound (``attn_output``) next to the residual sum
        # while its MLP runs (transformers ``GPT2Block.forward``; measured, MemTracker prefill:
        # ``addmm [b s, h]`` of c_proj alive at the MLP peak, note 17)
        mlp += bs * h * e
    if not fused and arch.kind == "decoder":
        # eager attention returns its probabilities (compute dtype: the fp32 softmax output for
        # fp32, else its cast) and the decoder layer binds them to ``_`` until it returns
        # (transformers ``LlamaDecoderLayer.forward``: ``hidden_states, _ = self.self_attn(...)``;
        # ``GPT2Block.forward``: ``attn_output, _ = self.attn(...)``), so they are alive
        # through the MLP of the same layer (measured, MemTracker prefill, notes 14 and 18)
        mlp += sq * e
    return int(base + mask + max(attn, mlp) / spec.tp)


def inference_logits_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int) -> int:
    """Logits of the last position only (``generate()`` passes ``logits_to_keep=1``), plus
    its fp32 copy: ``b V (e + 4)``."""
    e = precision(spec).compute
    if arch.kind != "decoder":
        return 0
    return int(b * arch.vocab_size * (e + 4))


# ----- device-level terms --------------------------------------------------------------------


def cuda_context_bytes(spec: TrainingSpec, arch: ModelArchitecture | None = None) -> int:
    """Memory the driver holds outside torch at the step's peak (bytes): in every NVML
    per-process figure, in no torch figure; 0 off CUDA (the device profile's figure). On CUDA
    the measured figures and what they depend on (GPU generation, CUDA version, libraries the
    step loads): :mod:`gpumem_tui.estimator.devices.cuda_context`; ``spec.measured_context``
    (the context measured on the box) replaces the after-initialisation part."""
    if spec.device != "cuda":
        return profile_for(spec.device).context_bytes()
    sixteen_bit_sdpa = (spec.attention in ("sdpa", "flash") and precision(spec).compute < 4
                        and not (arch is not None and arch.model_type == "gemma2"))
    return cuda_context.context_bytes(training=spec.task != "inference", flash_sdpa=sixteen_bit_sdpa,
                                      generate=spec.new_tokens > 0, measured_init_bytes=spec.measured_context)


def allocator_reserve_bytes(spec: TrainingSpec, peak_allocated: int, transient: int) -> int:
    """Caching-allocator reserve (reserved - allocated) at the peak, bytes, from the device
    profile (:func:`gpumem_tui.estimator.devices.cuda.allocator_reserve_bytes`, the model of
    :mod:`gpumem_tui.estimator.devices.cuda_allocator`; 0 on the CPU)."""
    return profile_for(spec.device).allocator_reserve_bytes(peak_allocated, transient)
