"""GPT-NeoX and Falcon variants against measured ground truth (held out while the rules of
issue 10 were written): block layout from the config, Falcon's new decoder architecture,
ALiBi, LoRA on a parallel block.

Ground truth: benchmarks/data/measured_neox_falcon.json (``gpumem-tui measure``, torch
MemTracker, torch 2.13 CPU build), written by benchmarks/collect_neox_falcon.py. Before these
rules the file's 74 cases were off by up to 10.8 % (median |error| 0.58 %).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpumem_tui.estimator.architecture import architecture_from_config, load_architecture
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.spec import TrainingSpec

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "measured_neox_falcon.json"
CASES = json.loads(DATA.read_text(encoding="utf-8"))["cases"]


def _error(case: dict) -> float:
    fields = dict(case["spec"])
    if "lora_targets" in fields:
        fields["lora_targets"] = tuple(fields["lora_targets"])
    predicted = estimate(load_architecture(str(ROOT / case["config"])), TrainingSpec(**fields)).peak_bytes
    measured = case["measured"]["peak_bytes"]
    return 100.0 * (predicted - measured) / measured


ERRORS = {c["id"]: _error(c) for c in CASES}


def test_targets_over_all_cases() -> None:
    assert len(ERRORS) >= 60
    values = [abs(v) for v in ERRORS.values()]
    assert statistics.median(values) <= 0.5
    assert max(values) <= 2.0, max(ERRORS.items(), key=lambda kv: abs(kv[1]))


@pytest.mark.parametrize("prefix,before", [
    ("neox-h2048-seq-meta-eager-fp32-b4-s512", -0.79),  # use_parallel_residual false
    ("falcon-seq-bias-h1024-meta-eager-fp32-b4-s512", -1.45),  # parallel_attn false
    ("falcon-ndA-h2048-meta-eager-fp32-b4-s512", -1.84),  # new_decoder_architecture, 4 KV heads
    ("falcon-alibi-h1024-meta-eager-fp32-b2-s1024-ckpt", -4.47),  # ALiBi mask kept by checkpoints
    ("falcon-alibi-h1024-meta-eager-bf16-b2-s1024-ckpt", -2.85),
    ("neox-h1024-par-meta-eager-fp32-b2-s512-lora-qv", +1.22),  # layer 0's MLP without a gradient
    ("falcon-mq-h4544-meta-eager-bf16-b2-s512-lora", +1.49),
    ("neox-h1024-gelufast-meta-eager-bf16-b2-s1024", -9.48),  # gelu_fast's op-by-op tanh formula
    ("neox-h1024-gelufast-meta-eager-fp32-b1-s1024-lora-qv", -10.81),
])
def test_diagnosed_cases_are_closed(prefix: str, before: float) -> None:
    assert abs(ERRORS[prefix]) <= 0.1, (prefix, ERRORS[prefix], "was", before)


FALCON = {"model_type": "falcon", "hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 2,
          "vocab_size": 4096}


def test_falcon_layout_fields() -> None:
    old = architecture_from_config(dict(FALCON))
    assert (old.num_kv_heads, old.norms_per_layer, old.family.parallel_residual) == (1, 1, True)
    mha_seq = architecture_from_config(dict(FALCON, multi_query=False, parallel_attn=False, num_kv_heads=4))
    # the old architecture ignores num_kv_heads: multi_query false is MHA
    assert (mha_seq.num_kv_heads, mha_seq.norms_per_layer, mha_seq.family.parallel_residual) == (16, 2, False)
    new = architecture_from_config(dict(FALCON, new_decoder_architecture=True, num_kv_heads=4))
    assert (new.num_kv_heads, new.norms_per_layer, new.kv_expanded) == (4, 2, True)
    # qkv width (a + 2 kv) d and two LayerNorms per layer
    d = 64
    per_layer = 1024 * (16 + 8) * d + 1024 * 1024 + 2 * 1024 * 4096 + 2 * 2 * 1024
    assert new.total_params == 2 * per_layer + 4096 * 1024 + 2 * 1024
    assert architecture_from_config(dict(FALCON, alibi=True)).alibi


def test_neox_sequential_block() -> None:
    cfg = {"model_type": "gpt_neox", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
           "intermediate_size": 1024, "vocab_size": 1000}
    assert architecture_from_config(dict(cfg)).family.parallel_residual
    assert not architecture_from_config(dict(cfg, use_parallel_residual=False)).family.parallel_residual


def test_alibi_mask_grows_with_heads_under_checkpointing() -> None:
    """The ALiBi mask is ``(b, a, s, s)``: doubling the heads at the same width adds one
    ``b a s s e`` more at the checkpointed backward peak than without ALiBi."""
    spec = TrainingSpec(batch=1, seq=512, dtype="fp32", attention="eager", grad_ckpt="full", device="cpu")
    peaks = {}
    for heads in (8, 16):
        for alibi in (False, True):
            arch = architecture_from_config(dict(FALCON, num_attention_heads=heads, alibi=alibi))
            peaks[heads, alibi] = estimate(arch, spec).peak_bytes
    extra8, extra16 = peaks[8, True] - peaks[8, False], peaks[16, True] - peaks[16, False]
    assert extra16 - extra8 == 8 * 512 * 512 * 4


def test_lora_with_checkpointing_keeps_layer0_norm_input() -> None:
    """measure's LoRA + full checkpointing calls ``enable_input_require_grads``: the frozen
    base's layer 0 norm is no saving there (was -3 b s h e at the peak, now -2)."""
    # the estimate's errors against these measured cases: -0.69 % and -1.00 % before this
    # rule, -0.46 % and -0.67 % with it (estimator output, not measurements)
    for name, bound in (("neox-h1024-par-meta-eager-bf16-b4-s256-lora-ckpt", -0.6),
                        ("falcon-mq-h2048-meta-eager-bf16-b4-s256-lora-ckpt", -0.8)):
        assert bound <= ERRORS[name] < 0, (name, ERRORS[name])
