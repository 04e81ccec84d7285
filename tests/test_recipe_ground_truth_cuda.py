"""Recipe estimates against the real frameworks on a CUDA GPU (one H100, CUDA 13.0, torch 2.11,
transformers 5.17, peft 0.21, bitsandbytes 0.50), measured by
``benchmarks/collect_cuda_recipes.py`` and saved in ``tests/data/recipes_cuda`` (its README
says how). Each figure is compared with the estimate's figure of the same kind: torch
allocated, torch reserved, NVML used (context included)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _benchmark():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("recipe_accuracy", ROOT / "benchmarks" / "recipe_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


BENCH = _benchmark()
RECORDS = BENCH.cuda_records()
#: per figure: (the record's field, the estimate's figure, tolerance). Allocated: 1 % (every
#: case is within 0.93 % today); reserved and NVML used: 4 % (gpu_accuracy.py's worst target is
#: 5 %; the allocator's reserve is replayed, not measured, and NVML adds the context)
FIGURES = {"allocated": ("peak_bytes", "allocated", 0.01), "reserved": ("max_reserved", "reserved", 0.04),
           "nvml_used": ("nvml_peak_used", "nvml_used", 0.04)}
#: known gaps, each a strict xfail (it fails the suite once it is fixed, so the mark goes): none
#: today (QLoRA's reserve was -8.9 % under the analytic share before the allocator replay
#: covered peft's k-bit preparation, devices/cuda_kbit_events)
KNOWN_GAPS: dict[tuple[str, str], str] = {}


def test_the_ground_truth_covers_every_cuda_recipe_and_says_how() -> None:
    """9 cases: the Trainer under bf16 and fp16 autocast (with and without checkpointing), PEFT
    LoRA under the Trainer and the plain loop, QLoRA via peft's k-bit preparation; each from
    the H100 with every figure present."""
    assert len(RECORDS) == 9
    kinds = {(r["spec"]["recipe"], r["spec"]["task"]) for r in RECORDS}
    assert kinds == {("hf-trainer", "train"), ("hf-trainer", "lora"), ("torch", "lora"), ("peft-kbit", "qlora")}
    assert {r["spec"]["dtype"] for r in RECORDS if r["spec"]["mixed_precision"]} == {"bf16", "fp16"}
    for record in RECORDS:
        assert "NVIDIA H100" in record["how"] and "collect_cuda_recipes.py" in record["how"]
        assert record["torch"].startswith("2.11") and record["transformers"] == "5.17.0"
        assert record["peak_bytes"] <= record["max_reserved"] < record["nvml_peak_used"]
        assert record["allocator_stats"]["num_ooms"] == 0 and record["allocator_stats"]["num_alloc_retries"] == 0


def _params():  # type: ignore[no-untyped-def]
    out = []
    for record in RECORDS:
        for figure in FIGURES:
            gap = KNOWN_GAPS.get((record["case"], figure))
            marks = [pytest.mark.xfail(strict=True, reason=gap)] if gap else []
            out.append(pytest.param(record, figure, id=f"{record['case']}-{figure}", marks=marks))
    return out


@pytest.mark.parametrize(("record", "figure"), _params())
def test_estimate_matches_the_h100(record, figure) -> None:  # type: ignore[no-untyped-def]
    field, key, tolerance = FIGURES[figure]
    error = BENCH.cuda_figures(record)[key] / record[field] - 1
    assert abs(error) <= tolerance, f"{record['case']} {figure}: {error:+.2%}"


def test_qlora_spec_reads_the_quantization_config() -> None:
    """The QLoRA cases' spec takes its quant format from the model's ``quantization_config``
    (nf4 with double quantization): the parameter bytes then match the 4-bit model's."""
    qlora = [r for r in RECORDS if r["spec"]["task"] == "qlora"]
    assert qlora
    for record in qlora:
        fmt = BENCH.cuda_spec(record).quant_format
        assert fmt is not None and fmt.method == "nf4" and fmt.double_quant


def test_trainer_lora_over_bf16_weights_runs_its_adapters_under_autocast() -> None:
    """The Trainer's bf16 autocast over bf16 weights: each adapted Linear saves a 16-bit (not
    fp32) copy of its input, so the Trainer case holds less than the same model and shapes in
    the plain loop (measured: 512.8 MiB less) and the estimate says the same difference."""
    by_recipe = {r["spec"]["recipe"]: r for r in RECORDS
                 if r["spec"]["task"] == "lora" and r["spec"]["grad_ckpt"] == "none"}
    trainer, loop = by_recipe["hf-trainer"], by_recipe["torch"]
    measured = loop["peak_bytes"] - trainer["peak_bytes"]
    predicted = BENCH.cuda_figures(loop)["allocated"] - BENCH.cuda_figures(trainer)["allocated"]
    assert measured > 500 << 20
    assert abs(predicted / measured - 1) <= 0.02


def test_qlora_build_replay_matches_the_h100_before_training() -> None:
    """The replayed QLoRA build (16-bit load, 4-bit quantization, k-bit preparation's fp32
    casts, the adapters: devices/cuda_kbit_events) against ``before_training`` of the H100
    records: allocated and its maximum within 0.5 % (measured 1.4538 / 1.9366 GiB), reserved
    within 3 % (1.9766 GiB: the freed 16-bit embedding stays cached); and the step's simulated
    reserve is the estimate's, within the 4 % of every reserved figure above."""
    from gpumem_tui.estimator.architecture import architecture_from_config
    from gpumem_tui.estimator.devices import cuda_kbit_events as K
    from gpumem_tui.estimator.devices import cuda_step_events as E
    from gpumem_tui.estimator.devices.cuda_layer_events import Run
    from gpumem_tui.estimator.estimate import estimate

    qlora = [r for r in RECORDS if r["spec"]["task"] == "qlora"]
    assert qlora
    for record in qlora:
        arch = architecture_from_config(record["model"], name=record["case"])
        spec = BENCH.cuda_spec(record)
        run = Run()
        K.build_kbit_model(run, K.KbitShapes(arch, spec))
        before = record["before_training"]
        assert abs(run.alloc.allocated / before["allocated"] - 1) <= 0.005
        assert abs(run.alloc.peak_allocated / before["max_allocated"] - 1) <= 0.005
        assert abs(run.alloc.reserved / before["max_reserved"] - 1) <= 0.03
        est = estimate(arch, spec)
        assert est.simulated_reserve_bytes is not None
        assert est.simulated_reserve_bytes == E.simulate(arch, spec).reserve
