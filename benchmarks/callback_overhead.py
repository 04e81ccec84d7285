"""Step-time overhead of the framework callbacks (prints figures; not a test).

    .venv/bin/python benchmarks/callback_overhead.py [--steps 20] [--rounds 3] [--frameworks trainer,lightning]

Trains the tests' tiny GPT-2 (tests/integration_jobs.py: 2 layers, h=64, V=2048, b=2, s=64,
AdamW, fp32, CPU, one thread: the smallest step, so the worst ratio) in one process with the
real transformers ``Trainer`` and Lightning ``Trainer``, each run in a fresh process (the probe
is attached once per process, as in a training script), alternating, ``--rounds`` times:

- ``none``: no probe;
- ``by hand``: the probe attached with ``gpumem_tui.probe.attach`` before training;
- ``callback``: ``GpumemCallback`` (which attaches the same probe itself).

The probe's CPU live-tensor tracker is off unless ``--track-tensors`` (on CUDA, where the
probe is meant to run, it is off by default; on the CPU it costs about as much as the step).

Times are CPU seconds (``time.process_time``: this process, all its threads, the probe's
sampler thread included), not wall time: on a machine shared with other jobs the wall time of
the same run varied threefold here, the CPU time far less. Prints per framework the median
step CPU time of each (from one step's start to the next's, the first step left out), ``callback / by hand`` (what the callback adds to the probe
the user would otherwise attach by hand) and ``callback / none`` (callback and probe together:
on the CPU the probe's live-tensor tracker dominates that, see benchmarks/probe_overhead.py),
and the CPU time (``time.thread_time``) spent inside the callback's own methods per step
divided by the step time (a
direct measure of the callback's cost, free of the run-to-run noise of a shared machine).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from integration_jobs import BATCH, tiny_gpt2, token_rows  # noqa: E402


class Clock:
    """Step start times, and seconds spent inside wrapped callback methods."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.inside = 0.0
        self.inside_after_first = 0.0  # from the second step's start on (attach is one-time)
        self.marks_after_first = 0.0  # of which inside Probe.mark (the probe's own work)
        self._depth = 0

    def wrap_probe_mark(self) -> None:
        """Time ``Probe.mark`` when a callback method calls it: work the probe's own hooks
        would do at the same moments without the callback."""
        from gpumem_tui.probe.core import Probe

        original = Probe.mark

        def timed_mark(probe, phase, _original=original):
            if not self._depth:
                return _original(probe, phase)
            started = time.thread_time()
            try:
                return _original(probe, phase)
            finally:
                if len(self.starts) >= 2:
                    self.marks_after_first += time.thread_time() - started

        Probe.mark = timed_mark

    def step_seconds(self) -> float:
        steps = [b - a for a, b in zip(self.starts[1:], self.starts[2:])]
        return statistics.median(steps)

    def wrap(self, callback: object) -> None:
        """Time every ``on_*`` method of ``callback`` (instance attributes shadow the class's:
        both frameworks call ``getattr(callback, event)``)."""
        for name in dir(type(callback)):
            if name.startswith("on_"):
                method = getattr(callback, name)

                @functools.wraps(method)
                def timed(*args, _method=method, **kwargs):
                    started = time.thread_time()
                    self._depth += 1
                    try:
                        return _method(*args, **kwargs)
                    finally:
                        self._depth -= 1
                        spent = time.thread_time() - started
                        self.inside += spent
                        if len(self.starts) >= 2:
                            self.inside_after_first += spent

                setattr(callback, name, timed)


def _instrument(mode: str, clock: Clock, callback_class, model, optimizer, directory: str, track: bool):  # noqa: ANN001
    """What ``mode`` adds to a run: ([the framework's GpumemCallback timed by ``clock``], None),
    ([], the probe attached by hand), or ([], None) without gpumem-tui."""
    import gpumem_tui.probe

    if mode == "callback":
        callback = callback_class(directory=directory, track_tensors=track)
        clock.wrap(callback)
        clock.wrap_probe_mark()
        return [callback], None
    if mode == "by hand":
        return [], gpumem_tui.probe.attach(model, optimizer, batch=BATCH, seq=64, directory=directory,
                                           track_tensors=track)
    return [], None


def run_trainer(mode: str, steps: int, directory: str, track: bool) -> Clock:
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from gpumem_tui.integrations.transformers import GpumemCallback

    clock = Clock()

    class Tick(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            clock.starts.append(time.process_time())

    model = tiny_gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # the Trainer's default
    callbacks, probe = _instrument(mode, clock, GpumemCallback, model, optimizer, directory, track)
    callbacks.insert(0, Tick())
    args = TrainingArguments(output_dir=directory, per_device_train_batch_size=BATCH, max_steps=steps,
                             use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no",
                             disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=token_rows(BATCH * steps), callbacks=callbacks,
            optimizers=(optimizer, None)).train()
    if probe is not None:
        probe.close()
    return clock


def run_lightning(mode: str, steps: int, directory: str, track: bool) -> Clock:
    import lightning.pytorch as pl
    import torch

    from gpumem_tui.integrations.lightning import GpumemCallback

    clock = Clock()
    model = tiny_gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    class TinyLM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            return self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def configure_optimizers(self):
            return optimizer

    class Tick(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            clock.starts.append(time.process_time())

    callbacks, probe = _instrument(mode, clock, GpumemCallback, model, optimizer, directory, track)
    callbacks.insert(0, Tick())
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, callbacks=callbacks, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=directory)
    trainer.fit(TinyLM(), torch.utils.data.DataLoader(token_rows(BATCH * steps), batch_size=BATCH))
    if probe is not None:
        probe.close()
    return clock


RUNNERS = {"trainer": run_trainer, "lightning": run_lightning}
MODES = ("none", "by hand", "callback")


def child(framework: str, mode: str, steps: int, track: bool) -> None:
    """One run in this (fresh) process; prints its figures as one JSON line."""
    import json
    import logging

    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as directory:
        clock = RUNNERS[framework](mode, steps, directory, track)
    print("RESULT " + json.dumps({"step": clock.step_seconds(), "inside": clock.inside_after_first,
                                  "marks": clock.marks_after_first,
                                  "steps": max(1, len(clock.starts) - 1)}), flush=True)


def run_child(framework: str, mode: str, steps: int, track: bool, tries: int = 3) -> dict:
    """One run in a fresh process; a run that crashed is said and run again (up to ``tries``):
    the probe's sampler thread has been seen to die with SIGSEGV reading ``param.grad`` while
    the training thread ran ``zero_grad`` (probe/core.py ``categories``; torch 2.13 CPU)."""
    for attempt in range(tries):
        try:
            return _run_child_once(framework, mode, steps, track)
        except RuntimeError as exc:
            print(f"  note: {exc}".splitlines()[0], flush=True)
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def _run_child_once(framework: str, mode: str, steps: int, track: bool) -> dict:
    import json
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(ROOT), TRANSFORMERS_VERBOSITY="error")
    argv = [sys.executable, __file__, "--child", framework, mode, "--steps", str(steps)]
    proc = subprocess.run(argv + (["--track-tensors"] if track else []),
                          capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if lines and proc.returncode != 0:  # measured, then died at exit (seen: SIGSEGV, rarely)
        print(f"  note: {framework} {mode} exited with {proc.returncode} after its figures", flush=True)
    if not lines:
        raise RuntimeError(f"{framework} {mode} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frameworks", default="trainer,lightning")
    parser.add_argument("--track-tensors", action="store_true",
                        help="the probe's CPU live-tensor tracker on (off by default, as on CUDA)")
    parser.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.steps, args.track_tensors)
        return 0
    for framework in args.frameworks.split(","):
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        inside: list[float] = []
        own: list[float] = []
        for _ in range(args.rounds):
            for mode in MODES:  # alternating, so load from other processes hits all three alike
                result = run_child(framework, mode, args.steps, args.track_tensors)
                times[mode].append(result["step"])
                print(f"  {framework} {mode}: {result['step']:.5f} s", flush=True)
                if mode == "callback":
                    inside.append(result["inside"] / result["steps"])
                    own.append((result["inside"] - result["marks"]) / result["steps"])
        med = {mode: statistics.median(values) for mode, values in times.items()}
        per_step_inside = statistics.median(inside)
        print(f"{framework}: median step none {med['none']:.5f} s, by hand {med['by hand']:.5f} s, "
              f"callback {med['callback']:.5f} s ({args.steps} steps x {args.rounds} rounds, torch 1 thread, "
              f"tensor tracker {'on' if args.track_tensors else 'off'})")
        print(f"  callback / by hand {med['callback'] / med['by hand']:.4f}; callback / none "
              f"{med['callback'] / med['none']:.4f}")
        per_step_own = statistics.median(own)
        print(f"  inside the callback's methods after the first step: {per_step_inside * 1e6:.1f} us per step = "
              f"{100 * per_step_inside / med['callback']:.3f} % of a step; without the probe's phase marks "
              f"(its hooks' work otherwise): {per_step_own * 1e6:.1f} us = {100 * per_step_own / med['by hand']:.3f} %"
              " of a step probed by hand")
    return 0


if __name__ == "__main__":
    sys.exit(main())
