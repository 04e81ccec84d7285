"""Collect the estimator's ground truth: run ``gpumem-tui measure`` over the benchmark cases.

Writes ``benchmarks/data/measured_cpu.json`` (and the shrunken ``config.json`` of every case to
``benchmarks/data/configs/``) so ``benchmarks/estimator_accuracy.py`` can compare the estimator
against it without torch. Regenerate with::

    .venv/bin/python benchmarks/collect_ground_truth.py            # all cases (~2-4 min of CPU)
    .venv/bin/python benchmarks/collect_ground_truth.py --only gpt2  # cases whose id contains 'gpt2'

Cases span 7 families (gpt2, bert, llama, mistral, qwen2, phi3, gemma2) x batch x seq x dtype x
attention x task. Catalogue configs are shrunk (fewer layers; on the real CPU also a narrower
width) so every run is cheap: eager attention on the meta device at real widths (no real
memory), SDPA (and some eager) on the real CPU at shapes that fit in RAM and run in seconds.
The meta device runs SDPA on the math path, so SDPA is measured on the CPU only.

Every case is measured with the kernel profile ``--device cpu`` (the per-tensor AdamW loop
torch uses on CPU and meta). Byte figures are live tensor storage bytes (torch "allocated").
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data"
CONFIGS = DATA / "configs"
OUT = DATA / "measured_cpu.json"

sys.path.insert(0, str(ROOT))

# Shrinks applied on the real CPU: width and vocabulary small enough for a fast real run.
_CPU_SMALL_LLAMA = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 704,
                    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 8192}

# id, catalogue model, config overrides, spec fields (TrainingSpec), where it runs
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], str]] = [
    # --- meta device, eager attention, real widths, fewer layers ---------------------------
    ("gpt2-124m-fp32-b2-s512", "gpt2", {}, dict(batch=2, seq=512, dtype="fp32"), "meta"),
    ("gpt2-medium-L4-bf16-b4-s1024", "gpt2-medium", {"n_layer": 4}, dict(batch=4, seq=1024, dtype="bf16"), "meta"),
    ("bert-base-fp32-b8-s128", "bert-base-uncased", {}, dict(batch=8, seq=128, dtype="fp32"), "meta"),
    ("bert-large-L6-bf16-b4-s512", "bert-large-uncased", {"num_hidden_layers": 6},
     dict(batch=4, seq=512, dtype="bf16"), "meta"),
    ("llama-3.2-1b-L4-bf16-b1-s256", "llama-3.2-1b", {"num_hidden_layers": 4}, dict(batch=1, seq=256, dtype="bf16"), "meta"),
    ("llama-3.1-8b-L2-bf16-b1-s2048", "llama-3.1-8b", {"num_hidden_layers": 2},
     dict(batch=1, seq=2048, dtype="bf16"), "meta"),
    ("llama-3.2-1b-L4-fp32-b2-s1024-ckpt", "llama-3.2-1b", {"num_hidden_layers": 4},
     dict(batch=2, seq=1024, dtype="fp32", grad_ckpt="full"), "meta"),
    ("mistral-7b-L2-bf16-b2-s1024", "mistral-7b", {"num_hidden_layers": 2}, dict(batch=2, seq=1024, dtype="bf16"), "meta"),
    ("qwen2.5-0.5b-fp32-b2-s512", "qwen2.5-0.5b", {}, dict(batch=2, seq=512, dtype="fp32"), "meta"),
    ("qwen2.5-1.5b-L4-bf16-b4-s512-lora16", "qwen2.5-1.5b", {"num_hidden_layers": 4},
     dict(batch=4, seq=512, dtype="bf16", task="lora", lora_rank=16, lora_targets=("q", "v")), "meta"),
    ("phi-3-mini-L2-bf16-b1-s1024", "phi-3-mini-4k", {"num_hidden_layers": 2}, dict(batch=1, seq=1024, dtype="bf16"), "meta"),
    ("gemma-2-2b-L2-bf16-b1-s1024", "gemma-2-2b", {"num_hidden_layers": 2}, dict(batch=1, seq=1024, dtype="bf16"), "meta"),
    ("gpt2-124m-fp32-b4-s256-sgdm", "gpt2", {}, dict(batch=4, seq=256, dtype="fp32", optimizer="sgd-momentum"), "meta"),
    ("llama-3.2-1b-L4-bf16-b4-s512-infer", "llama-3.2-1b", {"num_hidden_layers": 4},
     dict(batch=4, seq=512, dtype="bf16", task="inference"), "meta"),
    ("mistral-7b-L2-bf16-b8-s1024-infer", "mistral-7b", {"num_hidden_layers": 2},
     dict(batch=8, seq=1024, dtype="bf16", task="inference"), "meta"),
    # --- activation-dominated shapes (long s, many heads): the layer-backward moments decide ----
    ("gpt2-medium-L8-bf16-b8-s1024", "gpt2-medium", {"n_layer": 8}, dict(batch=8, seq=1024, dtype="bf16"), "meta"),
    ("gpt2-124m-bf16-b1-s1024", "gpt2", {}, dict(batch=1, seq=1024, dtype="bf16"), "meta"),
    ("llama-3.2-1b-L8-bf16-b2-s2048", "llama-3.2-1b", {"num_hidden_layers": 8}, dict(batch=2, seq=2048, dtype="bf16"), "meta"),
    ("llama-3.2-1b-L4-fp16-b2-s512", "llama-3.2-1b", {"num_hidden_layers": 4}, dict(batch=2, seq=512, dtype="fp16"), "meta"),
    ("mistral-7b-L4-sw1024-bf16-b1-s4096", "mistral-7b", {"num_hidden_layers": 4, "sliding_window": 1024},
     dict(batch=1, seq=4096, dtype="bf16"), "meta"),
    ("phi-3-mini-L4-bf16-b4-s2048", "phi-3-mini-4k", {"num_hidden_layers": 4}, dict(batch=4, seq=2048, dtype="bf16"), "meta"),
    ("qwen2.5-0.5b-L8-bf16-b4-s2048", "qwen2.5-0.5b", {"num_hidden_layers": 8}, dict(batch=4, seq=2048, dtype="bf16"), "meta"),
    ("bert-base-fp32-b32-s512", "bert-base-uncased", {}, dict(batch=32, seq=512, dtype="fp32"), "meta"),
    ("gemma-2-2b-L4-bf16-b2-s2048", "gemma-2-2b", {"num_hidden_layers": 4}, dict(batch=2, seq=2048, dtype="bf16"), "meta"),
    ("llama-3.2-1b-L4-bf16-b2-s1024-lora-all", "llama-3.2-1b", {"num_hidden_layers": 4},
     dict(batch=2, seq=1024, dtype="bf16", task="lora", lora_rank=8,
          lora_targets=("q", "k", "v", "o", "gate", "up", "down")), "meta"),
    ("mistral-7b-L4-bf16-b4-s2048-ckpt", "mistral-7b", {"num_hidden_layers": 4},
     dict(batch=4, seq=2048, dtype="bf16", grad_ckpt="full"), "meta"),
    # --- optimizer-step peaks (short sequences) ------------------------------------------------
    ("gpt2-124m-fp32-b1-s128-adam", "gpt2", {}, dict(batch=1, seq=128, dtype="fp32", optimizer="adam"), "meta"),
    ("qwen2.5-0.5b-L4-fp32-b1-s128-sgd", "qwen2.5-0.5b", {"num_hidden_layers": 4},
     dict(batch=1, seq=128, dtype="fp32", optimizer="sgd"), "meta"),
    # --- gradient accumulation, kept gradients, optimizer implementations -------------------------
    ("llama-3.2-1b-L4-bf16-b2-s512-accum4", "llama-3.2-1b", {"num_hidden_layers": 4},
     dict(batch=2, seq=512, dtype="bf16", grad_accum=4), "meta"),
    ("gpt2-124m-fp32-b2-s256-keepgrads", "gpt2", {}, dict(batch=2, seq=256, dtype="fp32", keep_grads=True), "meta"),
    ("qwen2.5-0.5b-L4-bf16-b1-s128-foreach", "qwen2.5-0.5b", {"num_hidden_layers": 4},
     dict(batch=1, seq=128, dtype="bf16", optimizer_impl="foreach"), "meta"),
    # --- classification heads (BERT-large: the HF "model memory anatomy" setup) ------------------
    ("bert-large-cls-fp32-b4-s512", "bert-large-uncased", {"architectures": ["BertForSequenceClassification"]},
     dict(batch=4, seq=512, dtype="fp32"), "meta"),
    ("llama-3.2-1b-L4-cls-bf16-b2-s512", "llama-3.2-1b",
     {"num_hidden_layers": 4, "architectures": ["LlamaForSequenceClassification"]},
     dict(batch=2, seq=512, dtype="bf16"), "meta"),
    # --- inference -----------------------------------------------------------------------------
    ("gpt2-124m-fp32-b4-s1024-infer", "gpt2", {}, dict(batch=4, seq=1024, dtype="fp32", task="inference"), "meta"),
    ("mistral-7b-L2-sw512-bf16-b2-s2048-infer", "mistral-7b", {"num_hidden_layers": 2, "sliding_window": 512},
     dict(batch=2, seq=2048, dtype="bf16", task="inference"), "meta"),
    # --- real CPU: SDPA's real kernel (and eager for contrast), narrow shapes ----------------
    ("gpt2-small-L2-fp32-b2-s256-cpu-sdpa", "gpt2", {"n_layer": 2, "n_embd": 256, "n_head": 4, "vocab_size": 8192},
     dict(batch=2, seq=256, dtype="fp32", attention="sdpa"), "cpu"),
    ("gpt2-small-L2-fp32-b2-s256-cpu-eager", "gpt2", {"n_layer": 2, "n_embd": 256, "n_head": 4, "vocab_size": 8192},
     dict(batch=2, seq=256, dtype="fp32", attention="eager"), "cpu"),
    ("llama-small-L2-bf16-b2-s256-cpu-sdpa", "llama-3.2-1b", _CPU_SMALL_LLAMA,
     dict(batch=2, seq=256, dtype="bf16", attention="sdpa"), "cpu"),
    ("qwen2-small-L2-fp32-b2-s256-cpu-sdpa", "qwen2.5-0.5b",
     {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 704, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 8192},
     dict(batch=2, seq=256, dtype="fp32", attention="sdpa"), "cpu"),
    ("bert-small-L2-fp32-b4-s128-cpu-sdpa", "bert-base-uncased",
     {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4, "vocab_size": 8192},
     dict(batch=4, seq=128, dtype="fp32", attention="sdpa"), "cpu"),
    # gemma2 has no SDPA path in transformers (attention logit softcapping): eager on the CPU
    ("gemma2-small-L2-bf16-b1-s256-cpu-eager", "gemma-2-2b",
     {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 8192},
     dict(batch=1, seq=256, dtype="bf16", attention="eager"), "cpu"),
    # long sequence, small vocabulary: attention, not logits, decides the peak
    ("gpt2-small-L2-fp32-b2-s1024-cpu-sdpa", "gpt2", {"n_layer": 2, "n_embd": 256, "n_head": 4, "vocab_size": 2048},
     dict(batch=2, seq=1024, dtype="fp32", attention="sdpa"), "cpu"),
    ("gpt2-small-L2-fp32-b2-s1024-cpu-eager", "gpt2", {"n_layer": 2, "n_embd": 256, "n_head": 4, "vocab_size": 2048},
     dict(batch=2, seq=1024, dtype="fp32", attention="eager"), "cpu"),
    ("llama-small-L2-bf16-b2-s1024-cpu-sdpa", "llama-3.2-1b", {**_CPU_SMALL_LLAMA, "vocab_size": 2048},
     dict(batch=2, seq=1024, dtype="bf16", attention="sdpa"), "cpu"),
    ("llama-small-L4-bf16-b2-s1024-cpu-sdpa-ckpt", "llama-3.2-1b", {**_CPU_SMALL_LLAMA, "num_hidden_layers": 4},
     dict(batch=2, seq=1024, dtype="bf16", attention="sdpa", grad_ckpt="full"), "cpu"),
    ("llama-small-L2-bf16-b4-s512-cpu-sdpa-infer", "llama-3.2-1b", _CPU_SMALL_LLAMA,
     dict(batch=4, seq=512, dtype="bf16", attention="sdpa", task="inference"), "cpu"),
    ("qwen2-small-L2-fp32-b2-s512-cpu-sdpa-lora", "qwen2.5-0.5b",
     {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 704, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 2048},
     dict(batch=2, seq=512, dtype="fp32", attention="sdpa", task="lora", lora_rank=8), "cpu"),
    ("llama-small-L2-fp32-b1-s64-cpu-adafactor", "llama-3.2-1b", {**_CPU_SMALL_LLAMA, "vocab_size": 32000},
     dict(batch=1, seq=64, dtype="fp32", attention="sdpa", optimizer="adafactor"), "cpu"),
    ("llama-small-L2-fp32-b2-s128-cpu-fused", "llama-3.2-1b", _CPU_SMALL_LLAMA,
     dict(batch=2, seq=128, dtype="fp32", attention="sdpa", optimizer_impl="fused"), "cpu"),
    ("llama-small-L2-bf16-b2-s256-cpu-mixed", "llama-3.2-1b", _CPU_SMALL_LLAMA,
     dict(batch=2, seq=256, dtype="bf16", attention="sdpa", mixed_precision=True), "cpu"),
]

_DEFAULTS = dict(task="train", attention="eager", optimizer="adamw", grad_ckpt="none", device="cpu")


def case_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The full TrainingSpec fields of a case (defaults filled in, device cpu)."""
    out = dict(_DEFAULTS)
    out.update(spec)
    if "lora_targets" in out:
        out["lora_targets"] = list(out["lora_targets"])
    return out


def write_config(case_id: str, model: str, overrides: dict[str, Any], directory: Path = CONFIGS) -> Path:
    """Write the case's config.json (catalogue entry + overrides) and return its path."""
    from gpumem_tui.estimator.architecture import CATALOGUE_DIR

    source = ROOT / model if model.endswith(".json") else CATALOGUE_DIR / f"{model}.json"  # a path or a catalogue name
    config = json.loads(source.read_text(encoding="utf-8"))
    config.update(overrides)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{case_id}.json"
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def measure_case(
    case: tuple[str, str, dict[str, Any], dict[str, Any], str], directory: Path = CONFIGS
) -> dict[str, Any]:
    """Measure one case; return its ground-truth record."""
    from gpumem_tui.estimator.architecture import load_architecture
    from gpumem_tui.estimator.spec import TrainingSpec
    from gpumem_tui.measure.cli import request_from_spec
    from gpumem_tui.measure.runner import run

    case_id, model, overrides, spec_fields, on = case
    path = write_config(case_id, model, overrides, directory)
    spec_dict = case_spec(spec_fields)
    arch = load_architecture(str(path))
    spec = TrainingSpec(**spec_dict)
    req = request_from_spec(arch, spec, on=on)
    t0 = time.process_time()
    result = run(req).to_json()
    return {
        "id": case_id,
        "model": model,
        "config": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
        "overrides": overrides,
        "spec": spec_dict,
        "on": on,
        "cpu_seconds": round(time.process_time() - t0, 2),
        "measured": result,
    }


def collect(cases: list[tuple], default_out: Path, description: str, argv: list[str] | None = None) -> int:
    """Measure ``cases`` and write them to a ground-truth file (``--only`` merges into it).

    Shared by this script and the other ``collect_*.py`` scripts, which list their own cases.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--only", default=None, help="measure only cases whose id contains this text (merged into the file)")
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args(argv)
    import torch
    import transformers

    records: dict[str, Any] = {}
    if args.only and args.out.exists():
        records = {r["id"]: r for r in json.loads(args.out.read_text(encoding="utf-8"))["cases"]}
    for case in cases:
        if args.only is not None and args.only not in case[0]:
            continue
        rec = measure_case(case)
        records[rec["id"]] = rec
        m = rec["measured"]
        print(f"{rec['id']:<44} {rec['on']:<5} peak {m['peak_bytes'] / 2**20:10.2f} MiB in {m['peak_phase']:<15}"
              f" ({rec['cpu_seconds']:.1f} s CPU)", flush=True)
    order = [c[0] for c in cases]
    data = {
        "description": description,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cases": sorted(records.values(), key=lambda r: order.index(r["id"]) if r["id"] in order else 10**6),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(data['cases'])} cases to {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return collect(
        CASES,
        OUT,
        "Ground truth for the estimator: live tensor storage bytes (torch allocated) of the "
        "last of 2 training steps (or prefill + 1 decode step), torch MemTracker, per component at the peak. "
        "Regenerate with benchmarks/collect_ground_truth.py.",
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
