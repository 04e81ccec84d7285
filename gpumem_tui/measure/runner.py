"""Measure the live tensor bytes of real training / inference steps with torch (ground truth).

torch and transformers only; import this module lazily (``gpumem-tui measure`` does).

The workload (issue 3, "Ground truth"): build the model with transformers
``AutoModelForCausalLM.from_config(config, attn_implementation=...)`` -- or
``AutoModelForMaskedLM`` for encoder-only configs (BERT-style: ``BertForMaskedLM``, i.e. the
encoder plus the MLM prediction head, labels on every position) -- under
``torch.set_default_dtype(dtype)`` (``model.to(dtype)`` fails under fake tensors) on the meta
device or the real CPU; random ``input_ids`` of shape (batch, seq) with ``labels = input_ids``;
``steps`` (default 2) iterations of forward, ``loss.backward()``, ``optimizer.step()``,
``optimizer.zero_grad(set_to_none=True)``; all under ``PhaseMemTracker`` (torch's MemTracker).
The reported peak is the last step's.

Inference (``task="inference"``): ``model.eval()`` under ``torch.no_grad()``; a prefill of
(batch, seq) tokens with ``use_cache=True`` and ``logits_to_keep=1`` (what ``generate()`` passes),
then one decode step of one token; the peak over both is reported, with the KV cache split out.

The meta device runs SDPA on the math path (it stores the b x a x s x s probabilities), unlike
CPU and CUDA kernels, so SDPA figures on meta overstate memory: use eager attention on meta and
SDPA only on the real CPU (ESTIMATOR.md: GPT-2 124M, b=2, s=1024, bf16: 3173.6 MiB on CPU,
4432.7 MiB on meta with SDPA; 3676.5 MiB with eager on both).

All byte figures are storage bytes of live tensors (comparable to torch "allocated", not to
torch "reserved" nor NVML "used"; no CUDA context, no allocator reserve).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpumem_tui.estimator.estimate import COMPONENT_KEYS

COMPONENTS = COMPONENT_KEYS

DTYPES = ("fp32", "bf16", "fp16")
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum", "adafactor")
ATTENTIONS = ("eager", "sdpa")
TASKS = ("train", "lora", "inference")

# Encoder-only model types measured with a masked-LM head instead of a causal-LM head.
ENCODER_TYPES = frozenset({"bert", "roberta", "distilbert", "xlm-roberta", "electra", "deberta", "deberta-v2"})

# LoRA defaults when no targets are given: the attention query and value projections, as peft's
# defaults for most decoder families (peft TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
DEFAULT_LORA_TARGETS = ("q_proj", "v_proj", "c_attn", "query", "value", "qkv_proj")


class MeasureError(ValueError):
    """Bad or unsupported measurement request (the CLI prints it as one line, exit code 2)."""


@dataclass(frozen=True)
class MeasureRequest:
    """What to measure.

    Attributes:
        config: a Hugging Face ``config.json`` as a dict (must hold ``model_type``).
        task: "train" (full fine-tuning), "lora" (frozen base, rank-``lora_rank`` adapters on
            ``lora_targets``), or "inference" (prefill + one decode step with KV cache).
        batch: micro-batch size b (>= 1).  seq: sequence length s (>= 2 for training).
        dtype: parameter and compute dtype ("fp32", "bf16", "fp16").
        mixed_precision: fp32 parameters/gradients/optimizer with 16-bit autocast compute
            (``dtype`` gives the compute dtype); real CPU only (autocast has no meta device).
        optimizer: "adamw", "adam", "sgd", "sgd-momentum" (momentum 0.9), "adafactor".
        optimizer_impl: "single" (per-tensor loop, torch's default on CPU and meta),
            "foreach" (multi-tensor, torch's default on CUDA) or "fused" (torch's fused kernel;
            AdamW/Adam only; the real CPU has one, the meta device does not).
        grad_ckpt: "none" or "full" (HF ``gradient_checkpointing_enable``, non-reentrant).
        attention: "eager" or "sdpa" (``attn_implementation``).
        on: "meta" (no real memory) or "cpu" (real tensors).
        steps: training iterations; the last one's peak is reported (>= 2 so optimizer states
            exist at the start of the measured step).
        grad_accum: micro-batches (forward + backward) per optimizer step; gradients
            accumulate in ``.grad`` across them.
        keep_grads: ``zero_grad(set_to_none=False)``: gradients stay allocated (zeroed) between steps.
        head: "lm" (causal-LM head for decoders, masked-LM head for encoders) or "classification"
            (``AutoModelForSequenceClassification`` with ``num_labels``; labels random of shape (b,)).
        lora_rank, lora_targets: LoRA rank r and the Linear modules that get adapters: plain
            names match the last name component (``q_proj``); entries holding a dot or a regex
            character are regular expressions searched in the full module name
            (``mlp\\.c_proj$``).
        seed: RNG seed for the inputs and weights on the CPU.
    """

    config: dict[str, Any]
    task: str = "train"
    batch: int = 1
    seq: int = 128
    dtype: str = "fp32"
    mixed_precision: bool = False
    optimizer: str = "adamw"
    optimizer_impl: str = "single"
    grad_ckpt: str = "none"
    attention: str = "eager"
    on: str = "meta"
    steps: int = 2
    grad_accum: int = 1
    keep_grads: bool = False
    head: str = "lm"
    num_labels: int = 2
    lora_rank: int = 8
    lora_targets: tuple[str, ...] = ()
    seed: int = 0


@dataclass
class Measurement:
    """Measured live bytes of the last step, split into the estimator's components.

    ``components_bytes`` is the breakdown at the peak (sums to ``peak_bytes``):
    parameters (Parameter + Buffer storages), gradients, optimizer_states (tensors held in
    ``optimizer.state``), optimizer_intermediates (other storages allocated inside
    ``optimizer.step``), logits_and_loss (tensors shaped (..., V) with >= b*(s-1) rows: logits,
    fp32 upcast, log-probs and their gradients), kv_cache (tensors held by the returned cache),
    activations (everything else allocated in forward or backward), cuda_context = 0,
    allocator_reserve = 0 (not applicable: no CUDA). ``phases`` gives each phase's peak live bytes.
    """

    total_params: int
    trainable_params: int
    components_bytes: dict[str, int]
    peak_bytes: int
    peak_phase: str
    phases: list[dict[str, Any]]
    on: str
    attention: str
    model_class: str
    tracker_categories: dict[str, int] = field(default_factory=dict)
    detail_bytes: dict[str, int] = field(default_factory=dict)
    top_tensors: list[dict[str, Any]] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    module_peaks: dict[str, dict[str, int]] = field(default_factory=dict)
    #: diagnosis only (``run(..., capture_modules=...)``): every live tensor at those moments
    module_tensors: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    peak_tensors: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The estimate JSON shape (bytes as ints) plus ``measured: true`` and measurement detail."""
        return {
            "total_params": self.total_params,
            "trainable_params": self.trainable_params,
            "components_bytes": dict(self.components_bytes),
            "peak_bytes": self.peak_bytes,
            "peak_phase": self.peak_phase,
            "phases": list(self.phases),
            "assumptions": list(self.assumptions),
            "measured": True,
            "on": self.on,
            "attention": self.attention,
            "model_class": self.model_class,
            "tracker_categories": dict(self.tracker_categories),
            "detail_bytes": dict(self.detail_bytes),
            "top_tensors": list(self.top_tensors),
            "module_peaks": dict(self.module_peaks),
        }


META_SDPA_WARNING = (
    "on the meta device SDPA takes the math path and stores the s x s attention probabilities "
    "(CPU and CUDA kernels do not): use --attention eager on meta, sdpa on the real CPU"
)


def load_config(source: str | Path) -> dict[str, Any]:
    """Read a ``config.json`` (path) into a dict; raises ``MeasureError`` if unreadable."""
    from gpumem_tui.support.safe_files import read_json  # regular files, size-limited, any nesting

    path = Path(source)
    try:
        data = read_json(path)
    except FileNotFoundError:
        raise MeasureError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise MeasureError(f"cannot read config {path}: {exc}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise MeasureError(f"{path}: not a Hugging Face config.json (no 'model_type')")
    return data


def validate(req: MeasureRequest) -> None:
    """Raise ``MeasureError`` naming the field for anything this runner cannot measure."""
    if req.task not in TASKS:
        raise MeasureError(f"task {req.task!r}: measure supports {', '.join(TASKS)} (qlora needs bitsandbytes on CUDA)")
    if req.batch < 1:
        raise MeasureError(f"batch must be >= 1, got {req.batch}")
    if req.seq < (1 if req.task == "inference" else 2):
        raise MeasureError(f"seq must be >= 2 for training, got {req.seq}")
    if req.dtype not in DTYPES:
        raise MeasureError(f"dtype {req.dtype!r}: one of {', '.join(DTYPES)}")
    if req.optimizer not in OPTIMIZERS:
        raise MeasureError(f"optimizer {req.optimizer!r}: measure supports {', '.join(OPTIMIZERS)} (8-bit Adam needs bitsandbytes)")
    if req.optimizer == "adafactor" and req.on == "meta":
        raise MeasureError("adafactor reads parameter norms with .item(), which the meta device cannot answer: use --on cpu")
    if req.optimizer_impl not in ("single", "foreach", "fused"):
        raise MeasureError(f"optimizer implementation {req.optimizer_impl!r}: single, foreach or fused")
    if req.optimizer_impl == "fused" and (req.on == "meta" or req.optimizer not in ("adamw", "adam")):
        raise MeasureError("--optimizer-impl fused: torch has fused AdamW/Adam kernels on the real CPU and CUDA only")
    if req.grad_accum < 1:
        raise MeasureError(f"grad-accum must be >= 1, got {req.grad_accum}")
    if req.grad_ckpt not in ("none", "full"):
        raise MeasureError(f"grad-ckpt {req.grad_ckpt!r}: measure supports none and full (HF has no selective recompute)")
    if req.attention not in ATTENTIONS:
        raise MeasureError(f"attention {req.attention!r}: measure supports eager and sdpa (flash needs CUDA)")
    if req.on not in ("meta", "cpu", "cuda"):
        raise MeasureError(f"--on {req.on!r}: meta, cpu or cuda")
    if req.mixed_precision and (req.on == "meta" or req.dtype == "fp32"):
        raise MeasureError("mixed precision needs --on cpu or cuda (autocast has no meta device) and --dtype bf16|fp16")
    if req.steps < 1:
        raise MeasureError(f"steps must be >= 1, got {req.steps}")
    if req.task == "lora" and req.lora_rank < 1:
        raise MeasureError(f"lora rank must be >= 1, got {req.lora_rank}")
    if "model_type" not in req.config:
        raise MeasureError("config has no 'model_type'")
    if req.head not in ("lm", "classification"):
        raise MeasureError(f"head {req.head!r}: measure supports lm (causal or masked) and classification")
    if req.head == "classification" and (req.num_labels < 1 or req.task == "inference"):
        raise MeasureError("a classification head needs num_labels >= 1 and a training task")


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _build_model(req: MeasureRequest, torch: Any) -> Any:
    """Instantiate the model from the config under the default dtype and device."""
    import transformers

    transformers.logging.set_verbosity_error()  # config sanity warnings would break the one-line contract
    cfg_dict = dict(req.config)
    model_type = cfg_dict.pop("model_type")
    for key in ("architectures", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "auto_map"):
        cfg_dict.pop(key, None)
    try:
        config = transformers.AutoConfig.for_model(model_type, **cfg_dict)
    except (ValueError, KeyError, TypeError) as exc:
        raise MeasureError(f"config model_type {model_type!r}: {exc}") from None
    encoder = model_type in ENCODER_TYPES
    auto = transformers.AutoModelForMaskedLM if encoder else transformers.AutoModelForCausalLM
    if req.head == "classification":
        auto = transformers.AutoModelForSequenceClassification
        config.num_labels = req.num_labels
        if getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = 0  # decoders pool the last non-pad token and need a pad id for b > 1
    param_dtype = torch.float32 if req.mixed_precision else _torch_dtype(torch, req.dtype)
    old_default = torch.get_default_dtype()
    torch.set_default_dtype(param_dtype)
    try:
        with torch.device(req.on):
            try:
                model = auto.from_config(config, attn_implementation=req.attention)
            except ValueError as exc:
                raise MeasureError(f"{model_type}: {exc}".splitlines()[0]) from None
    finally:
        torch.set_default_dtype(old_default)
    return model


def _lora_class(torch: Any) -> Any:
    nn = torch.nn

    class _LoRALinear(nn.Module):
        """A frozen Linear plus a trainable rank-r update: y = W x + (alpha/r) B A x.

        A: (r, d_in), B: (d_out, r), B initialised to zero (Hu et al. 2021, arXiv 2106.09685);
        no dropout on the adapter input (peft's default lora_dropout=0).
        """

        def __init__(self, base: Any, rank: int) -> None:
            super().__init__()
            self.base = base
            d_in, d_out = base.in_features, base.out_features
            w = base.weight
            self.lora_A = nn.Parameter(torch.empty(rank, d_in, dtype=w.dtype, device=w.device))
            self.lora_B = nn.Parameter(torch.zeros(d_out, rank, dtype=w.dtype, device=w.device))
            if w.device.type != "meta":
                nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            self.scaling = 16.0 / rank

        def forward(self, x: Any) -> Any:
            return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling

    return _LoRALinear


def _conv1d_to_linear(torch: Any, module: Any) -> Any:
    """GPT-2's Conv1D (weight (d_in, d_out)) as an equivalent Linear so LoRA can wrap it."""
    lin = torch.nn.Linear(module.weight.shape[0], module.weight.shape[1], bias=module.bias is not None,
                          device=module.weight.device, dtype=module.weight.dtype)
    with torch.no_grad():
        if module.weight.device.type != "meta":
            lin.weight.copy_(module.weight.t())
            if module.bias is not None:
                lin.bias.copy_(module.bias)
    return lin


def _apply_lora(model: Any, req: MeasureRequest, torch: Any) -> int:
    """Freeze every parameter and wrap the target Linear layers; return the number wrapped."""
    cls = _lora_class(torch)
    targets = set(req.lora_targets or DEFAULT_LORA_TARGETS)
    patterns = [re.compile(t if re.search(r"[.\\$^|()\[\]*+?]", t) else rf"(^|\.){re.escape(t)}$") for t in targets]
    for p in model.parameters():
        p.requires_grad_(False)
    wrapped = 0
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if not any(pat.search(full) for pat in patterns):
                continue
            if type(child).__name__ == "Conv1D":
                child = _conv1d_to_linear(torch, child)
                child.requires_grad_(False)
            if not isinstance(child, torch.nn.Linear):
                continue
            setattr(module, child_name, cls(child, req.lora_rank))
            wrapped += 1
    if wrapped == 0:
        raise MeasureError(f"no Linear layer named {', '.join(sorted(targets))} in this model for LoRA")
    return wrapped


def _make_optimizer(req: MeasureRequest, params: list[Any], torch: Any) -> Any:
    foreach = req.optimizer_impl == "foreach"
    fused = True if req.optimizer_impl == "fused" else None
    if req.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=foreach, fused=fused)
    if req.optimizer == "adam":
        return torch.optim.Adam(params, lr=1e-4, foreach=foreach, fused=fused)
    if req.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-4, foreach=foreach)
    if req.optimizer == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9, foreach=foreach)
    if req.optimizer == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-2, foreach=foreach)
    raise MeasureError(f"optimizer {req.optimizer!r} is not supported by measure")


def _vocab_size(model: Any) -> int:
    out = model.get_output_embeddings()
    if out is not None and getattr(out, "weight", None) is not None:
        return int(out.weight.shape[0])
    return int(getattr(model.config, "vocab_size", 0) or 0)


def run(
    req: MeasureRequest,
    *,
    capture_modules: tuple[str, ...] = (),
    hook: Any = None,
) -> Measurement:
    """Run the workload and return the last step's measurement.

    Args:
        req: what to measure (validated here).
        capture_modules: diagnosis only: module FQNs (e.g. ``"LlamaForCausalLM.model.layers.1"``)
            whose forward / backward peak moments are described tensor by tensor in
            ``Measurement.module_tensors``; non-empty also fills ``Measurement.peak_tensors``.
        hook: diagnosis only: ``hook(model, tracker)`` is called before the first step (it may
            register module hooks and read ``tracker``).

    Raises:
        MeasureError: unsupported or invalid request (e.g. mixed precision on meta, LoRA target
            names absent from the model, an unknown ``model_type``).
        RuntimeError: the tracker internals are missing in this torch version.
    """
    validate(req)
    with warnings.catch_warnings():
        # ModTracker warns when a module was freed before its backward hook; transformers warns
        # about deprecated names: neither concerns the measurement, and both would clutter the CLI.
        warnings.filterwarnings("ignore", message="Module is None", category=UserWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        return _run(req, capture_modules=capture_modules, hook=hook)


def prepare_model(req: MeasureRequest, torch: Any) -> tuple[Any, list[str]]:
    """Seed torch with ``req.seed``, build the model (:func:`_build_model`), add LoRA adapters
    and activation checkpointing as ``req`` asks; return ``(model, assumptions)``.

    Raises:
        MeasureError: unknown model type, LoRA targets absent, no checkpointing support.
    """
    torch.manual_seed(req.seed)
    model = _build_model(req, torch)
    assumptions = [
        f"measured on {req.on}: storage bytes of live tensors (comparable to torch allocated; "
        "no CUDA context, no allocator reserve)",
        f"model class {type(model).__name__}"
        + (" (masked-LM head, labels on every position)" if type(model).__name__.endswith("ForMaskedLM") else ""),
    ]
    if req.task != "inference":
        assumptions.append("training forward with use_cache=False (no KV cache kept in training)")
    if req.on == "meta" and req.attention == "sdpa":
        assumptions.append("WARNING: " + META_SDPA_WARNING)
    if req.task == "lora":
        n_wrapped = _apply_lora(model, req, torch)
        assumptions.append(f"LoRA r={req.lora_rank} on {n_wrapped} Linear layers (minimal built-in adapters, no peft)")
    if req.grad_ckpt == "full":
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise MeasureError(f"{type(model).__name__} does not support gradient checkpointing")
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if req.task == "lora":
            model.enable_input_require_grads()
    return model, assumptions


def _run(req: MeasureRequest, *, capture_modules: tuple[str, ...], hook: Any) -> Measurement:
    import torch

    from gpumem_tui.measure.tracker import PhaseMemTracker

    model, assumptions = prepare_model(req, torch)
    total_params = sum(p.numel() for p in model.parameters())
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainable_params = sum(p.numel() for p in trainable)
    vocab = _vocab_size(model)
    vocab_cfg = int(getattr(model.config, "vocab_size", vocab) or vocab)
    b, s = req.batch, req.seq
    inference = req.task == "inference"
    logits_rows = max(1, b * (s - 1)) if not inference else b
    tracker = PhaseMemTracker(vocab_size=vocab, logits_rows=logits_rows)
    tracker.capture_modules = set(capture_modules)
    if hook is not None:  # diagnosis hook: hook(model, tracker) may register module hooks
        hook(model, tracker)
    compute_dtype = _torch_dtype(torch, req.dtype)
    autocast = (
        torch.autocast("cpu", dtype=compute_dtype) if req.mixed_precision else contextlib.nullcontext()
    )
    optimizer = None
    phase_order: list[str] = []

    def phase(name: str) -> None:
        tracker.start_phase(name)
        phase_order.append(name)

    with tracker:
        optimizer = None if inference else _make_optimizer(req, trainable, torch)
        if inference:
            step_name = _inference_steps(req, model, tracker, phase, autocast, vocab_cfg)
            measured_phases = ["step1.prefill", "step1.decode"]
        else:
            step_name = train_steps(req, model, optimizer, tracker, phase, autocast)
            measured_phases = list(dict.fromkeys(p for p in phase_order if p.startswith(f"{step_name}.")))
        if optimizer is not None:
            tracker.tag_tensors([list(st.values()) for st in optimizer.state.values()], "optimizer_states")

    peaks = [tracker.phase_peaks[p] for p in measured_phases]
    best = max(peaks, key=lambda pk: pk.peak_bytes)
    components, cats, detail = split_live(tracker, best.live)
    top = sorted(best.live, key=lambda e: e.nbytes, reverse=True)
    top_tensors = [_describe(tracker, e) for e in top[:12]]
    peak_tensors = [_describe(tracker, e) for e in top] if capture_modules else []
    module_peaks = _module_peaks(tracker) if not inference else {}
    module_tensors = {
        key: [_describe(tracker, e) for e in sorted(live, key=lambda e: e.nbytes, reverse=True)]
        for key, live in tracker.module_live.items()
    }
    total = sum(components.values())
    if total != best.peak_bytes:  # the split must account for every byte of the peak
        raise RuntimeError(f"internal: components sum {total} != peak {best.peak_bytes}")
    phases = [
        {"name": p.removeprefix(f"{step_name}."), "live_bytes": tracker.phase_peaks[p].peak_bytes}
        for p in measured_phases
    ]
    return Measurement(
        total_params=int(total_params),
        trainable_params=int(trainable_params),
        components_bytes=components,
        peak_bytes=int(best.peak_bytes),
        peak_phase=best.name.removeprefix(f"{step_name}."),
        phases=phases,
        on=req.on,
        attention=req.attention,
        model_class=type(model).__name__,
        tracker_categories=cats,
        detail_bytes=detail,
        top_tensors=top_tensors,
        assumptions=assumptions,
        module_peaks=module_peaks,
        module_tensors=module_tensors,
        peak_tensors=peak_tensors,
    )


def _inference_steps(req: MeasureRequest, model: Any, tracker: Any, phase: Any, autocast: Any, vocab_cfg: int) -> str:
    """A prefill of (b, s) tokens with ``use_cache=True`` (and ``logits_to_keep=1`` where the
    model takes it, as ``generate()`` passes) then one decode step, under ``tracker``; the KV
    cache's tensors are tagged ``kv_cache``. Returns the phase prefix ``"step1"``.

    Raises:
        MeasureError: the model returned no KV cache.
    """
    import torch

    b, s = req.batch, req.seq
    model.eval()
    with torch.no_grad():
        ids = torch.randint(0, vocab_cfg, (b, s), device=req.on)
        step_name = "step1"
        phase("step1.prefill")
        kwargs: dict[str, Any] = {"use_cache": True}
        if "logits_to_keep" in inspect.signature(model.forward).parameters:
            kwargs["logits_to_keep"] = 1
        with autocast, _meta_patches(req.on):
            out = model(input_ids=ids, **kwargs)
        cache = getattr(out, "past_key_values", None)
        if cache is None:
            raise MeasureError(f"{type(model).__name__} returned no KV cache (not a decoder?)")
        tracker.tag_tensors(_cache_tensors(cache), "kv_cache")
        nxt = out.logits[:, -1:].argmax(-1)
        del out
        phase("step1.decode")
        tracker.reset_mod_stats()  # a second root forward
        with autocast, _meta_patches(req.on):
            out = model(input_ids=nxt, past_key_values=cache, **kwargs)
        tracker.tag_tensors(_cache_tensors(out.past_key_values), "kv_cache")
        del out, nxt
    return step_name


def train_steps(req: MeasureRequest, model: Any, optimizer: Any, tracker: Any, phase: Any, autocast: Any,
                *, data_seed: int | None = None) -> str:
    """Run ``req.steps`` training steps under ``tracker`` (already entered); return the last
    step's phase prefix (``"step2"``).

    Each step: ``req.grad_accum`` micro-batches of forward (random ``input_ids`` (b, s), labels
    = inputs for LM heads) and ``loss.backward()``, then ``optimizer.step()`` and
    ``optimizer.zero_grad(set_to_none=not keep_grads)``. ``phase(name)`` is called at each
    phase boundary. ``data_seed`` (distributed data-parallel ranks) reseeds the input RNG so
    each rank draws its own batch; shapes, hence memory, do not depend on it.
    """
    import torch

    model.train()
    # use_cache=False: a training forward otherwise fills a DynamicCache that pins each
    # layer's post-rotary K/V (transformers defaults use_cache from config.use_cache).
    config = getattr(model, "config", None) or model.module.config
    train_kwargs = {} if config.model_type in ENCODER_TYPES or req.head == "classification" \
        else {"use_cache": False}
    vocab_cfg = int(getattr(config, "vocab_size", 0) or 0) or _vocab_size(model)
    b, s = req.batch, req.seq
    rng: dict[str, Any] = {"device": req.on}
    if data_seed is not None:  # real CPU only (a generator cannot draw on meta)
        rng["generator"] = torch.Generator(device="cpu").manual_seed(data_seed)
    step_name = "step1"
    for step in range(1, req.steps + 1):
        step_name = f"step{step}"
        if step > 1:
            tracker.reset_mod_stats()  # MemTracker refuses a second root forward otherwise
            tracker.module_live.clear()
        for micro in range(req.grad_accum):
            if micro > 0:
                tracker.reset_mod_stats()
            # with accumulation the micro-batches of one step share the phase names, so a
            # phase peak is the largest over its micro-batches
            phase(f"{step_name}.forward")
            ids = torch.randint(0, vocab_cfg, (b, s), **rng)
            labels = ids if req.head == "lm" else torch.randint(0, req.num_labels, (b,), **rng)
            with autocast, _meta_patches(req.on):
                out = model(input_ids=ids, labels=labels, **train_kwargs)
            del labels
            loss = out.loss
            del out
            phase(f"{step_name}.backward")
            loss.backward()
            del loss
        # the last batch stays referenced through the step, as a training loop's variable does
        phase(f"{step_name}.optimizer_step")
        optimizer.step()
        phase(f"{step_name}.zero_grad")
        optimizer.zero_grad(set_to_none=not req.keep_grads)
        del ids
    return step_name


def split_live(tracker: Any, live: list[Any]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Split the storages live at a peak into the estimator's components.

    Returns ``(components, categories, detail)``: bytes per component (:data:`COMPONENTS`),
    per tracker category (MemTracker's Parameter / Buffer / Gradient / Activation / Temp /
    Optstate, or FSDPMemTracker's Sharded/Unsharded Param, Sharded/Unsharded Grad, All Gather,
    Reduce Scatter, OptState, Inputs) and per ``component.category``. Rules: parameter and
    buffer categories (FSDP2's all-gather output holds the parameters being unsharded) are
    parameters; gradient categories, FSDP2's reduce-scatter input (the unsharded gradients
    being reduced) and storages tagged ``grad_buckets`` (DDP's reducer buckets) are gradients;
    storages tagged ``optimizer_states`` are optimizer states, other optimizer-step storages
    optimizer intermediates; ``kv_cache`` and ``logits`` tags next; the rest activations.
    """
    components = dict.fromkeys(COMPONENTS, 0)
    cats: dict[str, int] = {}
    detail: dict[str, int] = {}
    for entry in live:
        tag = tracker.tag_of(entry)
        cats[entry.reftype] = cats.get(entry.reftype, 0) + entry.nbytes
        final_ref = str(getattr(entry.info.reftype, "value", entry.info.reftype))
        if entry.reftype in _PARAM_CATEGORIES:
            comp = "parameters"
        elif entry.reftype in _GRAD_CATEGORIES or final_ref in _GRAD_CATEGORIES or tag == "grad_buckets":
            comp = "gradients"
        elif tag == "optimizer_states":
            comp = "optimizer_states"
        elif entry.reftype in ("Optstate", "OptState"):
            comp = "optimizer_intermediates"
        elif tag == "kv_cache":
            comp = "kv_cache"
        elif tag == "logits":
            comp = "logits_and_loss"
        else:
            comp = "activations"
        components[comp] += entry.nbytes
        key = f"{comp}.{entry.reftype}"
        detail[key] = detail.get(key, 0) + entry.nbytes
    return components, cats, detail


# MemTracker (mem_tracker._MemRefType) and FSDPMemTracker (fsdp2_mem_tracker._FSDPRefType) names
_PARAM_CATEGORIES = frozenset({"Parameter", "Buffer", "Sharded Param", "Unsharded Param", "All Gather"})
_GRAD_CATEGORIES = frozenset({"Gradient", "Sharded Grad", "Unsharded Grad", "Reduce Scatter"})


def _describe(tracker: Any, entry: Any) -> dict[str, Any]:
    op, shape, dtype = tracker.describe(entry)
    return {"bytes": entry.nbytes, "category": entry.reftype, "tag": tracker.tag_of(entry),
            "op": op, "shape": list(shape), "dtype": dtype}


def _module_peaks(tracker: Any, depth: int = 4) -> dict[str, dict[str, int]]:
    """Peak live bytes while each module (FQN depth <= ``depth``) ran forward / backward, last step.

    From MemTracker's per-module PEAK_FW / PEAK_BW snapshots ("Total" over devices).
    """
    from torch.distributed._tools import mem_tracker as mt

    out: dict[str, dict[str, int]] = {}
    for stats in tracker.memory_tracking.values():
        if stats.mod_fqn.count(".") + 1 > depth:
            continue
        row: dict[str, int] = {}
        for key, state in (("forward", mt._ModState.PEAK_FW), ("backward", mt._ModState.PEAK_BW)):
            snaps = stats.snapshots.get(state) or []
            if snaps:
                row[key] = int(sum(d.get(mt._TOTAL_KEY, 0) for d in snaps[-1].values()))
        if row:
            out[stats.mod_fqn] = row
    return out


@contextlib.contextmanager
def _meta_patches(on: str) -> Any:
    """On meta, skip transformers' packed-sequence check (it calls ``.item()``, which meta
    tensors cannot answer). On the CPU the check returns None for our unpacked (b, s) inputs,
    so the meta run follows the same path; its (b, s) int64 temporaries are transient.
    """
    if on != "meta":
        yield
        return
    try:
        from transformers import masking_utils
    except ImportError:
        yield
        return
    original = getattr(masking_utils, "find_packed_sequence_indices", None)
    if original is None:
        yield
        return
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


def _cache_tensors(cache: Any) -> list[Any]:
    """Every tensor a transformers Cache (or legacy tuple cache) holds."""
    import torch

    found: list[Any] = []
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if depth > 4 or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                visit(item, depth + 1)
        elif isinstance(obj, dict):
            for item in obj.values():
                visit(item, depth + 1)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            for item in vars(obj).values():
                visit(item, depth + 1)

    visit(cache, 0)
    return found
