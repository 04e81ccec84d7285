"""The headless CUDA rules (estimator/devices/): allocator arithmetic, kernel selection,
autocast lists, context; and that they import no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpumem_tui.estimator.devices import cuda_allocator as A
from gpumem_tui.estimator.devices import cuda_autocast, cuda_context, cuda_kernels

MiB = 1 << 20


@pytest.mark.parametrize("n, rounded", [(0, 512), (1, 512), (512, 512), (513, 1024), (MiB + 1, MiB + 512)])
def test_round_size(n, rounded):
    assert A.round_size(n) == rounded


@pytest.mark.parametrize("n, seg", [(4, 2 * MiB), (MiB, 2 * MiB), (MiB + 1, 20 * MiB), (10 * MiB - 512, 20 * MiB),
                                    (10 * MiB, 10 * MiB), (11 * MiB + 1, 12 * MiB)])
def test_segment_sizes(n, seg):
    assert A.segment_bytes(n) == seg


def test_packing_splits_segments_and_opens_new_ones():
    # four 512 KiB requests fit one 2 MiB small segment, a fifth opens another
    assert A.packed_reserved_bytes([512 * 1024] * 4) == 2 * MiB
    assert A.packed_reserved_bytes([512 * 1024] * 5) == 4 * MiB
    # three 6 MiB requests: two share a 20 MiB segment (8 MiB left), the third fits the rest
    assert A.packed_reserved_bytes([6 * MiB] * 3) == 20 * MiB
    assert A.packed_reserved_bytes([6 * MiB] * 4) == 40 * MiB
    assert A.packed_reserved_bytes([100 * MiB + 1]) == 102 * MiB
    with pytest.raises(ValueError):
        A.round_size(-1)


@pytest.mark.parametrize("args, backend", [
    ((2, 64, True, False, False), "flash"),
    ((2, 64, False, True, False), "efficient"),  # a padding / sliding-window mask
    ((4, 64, False, False, False), "efficient"),  # fp32 has no flash kernel
    ((2, 64, False, True, True), "math"),  # mask + enable_gqa: no fused kernel
    ((2, 512, False, False, False), "math"),  # head_dim above both kernels' limits
])
def test_sdpa_backend(args, backend):
    assert cuda_kernels.sdpa_backend(*args) == backend


def test_workspaces_per_thread():
    assert cuda_kernels.library_workspace_bytes(training=True) == 2 * cuda_kernels.library_workspace_bytes(training=False)
    assert cuda_kernels.library_workspace_bytes(training=False, sm_major=8) < 32 * MiB


def test_autocast_lists_are_disjoint_and_gelu_rule():
    assert not cuda_autocast.FP32_OPS & cuda_autocast.LOWER_PRECISION_OPS
    assert cuda_autocast.runs_fp32("pow") and cuda_autocast.runs_fp32("softmax") and not cuda_autocast.runs_fp32("mm")
    assert cuda_autocast.gelu_new_saved_bytes_per_element(2, cuda_amp=True) > cuda_autocast.gelu_new_saved_bytes_per_element(2, cuda_amp=False)


def test_context_measured_on_the_box_replaces_the_init_part():
    base = cuda_context.context_bytes(training=True, flash_sdpa=False, generate=False)
    assert base == 742 * MiB  # H100 / CUDA 13 measurement
    mine = cuda_context.context_bytes(training=True, flash_sdpa=False, generate=False, measured_init_bytes=400 * MiB)
    assert base - mine == 210 * MiB
    with pytest.raises(ValueError):
        cuda_context.context_bytes(training=True, flash_sdpa=False, generate=False, measured_init_bytes=-1)
    _fig, exact = cuda_context.figures_for(8, 12)
    assert not exact


def test_spec_passes_the_measured_context_through():
    from gpumem_tui.estimator.architecture import load_architecture
    from gpumem_tui.estimator.estimate import estimate
    from gpumem_tui.estimator.spec import SpecError, TrainingSpec

    arch = load_architecture("gpt2")
    a = estimate(arch, TrainingSpec(device="cuda"))
    b = estimate(arch, TrainingSpec(device="cuda", measured_context=100 * MiB))
    assert a.components_bytes["cuda_context"] - b.components_bytes["cuda_context"] == 510 * MiB
    with pytest.raises(SpecError):
        TrainingSpec(measured_context=-5)


def test_devices_import_no_torch():
    code = ("import sys; import gpumem_tui.estimator.devices.cuda_allocator, gpumem_tui.estimator.devices.cuda_kernels, "
            "gpumem_tui.estimator.devices.cuda_autocast, gpumem_tui.estimator.devices.cuda_context, "
            "gpumem_tui.estimator.devices.peft_lora; "
            "assert not {'torch', 'textual', 'pynvml'} & set(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
