"""Which kernels run, as the device profile and the model's transformers code decide, and what
they keep: the attention path (fused SDPA / FlashAttention, SDPA's math path, eager), its
element size and layout copies, the dropout mask. Read by the activation, backward and
inference rules; none of these is a memory component by itself."""

from __future__ import annotations

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.devices import cuda_kernels, profile_for
from gpumem_tui.estimator.precision import precision
from gpumem_tui.estimator.spec import TrainingSpec


def dropout_mask_bytes(spec: TrainingSpec, e: int) -> int:
    """Bytes per element a dropout keeps for backward when its input has ``e`` bytes per
    element, from the device profile: CUDA's fused dropout keeps a bool mask (1), the CPU path
    a scaled noise tensor in the input dtype (``e``) (ATen ``Dropout.cpp``: ``_dropout_impl``
    vs ``native_dropout``)."""
    return profile_for(spec.device).dropout_mask_bytes(e)


def fused_sdpa(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
    """Whether attention runs a fused kernel that keeps output + log-sum-exp, not s x s.

    Eager never does. SDPA on the CPU falls back to the math path when dropout is on, i.e.
    in training with attention dropout (see :func:`sdpa_math`); in inference (``eval()``)
    dropout is off and the CPU flash kernel runs. A family without an SDPA path in
    transformers (Gemma 2) falls back to eager.
    """
    if spec.attention == "eager" or not arch.family.sdpa and spec.attention == "sdpa":
        return False
    return not sdpa_math(arch, spec)


def sdpa_math(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
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
        return cuda_sdpa_backend(arch, spec) == "math"
    profile = profile_for(spec.device)
    return profile.sdpa_always_math or (
        profile.sdpa_math_with_dropout and arch.attention_dropout > 0 and spec.task != "inference"
    )


def sdpa_output_copied(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
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
    backend = cuda_sdpa_backend(arch, spec) if spec.device == "cuda" else "flash"
    return profile_for(spec.device).sdpa_output_in_query_layout(backend)


def cuda_sdpa_window_mask(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
    """Whether transformers passes an explicit (sliding-window) mask to SDPA: a sliding-window
    layer whose sequence reaches its window (``masking_utils._ignore_causal_mask_sdpa``
    returns False once ``kv_length >= local_attention_size``, transformers 5.x; a sequence of
    exactly the window gets a mask equal to the causal one, materialised all the same; below
    the window it passes ``is_causal``)."""
    return bool(arch.kind == "decoder" and arch.sliding_window and arch.sliding_layers
                and spec.seq >= arch.sliding_window)


def cuda_sdpa_backend(arch: ModelArchitecture, spec: TrainingSpec) -> str:
    """The kernel CUDA's SDPA picks for this model, ``flash`` | ``efficient`` | ``math``
    (:func:`gpumem_tui.estimator.devices.cuda_kernels.sdpa_backend`):
    transformers passes k and v at the KV head count with ``enable_gqa=True`` when there is no
    mask (``use_gqa_in_sdpa``), which the memory-efficient kernel rejects
    (``check_batch_size_and_num_heads_dense<false /*supports_grouped_query_attention*/>``
    in ``use_mem_efficient_attention``, ``sdp_utils.cpp``); with a mask it repeats them
    (``repeat_kv``). So fp32 GQA models (no flash for fp32) run the math path. Measured on the
    H100 (``dev_truth_h100.jsonl``, Llama-3.2-1B fp32 b2 s512): the forward peak was 1278 MiB
    (80 MiB per layer) above the fused-kernel estimate; the math path's ``s x s`` fp32
    probabilities, scaled q / k and repeated v are 76 MiB per layer."""
    mask = cuda_sdpa_window_mask(arch, spec)
    gqa = cuda_kernels.uses_gqa_flag(mask, arch.num_kv_heads, arch.num_heads)
    return cuda_kernels.sdpa_backend(precision(spec).compute, arch.head_dim, arch.attention_dropout > 0, mask, gqa)


def v_pins_fused_qkv(arch: ModelArchitecture, spec: TrainingSpec, b: int) -> bool:
    """GPT-2 on the math path at ``b = 1`` in fp32: ``v`` (a head-split view of the fused
    ``c_attn`` output) needs no copy for the batched matmul (batch and head dims fold into
    one stride), so the saved ``v`` keeps the whole ``b s (q + 2 kv)`` projection output
    alive; at ``b > 1`` (or upcast to fp32) it is a copy (measured, torch 2.13 CPU:
    +2 bsh e per layer at b = 1)."""
    return (
        b == 1
        and arch.family.math_v_view_pins_fused_qkv
        and arch.fused_qkv
        and attention_elem(arch, spec, precision(spec).compute) == precision(spec).compute
    )


def v_pins_fused_qkv_eager(arch: ModelArchitecture, b: int) -> bool:
    """Phi-3 eager attention at ``b = 1`` without GQA: the saved ``v`` is a view of the fused
    qkv output (see :func:`.activations_per_layer.layer_activations`), released when the attention's second matmul
    has run backward."""
    return b == 1 and arch.fused_qkv and not arch.learned_positions and arch.num_kv_heads == arch.num_heads


def broadcast_kv_copies(arch: ModelArchitecture, b: int, s: int, e: int) -> int:
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


def attention_elem(arch: ModelArchitecture, spec: TrainingSpec, e: int) -> int:
    """Element size of the attention core's saved tensors: 4 on the math path for 16-bit
    inputs, else ``e``. ``_scaled_dot_product_attention_math`` (``aten/src/ATen/native/
    transformers/attention.cpp``) upcasts half / bfloat16 q, k, v to fp32 (unless
    ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)``), so the scaled q, k, the
    fp32 v, the scores, softmax, dropout noise and product are fp32, and only the output is
    cast back (measured with a TorchDispatchMode, torch 2.13 CPU). Under CPU autocast the same
    holds: the Linear outputs q, k, v are 16-bit, and the math path upcasts them (measured,
    MemTracker: BERT and GPT-2 with ``torch.autocast("cpu")`` save fp32 q/k/v clones and fp32
    softmax / dropout noise / product; notes/accuracy.md note 19)."""
    return 4 if sdpa_math(arch, spec) else e


def amp_softmax_fp32(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
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
