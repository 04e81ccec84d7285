"""Ground truth for GPT-NeoX and Falcon variants: the fused-qkv, parallel-attention families.

Writes ``benchmarks/data/measured_neox_falcon.json`` with ``gpumem-tui measure`` (MemTracker):
GPT-NeoX shapes (parallel or sequential residual, partial rotary, tied or untied head) and
Falcon shapes (multi-query, grouped ``new_decoder_architecture``, sequential attention, ALiBi,
biases), fp32 and bf16, full training and LoRA, with and without full gradient checkpointing,
eager on the meta device (real widths, few layers) and SDPA on the real CPU (narrow widths).
These shapes were not used to write the rules they check (held out, issue 12). Regenerate::

    .venv/bin/python benchmarks/collect_neox_falcon.py [--only falcon]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from collect_ground_truth import collect  # noqa: E402

OUT = ROOT / "benchmarks" / "data" / "measured_neox_falcon.json"

NEOX: list[tuple[str, dict[str, Any]]] = [
    ("neox-h1024-par", {"hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096,
                        "num_hidden_layers": 3, "vocab_size": 50304}),
    ("neox-h2048-seq", {"hidden_size": 2048, "num_attention_heads": 16, "intermediate_size": 8192,
                        "num_hidden_layers": 2, "use_parallel_residual": False, "rotary_pct": 1.0,
                        "vocab_size": 32000}),
    ("neox-h768-tied", {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072,
                        "num_hidden_layers": 4, "tie_word_embeddings": True, "vocab_size": 50304}),
    ("neox-h2560-r50", {"hidden_size": 2560, "num_attention_heads": 32, "intermediate_size": 10240,
                        "num_hidden_layers": 2, "rotary_pct": 0.5, "vocab_size": 50432}),
]
FALCON: list[tuple[str, dict[str, Any]]] = [
    ("falcon-mq-h2048", {"hidden_size": 2048, "num_attention_heads": 32, "num_hidden_layers": 2}),
    ("falcon-mq-h4544", {"hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 2,
                         "vocab_size": 65024}),
    ("falcon-ndA-h2048", {"hidden_size": 2048, "num_attention_heads": 32, "num_kv_heads": 4,
                          "new_decoder_architecture": True, "multi_query": True, "num_hidden_layers": 2}),
    ("falcon-seq-bias-h1024", {"hidden_size": 1024, "num_attention_heads": 16, "parallel_attn": False,
                               "multi_query": False, "bias": True, "num_hidden_layers": 3}),
    ("falcon-alibi-h1024", {"hidden_size": 1024, "num_attention_heads": 16, "alibi": True, "multi_query": True,
                            "num_hidden_layers": 2}),
]


def _narrow(over: dict[str, Any]) -> dict[str, Any]:
    """The same structure at a width the real CPU runs in seconds."""
    out = dict(over)
    heads = 4
    out.update(hidden_size=256, num_attention_heads=heads, vocab_size=4096, num_hidden_layers=2)
    if "intermediate_size" in over:
        out["intermediate_size"] = 1024
    if "num_kv_heads" in over:
        out["num_kv_heads"] = 2
    return out


ALL_LINEAR = ["q", "k", "v", "o", "up", "down"]
META = [dict(batch=4, seq=512, dtype="fp32"), dict(batch=2, seq=1024, dtype="bf16"),
        dict(batch=2, seq=512, dtype="bf16", task="lora", lora_rank=8, lora_targets=["q", "v"]),
        dict(batch=2, seq=1024, dtype="fp32", grad_ckpt="full"),
        dict(batch=4, seq=256, dtype="bf16", task="lora", lora_rank=16, lora_targets=ALL_LINEAR, grad_ckpt="full")]
CPU = [dict(batch=2, seq=256, dtype="fp32", attention="sdpa"),
       dict(batch=1, seq=384, dtype="fp32", attention="sdpa", task="lora", lora_rank=8, lora_targets=ALL_LINEAR)]


def _id(name: str, on: str, s: dict[str, Any]) -> str:
    extra = "".join(f"-{s[k]}" for k in ("task",) if k in s) + ("-ckpt" if s.get("grad_ckpt") else "")
    extra += "-qv" if s.get("lora_targets") == ["q", "v"] and s["dtype"] == "fp32" else ""
    return f"{name}-{on}-{s.get('attention', 'eager')}-{s['dtype']}-b{s['batch']}-s{s['seq']}{extra}"


#: single cases: fp32 LoRA, dropout, long sequences, ALiBi under checkpointing
_H1024 = NEOX[0][1]
_ALIBI = FALCON[4][1]
EXTRA: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("neox-h1024-par", "pythia-160m", _H1024,
     dict(batch=2, seq=512, dtype="fp32", task="lora", lora_rank=8, lora_targets=["q", "v"])),
    ("neox-h1024-par", "pythia-160m", _H1024,
     dict(batch=2, seq=512, dtype="fp32", task="lora", lora_rank=16, lora_targets=ALL_LINEAR, grad_ckpt="full")),
    ("neox-h1024-drop", "pythia-160m", dict(_H1024, attention_dropout=0.1, hidden_dropout=0.1),
     dict(batch=2, seq=512, dtype="fp32")),
    ("neox-h1024-par", "pythia-160m", _H1024, dict(batch=1, seq=2048, dtype="fp32")),
    ("neox-h1024-gelufast", "pythia-160m", dict(_H1024, hidden_act="gelu_fast"), dict(batch=2, seq=512, dtype="fp32")),
    ("neox-h1024-gelufast", "pythia-160m", dict(_H1024, hidden_act="gelu_fast"), dict(batch=2, seq=1024, dtype="bf16")),
    ("neox-h1024-gelufast", "pythia-160m", dict(_H1024, hidden_act="gelu_fast"),
     dict(batch=1, seq=1024, dtype="fp32", task="lora", lora_rank=8, lora_targets=["q", "v"])),
    ("neox-h1024-par", "pythia-160m", _H1024,
     dict(batch=1, seq=1024, dtype="fp32", task="lora", lora_rank=8, lora_targets=["q", "v"])),
    ("falcon-alibi-mha-h1024", "falcon-7b", dict(_ALIBI, multi_query=False),
     dict(batch=2, seq=512, dtype="fp32", grad_ckpt="full")),
    ("falcon-alibi-h1024", "falcon-7b", _ALIBI, dict(batch=2, seq=1024, dtype="bf16", grad_ckpt="full")),
    ("falcon-alibi-h1024", "falcon-7b", _ALIBI,
     dict(batch=1, seq=1024, dtype="fp32", task="lora", lora_rank=8, lora_targets=["q", "v"], grad_ckpt="full")),
]


def cases() -> list[tuple[str, str, dict[str, Any], dict[str, Any], str]]:
    out = [(_id(name, "meta", s), base, over, s, "meta") for name, base, over, s in EXTRA]
    for base, variants in (("pythia-160m", NEOX), ("falcon-7b", FALCON)):
        for name, over in variants:
            out += [(_id(name, "meta", s), base, over, s, "meta") for s in META]
            out += [(_id(name, "cpu", s), base, _narrow(over), s, "cpu") for s in CPU]
    return out


def main(argv: list[str] | None = None) -> int:
    return collect(
        cases(), OUT,
        "Held-out GPT-NeoX and Falcon variants: live tensor storage bytes (torch allocated) of the last of 2 "
        "training steps, torch MemTracker. Regenerate with benchmarks/collect_neox_falcon.py.",
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
