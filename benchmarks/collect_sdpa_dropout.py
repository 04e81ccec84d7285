"""Ground truth for SDPA with attention dropout on the real CPU (training), and without it.

torch's CPU dispatcher picks the fused flash kernel for ``scaled_dot_product_attention`` only
when ``dropout_p == 0`` (``check_for_dropout`` among the CPU flash constraints,
``aten/src/ATen/native/transformers/sdp_utils_cpp.{h,cpp}``; at run time
``torch._fused_sdp_choice(q, k, v, None, 0.1, True)`` returns MATH on torch 2.13 CPU). With
dropout in training it runs ``_scaled_dot_product_attention_math``: scaled q and k copies, the
``b x a x s x s`` ``_safe_softmax`` output, the dropout noise and its product are saved for
backward. These cases pair dropout on/off at equal shapes, and include the built-in demo's
exact model (``gpumem_tui.demo.job`` defaults), so ``gpumem-tui compare`` on the demo has a
measured reference. Same record format as ``benchmarks/collect_ground_truth.py`` (whose
``measure_case`` runs each case); written to ``benchmarks/data/measured_sdpa_dropout.json``::

    .venv/bin/python benchmarks/collect_sdpa_dropout.py     # ~1 min of CPU
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

OUT = ROOT / "benchmarks" / "data" / "measured_sdpa_dropout.json"

_DEMO = {"n_layer": 4, "n_embd": 256, "n_head": 4, "vocab_size": 8192, "n_positions": 128,
         "bos_token_id": 0, "eos_token_id": 0}
_GPT2_SMALL = {"n_layer": 2, "n_embd": 256, "n_head": 4, "vocab_size": 4096}
_LLAMA_SMALL = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 704, "num_attention_heads": 8,
                "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 4096}
_BERT_SMALL = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 1024,
               "num_attention_heads": 4, "vocab_size": 4096}

# id, catalogue model, config overrides, spec fields, where it runs (always the real CPU: the
# meta device takes the math path whatever the dropout)
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], str]] = [
    ("sdpa-drop-demo-gpt2-L4-fp32-b4-s128", "gpt2", _DEMO,
     dict(batch=4, seq=128, dtype="fp32", attention="sdpa"), "cpu"),
    ("sdpa-nodrop-demo-gpt2-L4-fp32-b4-s128", "gpt2", dict(_DEMO, attn_pdrop=0.0),
     dict(batch=4, seq=128, dtype="fp32", attention="sdpa"), "cpu"),
    ("sdpa-drop-gpt2-L2-bf16-b2-s512", "gpt2", _GPT2_SMALL,
     dict(batch=2, seq=512, dtype="bf16", attention="sdpa"), "cpu"),
    ("sdpa-nodrop-gpt2-L2-bf16-b2-s512", "gpt2", dict(_GPT2_SMALL, attn_pdrop=0.0),
     dict(batch=2, seq=512, dtype="bf16", attention="sdpa"), "cpu"),
    # long sequence, small vocabulary: the layers' attention backward decides the peak
    ("sdpa-drop-gpt2-L2-bf16-b1-s1024-v1024", "gpt2", dict(_GPT2_SMALL, vocab_size=1024, n_positions=1024),
     dict(batch=1, seq=1024, dtype="bf16", attention="sdpa"), "cpu"),
    ("sdpa-drop-gpt2-L2-fp32-b1-s1024-v1024", "gpt2", dict(_GPT2_SMALL, vocab_size=1024, n_positions=1024),
     dict(batch=1, seq=1024, dtype="fp32", attention="sdpa"), "cpu"),
    ("sdpa-drop-llama-L2-bf16-b1-s1024-v1024", "llama-3.2-1b",
     dict(_LLAMA_SMALL, attention_dropout=0.1, vocab_size=1024),
     dict(batch=1, seq=1024, dtype="bf16", attention="sdpa"), "cpu"),
    # inference (eval mode): dropout is off, so the fused kernel runs despite the config's dropout
    ("sdpa-drop-gpt2-L2-bf16-b2-s512-infer", "gpt2", _GPT2_SMALL,
     dict(batch=2, seq=512, dtype="bf16", attention="sdpa", task="inference"), "cpu"),
    ("sdpa-drop-bert-L2-fp32-b2-s256", "bert-base-uncased", _BERT_SMALL,
     dict(batch=2, seq=256, dtype="fp32", attention="sdpa"), "cpu"),
    ("sdpa-drop-llama-L2-fp32-b2-s256", "llama-3.2-1b", dict(_LLAMA_SMALL, attention_dropout=0.1),
     dict(batch=2, seq=256, dtype="fp32", attention="sdpa"), "cpu"),
    ("sdpa-drop-bert-L2-bf16-b2-s256", "bert-base-uncased", _BERT_SMALL,
     dict(batch=2, seq=256, dtype="bf16", attention="sdpa"), "cpu"),
    ("sdpa-drop-llama-L2-bf16-b2-s256", "llama-3.2-1b", dict(_LLAMA_SMALL, attention_dropout=0.1),
     dict(batch=2, seq=256, dtype="bf16", attention="sdpa"), "cpu"),
]


def main(argv: list[str] | None = None) -> int:
    import torch
    from collect_ground_truth import collect

    torch.set_num_threads(1)
    return collect(
        CASES,
        OUT,
        "Ground truth, SDPA with and without attention dropout on the real CPU: live tensor "
        "storage bytes (torch allocated) of the last of 2 training steps, torch MemTracker "
        "(gpumem-tui measure), per component at the peak. Regenerate with benchmarks/collect_sdpa_dropout.py.",
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
