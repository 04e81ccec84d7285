"""CUDA kernel rules that change what torch allocates (pure Python; models torch 2.13).

TORCH_VERSION_MODELLED is the torch release whose selection rules these functions encode
(``estimate --help`` states it). The H100 ground truth (``../shared/validation/gpu``) was
taken with torch 2.11; the rules below are the same in 2.11 and 2.13.

SDPA backend selection (``select_sdp_backend``, ``aten/src/ATen/native/transformers/cuda/
sdp_utils.cpp``; the shared checks in ``sdp_utils_cpp.h``). The default priority order is
flash, memory-efficient, math, cuDNN (cuDNN is tried first only when asked for with
``torch.nn.attention.sdpa_kernel``), and a backend is taken when all its checks pass:

- flash (``use_flash_attention``): fp16 / bf16 only (``check_flash_attention_datatype``),
  ``head_dim <= 256`` and a multiple of 8 (``check_head_dim_size_flash``), no explicit
  ``attn_mask`` (``check_for_attn_mask``: only ``is_causal``); dropout allowed; grouped-query
  ``enable_gqa`` allowed (``check_grouped_query_attention``). Saves q, k, v, output and an
  fp32 log-sum-exp ``(b, a, s)``.
- memory-efficient (``use_mem_efficient_attention``): fp32, fp16, bf16; an explicit mask is
  allowed (``attn_bias``), dropout allowed, ``head_dim`` a multiple of 8 (fp16/bf16) or 4
  (fp32) and ``<= 128`` on sm80+ for backward; NOT with ``enable_gqa``
  (``check_for_gqa`` fails for mem-efficient in ``sdp_utils.cpp``). Saves q, k, v, output and
  the log-sum-exp padded to a multiple of 32 positions.
- math (``_scaled_dot_product_attention_math``, ``aten/src/ATen/native/transformers/
  attention.cpp``): everything else; stores the ``s x s`` probabilities.

transformers passes ``enable_gqa=True`` only when there is no attention mask (``use_gqa_in_sdpa``
in ``integrations/sdpa_attention.py``); otherwise it repeats k and v to every head
(``repeat_kv``) first, so memory-efficient stays possible with a sliding-window or padding mask.

Library workspaces: cuBLAS keeps a workspace per (handle, stream), allocated
through the caching allocator (so it is in torch *allocated*) the first time a matmul runs and
kept until exit (``aten/src/ATen/cuda/CublasHandlePool.cpp``, ``getChosenWorkspaceSize`` /
``getCUDABlasLtWorkspaceSize``: 32 MiB on sm90+ (Hopper, Blackwell), about 8 MiB before).
Measured on the H100: every phase of every training case of ``dev_truth_h100.jsonl`` is 64.0 to
~96 MiB above the tensor bytes of the step; the 64 MiB floor is the two workspaces (forward
thread and autograd thread, see :func:`library_workspace_bytes`).
"""

from __future__ import annotations

TORCH_VERSION_MODELLED = "2.13"
#: the torch release of the H100 ground truth the rules were checked against
#: (``../shared/validation/gpu/README.md``: torch 2.11.0+cu130, CUDA 13.0, driver 580.159.04)
TORCH_VERSION_MEASURED = "2.11"

MiB = 1 << 20

#: per-workspace bytes by compute capability major (CublasHandlePool.cpp)
_WORKSPACE_BYTES_SM90 = 32 * MiB
_WORKSPACE_BYTES_OLDER = 4096 * 1024 * 2 + 16 * 1024 * 8  # ":4096:2:16:8"


def library_workspace_bytes(training: bool, sm_major: int = 9) -> int:
    """cuBLAS workspaces held in torch allocated, bytes (see module doc).

    One workspace per (cuBLAS handle, stream), and handles are per thread
    (``DeviceThreadHandlePool``): the forward runs on the caller's thread, backward on the
    autograd engine's device thread (``torch/csrc/autograd/engine.cpp``), so training holds
    two, a no-grad forward one. ``sm_major``: compute capability major (9 = H100). Source:
    ``CublasHandlePool.cpp``; measured on the H100 (``dev_truth_h100.jsonl``): 64 MiB in every
    training case, 32 MiB in the inference cases.
    """
    per = _WORKSPACE_BYTES_SM90 if sm_major >= 9 else _WORKSPACE_BYTES_OLDER
    return (2 if training else 1) * per


def sdpa_backend(dtype_bytes: int, head_dim: int, dropout: bool, explicit_mask: bool,
                 enable_gqa: bool, sm_major: int = 9) -> str:
    """The kernel ``F.scaled_dot_product_attention`` picks on CUDA: flash | efficient | math.

    ``dtype_bytes`` 4 = fp32, 2 = fp16/bf16; ``explicit_mask`` is an ``attn_mask`` tensor
    (padding, sliding window), not ``is_causal``. Rules: see the module doc
    (``select_sdp_backend``, ``sdp_utils.cpp``). ``dropout`` is accepted because flash and
    memory-efficient both support it (only the CPU falls back to math for dropout).
    """
    del dropout  # supported by both fused CUDA kernels
    if dtype_bytes == 2 and head_dim <= 256 and head_dim % 8 == 0 and not explicit_mask and sm_major >= 8:
        return "flash"
    align = 8 if dtype_bytes == 2 else 4
    if not enable_gqa and head_dim % align == 0 and head_dim <= 128:
        return "efficient"
    return "math"


def sdpa_output_in_query_layout(backend: str) -> bool:
    """Whether the CUDA SDPA ``backend`` writes its output in the query's memory layout.

    Both kernels take the query as a ``(b, s, a, d)`` view. Flash allocates its output with
    ``empty_like(query)``, so a ``(b, a, s, d)``-contiguous query (made by ``torch.cat``, see
    ``Family.rotary_concat``) gives an output that ``transpose(1, 2).contiguous()`` must copy
    before the o-projection. The memory-efficient kernel always allocates
    ``empty(B, M, num_heads, Kv)``: its output transposed back is already contiguous in
    ``(b, s, a, d)`` and the o-projection saves it without a copy. Source: torch
    ``_meta_registrations.py`` (``meta__flash_attention_forward``,
    ``meta__efficient_attention_forward``), mirroring ``aten/src/ATen/native/transformers/cuda/
    attention.cu``. Measured on the H100 (``dev_truth_h100.jsonl``, Pythia-410M fp32 b4 s512,
    memory-efficient): no copy.
    """
    return backend == "flash"


def uses_gqa_flag(has_mask: bool, kv_heads: int, heads: int) -> bool:
    """Whether transformers passes ``enable_gqa=True`` to SDPA (``use_gqa_in_sdpa``: torch >=
    2.5, grouped-query heads and no attention mask)."""
    return kv_heads < heads and not has_mask
