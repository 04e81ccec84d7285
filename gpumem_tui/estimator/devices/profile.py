"""The device-profile interface: every estimator rule that depends on the device (data)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True, slots=True)
class DeviceProfile:
    """Device-dependent rules (frozen). Sizes in bytes.

    ``dropout_mask_bytes(e)``: bytes per element a dropout keeps for backward when its input
    has ``e`` bytes per element. ``sdpa_math_with_dropout``: SDPA falls back to the math path
    (s x s probabilities) when training with attention dropout. ``sdpa_always_math``: SDPA
    always runs the math path. ``autocast_softmax_fp32``: ``softmax`` is on the device's
    autocast fp32 list. ``optimizer_step_tensors``: torch keeps each parameter's optimizer
    ``step`` as a 4-byte tensor on the device. ``default_optimizer_impl``: torch's default
    optimizer implementation there ("single" or "foreach"). ``context_bytes()``: memory the
    driver holds outside torch (0 off CUDA). ``allocator_reserve_bytes(peak_allocated,
    transient)``: caching-allocator reserve at the peak. ``figure``: what the peak compares
    with. ``sdpa_output_in_query_layout(backend)``: the fused SDPA kernel ``backend`` ("flash",
    "efficient") writes its output in the query's memory layout rather than always in
    ``(b, s, a, d)``. ``training_forward_fills_cache``: the training loop this device's ground
    truth runs calls ``model(input_ids, labels=...)`` with the config's ``use_cache``, so
    transformers fills a ``DynamicCache`` in training (unless gradient checkpointing turns the
    cache off) and attention reads k and v as the cache's ``torch.cat`` copies.
    """

    name: str
    dropout_mask_bytes: Callable[[int], int]
    sdpa_math_with_dropout: bool
    sdpa_always_math: bool
    autocast_softmax_fp32: bool
    optimizer_step_tensors: bool
    default_optimizer_impl: str
    context_bytes: Callable[[], int]
    allocator_reserve_bytes: Callable[[int, int], int]
    figure: str
    sdpa_output_in_query_layout: Callable[[str], bool] = lambda backend: True
    training_forward_fills_cache: bool = False
