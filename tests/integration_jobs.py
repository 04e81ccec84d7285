"""Tiny real training jobs through transformers' Trainer, Lightning and accelerate, with the
gpumem-tui callbacks; run as a child process by tests/test_integrations_*.py and
benchmarks/callback_overhead.py:

    python tests/integration_jobs.py trainer|lightning|accelerate [--steps N] [--no-probe] [--time]

The model: a 2-layer GPT-2 (hidden 64, 2 heads, vocabulary 2048, fp32, CPU), b=2, s=64,
``use_cache=False`` in its config (a training config; the CPU device profile models no
training KV cache), labels = inputs. ``--time`` prints ``step_seconds <median>`` over the steps
after the first; ``--batch-seconds`` makes each step start with the same fixed work.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

BATCH, SEQ, VOCAB = 2, 64, 2048


def tiny_gpt2():
    """The model every job trains (seeded, so every run starts alike)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=SEQ, use_cache=False)
    return GPT2LMHeadModel(config)


def token_rows(count: int) -> list[dict]:
    import torch

    generator = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(count):
        ids = torch.randint(0, VOCAB, (SEQ,), generator=generator)
        rows.append({"input_ids": ids, "labels": ids.clone()})
    return rows


class StepTimer:
    """Wall time of each training step, from one step's start to the next's."""

    def __init__(self) -> None:
        self.marks: list[float] = []

    def tick(self) -> None:
        self.marks.append(time.perf_counter())

    def report(self) -> None:
        steps = [b - a for a, b in zip(self.marks[1:], self.marks[2:])]
        if steps:
            print(f"step_seconds {statistics.median(steps):.6f}", flush=True)


def run_trainer(steps: int, probe: bool, timer: StepTimer, out_dir: str) -> None:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Tick(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            timer.tick()

    args = TrainingArguments(
        output_dir=out_dir, per_device_train_batch_size=BATCH, max_steps=steps, use_cpu=True,
        report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, learning_rate=1e-4,
    )
    callbacks = [Tick()]
    if probe:
        from gpumem_tui.integrations.transformers import GpumemCallback

        callbacks.append(GpumemCallback())
    Trainer(model=tiny_gpt2(), args=args, train_dataset=token_rows(BATCH * steps), callbacks=callbacks).train()


def run_lightning(steps: int, probe: bool, timer: StepTimer, out_dir: str) -> None:
    import lightning.pytorch as pl
    import torch

    class TinyLM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = tiny_gpt2()

        def training_step(self, batch, batch_idx):
            return self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    class Tick(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            timer.tick()

    callbacks: list = [Tick()]
    if probe:
        from gpumem_tui.integrations.lightning import GpumemCallback

        callbacks.append(GpumemCallback())
    loader = torch.utils.data.DataLoader(token_rows(BATCH * steps), batch_size=BATCH)
    trainer = pl.Trainer(
        max_steps=steps, accelerator="cpu", devices=1, callbacks=callbacks, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=out_dir,
    )
    trainer.fit(TinyLM(), loader)


def run_accelerate(steps: int, probe: bool, timer: StepTimer, out_dir: str) -> None:
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = tiny_gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = torch.utils.data.DataLoader(token_rows(BATCH * steps), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if probe:
        from gpumem_tui.integrations.accelerate import attach

        attach(accelerator, model, optimizer)
    model.train()
    for batch in loader:
        timer.tick()
        loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del loss
    timer.tick()
    accelerator.end_training()


JOBS = {"trainer": run_trainer, "lightning": run_lightning, "accelerate": run_accelerate}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("job", choices=sorted(JOBS))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--no-probe", action="store_true")
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--out", default=None, help="scratch directory of the framework")
    args = parser.parse_args(argv)
    import tempfile

    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("default")
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as scratch:
        JOBS[args.job](args.steps, not args.no_probe, timer, args.out or scratch)
    if args.time:
        timer.report()
    print(f"pid {os.getpid()} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
