"""Device-level terms: the CUDA context (outside torch) and the caching allocator's reserve
(reserved - allocated) at the peak (bytes)."""

from __future__ import annotations

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.devices import cuda_context, profile_for
from gpumem_tui.estimator.precision import precision
from gpumem_tui.estimator.spec import TrainingSpec


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
