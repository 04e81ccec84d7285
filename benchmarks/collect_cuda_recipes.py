"""Recipe ground truth on a CUDA GPU: transformers ``Trainer`` (bf16 / fp16 autocast, gradient
checkpointing), PEFT LoRA under the Trainer and in the plain torch loop.

Each case runs in its own child process (its own CUDA context and allocator statistics), up to
``--jobs`` at a time on the one GPU; a case starts only while the estimator's peaks of the
running cases, padded (``_budget_bytes``), fit in ``--gpu-gib``, so concurrent cases do not
squeeze each other into OOM. Loops (``benchmarks/collect_recipes.py``'s, 3 steps, step 3 reported):

- ``hf-trainer``: ``Trainer.train`` with ``TrainingArguments(bf16=True | fp16=True,
  gradient_checkpointing=..., max_steps=3, ...)``, default optimizer (``adamw_torch_fused``),
  rows of ``{"input_ids", "labels"}`` through ``default_data_collator``; torch's peak
  statistics are reset and read at each phase boundary: ``on_step_begin`` (forward), a forward
  hook on the model (backward, gradient clipping included), ``on_pre_optimizer_step``
  (optimizer step, scheduler, ``zero_grad``), ``on_step_end``. (The first GPU run, 2026-11-27
  04:42, read one peak per step, ``on_step_begin`` to ``on_step_end``: the same maximum.)
- ``torch`` with PEFT: ``out = model(input_ids=ids, labels=ids, use_cache=False)``, ``loss =
  out.loss``, ``del out``, ``loss.backward()``, ``AdamW(foreach=False).step()``,
  ``zero_grad(set_to_none=True)``; peak reset at each phase boundary (forward, backward,
  optimizer step), as ``/work/shared/validation/gpu/gpu_truth.py`` measured.

Figures per case (bytes): ``peak_bytes`` = ``torch.cuda.max_memory_allocated`` of step 3 (the
largest of its phases, in ``phases_of_last_step``), ``steps`` per step, ``max_reserved`` = the largest
``torch.cuda.max_memory_reserved`` read before any peak reset and at the end, ``nvml_peak_used``
= the process's NVML used memory (``nvmlDeviceGetComputeRunningProcesses``) sampled every 2 ms
by a thread (a spike shorter than that can be missed), ``cuda_context`` = NVML used minus
``torch.cuda.memory_reserved`` after CUDA initialisation and one 4-byte tensor,
``before_training`` = torch allocated / reserved once the model is built and prepared (max
since initialisation: what loading and quantizing left in the allocator).

GPU: ``PYTHONPATH=. python3 benchmarks/collect_cuda_recipes.py --device cuda --out DIR``
(torch with CUDA, transformers, peft, nvidia-ml-py; no gpumem_tui module but the estimator,
which is pure Python). CPU smoke test of every code path that runs without CUDA:
``PYTHONPATH=. .venv/bin/python benchmarks/collect_cuda_recipes.py --device cpu --tiny --out DIR``
(tiny configs, short sequences; figures from gpumem-tui's ``PhaseMemTracker``, no NVML).
``--print-command`` prints the one-line command for the GPU machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_recipes import _ROLES, CONFIGS, ROOT, STEPS, _dataset, _model, _peft, _run_trainer, _torch_steps  # noqa: E402

CUDA_CONFIGS = ROOT / "tests" / "data" / "recipes_cuda" / "configs"
LORA_RANK = 16
#: ``torch.cuda.memory_stats()`` entries kept per case (whole run): retries / OOMs (another
#: process squeezed this one), segments cudaMalloc'ed, the peak of split-off free bytes
#: (fragmentation) and the reserved peak of each pool
ALLOCATOR_STATS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "inactive_split_bytes.all.peak",
                   "reserved_bytes.large_pool.peak", "reserved_bytes.small_pool.peak")
#: the phases of a step, for both loops
PHASES = ("forward", "backward", "optimizer_step")
LORA_TARGETS = ("q_proj", "v_proj")
#: full-size config -> the tiny config the CPU smoke test runs instead
TINY = {"gpt2.json": CONFIGS / "gpt2-tiny.json", "llama-3.2-1b.json": CONFIGS / "llama-tiny.json",
        "bert-base-uncased.json": CUDA_CONFIGS / "bert-tiny.json"}

#: name, config, head, recipe, task, weight dtype, autocast (Trainer flag), grad ckpt, attention, batch, seq
CASES: list[dict[str, Any]] = [
    dict(name=n, config=c, head=h, recipe=r, task=t, weights=w, amp=a, gc=g, attn=at, batch=b, seq=s)
    for n, c, h, r, t, w, a, g, at, b, s in [
        ("llama1b-hf-trainer-bf16amp-b2-s1024", "llama-3.2-1b.json", "causal", "hf-trainer", "train", "fp32", "bf16", False, "sdpa", 2, 1024),
        ("llama1b-hf-trainer-bf16amp-gc-b4-s1024", "llama-3.2-1b.json", "causal", "hf-trainer", "train", "fp32", "bf16", True, "sdpa", 4, 1024),
        ("llama1b-hf-trainer-peft-lora-bf16-b4-s1024", "llama-3.2-1b.json", "causal", "hf-trainer", "lora", "bf16", "bf16", False, "sdpa", 4, 1024),
        ("llama1b-hf-trainer-peft-lora-bf16-gc-b4-s1024", "llama-3.2-1b.json", "causal", "hf-trainer", "lora", "bf16", "bf16", True, "sdpa", 4, 1024),
        ("llama1b-torch-peft-lora-bf16-b4-s1024", "llama-3.2-1b.json", "causal", "torch", "lora", "bf16", None, False, "sdpa", 4, 1024),
        ("gpt2-hf-trainer-bf16amp-b4-s512", "gpt2.json", "causal", "hf-trainer", "train", "fp32", "bf16", False, "sdpa", 4, 512),
        ("bert-base-mlm-hf-trainer-fp16amp-eager-b8-s512", "bert-base-uncased.json", "mlm", "hf-trainer", "train", "fp32", "fp16", False, "eager", 8, 512),
        # QLoRA as users run it: nf4 base loaded by from_pretrained, prepare_model_for_kbit_training, Trainer
        ("llama1b-qlora-nf4-dq-hf-trainer-bf16-gc-b4-s1024", "llama-3.2-1b.json", "causal", "peft-kbit", "qlora", "bf16", "bf16", True, "sdpa", 4, 1024),
        ("llama1b-qlora-nf4-dq-hf-trainer-bf16-b2-s1024", "llama-3.2-1b.json", "causal", "peft-kbit", "qlora", "bf16", "bf16", False, "sdpa", 2, 1024),
    ]
]

#: the QLoRA cases' transformers ``BitsAndBytesConfig`` (the QLoRA paper's recipe: NF4, double
#: quantisation, bf16 compute), as a config.json's ``quantization_config`` holds it
QLORA_QUANTIZATION_CONFIG = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                             "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16"}


def estimator_spec(case: dict[str, Any], device: str) -> dict[str, Any]:
    """The ``TrainingSpec`` fields (as in ``tests/data/recipes/*.json``) the estimator is given
    for ``case``: 16-bit autocast over fp32 weights is ``dtype`` = the autocast dtype with
    ``mixed_precision``; bf16 weights are ``dtype`` bf16 (the Trainer's bf16 autocast changes
    nothing there); the torch loop's ``AdamW(foreach=False)`` is ``optimizer_impl`` single."""
    mixed = case["weights"] == "fp32" and case["amp"] is not None
    spec: dict[str, Any] = {
        "task": case["task"], "batch": case["batch"], "seq": case["seq"],
        "dtype": case["amp"] if mixed else case["weights"], "mixed_precision": mixed,
        "grad_ckpt": "full" if case["gc"] else "none", "attention": case["attn"], "device": device,
        "optimizer": "adamw", "recipe": case["recipe"]}
    if case["recipe"] == "torch":
        spec["optimizer_impl"] = "single"
    if case["task"] in ("lora", "qlora"):
        spec.update(lora_rank=LORA_RANK, lora_targets=[_ROLES[t] for t in LORA_TARGETS])
    if case["task"] == "qlora":
        spec["quant"] = QLORA_QUANTIZATION_CONFIG["bnb_4bit_quant_type"]
    return spec


def shrink(case: dict[str, Any]) -> dict[str, Any]:
    """The CPU smoke-test variant of ``case``: tiny config, batch 2, seq 32 (fp16 autocast stays:
    transformers 5.24 with torch 2.13 runs ``fp16=True`` with ``use_cpu``)."""
    name = re.sub(r"-b\d+-s\d+$", "", case["name"]) + "-tiny-b2-s32"
    return {**case, "name": name, "config": str(TINY[case["config"]]), "batch": 2, "seq": 32}


# --- measuring, inside the child ------------------------------------------------------------------
class CudaMeter:
    """torch.cuda peak statistics per phase: ``begin`` resets the peak, ``end`` reads it."""

    def __init__(self, torch: Any) -> None:
        self.torch, self.peaks, self.max_reserved, self.notes = torch, {}, 0, {}

    def _read_reserved(self) -> None:
        self.torch.cuda.synchronize()
        self.max_reserved = max(self.max_reserved, int(self.torch.cuda.max_memory_reserved()))

    def begin(self, phase: str) -> None:
        self._read_reserved()  # the reset below also resets the reserved peak
        self.torch.cuda.reset_peak_memory_stats()

    def end(self, phase: str) -> None:
        self._read_reserved()
        self.peaks[phase] = int(self.torch.cuda.max_memory_allocated())


class CpuMeter:
    """The smoke test's stand-in: gpumem-tui's ``PhaseMemTracker`` (torch allocated on the CPU)."""

    def __init__(self, tracker: Any) -> None:
        self.tracker, self.peaks, self.max_reserved, self.notes = tracker, {}, None, {}

    def begin(self, phase: str) -> None:
        if "." not in phase or phase.endswith(".forward"):  # only where a root forward begins
            self.tracker.reset_mod_stats()  # MemTracker refuses a second root forward otherwise
        self.tracker.start_phase(phase)

    def end(self, phase: str) -> None:
        self.peaks[phase] = int(self.tracker.phase_peaks[phase].peak_bytes)


def nvml_used_of(pynvml: Any, pid: int) -> int | None:
    """NVML used bytes of process ``pid`` summed over every GPU, None if NVML lists it nowhere
    (``nvmlDeviceGetComputeRunningProcesses``; ``usedGpuMemory`` None = not available)."""
    total, seen = 0, False
    for index in range(pynvml.nvmlDeviceGetCount()):
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(index))
        except pynvml.NVMLError:  # a GPU that cannot list its processes (MIG, permissions): not ours to count
            continue
        for proc in procs:
            if proc.pid == pid and proc.usedGpuMemory is not None:
                total, seen = total + int(proc.usedGpuMemory), True
    return total if seen else None


class NvmlPeak(threading.Thread):
    """Samples :func:`nvml_used_of` this process every ``interval`` seconds; ``peak`` in bytes."""

    def __init__(self, pynvml: Any, interval: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.pynvml, self.interval, self.pid = pynvml, interval, os.getpid()
        self.peak, self.samples, self.stopped = 0, 0, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            used = nvml_used_of(self.pynvml, self.pid)
            if used is not None:
                self.peak, self.samples = max(self.peak, used), self.samples + 1


def _trainer_run(case: dict[str, Any], model: Any, rows: list[dict[str, Any]], meter: Any, device: str) -> None:
    """``Trainer.train`` with the step split into phases, as the torch loop's: ``forward`` from
    ``on_step_begin`` to the end of the model's forward (a forward hook on the model the
    Trainer calls; the loss is computed inside it), ``backward`` from there to
    ``on_pre_optimizer_step`` (gradient clipping included), ``optimizer_step`` from there to
    ``on_step_end`` (the step, the scheduler, ``zero_grad``). The step's peak is their largest."""
    from transformers import TrainerCallback

    phase = {"step": 0, "name": None}

    def switch(name: str | None) -> None:
        if phase["name"]:
            meter.end(f"step{phase['step']}.{phase['name']}")
        if name:
            meter.begin(f"step{phase['step']}.{name}")
        phase["name"] = name

    def forward_end(module, args, output):  # type: ignore[no-untyped-def]
        if phase["name"] == "forward" and module.training:
            switch("backward")

    class StepPhases(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            meter.notes["optim"] = str(getattr(args.optim, "value", args.optim))

        def on_step_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            phase["step"] = state.global_step + 1
            switch("forward")

        def on_pre_optimizer_step(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            switch("optimizer_step")

        def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            switch(None)

    handle = model.register_forward_hook(forward_end)
    try:
        _run_trainer(model, rows, case["batch"], StepPhases(), **trainer_arguments(case, device))
    finally:
        handle.remove()
    _step_peaks_from_phases(meter)


def _step_peaks_from_phases(meter: Any) -> None:
    """``step{n}`` = the largest of its phases' peaks (the phases cover the step end to end)."""
    for step in range(1, STEPS + 1):
        meter.peaks[f"step{step}"] = max(meter.peaks[f"step{step}.{p}"] for p in PHASES)


def _torch_run(case: dict[str, Any], model: Any, rows: list[dict[str, Any]], meter: Any, device: str, torch: Any) -> None:
    phases = PHASES

    def mark(step: int, phase: str) -> None:
        index = phases.index(phase) if phase in phases else len(phases)
        if index > 0:
            meter.end(f"step{step}.{phases[index - 1]}")
        if phase != "end":
            meter.begin(f"step{step}.{phase}")

    _torch_steps(model, rows, case["batch"], torch, mark, device=device)
    _step_peaks_from_phases(meter)


def _cuda_context(torch: Any, pynvml: Any) -> int | None:
    """NVML used minus torch reserved after CUDA initialisation and one 4-byte tensor (bytes)."""
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    time.sleep(0.2)  # NVML's per-process figure lags the allocation a little
    used = nvml_used_of(pynvml, os.getpid())
    return None if used is None else used - int(torch.cuda.memory_reserved())


def _load_nvml() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # ImportError, NVMLError: say which and stop this case
        raise RuntimeError(f"NVML unavailable ({type(exc).__name__}: {exc}); install nvidia-ml-py") from exc
    return pynvml


def trainer_arguments(case: dict[str, Any], device: str) -> dict[str, Any]:
    """The case's ``TrainingArguments`` fields beyond the common ones of ``_run_trainer``:
    ``use_cpu``, ``gradient_checkpointing``, and ``bf16`` / ``fp16`` for its autocast."""
    extra = {"use_cpu": device == "cpu", "gradient_checkpointing": case["gc"]}
    if case["amp"]:
        extra[case["amp"]] = True
    return extra


def case_config(case: dict[str, Any]) -> dict[str, Any]:
    """The model config (a dict) of ``case``: its file in ``CUDA_CONFIGS``, or an absolute path."""
    config_path = Path(case["config"]) if os.path.isabs(case["config"]) else CUDA_CONFIGS / case["config"]
    return json.loads(config_path.read_text())


def build_model(case: dict[str, Any], config: dict[str, Any], torch: Any, device: str) -> Any:
    """The model of ``case`` on ``device`` as the run trains it: random weights in the case's
    dtype (QLoRA: quantized on load, k-bit prepared), PEFT LoRA on top for lora / qlora."""
    weights = {"fp32": torch.float32, "bf16": torch.bfloat16}[case["weights"]]
    if case["task"] == "qlora":
        model = _qlora_model(config, case, torch, weights, device)
    else:
        model = _model(config, torch, attn=case["attn"], dtype=weights, head=case["head"], device=device)
    if case["task"] in ("lora", "qlora"):
        model = _peft(model, LORA_TARGETS, rank=LORA_RANK)
    return model


def measure_case(case: dict[str, Any], device: str) -> dict[str, Any]:
    """Run ``case`` in this process on ``device`` (cuda | cpu); return its record."""
    import peft
    import torch
    import transformers

    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"--device cuda but torch {torch.__version__} sees no CUDA device")
    config = case_config(case)
    pynvml = _load_nvml() if device == "cuda" else None
    context = _cuda_context(torch, pynvml) if pynvml else None
    model = build_model(case, config, torch, device)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    rows = _dataset(case["batch"], case["seq"], int(config["vocab_size"]), torch)
    setup = _before_training(torch) if device == "cuda" else None
    monitor = NvmlPeak(pynvml) if pynvml else None
    if device == "cuda":
        meter: Any = CudaMeter(torch)
        tracker = None
    else:
        from gpumem_tui.measure.tracker import PhaseMemTracker

        tracker = PhaseMemTracker()
        meter = CpuMeter(tracker)
    if monitor:
        monitor.start()
    try:
        if tracker:
            tracker.__enter__()
        if uses_trainer(case):
            _trainer_run(case, model, rows, meter, device)
        else:
            _torch_run(case, model, rows, meter, device, torch)
    finally:
        if tracker:
            tracker.__exit__(None, None, None)
        if monitor:
            monitor.stopped.set()
            monitor.join()
    if device == "cuda":
        meter.begin("after")  # reads the reserved peak once more
        stats = torch.cuda.memory_stats()  # retries: another process squeezed this one's allocator
        meter.notes["allocator"] = {k: stats.get(k) for k in ALLOCATOR_STATS}
    meter.notes["checkpoint"] = checkpoint_flavour(model)
    record = _record(case, device, config, meter, params, trainable, torch, transformers, peft)
    record.update(cuda_context=context, before_training=setup, nvml_peak_used=monitor.peak if monitor else None,
                  nvml_samples=monitor.samples if monitor else None,
                  nvml_used_after=nvml_used_of(pynvml, os.getpid()) if pynvml else None,
                  param_dtype=str(next(model.parameters()).dtype).removeprefix("torch."))
    return record


def _before_training(torch: Any) -> dict[str, int]:
    """torch's figures once the model is built (loaded, quantized, prepared, PEFT-wrapped) and
    before training starts (bytes): ``allocated`` now, ``max_allocated`` and ``max_reserved``
    since CUDA initialisation (what loading left in the caching allocator)."""
    torch.cuda.synchronize()
    return {"allocated": int(torch.cuda.memory_allocated()), "max_allocated": int(torch.cuda.max_memory_allocated()),
            "reserved": int(torch.cuda.memory_reserved()), "max_reserved": int(torch.cuda.max_memory_reserved())}


def _qlora_model(config: dict[str, Any], case: dict[str, Any], torch: Any, weights: Any, device: str) -> Any:
    """The QLoRA base as users load it: random ``weights``-dtype weights saved to a scratch
    directory, then ``from_pretrained(..., quantization_config=BitsAndBytesConfig(...))`` (the
    Linears become bitsandbytes ``Linear4bit``), then peft's ``prepare_model_for_kbit_training``
    (``use_gradient_checkpointing`` = the case's; reentrant, its default)."""
    import transformers
    from peft import prepare_model_for_kbit_training

    qc = {k: v for k, v in QLORA_QUANTIZATION_CONFIG.items() if k != "quant_method"}
    qc["bnb_4bit_compute_dtype"] = getattr(torch, qc["bnb_4bit_compute_dtype"])
    scratch = tempfile.mkdtemp(prefix="gpumem-qlora-")
    try:
        _model(config, torch, attn=case["attn"], dtype=weights, head=case["head"], device="cpu").save_pretrained(scratch)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            scratch, quantization_config=transformers.BitsAndBytesConfig(**qc), dtype=weights,
            attn_implementation=case["attn"], device_map={"": 0} if device == "cuda" else "cpu")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=case["gc"])


def uses_trainer(case: dict[str, Any]) -> bool:
    """Whether ``case`` runs under transformers' ``Trainer`` (its recipes ``hf-trainer`` and
    ``peft-kbit``) rather than the plain torch loop."""
    return case["recipe"] in ("hf-trainer", "peft-kbit")


def _bnb_version() -> str:
    import bitsandbytes

    return bitsandbytes.__version__


def checkpoint_flavour(model: Any) -> str | None:
    """``reentrant`` / ``non-reentrant`` as transformers set ``_gradient_checkpointing_func``
    (a ``functools.partial`` of ``torch.utils.checkpoint.checkpoint``) on the model's layers,
    ``torch-default`` where it passes no ``use_reentrant``; None where checkpointing is off.
    Read after the run: the Trainer enables it inside ``train``."""
    for module in model.modules():
        func = getattr(module, "_gradient_checkpointing_func", None)
        if getattr(module, "gradient_checkpointing", False) and func is not None:
            keywords = getattr(func, "keywords", {})
            if "use_reentrant" not in keywords:
                return "torch-default"
            return "reentrant" if keywords["use_reentrant"] else "non-reentrant"
    return None


def _gpu_line(torch: Any, device: str) -> str:
    if device != "cuda":
        return "CPU (smoke test, not ground truth)"
    import pynvml

    return (f"{torch.cuda.get_device_name()}, driver {pynvml.nvmlSystemGetDriverVersion()}, "
            f"CUDA {torch.version.cuda}")


def _record(case: dict[str, Any], device: str, config: dict[str, Any], meter: Any, params: int, trainable: int,
            torch: Any, transformers: Any, peft: Any) -> dict[str, Any]:
    if uses_trainer(case):
        flags = ", ".join(f for f in (f"{case['amp']}=True" if case["amp"] else "",
                                      "gradient_checkpointing=True" if case["gc"] else "") if f)
        loop = f"transformers Trainer.train, TrainingArguments({flags}), optim {meter.notes.get('optim')} (default)"
    else:
        loop = "plain torch loop (benchmarks/collect_recipes.py's _torch_steps), AdamW(foreach=False)"
    lora = f", PEFT LoRA r={LORA_RANK} on {'/'.join(LORA_TARGETS)}" if case["task"] in ("lora", "qlora") else ""
    if case["task"] == "qlora":
        lora = (f", bitsandbytes {_bnb_version()} BitsAndBytesConfig {QLORA_QUANTIZATION_CONFIG} via from_pretrained, "
                f"peft prepare_model_for_kbit_training(use_gradient_checkpointing={case['gc']})" + lora)
    how = (f"benchmarks/collect_cuda_recipes.py: {loop}{lora}, {case['weights']} weights, {case['attn']} attention, "
           f"batch {case['batch']}, seq {case['seq']}, {STEPS} steps; {_gpu_line(torch, device)}; "
           f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, "
           f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    if device == "cuda":
        per = ("the largest of its forward (on_step_begin to the model's forward hook) / backward (to "
               "on_pre_optimizer_step) / optimizer-step (to on_step_end) phases, reset at each phase boundary"
               if uses_trainer(case)
               else "the largest of its forward / backward / optimizer-step phases, reset at each phase boundary")
        measured = f"torch.cuda.max_memory_allocated, peak of step {STEPS} of {STEPS}, {per}"
    else:
        measured = f"torch allocated (live tensor bytes) by PhaseMemTracker, peak of step {STEPS} of {STEPS}, CPU"
    steps = {k: v for k, v in meter.peaks.items() if k.startswith("step") and "." not in k}
    phases = {k.split(".")[1]: v for k, v in meter.peaks.items() if k.startswith(f"step{STEPS}.")}
    spec = estimator_spec(case, device)
    if meter.notes.get("checkpoint") in ("reentrant", "non-reentrant"):  # as the probe passes it
        spec["checkpoint_impl"] = meter.notes["checkpoint"]
    if case["task"] == "qlora":  # as a quantized checkpoint's config.json holds it
        config = {**config, "quantization_config": QLORA_QUANTIZATION_CONFIG}
    return {"case": case["name"], "how": how, "model": config, "spec": spec,
            "measured": measured, "peak_bytes": steps[f"step{STEPS}"], "steps": steps,
            "phases_of_last_step": phases or None,
            "max_reserved": meter.max_reserved, "checkpoint_seen": meter.notes.get("checkpoint"),
            "allocator_stats": meter.notes.get("allocator"), "params": params, "trainable": trainable,
            "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}


# --- the parent: scheduling, records, lines ---------------------------------------------------------
def estimate_bytes(case: dict[str, Any], device: str = "cuda") -> int:
    """The estimator's peak for ``case`` on ``device`` (bytes; on cuda the context included)."""
    from gpumem_tui.estimator.architecture import architecture_from_config
    from gpumem_tui.estimator.estimate import estimate
    from gpumem_tui.estimator.spec import TrainingSpec

    config_path = Path(case["config"]) if os.path.isabs(case["config"]) else CUDA_CONFIGS / case["config"]
    fields = estimator_spec(case, device)
    if case["task"] == "qlora":
        from gpumem_tui.estimator.quantization import format_from_config

        fields["quant_format"] = format_from_config(QLORA_QUANTIZATION_CONFIG)
    arch = architecture_from_config(json.loads(config_path.read_text()), name=case["name"])
    return int(estimate(arch, TrainingSpec(**fields)).peak_bytes)


def _budget_bytes(est: int) -> int:
    """What a running case may hold on the GPU, from its estimate ``est``: x 1.2 (allocator
    reserve, the estimator's error) + 1 GiB."""
    return int(est * 1.2) + (1 << 30)


def run_child(case: dict[str, Any], device: str, timeout: float, log: Path) -> dict[str, Any]:
    """Run ``case`` in a child process; its record, or one with ``error`` (timeout, crash, OOM)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpumem-case-") as scratch:
        out = Path(scratch) / "record.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(case), "--device", device,
               "--record", str(out)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
            output, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            output = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
            code = None
        with log.open("a") as handle:
            handle.write(f"===== {case['name']} (exit {code}) =====\n{output}\n")
        record = json.loads(out.read_text()) if out.exists() else {"case": case["name"], "error": None}
    if code is None:
        record["error"] = f"timeout after {timeout:.0f} s"
    elif code != 0 and not record.get("error"):
        record["error"] = f"exit {code}: " + (output.strip().splitlines() or ["no output"])[-1][:300]
    record["seconds"] = round(time.monotonic() - started, 1)
    return record


def child_main(case: dict[str, Any], device: str, record_path: Path) -> int:
    """Measure one case, write its record (or its error) to ``record_path``; exit status 0 / 1."""
    try:
        record = measure_case(case, device)
    except Exception as exc:  # the record carries the error; the other cases still run
        record = {"case": case["name"], "spec": estimator_spec(case, device), "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
        record_path.write_text(json.dumps(record) + "\n")
        return 1
    record_path.write_text(json.dumps(record) + "\n")
    return 0


def run_all(cases: list[dict[str, Any]], device: str, jobs: int, gpu_bytes: int, timeout: float, out: Path) -> list[dict[str, Any]]:
    """Run ``cases`` up to ``jobs`` at a time while their budgets fit ``gpu_bytes``, biggest
    first; write ``recipes_cuda.jsonl`` (one record a line, in case order) and ``children.log``."""
    estimates = {c["name"]: estimate_bytes(c, device) for c in cases}
    budgets = {name: _budget_bytes(est) for name, est in estimates.items()}
    pending = sorted(cases, key=lambda c: -budgets[c["name"]])
    running: dict[Future[dict[str, Any]], dict[str, Any]] = {}
    records: dict[str, dict[str, Any]] = {}
    log, jsonl = out / "children.log", out / "recipes_cuda.jsonl"
    jsonl.write_text("")
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        while pending or running:
            held = sum(budgets[c["name"]] for c in running.values())
            fits = [c for c in pending if held + budgets[c["name"]] <= gpu_bytes or not running]
            while fits and len(running) < jobs:
                case = fits.pop(0)
                pending.remove(case)
                held += budgets[case["name"]]
                running[pool.submit(run_child, case, device, timeout, log)] = case
                fits = [c for c in fits if held + budgets[c["name"]] <= gpu_bytes]
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                case = running.pop(future)
                record = records[case["name"]] = future.result()
                record["estimate_bytes"] = estimates[case["name"]]
                print(_line(record), flush=True)
                with jsonl.open("a") as handle:  # as each ends: a run killed later keeps what it has
                    handle.write(json.dumps(record) + "\n")
    ordered = [records[c["name"]] for c in cases]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ordered))
    return ordered


def _line(record: dict[str, Any]) -> str:
    if record.get("error"):
        return f"{record['case']:<50} ERROR {record['error']}  ({record['seconds']} s)"
    mib = 1 << 20
    est = record.get("estimate_bytes") or 0
    err = f"{est / record['peak_bytes'] - 1:+.1%}" if est else "n/a"
    reserved = "n/a" if record["max_reserved"] is None else f"{record['max_reserved'] / mib:,.0f}"
    nvml = "n/a" if record["nvml_peak_used"] is None else f"{record['nvml_peak_used'] / mib:,.0f}"
    ctx = "n/a" if record["cuda_context"] is None else f"{record['cuda_context'] / mib:,.0f}"
    return (f"{record['case']:<50} peak_alloc {record['peak_bytes'] / mib:>10,.1f} MiB  steps "
            f"{[round(v / mib, 1) for v in record['steps'].values()]}  reserved {reserved}  nvml {nvml}  "
            f"ctx {ctx}  estimate {err}  ({record['seconds']} s)")


COMMAND = ("nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv; "
           "PYTHONUNBUFFERED=1 PYTHONPATH=. timeout 290 python3 benchmarks/collect_cuda_recipes.py --device cuda "
           "--jobs 4 --case-timeout 200 --out \"$OUT\" 2>&1 | tee \"$OUT/run.log\"")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny configs, batch 2, seq 32 (the CPU smoke test)")
    parser.add_argument("--out", type=Path, help="directory for recipes_cuda.jsonl and children.log")
    parser.add_argument("--jobs", type=int, default=4, help="cases at a time, each its own process [4]")
    parser.add_argument("--gpu-gib", type=float, default=74.0, help="GiB the running cases' budgets may add to [74]")
    parser.add_argument("--case-timeout", type=float, default=200.0, help="seconds per case [200]")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    parser.add_argument("--print-command", action="store_true", help="print the GPU machine's command and exit")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.print_command:
        print(COMMAND)
        return
    if args.child:
        raise SystemExit(child_main(json.loads(args.child), args.device, args.record))
    if args.out is None or args.jobs < 1:
        parser.error("--out DIR is required and --jobs must be >= 1")
    if args.device == "cuda" and args.tiny:
        parser.error("--tiny is the CPU smoke test; the GPU runs the full-size cases")
    args.out.mkdir(parents=True, exist_ok=True)
    cases = [shrink(c) if args.tiny else c for c in CASES if args.only in c["name"]]
    started = time.monotonic()
    records = run_all(cases, args.device, args.jobs, int(args.gpu_gib * (1 << 30)), args.case_timeout, args.out)
    failed = sum(1 for r in records if r.get("error"))
    print(f"{len(records)} cases, {failed} failed, {time.monotonic() - started:.0f} s; {args.out / 'recipes_cuda.jsonl'}")


if __name__ == "__main__":
    main()
