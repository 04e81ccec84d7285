"""Every figure the CUDA allocator simulation feeds, dumped to JSON: a before/after identity check.

Speed work on :mod:`gpumem_tui.estimator.devices.cuda_allocator_sim` and
:mod:`~gpumem_tui.estimator.devices.cuda_step_events` must not change any result. This dumps

- the H100 cases of ``benchmarks/gpu_accuracy.py`` with every method (detailed, accelerate,
  zero16): the predicted figures, plus the raw simulated peaks (bytes);
- the setups of ``benchmarks/estimator_speed.py``: the estimate and ``max_batch`` / ``max_seq``;
- a fixed pseudo-random set of specs (seeded): catalogue models of the simulated families,
  batch 1-64, seq 128-16384, train / inference (with and without ``generate()``) / LoRA,
  checkpointing, fp32 / bf16 / amp, eager / sdpa / flash: the simulated peaks and the estimate
  (and for some a ``max_batch`` search).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/sim_fingerprint.py > before.json
    ... change ...
    PYTHONPATH=$PWD .venv/bin/python benchmarks/sim_fingerprint.py > after.json
    cmp before.json after.json

The H100 cases need ``../shared/validation/gpu`` (or ``GPUMEM_SHARED``), as gpu_accuracy.py does.
The whole dump takes about 5 s.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: catalogue models whose specs the simulation covers (dense layers, no MLA)
MODELS = ("gpt2", "gpt2-medium", "bert-base-uncased", "llama-3.2-1b", "llama-3.1-8b", "qwen2.5-0.5b",
          "qwen2.5-7b", "qwen3-0.6b", "gemma-2-2b", "gemma-3-1b", "opt-125m", "opt-350m", "pythia-160m",
          "phi-2", "mistral-7b", "falcon-7b", "olmo-2-1b", "stablelm-2-1.6b", "starcoder")
RANDOM_SPECS = 150
#: of which the first ones also get a ``max_batch`` search (many batch sizes simulated)
SEARCHED = 25
BUDGET = 80 << 30


def _sim(arch: Any, spec: Any) -> list[int] | None:
    from gpumem_tui.estimator.devices.cuda_step_events import simulate

    simulate.cache_clear()
    res = simulate(arch, spec)
    return None if res is None else [res.peak_allocated, res.peak_reserved]


def _figures(arch: Any, spec: Any, method: str = "detailed") -> dict[str, Any]:
    from gpumem_tui.estimator.methods import run_method

    return run_method(method, arch, spec).to_json()["figures"]


def _random_spec(rng: random.Random) -> dict[str, Any]:
    task = rng.choice(("train", "train", "lora", "inference", "inference"))
    prec = rng.choice(("fp32", "bf16", "amp"))
    kw: dict[str, Any] = dict(task=task, batch=rng.randint(1, 64), seq=rng.choice((128, 256, 512, 1000, 1024, 2048,
                                                                                      4096, 8192, 16384)),
                              dtype="bf16" if prec == "amp" else prec, mixed_precision=prec == "amp",
                              attention=rng.choice(("eager", "sdpa", "flash")))
    if task == "inference":
        kw["mixed_precision"] = False
        if rng.random() < 0.4:
            kw["new_tokens"] = rng.choice((1, 4, 16, 64))
        else:
            kw["logits"] = rng.choice(("last", "all"))
    else:
        kw["grad_ckpt"] = rng.choice(("none", "full"))
        kw["optimizer"] = rng.choice(("adamw", "adamw", "sgd", "sgd-momentum"))
        kw["optimizer_impl"] = rng.choice(("foreach", "single"))
        kw["keep_outputs"] = rng.random() < 0.2
    if task == "lora":
        kw["lora_rank"] = rng.choice((8, 16, 64))
        kw["lora_targets"] = rng.choice((("q", "v"), ("q", "k", "v", "o", "gate", "up", "down")))
    return kw


def dump() -> dict[str, Any]:
    import gpu_accuracy
    from estimator_speed import CASES

    from gpumem_tui.estimator.architecture import load_architecture
    from gpumem_tui.estimator.solve import max_batch, max_seq
    from gpumem_tui.estimator.spec import SpecError, TrainingSpec

    out: dict[str, Any] = {"gpu_accuracy": {}, "speed": {}, "random": []}
    for case, _truth in gpu_accuracy.load_cases():
        arch, spec = gpu_accuracy.arch_and_spec(case)
        out["gpu_accuracy"][case["name"]] = {
            "sim": _sim(arch, spec), **{m: _figures(arch, spec, m) for m in ("detailed", "accelerate", "zero16")}}
    for name, spec in CASES:
        arch = load_architecture(name)
        out["speed"][f"{name} {spec}"] = {"sim": _sim(arch, spec), "figures": _figures(arch, spec),
                                          "max_batch": max_batch(arch, spec, BUDGET),
                                          "max_seq": max_seq(arch, spec.replace(batch=1), BUDGET)}
    rng = random.Random(20261125)
    while len(out["random"]) < RANDOM_SPECS:
        name, kw = rng.choice(MODELS), _random_spec(rng)
        arch = load_architecture(name)
        try:
            spec = TrainingSpec(**kw)
            figures = _figures(arch, spec)
        except (SpecError, ValueError):
            continue
        row = {"model": name, "spec": repr(kw), "sim": _sim(arch, spec), "figures": figures}
        if len(out["random"]) < SEARCHED:
            row["max_batch"] = max_batch(arch, spec, BUDGET)
        out["random"].append(row)
    return out


if __name__ == "__main__":
    print(json.dumps(dump(), indent=1, sort_keys=True))
