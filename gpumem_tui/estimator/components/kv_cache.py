"""KV cache: the inference cache of keys and values, and the cache a training forward fills
when ``use_cache`` stays on (bytes)."""

from __future__ import annotations

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.components.kernels import cuda_sdpa_window_mask, sdpa_math
from gpumem_tui.estimator.devices import profile_for
from gpumem_tui.estimator.precision import precision
from gpumem_tui.estimator.recipes import rules as R
from gpumem_tui.estimator.spec import TrainingSpec


def kv_cache_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int, prefill: bool = False) -> int:
    """KV cache (bytes): ``2 L k d s b`` elements in the KV dtype; sliding-window layers keep
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
    if spec.attention == "eager" or not arch.family.sdpa or sdpa_math(arch, spec):
        layers = arch.num_layers
    elif cuda_sdpa_window_mask(arch, spec):
        layers = arch.sliding_layers
    else:
        return 0  # enable_gqa: the fused kernel reads (and saves) the cache's copies
    return layers * 2 * b * s * arch.kv_dim * precision(spec).compute // spec.tp
