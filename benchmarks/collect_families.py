"""Ground truth for the families of issue 10 and for configs the estimator has never seen.

Writes ``benchmarks/data/measured_families.json`` with ``gpumem-tui measure`` (MemTracker):
per family at least three shapes with eager attention on the meta device (real widths, two
layers) and SDPA on the real CPU (narrow widths). Mixture-of-experts models route by the data,
which the meta device cannot compute, so they are measured on the real CPU only (random
weights and tokens: near-uniform routing). The ``unseen-*`` cases are families with no exact
description, estimated with the general one. Regenerate::

    .venv/bin/python benchmarks/collect_families.py [--only qwen3]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from collect_ground_truth import collect  # noqa: E402

OUT = ROOT / "benchmarks" / "data" / "measured_families.json"


def _narrow(**extra: Any) -> dict[str, Any]:
    """A narrow two-layer shape for real CPU runs (fields named as in most configs)."""
    out = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 4096}
    out.update(extra)
    return out


# catalogue name, meta overrides (real width), CPU overrides (narrow)
FAMILIES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("qwen3-0.6b", {"num_hidden_layers": 2}, _narrow(num_key_value_heads=2, head_dim=64, intermediate_size=704)),
    ("olmo-2-1b", {"num_hidden_layers": 2}, _narrow(num_key_value_heads=4, intermediate_size=704)),
    ("stablelm-2-1.6b", {"num_hidden_layers": 2}, _narrow(num_key_value_heads=4, intermediate_size=704)),
    ("pythia-160m", {"num_hidden_layers": 2}, _narrow(intermediate_size=1024)),
    ("phi-2", {"num_hidden_layers": 2}, _narrow(hidden_size=320, intermediate_size=1024)),  # rotary 0.4 x 80
    ("opt-125m", {"num_hidden_layers": 2}, _narrow(ffn_dim=1024, word_embed_proj_dim=256)),
    ("opt-350m", {"num_hidden_layers": 2}, _narrow(ffn_dim=1024, word_embed_proj_dim=128)),
    ("falcon-7b", {"num_hidden_layers": 2}, _narrow()),
    ("gemma-3-1b", {"num_hidden_layers": 2}, _narrow(num_key_value_heads=1, head_dim=64, intermediate_size=704,
                                                    sliding_window=128, sliding_window_pattern=2)),
]
MOE: list[tuple[str, dict[str, Any]]] = [
    ("qwen1.5-moe-a2.7b", _narrow(intermediate_size=512, moe_intermediate_size=128, shared_expert_intermediate_size=512,
                                  num_experts=8, num_experts_per_tok=2, num_key_value_heads=4)),
    ("qwen3-30b-a3b", _narrow(intermediate_size=512, moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2,
                              num_key_value_heads=2, head_dim=64)),
    ("mixtral-8x7b", _narrow(intermediate_size=512, num_local_experts=4, num_experts_per_tok=2, num_key_value_heads=2)),
    # no exact description yet (MLA, dense first layer, shared expert): the general reading's error
    ("deepseek-v3", _narrow(num_hidden_layers=3, first_k_dense_replace=1, intermediate_size=512, moe_intermediate_size=128,
                            n_routed_experts=8, num_experts_per_tok=2, n_group=1, topk_group=1, n_shared_experts=1,
                            q_lora_rank=128, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
                            num_key_value_heads=4)),
]
UNSEEN = ["benchmarks/data/configs/unseen/starcoder2.json", "benchmarks/data/configs/unseen/helium.json"]

META_SHAPES = [dict(batch=1, seq=512, dtype="bf16"), dict(batch=2, seq=256, dtype="fp32"),
               dict(batch=2, seq=1024, dtype="bf16")]
CPU_SHAPES = [dict(batch=2, seq=256, dtype="fp32", attention="sdpa"), dict(batch=1, seq=512, dtype="bf16", attention="sdpa"),
              dict(batch=4, seq=128, dtype="fp32", attention="eager")]


def _id(name: str, on: str, spec: dict[str, Any]) -> str:
    return f"{name}-{on}-{spec.get('attention', 'eager')}-{spec['dtype']}-b{spec['batch']}-s{spec['seq']}"


def cases() -> list[tuple[str, str, dict[str, Any], dict[str, Any], str]]:
    out = []
    for name, meta_over, cpu_over in FAMILIES:
        out += [(_id(name, "meta", s), name, meta_over, s, "meta") for s in META_SHAPES]
        out += [(_id(name, "cpu", s), name, cpu_over, s, "cpu") for s in CPU_SHAPES]
    for name, cpu_over in MOE:
        out += [(_id(name, "cpu", s), name, cpu_over, s, "cpu") for s in CPU_SHAPES]
    # held out while the MLA rules were written: no low-rank query (V2-Lite style), other shapes
    lite = dict(MOE[-1][1], q_lora_rank=None, num_hidden_layers=2)
    out += [(_id("deepseek-v3-noqlora", "cpu", s), "deepseek-v3", lite, s, "cpu")
            for s in (dict(batch=2, seq=384, dtype="bf16", attention="eager"),
                      dict(batch=1, seq=768, dtype="fp32", attention="sdpa"))]
    for path in UNSEEN:
        name = "unseen-" + Path(path).stem
        out += [(_id(name, "meta", s), path, {}, s, "meta") for s in META_SHAPES]
    return out


def main(argv: list[str] | None = None) -> int:
    return collect(
        cases(), OUT,
        "Ground truth for the families of issue 10 (meta eager at real widths, CPU SDPA/eager at narrow widths; "
        "MoE on the CPU only) and for unseen families estimated with the general description. "
        "Regenerate with benchmarks/collect_families.py.",
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
