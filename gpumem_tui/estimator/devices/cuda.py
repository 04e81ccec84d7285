"""CUDA profile: a thin profile over the CUDA rules.

- Dropout keeps a 1-byte bool mask (``native_dropout`` / fused dropout kernels).
- Flash and memory-efficient SDPA kernels support dropout (no math fallback for it).
- ``softmax`` is on CUDA autocast's fp32 list (PyTorch "Automatic Mixed Precision package",
  CUDA ops that autocast to float32).
- The optimizer ``step`` lives on the host (unless ``capturable`` / ``fused``); the default
  implementation is ``foreach`` (``torch/optim/optimizer.py``, ``_default_to_fused_or_foreach``).
- Fused SDPA output layout: :func:`.cuda_kernels.sdpa_output_in_query_layout`.
- The training loop of the CUDA ground truth (``../shared/validation/gpu/gpu_truth.py``) and of
  ``measure --on cuda`` calls ``model(input_ids=ids, labels=ids)`` with the config's
  ``use_cache``, so transformers fills a ``DynamicCache`` during training
  (:func:`gpumem_tui.estimator.components.training_cache_copies`).
- The CUDA context and the caching allocator's reserve: see :data:`CUDA_CONTEXT_BYTES` and
  :func:`allocator_reserve_bytes`. The rules calibrated on H100 measurements (issue 9) go
  into modules beside this one (``cuda_allocator``, ``cuda_context``, ...), called from here.
"""

from __future__ import annotations

from gpumem_tui.estimator.devices.cuda_allocator import fragmentation_bytes
from gpumem_tui.estimator.devices.cuda_context import context_bytes
from gpumem_tui.estimator.devices.cuda_kernels import sdpa_output_in_query_layout
from gpumem_tui.estimator.devices.profile import DeviceProfile

MiB = 1 << 20

#: (kept for old imports) NVIDIA's lazy-loading figure; the CUDA profile now uses the measured
#: figures of cuda_context. CUDA context per process with lazy module loading (CUDA >= 11.7): ESTIMATOR.md gives
#: 300-500 MiB; NVIDIA "CUDA C++ Programming Guide", Lazy Loading. The upper end is used.
CUDA_CONTEXT_BYTES = 500 * MiB

def allocator_reserve_bytes(peak_allocated: int, transient: int) -> int:
    """Caching-allocator reserve (reserved - allocated) at the peak, bytes: the analytic
    fallback of :mod:`gpumem_tui.estimator.devices.cuda_allocator` (``peak_allocated`` is
    accepted for rules that scale by the total). ``estimate`` prefers the simulated reserve of
    :mod:`gpumem_tui.estimator.devices.cuda_step_events` where the step's order is modelled."""
    return fragmentation_bytes(transient)


PROFILE = DeviceProfile(
    name="cuda",
    dropout_mask_bytes=lambda e: 1,
    sdpa_math_with_dropout=False,
    sdpa_always_math=False,
    autocast_softmax_fp32=True,
    optimizer_step_tensors=False,
    default_optimizer_impl="foreach",
    # a training step's context without flash SDPA (H100 / CUDA 13); components.cuda_context_bytes
    # refines it by what the step loads and by the context measured on the box
    context_bytes=lambda: context_bytes(training=True, flash_sdpa=False, generate=False),
    allocator_reserve_bytes=allocator_reserve_bytes,
    figure="nvml_used",
    sdpa_output_in_query_layout=sdpa_output_in_query_layout,
    training_forward_fills_cache=True,
)
