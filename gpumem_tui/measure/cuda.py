"""``gpumem-tui measure ... --on cuda``: the ground truth on the user's own GPU.

One process, one device (``cuda:0``). Training: ``steps`` iterations of
``out = model(input_ids=ids, labels=ids); loss = out.loss; del out; loss.backward();
opt.step(); opt.zero_grad(set_to_none=True)``; the last step is reported with
``torch.cuda.max_memory_allocated`` per phase, the peak stats reset at each phase boundary
(forward, backward, optimizer_step) -- the protocol of ``../shared/validation/gpu/gpu_truth.py``.
LoRA: peft ``get_peft_model(LoraConfig(r, lora_alpha=2r, target_modules, lora_dropout=0))``.
Inference: ``torch.no_grad()``; with ``--new-tokens N`` ``model.generate`` (greedy, exactly N
new tokens), otherwise one forward with ``use_cache=True`` whose output stays alive (``--logits
all``) or with ``logits_to_keep=1`` (``--logits last``).

Figures (never mixed): ``phase_peak_allocated`` and ``peak_allocated`` (torch allocated),
``max_reserved`` (torch reserved), ``nvml_peak_used`` (the process's NVML used memory, sampled
every 2 ms by a thread: a shorter spike can be missed), ``cuda_context`` (NVML used minus torch
reserved right after CUDA initialisation). Errors are :class:`~gpumem_tui.measure.runner.
MeasureError` with one line (the CLI exits 2).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from typing import Any

from gpumem_tui.measure.runner import MeasureError

MiB = 1 << 20


def check_cuda(torch: Any) -> None:
    """Raise MeasureError (one line) unless torch has a CUDA build and sees a GPU."""
    if getattr(torch.version, "cuda", None) is None:
        raise MeasureError(f"--on cuda needs a CUDA build of torch; this is torch {torch.__version__} without CUDA")
    if not torch.cuda.is_available():
        raise MeasureError("--on cuda: no CUDA GPU is visible (torch.cuda.is_available() is False; check the "
                           "NVIDIA driver and CUDA_VISIBLE_DEVICES)")


def oom_message(exc: BaseException, free_bytes: int | None) -> str:
    """One line for a CUDA out-of-memory error: how much was asked and what was free."""
    text = str(exc)
    asked = re.search(r"Tried to allocate ([0-9.]+ [KMGT]?i?B)", text)
    parts = ["out of GPU memory"]
    if asked:
        parts.append(f"asked {asked.group(1)}")
    if free_bytes is not None:
        parts.append(f"{free_bytes / MiB:,.0f} MiB free")
    return ", ".join(parts) + "; use a smaller --batch / --seq, --grad-ckpt full or LoRA"


class NvmlSampler(threading.Thread):
    """The own process's NVML used memory, sampled every ``interval`` seconds (peak in bytes)."""

    def __init__(self, interval: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peak = 0
        self.samples = 0
        self._stopping = threading.Event()  # not "_stop": that is a method Thread.join calls
        self._pynvml: Any = None
        self._handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._pynvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # no NVML: the NVML figures are reported as null, not invented
            self._pynvml = None

    def used(self) -> int | None:
        """NVML used memory of this process on GPU 0 (bytes), None when unreadable."""
        if self._pynvml is None:
            return None
        pid = os.getpid()
        for fn in (self._pynvml.nvmlDeviceGetComputeRunningProcesses,
                   self._pynvml.nvmlDeviceGetGraphicsRunningProcesses):
            try:
                for proc in fn(self._handle):
                    if proc.pid == pid and proc.usedGpuMemory is not None:
                        return int(proc.usedGpuMemory)
            except self._pynvml.NVMLError:
                continue
        return None

    def run(self) -> None:
        while not self._stopping.is_set():
            value = self.used()
            if value is not None:
                self.peak = max(self.peak, value)
                self.samples += 1
            time.sleep(self.interval)

    def stop(self) -> None:
        """Stop sampling and release NVML (its nvmlInit is reference-counted: pair it)."""
        self._stopping.set()
        if self.is_alive():
            self.join()
        if self._pynvml is not None:
            with contextlib.suppress(Exception):
                self._pynvml.nvmlShutdown()
            self._pynvml = None


def apply_peft_lora(model: Any, rank: int, targets: Any) -> Any:
    """Wrap ``model`` with peft LoRA as users run it (``get_peft_model``; adapters upcast to
    fp32 by peft's default ``autocast_adapter_dtype=True``).

    Raises:
        MeasureError: peft missing, or no module matches ``targets``.
    """
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise MeasureError("LoRA needs peft (pip install 'gpumem-tui[torch]')") from None
    try:
        return get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets,
                                                lora_dropout=0.0))
    except ValueError as exc:
        raise MeasureError(f"LoRA: {str(exc).splitlines()[0]}") from None


class _Stats:
    """Peak-allocated / reserved readings of a device (CUDA; on other devices zeros, for tests)."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch, self.device = torch, device
        self.cuda = device.type == "cuda"

    def sync_reset(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        if not self.cuda:
            return 0
        self.torch.cuda.synchronize(self.device)
        return int(self.torch.cuda.max_memory_allocated(self.device))

    def allocated(self) -> int:
        return int(self.torch.cuda.memory_allocated(self.device)) if self.cuda else 0


def run_steps(model: Any, ids: Any, *, task: str, steps: int, optimizer: Any, amp: Any, stats: _Stats,
              new_tokens: int = 0, logits: str = "last") -> dict[str, int]:
    """Run the measured loop (see module doc) and return the last step's per-phase peaks."""
    torch = stats.torch
    phases: dict[str, int] = {}
    if task == "inference":
        model.eval()
        stats.sync_reset()
        before = stats.allocated()
        with torch.no_grad():
            if new_tokens:
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                     min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
                if out.shape[1] != ids.shape[1] + new_tokens:
                    raise MeasureError(f"generate returned {out.shape[1] - ids.shape[1]} new tokens, not {new_tokens}")
            elif logits == "all":
                out = model(input_ids=ids, use_cache=True)
            else:
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        phases["forward"] = stats.peak()
        phases["_before"] = before
        del out
        return phases
    model.train()
    for _ in range(steps):
        stats.sync_reset()
        with amp():
            out = model(input_ids=ids, labels=ids)
        loss = out.loss
        del out
        fwd = stats.peak()
        stats.sync_reset()
        loss.backward()
        bwd = stats.peak()
        stats.sync_reset()
        optimizer.step()
        opt = stats.peak()
        optimizer.zero_grad(set_to_none=True)
        del loss
        phases = {"forward": fwd, "backward": bwd, "optimizer_step": opt}
    return phases


def measure_cuda(req: Any, *, new_tokens: int = 0, logits: str = "last") -> dict[str, Any]:
    """Measure ``req`` (a :class:`~gpumem_tui.measure.runner.MeasureRequest`) on ``cuda:0``.

    Returns the JSON dict described in the module doc (bytes).
    Raises:
        MeasureError: no CUDA build / no GPU / out of GPU memory / bad LoRA targets (one line).
    """
    import torch

    from gpumem_tui.measure.runner import _build_model, _make_optimizer

    check_cuda(torch)
    device = torch.device("cuda", 0)
    sampler = NvmlSampler()
    torch.zeros(1, device=device)
    torch.cuda.synchronize(device)
    ctx_used = sampler.used()
    context = None if ctx_used is None else ctx_used - int(torch.cuda.memory_reserved(device))
    try:
        model = _build_model(_replace_on(req, "cuda"), torch)
        if req.grad_ckpt == "full":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if req.task == "lora":
            model = apply_peft_lora(model, req.lora_rank, list(req.lora_targets))
        trainable = [p for p in model.parameters() if p.requires_grad]
        vocab = int(model.config.vocab_size if hasattr(model, "config") else model.get_input_embeddings().num_embeddings)
        gen = torch.Generator(device="cpu").manual_seed(req.seed)
        ids = torch.randint(0, vocab, (req.batch, req.seq), generator=gen).to(device)
        amp = ((lambda: torch.autocast("cuda", dtype=torch.bfloat16 if req.dtype == "bf16" else torch.float16))
               if req.mixed_precision else contextlib.nullcontext)
        opt = _make_optimizer(req, trainable, torch) if req.task != "inference" else None
        sampler.start()
        phases = run_steps(model, ids, task=req.task, steps=req.steps, optimizer=opt, amp=amp,
                           stats=_Stats(torch, device), new_tokens=new_tokens, logits=logits)
        torch.cuda.synchronize(device)
        time.sleep(0.05)
    except torch.cuda.OutOfMemoryError as exc:
        free = None
        with contextlib.suppress(Exception):
            free = int(torch.cuda.mem_get_info(device)[0])
        raise MeasureError(oom_message(exc, free)) from None
    finally:
        sampler.stop()
    peak = max(v for k, v in phases.items() if not k.startswith("_"))
    return {
        "on": "cuda",
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "phase_peak_allocated": phases,
        "peak_allocated": peak,
        "max_reserved": int(torch.cuda.max_memory_reserved(device)),
        "nvml_peak_used": sampler.peak if sampler.samples else None,
        "nvml_samples": sampler.samples,
        "cuda_context": context,
        "trainable_params": sum(p.numel() for p in trainable),
        "figures": {"peak_allocated": "torch.cuda.max_memory_allocated", "max_reserved":
                    "torch.cuda.max_memory_reserved", "nvml_peak_used": "NVML used of this process (sampled 2 ms)"},
    }


def _replace_on(req: Any, on: str) -> Any:
    import dataclasses

    return dataclasses.replace(req, on=on)
