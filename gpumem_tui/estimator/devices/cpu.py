"""CPU profile: the kernels of torch's CPU build (what ``measure --on cpu`` runs).

- Dropout keeps its scaled noise tensor in the input dtype, not a 1-byte mask (ATen
  ``Dropout.cpp``: ``_dropout_impl`` on CPU vs ``native_dropout`` on CUDA).
- SDPA: ``select_sdp_backend_cpp`` (``aten/src/ATen/native/transformers/sdp_utils_cpp.cpp``)
  picks the CPU flash kernel only when ``dropout_p == 0``; training with attention dropout
  runs the math path (measured, torch 2.13 CPU: ``torch._fused_sdp_choice`` is MATH at 0.1).
- ``softmax`` is not on CPU autocast's fp32 list (PyTorch "Automatic Mixed Precision").
- Adam-style optimizers keep ``step`` as a 0-d fp32 tensor per parameter, on the device;
  the default implementation is the single-tensor loop (``torch/optim/optimizer.py``,
  ``_default_to_fused_or_foreach``: foreach only for CUDA tensors).
- No context and no caching allocator: figures are live tensor bytes (MemTracker).
- The CPU flash SDPA kernel writes its output with the query's strides (measured, torch 2.13
  CPU: a ``(b, a, s, d)``-contiguous query gives a ``(b, a, s, d)``-contiguous output, a
  transposed ``(b, s, a, d)`` one a transposed output).
- ``measure --on cpu`` runs the training forward with ``use_cache=False``
  (:mod:`gpumem_tui.measure.runner`), so no cache is filled in training.
"""

from __future__ import annotations

from gpumem_tui.estimator.devices.profile import DeviceProfile

PROFILE = DeviceProfile(
    name="cpu",
    dropout_mask_bytes=lambda e: e,
    sdpa_math_with_dropout=True,
    sdpa_always_math=False,
    autocast_softmax_fp32=False,
    optimizer_step_tensors=True,
    default_optimizer_impl="single",
    context_bytes=lambda: 0,
    allocator_reserve_bytes=lambda peak, transient: 0,
    figure="live tensor bytes (MemTracker)",
    sdpa_output_in_query_layout=lambda backend: True,
    training_forward_fills_cache=False,
)
