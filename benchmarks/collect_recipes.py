"""Recipe ground truth with the real frameworks on the CPU: transformers' ``Trainer`` and PEFT LoRA.

``gpumem-tui measure`` runs the project's own loop (recipe ``torch``, minimal built-in
adapters). The recipes ``hf-trainer`` (``Trainer.train``) and PEFT LoRA (``peft.get_peft_model``
with ``LoraConfig``) are what users run; this script runs them for real on tiny models and
writes one case per run to ``tests/data/recipes/`` (``tests/test_recipe_ground_truth.py`` holds
the estimator to them; ``benchmarks/recipe_accuracy.py`` prints the error table).

Measured with gpumem-tui's ``PhaseMemTracker`` (torch's ``MemTracker`` with one phase per
training step, started from a ``TrainerCallback.on_step_begin`` or the loop itself): the peak
of the last of 3 steps, live tensor storage bytes (torch "allocated" on the CPU). The loops:

- ``hf-trainer``: ``Trainer(model, TrainingArguments(use_cpu=True, max_steps=3,
  per_device_train_batch_size=b, report_to=[], ...), train_dataset=...)`` over rows of
  ``{"input_ids", "labels"}`` (lists of random token ids, labels = input ids, as a tokenized
  dataset holds them: the collator builds the tensors inside the step), ``default_data_collator``;
  the optimizer is the Trainer's default (``adamw_torch_fused``).
- ``torch`` with PEFT: ``out = model(input_ids=ids, labels=ids, use_cache=False)``,
  ``loss = out.loss``, ``del out``, ``loss.backward()``, ``AdamW(foreach=False).step()``,
  ``zero_grad(set_to_none=True)`` -- the loop of ``gpumem_tui/measure/runner.py``.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/collect_recipes.py [--only SUBSTRING]``
(about a minute of CPU). torch, transformers and peft only; no GPU. The same loops on a CUDA
GPU, with bf16 / fp16 autocast and gradient checkpointing: ``benchmarks/collect_cuda_recipes.py``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CONFIGS = ROOT / "tests" / "data" / "ranks" / "configs"
OUT = ROOT / "tests" / "data" / "recipes"
STEPS = 3

#: id, model config file, recipe, task, batch, seq, LoRA targets (peft module names)
CASES: list[tuple[str, str, str, str, int, int, tuple[str, ...]]] = [
    ("llama-tiny-hf-trainer-b2-s64", "llama-tiny", "hf-trainer", "train", 2, 64, ()),
    ("llama-tiny-hf-trainer-b4-s128", "llama-tiny", "hf-trainer", "train", 4, 128, ()),
    ("gpt2-tiny-hf-trainer-b2-s64", "gpt2-tiny", "hf-trainer", "train", 2, 64, ()),
    ("gpt2-tiny-hf-trainer-b4-s128", "gpt2-tiny", "hf-trainer", "train", 4, 128, ()),
    ("llama-tiny-hf-trainer-peft-lora-b2-s64", "llama-tiny", "hf-trainer", "lora", 2, 64, ("q_proj", "v_proj")),
    ("llama-tiny-hf-trainer-peft-lora-b4-s128", "llama-tiny", "hf-trainer", "lora", 4, 128, ("q_proj", "v_proj")),
    ("gpt2-tiny-hf-trainer-peft-lora-b4-s128", "gpt2-tiny", "hf-trainer", "lora", 4, 128, ("c_attn",)),
    ("llama-tiny-torch-peft-lora-b2-s64", "llama-tiny", "torch", "lora", 2, 64, ("q_proj", "v_proj")),
    ("llama-tiny-torch-peft-lora-b4-s128", "llama-tiny", "torch", "lora", 4, 128, ("q_proj", "v_proj")),
    ("gpt2-tiny-torch-peft-lora-b4-s128", "gpt2-tiny", "torch", "lora", 4, 128, ("c_attn",)),
]

#: peft module name -> the estimator's LoRA target role
#: (GPT-2's ``c_attn`` is the fused q,k,v Linear: the estimator adapts its "qkv" Linear for "q")
_ROLES = {"q_proj": "q", "v_proj": "v", "k_proj": "k", "o_proj": "o", "c_attn": "q"}
LORA_RANK = 8


def _model(config: dict[str, Any], torch: Any, attn: str = "sdpa", dtype: Any = None, head: str = "causal",
           device: str = "cpu") -> Any:
    """Random-weight model from ``config`` (a dict): causal LM (``head="causal"``) or masked LM
    (``"mlm"``), built on ``device``; ``dtype`` None = fp32 (the CPU cases' ``.float()``)."""
    import transformers

    torch.manual_seed(0)
    raw = {k: v for k, v in config.items() if k not in ("torch_dtype", "dtype")}  # else built in the config's dtype
    cfg = transformers.AutoConfig.for_model(**raw)
    cfg._attn_implementation = attn
    auto = transformers.AutoModelForMaskedLM if head == "mlm" else transformers.AutoModelForCausalLM
    with torch.device(device):
        model = auto.from_config(cfg, attn_implementation=attn, dtype=dtype or torch.float32)
    return model if dtype is not None else model.float()


def _peft(model: Any, targets: tuple[str, ...], rank: int = LORA_RANK) -> Any:
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=rank, lora_alpha=16, target_modules=list(targets),
                                            lora_dropout=0.0, task_type="CAUSAL_LM"))


def _dataset(batch: int, seq: int, vocab: int, torch: Any) -> list[dict[str, Any]]:
    """Tokenized rows as a dataset holds them (lists of ids, no tensors): the collator builds
    the batch's tensors inside the step, and a dataset is not the step's memory."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch * STEPS, seq), generator=gen).tolist()
    return [{"input_ids": row, "labels": list(row)} for row in ids]


def _run_trainer(model: Any, rows: list[dict[str, Any]], batch: int, callback: Any, **extra_args: Any) -> None:
    """``Trainer.train`` for ``STEPS`` steps of ``batch`` rows with ``callback`` (a
    ``TrainerCallback``); ``extra_args`` go to ``TrainingArguments`` (use_cpu, bf16, fp16, ...)."""
    from transformers import Trainer, TrainingArguments, default_data_collator

    scratch = tempfile.mkdtemp(prefix="gpumem-trainer-")  # the Trainer wants an output_dir; nothing is saved
    args = TrainingArguments(output_dir=scratch, max_steps=STEPS, per_device_train_batch_size=batch,
                             report_to=[], save_strategy="no", logging_strategy="no",
                             dataloader_num_workers=0, disable_tqdm=True, **extra_args)
    try:
        Trainer(model=model, args=args, train_dataset=rows, data_collator=default_data_collator,
                callbacks=[callback]).train()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _trainer_step_peaks(model: Any, tracker: Any, rows: list[dict[str, Any]], batch: int, torch: Any) -> None:
    from transformers import TrainerCallback

    class StepPhases(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            tracker.reset_mod_stats()  # MemTracker refuses a second root forward otherwise
            tracker.start_phase(f"step{state.global_step + 1}")

    _run_trainer(model, rows, batch, StepPhases(), use_cpu=True)


def _torch_steps(model: Any, rows: list[dict[str, Any]], batch: int, torch: Any, mark: Any,
                 device: str = "cpu") -> None:
    """The plain loop, ``STEPS`` steps; ``mark(step, phase)`` is called as each of the phases
    ``forward``, ``backward``, ``optimizer_step`` begins and at ``end`` (after ``zero_grad``)."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, foreach=False)
    for step in range(1, STEPS + 1):
        # the batch is built inside the step, as the collator does
        ids = torch.tensor([row["input_ids"] for row in rows[(step - 1) * batch:step * batch]], device=device)
        mark(step, "forward")
        out = model(input_ids=ids, labels=ids, use_cache=False)
        loss = out.loss
        del out
        mark(step, "backward")
        loss.backward()
        mark(step, "optimizer_step")
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark(step, "end")
        del loss, ids


def _torch_step_peaks(model: Any, tracker: Any, rows: list[dict[str, Any]], batch: int, torch: Any) -> None:
    def mark(step: int, phase: str) -> None:  # one tracker phase per whole step
        if phase == "forward":
            tracker.reset_mod_stats()
            tracker.start_phase(f"step{step}")

    _torch_steps(model, rows, batch, torch, mark)


def run_case(case: tuple[str, str, str, str, int, int, tuple[str, ...]]) -> dict[str, Any]:
    """Run one case; return its JSON record (the spec the estimator is given, the measured peak)."""
    import peft
    import torch
    import transformers

    from gpumem_tui.measure.tracker import PhaseMemTracker

    name, model_name, recipe, task, batch, seq, targets = case
    config = json.loads((CONFIGS / f"{model_name}.json").read_text())
    torch.set_num_threads(1)
    model = _model(config, torch)
    if task == "lora":
        model = _peft(model, targets)
    vocab = int(config["vocab_size"])
    rows = _dataset(batch, seq, vocab, torch)
    tracker = PhaseMemTracker(vocab_size=vocab, logits_rows=batch * (seq - 1))
    with tracker:
        (_trainer_step_peaks if recipe == "hf-trainer" else _torch_step_peaks)(model, tracker, rows, batch, torch)
    last = tracker.phase_peaks[f"step{STEPS}"]
    loop = "transformers Trainer.train" if recipe == "hf-trainer" else "plain torch loop (gpumem_tui/measure/runner.py's)"
    how = (f"benchmarks/collect_recipes.py: {loop}{', PEFT LoRA r=%d on %s' % (LORA_RANK, '/'.join(targets)) if targets else ''}, "
           f"batch {batch}, seq {seq}, fp32, SDPA, CPU; peak of step {STEPS} of {STEPS} by PhaseMemTracker (MemTracker), "
           f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, "
           f"{datetime.date.today().isoformat()}")
    spec = {"task": task, "batch": batch, "seq": seq, "dtype": "fp32", "attention": "sdpa", "device": "cpu",
            "optimizer": "adamw", "recipe": recipe}
    if task == "lora":
        spec.update(lora_rank=LORA_RANK, lora_targets=[_ROLES[t] for t in targets])
    return {"how": how, "model": config, "spec": spec, "measured": "torch allocated (live tensor bytes), CPU",
            "peak_bytes": int(last.peak_bytes),
            "steps": {p: int(tracker.phase_peaks[p].peak_bytes) for p in sorted(tracker.phase_peaks) if p.startswith("step")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only the cases whose id contains this")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        if args.only not in case[0]:
            continue
        record = run_case(case)
        (OUT / f"{case[0]}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(f"{case[0]:<44}{record['peak_bytes']:>12,}  steps {record['steps']}")


if __name__ == "__main__":
    main()
