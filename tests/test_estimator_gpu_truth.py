"""The CUDA profile against the H100 ground truth (``../shared/validation/gpu/``, issue 9).

Every case of ``dev_truth_h100.jsonl`` is estimated as a user would type it
(``benchmarks/gpu_accuracy.py`` builds the spec) and held to a bound per figure. Targets of the
issue: allocated median <= 0.5 %, worst <= 2 %; reserved and NVML used median <= 2 %, worst
<= 5 %. All three are met on every case.
"""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_accuracy", ROOT / "benchmarks" / "gpu_accuracy.py")
gpu_accuracy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_accuracy)

from shared_data import GPU_DIR, needs_gpu_dir  # noqa: E402

pytestmark = needs_gpu_dir

TARGETS = {"allocated": (0.5, 2.0), "reserved": (2.0, 5.0), "nvml": (2.0, 5.0)}


@pytest.fixture(scope="module")
def rows():
    out = gpu_accuracy.errors("detailed", GPU_DIR)
    assert len(out) == 22
    return [r for r in out if "error_pct" in r]


@pytest.mark.parametrize("figure", ["allocated", "reserved", "nvml"])
def test_median_and_worst_within_bounds(rows, figure):
    errs = [abs(r["error_pct"][figure]) for r in rows]
    med_target, worst_target = TARGETS[figure]
    assert statistics.median(errs) <= med_target
    assert max(errs) <= worst_target


def test_every_modelled_family_is_estimated(rows):
    # OPT and GPT-NeoX are read by issue 10's config reader; everything else must be estimated
    assert len(rows) >= 20


def test_peft_lora_rule_is_what_closes_the_lora_cases(rows):
    by = {r["case"]: r["error_pct"]["allocated"] for r in rows}
    for name in ("dev-qwen05b-lora8-all-b4-s2048", "dev-mistral7b-lora8-all-b1-s2048"):
        assert abs(by[name]) <= 0.5, (name, by[name])


def test_inference_modes(rows):
    by = {r["case"]: r["error_pct"]["allocated"] for r in rows}
    assert abs(by["dev-llama8b-prefill-b4-s1024"]) <= 0.5  # --logits all
    assert abs(by["dev-llama8b-gen-b4-p1024-n64"]) <= 0.5  # --new-tokens 64
    assert abs(by["dev-qwen05b-gen-b32-p512-n128"]) <= 1.0


def test_sliding_window_sdpa_mask_rule_closes_mistral_s8192(rows):
    by = {r["case"]: r["error_pct"] for r in rows}
    assert abs(by["dev-mistral7b-lora8-qv-b1-s8192"]["allocated"]) <= 1.0  # was -11.45 %


def test_simulated_reserve_closes_checkpointing_and_generation(rows):
    by = {r["case"]: r["error_pct"] for r in rows}
    for name in ("dev-llama1b-bf16-b8-s512-sdpa-ckpt", "dev-qwen05b-gen-b32-p512-n128",
                 "dev-qwen05b-bf16-b4-s2048-eager"):  # were -25.3 %, -11.0 %, -1.3 %
        assert abs(by[name]["reserved"]) <= 1.5, (name, by[name]["reserved"])
        assert abs(by[name]["nvml"]) <= 1.5, (name, by[name]["nvml"])


def test_training_cache_and_output_layout_rules_close_the_fused_qkv_cases(rows):
    # GPT-2 (learned positions: q pins the fused c_attn output, k and v are the training
    # cache's copies) and Pythia (rotary q is new; memory-efficient SDPA writes (b, s, a, d),
    # so the o-projection saves no copy): were +6.50 % (Pythia) before these rules
    by = {r["case"]: r["error_pct"]["allocated"] for r in rows}
    for name in ("dev-pythia410m-fp32-b4-s512-sdpa", "dev-gpt2-fp32-b4-s512-sdpa", "dev-gpt2-nodrop-fp32-b4-s1024-sdpa"):
        assert abs(by[name]) <= 0.5, (name, by[name])


def test_forward_phase_of_every_training_case_within_1_percent():
    # the forward's peak (end of forward: activations, logits and the training cache's copies
    # that attention did not save) against torch's forward-phase max_memory_allocated;
    # Mistral-7B s8192 was -1.6 % before the cache copies were counted
    from gpumem_tui.estimator import estimate as E
    from gpumem_tui.estimator.devices.cuda_kernels import library_workspace_bytes

    worst = {}
    for case, truth in gpu_accuracy.load_cases(GPU_DIR):
        if case["task"] == "inference":
            continue
        arch, spec = gpu_accuracy.arch_and_spec(case, GPU_DIR)
        fwd = max(sum(m.values()) for phase, _label, m in E._training_moments(arch, spec) if phase == "forward")
        measured = truth["phase_peak_allocated"]["forward"]
        worst[case["name"]] = 100 * (fwd + library_workspace_bytes(True) - measured) / measured
    assert len(worst) >= 17
    assert max(abs(v) for v in worst.values()) <= 1.0, worst
