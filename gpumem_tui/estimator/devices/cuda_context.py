"""The CUDA context: device memory a process holds outside torch's allocator (pure Python).

It is in every NVML per-process "used" figure and in no torch figure (torch allocated /
reserved). It has two parts:

1. After initialisation (``torch.zeros(1, device="cuda")``): the driver context, torch's
   kernel images loaded lazily (``CUDA_MODULE_LOADING=LAZY``, the default since CUDA 11.7 /
   torch 1.13; NVIDIA's "CUDA C++ Programming Guide", Lazy Loading: 300-500 MiB typical).
   Measured: 610 MiB on an H100 with CUDA 13 / driver 580 / torch 2.11
   (``../shared/validation/gpu/dev_truth_h100.jsonl``, field ``cuda_context``, every case).
2. Grown during the step, as kernels and libraries load: cuBLAS / cuBLASLt handles and their
   kernels, the autograd backward kernels, flash-attention. Measured as NVML used minus torch
   reserved at the peak (same file): training 742 MiB, 758 MiB when the flash SDPA kernel runs
   (16-bit SDPA), a no-grad forward 686 MiB, ``generate()`` 692-696 MiB.

:data:`_MEASURED` holds these figures per (GPU compute-capability major, CUDA major); other
combinations use the nearest measured one and say so. When the dashboard runs on the box, the
context measured there (NVML used minus reserved of a process at rest, or ``measure --on cuda``'s
``cuda_context``) is passed as ``measured_init_bytes`` and replaces part 1.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20


@dataclass(frozen=True)
class ContextFigures:
    """Measured context parts (bytes) for one GPU generation / CUDA major version."""

    init: int  # after initialisation
    training_extra: int  # grown by a training step (autograd, cuBLAS handles, kernels)
    flash_extra: int  # + the flash SDPA kernels (16-bit SDPA training)
    inference_extra: int  # grown by a no-grad forward
    generate_extra: int  # + generate()'s decode kernels
    source: str


_MEASURED = {
    (9, 13): ContextFigures(610 * MiB, 132 * MiB, 16 * MiB, 76 * MiB, 8 * MiB,
                            "H100, CUDA 13.0, torch 2.11 (validation/gpu/dev_truth_h100.jsonl)"),
}
DEFAULT_KEY = (9, 13)


def figures_for(sm_major: int = 9, cuda_major: int = 13) -> tuple[ContextFigures, bool]:
    """The measured figures for this GPU generation / CUDA version and whether they are exact
    (False: the nearest measured combination is used)."""
    key = (sm_major, cuda_major)
    if key in _MEASURED:
        return _MEASURED[key], True
    return _MEASURED[DEFAULT_KEY], False


def context_bytes(training: bool, flash_sdpa: bool, generate: bool, sm_major: int = 9,
                  cuda_major: int = 13, measured_init_bytes: int | None = None) -> int:
    """Context at the step's peak (bytes): part 1 (or ``measured_init_bytes`` measured on the
    box) plus what the step loads (part 2). See the module doc for the sources.

    Raises:
        ValueError: ``measured_init_bytes`` negative or above 64 GiB (not a context).
    """
    fig, _exact = figures_for(sm_major, cuda_major)
    if measured_init_bytes is not None and not 0 <= measured_init_bytes <= 64 * 1024 * MiB:
        raise ValueError(f"measured CUDA context {measured_init_bytes} bytes is implausible")
    init = fig.init if measured_init_bytes is None else measured_init_bytes
    if training:
        return init + fig.training_extra + (fig.flash_extra if flash_sdpa else 0)
    return init + fig.inference_extra + (fig.generate_extra if generate else 0)
