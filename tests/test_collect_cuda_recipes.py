"""``benchmarks/collect_cuda_recipes.py``, the CUDA ground-truth collector, on the parts that
decide what its records say without a GPU: the estimator spec of each case, the NVML figure of
the process (fake ``pynvml``, the project's NVML test double) and the checkpoint flavour read
back from a real transformers model."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

from gpumem_tui.estimator.spec import TrainingSpec
from tests.fake_pynvml import NVML_ERROR_NO_PERMISSION, FakeNvml, GiB

ROOT = Path(__file__).resolve().parent.parent


def _load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("collect_cuda_recipes", ROOT / "benchmarks" / "collect_cuda_recipes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["collect_cuda_recipes"] = module
    spec.loader.exec_module(module)
    return module


ccr = _load()


@pytest.mark.parametrize("case", ccr.CASES, ids=[c["name"] for c in ccr.CASES])
def test_every_case_is_a_valid_estimator_spec_naming_its_precision(case) -> None:  # type: ignore[no-untyped-def]
    fields = ccr.estimator_spec(case, "cuda")
    spec = TrainingSpec(**{**fields, "lora_targets": tuple(fields.get("lora_targets", ("q", "v")))})
    if case["weights"] == "fp32":  # Trainer bf16=True / fp16=True over fp32 weights: autocast
        assert spec.mixed_precision and spec.dtype == case["amp"]
    else:  # weights already bf16: no fp32 master copy
        assert not spec.mixed_precision and spec.dtype == case["weights"]
    assert spec.grad_ckpt == ("full" if case["gc"] else "none")
    assert spec.optimizer_impl == ("single" if case["recipe"] == "torch" else "auto")


def test_tiny_variant_keeps_every_code_path_but_the_size() -> None:
    for case in ccr.CASES:
        tiny = ccr.shrink(case)
        assert {k: v for k, v in tiny.items() if k not in ("name", "config", "batch", "seq")} == \
            {k: v for k, v in case.items() if k not in ("name", "config", "batch", "seq")}
        assert Path(tiny["config"]).is_file() and tiny["name"].endswith("-tiny-b2-s32")


def test_nvml_used_sums_this_pid_over_gpus_and_skips_a_gpu_that_refuses(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake = FakeNvml(gpus=3)
    fake.add_process(0, pid=77, used=1 * GiB)
    fake.add_process(1, pid=77, used=2 * GiB)
    fake.add_process(1, pid=78, used=5 * GiB)
    fake.add_process(2, pid=77, used=4 * GiB)
    fake.install(monkeypatch)
    pynvml = sys.modules["pynvml"]
    pynvml.nvmlInit()
    assert ccr.nvml_used_of(pynvml, 77) == 7 * GiB
    fake.fail("nvmlDeviceGetComputeRunningProcesses", NVML_ERROR_NO_PERMISSION, device=2)
    assert ccr.nvml_used_of(pynvml, 77) == 3 * GiB
    assert ccr.nvml_used_of(pynvml, 99) is None
    fake.add_process(0, pid=99, used=None)  # usedGpuMemory not available (Windows WDDM, some MIG)
    assert ccr.nvml_used_of(pynvml, 99) is None


def _wait_until(condition) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_nvml_sampler_keeps_the_peak_after_memory_drops(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import os

    fake = FakeNvml(gpus=1)
    proc = fake.add_process(0, pid=os.getpid(), used=1 * GiB)
    fake.install(monkeypatch)
    pynvml = sys.modules["pynvml"]
    pynvml.nvmlInit()
    sampler = ccr.NvmlPeak(pynvml, interval=0.001)
    sampler.start()
    try:
        _wait_until(lambda: sampler.peak == 1 * GiB)
        proc.used = 3 * GiB
        _wait_until(lambda: sampler.peak == 3 * GiB)
        proc.used = 2 * GiB
        seen = sampler.samples
        _wait_until(lambda: sampler.samples > seen + 2)
    finally:
        sampler.stopped.set()
        sampler.join()
    assert sampler.peak == 3 * GiB


@pytest.mark.torch_in_process
def test_checkpoint_flavour_is_read_from_the_model() -> None:
    import json

    import torch

    model = ccr._model(json.loads((ccr.CONFIGS / "llama-tiny.json").read_text()), torch)
    assert ccr.checkpoint_flavour(model) is None
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert ccr.checkpoint_flavour(model) == "non-reentrant"
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    assert ccr.checkpoint_flavour(model) == "reentrant"


def test_a_steps_peak_is_the_largest_of_its_phases() -> None:
    """Both loops read one peak per phase (forward, backward, optimizer step); the step's peak
    is their largest, whichever phase holds it."""
    meter = type("Meter", (), {})()
    meter.peaks = {}
    for step in range(1, ccr.STEPS + 1):
        for offset, phase in enumerate(ccr.PHASES):
            meter.peaks[f"step{step}.{phase}"] = 100 * step + (offset + step) % 3
    ccr._step_peaks_from_phases(meter)
    for step in range(1, ccr.STEPS + 1):
        assert meter.peaks[f"step{step}"] == 100 * step + 2
