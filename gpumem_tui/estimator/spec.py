"""What job to estimate: a validated, frozen :class:`TrainingSpec`.

One spec type covers training, LoRA / QLoRA fine-tuning and inference (``task``); fields
that do not apply to a task must stay at their defaults, so contradictions are caught here
(``--kv-dtype`` on training, ``--lora-rank`` without a LoRA task, QLoRA in fp32, ...)
and reported as :class:`SpecError` naming the flag's field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpumem_tui.estimator.quantization import QuantFormat, effective_method
from gpumem_tui.estimator.recipes import RECIPES

if TYPE_CHECKING:
    from gpumem_tui.estimator.architecture import ModelArchitecture

TASKS = ("train", "lora", "qlora", "inference")
DTYPES = ("fp32", "bf16", "fp16")
KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8")
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum", "adafactor", "adamw-8bit")
GRAD_CKPT = ("none", "selective", "full")
ATTENTION = ("eager", "sdpa", "flash")
DEVICES = ("cuda", "cpu", "meta")
QUANT = ("none", "int8", "nf4", "fp4", "gptq", "awq")
OPTIMIZER_IMPLS = ("auto", "single", "foreach", "fused")
CHECKPOINT_IMPLS = ("auto", "reentrant", "non-reentrant")
LORA_ROLES = ("q", "k", "v", "o", "gate", "up", "down")

#: bytes per element of each dtype name
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}

_MAX_BATCH = 1 << 24
_MAX_SEQ = 1 << 24


class SpecError(ValueError):
    """An invalid or contradictory job description; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def parse_lora_targets(text: str) -> tuple[str, ...]:
    """Parse ``--lora-targets``: ``all-linear``, ``attention``, ``mlp`` or a comma list of
    q,k,v,o,gate,up,down (``*_proj`` suffixes accepted).

    Raises:
        SpecError: empty or unknown target (field ``lora_targets``).
    """
    items = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    if not items:
        raise SpecError("lora_targets", "--lora-targets is empty")
    out: list[str] = []
    for item in items:
        if item in ("all-linear", "all"):
            out.extend(LORA_ROLES)
        elif item == "attention":
            out.extend(("q", "k", "v", "o"))
        elif item == "mlp":
            out.extend(("gate", "up", "down"))
        else:
            role = item[:-5] if item.endswith("_proj") else item
            if role not in LORA_ROLES:
                raise SpecError(
                    "lora_targets",
                    f"unknown LoRA target {item!r} (use all-linear, attention, mlp or {','.join(LORA_ROLES)})",
                )
            out.append(role)
    return tuple(r for r in LORA_ROLES if r in out)


@dataclass(frozen=True, slots=True)
class TrainingSpec:
    """One training step (or one inference request) to estimate.

    Fields (defaults in brackets):
        task: train | lora | qlora | inference [train]
        batch: micro-batch size ``b`` per device, >= 1 [1]
        seq: sequence length ``s`` in tokens, >= 1; for inference the whole context
            (prompt + generated tokens) [512]
        dtype: parameter / compute dtype fp32 | bf16 | fp16 [bf16]
        mixed_precision: fp32 master weights and optimizer states, 16-bit compute (needs a
            16-bit ``dtype``) [False]
        optimizer: adamw | adam | sgd | sgd-momentum | adafactor | adamw-8bit [adamw]
        grad_ckpt: activation checkpointing none | selective | full [none]
        attention: eager | sdpa | flash [sdpa]
        zero: ZeRO stage 0..3 (3 ~ FSDP full shard) [0]; dp, tp, pp: data / tensor /
            pipeline parallel degrees [1]
        lora_rank, lora_targets: LoRA rank ``r`` and adapted projections (LoRA tasks only; a list is kept as a tuple)
        kv_dtype: KV-cache dtype for inference [same as dtype]
        quant: weight quantization none | int8 | nf4 | fp4 | gptq | awq (inference or QLoRA) [none]
        quant_format: the format's details (:class:`gpumem_tui.estimator.quantization.QuantFormat`,
            from ``quantization_config`` or flags; None: the QLoRA paper's NF4 rate) [None]
        device: kernel profile cuda | cpu [cuda]; cuda adds CUDA context and allocator reserve
        optimizer_impl: auto | single | foreach | fused: torch optimizer implementation
            [auto = single-tensor loop on cpu, foreach on cuda (torch's defaults); fused with
            ZeRO (DeepSpeed's FusedAdam)]
        grad_accum: micro-batches per optimizer step [1]; > 1 keeps gradients allocated
            while later micro-batches run forward and backward
        keep_grads: gradients stay allocated between steps (``zero_grad(set_to_none=False)``,
            the default before PyTorch 2.0) [False]
        keep_outputs: the training loop keeps the model output referenced through backward
            and the optimizer step (``outputs = model(**batch); outputs.loss.backward()``), so
            its ``b x s x V`` logits stay alive; HF ``Trainer`` and ``gpumem-tui measure``
            release it before backward [False]
        new_tokens: inference with ``generate()``: ``seq`` is the prompt and the KV cache grows
            to ``seq + new_tokens``; the prefill keeps only the last position's logits [0 =
            one forward over ``seq``]
        logits: inference without ``new_tokens``: ``last`` (the logits of the last position,
            as ``generate()`` asks) or ``all`` (a plain forward whose output stays alive, e.g.
            scoring or perplexity: ``b x s x V`` logits in the compute dtype) [last]
        measured_context: CUDA context measured on the box after initialisation (bytes; the
            dashboard passes it), replacing the H100 figure [None]
        recipe: the training framework around the model, a name of
            :data:`gpumem_tui.estimator.recipes.RECIPES` (cache in training, kept outputs, loss,
            checkpoint flavour, optimizer default, k-bit preparation) [torch: gpumem-tui's plain loop]
        checkpoint_impl: ``torch.utils.checkpoint`` flavour of full checkpointing, ``reentrant``
            | ``non-reentrant`` as the job runs it (the probe reads it), overriding the recipe's
            [auto = the recipe's]

    Raises:
        SpecError: on construction, for any invalid value or contradiction (``.field`` names it).
    """

    task: str = "train"
    batch: int = 1
    seq: int = 512
    dtype: str = "bf16"
    mixed_precision: bool = False
    optimizer: str = "adamw"
    grad_ckpt: str = "none"
    attention: str = "sdpa"
    zero: int = 0
    dp: int = 1
    tp: int = 1
    pp: int = 1
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] = ("q", "v")
    kv_dtype: str | None = None
    quant: str = "none"
    device: str = "cuda"
    optimizer_impl: str = "auto"
    grad_accum: int = 1
    keep_grads: bool = False
    keep_outputs: bool = False
    new_tokens: int = 0
    logits: str = "last"
    measured_context: int | None = None
    recipe: str = "torch"
    quant_format: QuantFormat | None = None
    checkpoint_impl: str = "auto"
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        """Validate the fields in the order the checks below run (the first failure raises
        :class:`SpecError`); record the warnings, and PEFT's default rank for a LoRA task
        given none."""
        warnings: list[str] = []
        if isinstance(self.lora_targets, list):  # a JSON array (a probe stream, a saved case)
            object.__setattr__(self, "lora_targets", tuple(self.lora_targets))
        self._check_values()
        self._check_inference_options()
        self._check_flags_and_degrees()
        self._check_precision_and_device(warnings)
        self._check_lora(warnings)
        self._check_quant()
        self._check_task_fields()
        if self.kv_dtype is not None:
            _choice("kv_dtype", self.kv_dtype, KV_DTYPES)
        if self.pp > 1 and self.zero >= 2:
            warnings.append("ZeRO-2/3 with pipeline parallelism is unusual (DeepSpeed forbids it)")
        object.__setattr__(self, "warnings", tuple(warnings))

    def _check_values(self) -> None:
        """Each field on its own: a known name, an integer in range."""
        _choice("task", self.task, TASKS)
        _positive("batch", self.batch, _MAX_BATCH)
        _positive("seq", self.seq, _MAX_SEQ)
        _choice("dtype", self.dtype, DTYPES)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("grad_ckpt", self.grad_ckpt, GRAD_CKPT)
        _choice("attention", self.attention, ATTENTION)
        _choice("device", self.device, DEVICES)
        _choice("quant", self.quant, QUANT)
        _choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        _positive("grad_accum", self.grad_accum, 1 << 16)
        _choice("recipe", self.recipe, tuple(RECIPES))
        _choice("checkpoint_impl", self.checkpoint_impl, CHECKPOINT_IMPLS)
        if isinstance(self.new_tokens, bool) or not isinstance(self.new_tokens, int) or not 0 <= self.new_tokens <= _MAX_SEQ:
            raise SpecError("new_tokens", f"--new-tokens must be an integer 0..{_MAX_SEQ}, got {self.new_tokens!r}")
        _choice("logits", self.logits, ("last", "all"))
        if self.measured_context is not None and (
                isinstance(self.measured_context, bool) or not isinstance(self.measured_context, int)
                or not 0 <= self.measured_context <= 1 << 36):
            raise SpecError("measured_context", f"measured CUDA context must be 0..64 GiB in bytes, got {self.measured_context!r}")

    def _check_inference_options(self) -> None:
        """``new_tokens`` and ``logits`` belong to inference, and exclude each other."""
        if self.task != "inference" and self.new_tokens:
            raise SpecError("new_tokens", f"--new-tokens applies to inference only (task is {self.task})")
        if self.task != "inference" and self.logits != "last":
            raise SpecError("logits", f"--logits all applies to inference only (task is {self.task}; training keeps every position's logits anyway)")
        if self.new_tokens and self.logits == "all":
            raise SpecError("logits", "--logits all is a plain forward; generate() (--new-tokens) keeps the last position's logits only")

    def _check_flags_and_degrees(self) -> None:
        """The true/false flags, the ZeRO stage and the dp / tp / pp degrees."""
        if not isinstance(self.keep_grads, bool):
            raise SpecError("keep_grads", "keep_grads must be true or false")
        if not isinstance(self.keep_outputs, bool):
            raise SpecError("keep_outputs", "keep_outputs must be true or false")
        if not isinstance(self.mixed_precision, bool):
            raise SpecError("mixed_precision", "mixed_precision must be true or false")
        if isinstance(self.zero, bool) or not isinstance(self.zero, int) or not 0 <= self.zero <= 3:
            raise SpecError("zero", f"--zero must be 0, 1, 2 or 3, got {self.zero!r}")
        for name in ("dp", "tp", "pp"):
            _positive(name, getattr(self, name), 1 << 16)

    def _check_precision_and_device(self, warnings: list[str]) -> None:
        """Mixed precision needs a 16-bit compute dtype; ZeRO over one device; what the
        non-CUDA devices cannot run (FlashAttention, tp / pp) or run unusually (fp16
        training). Warnings are appended to ``warnings``."""
        if self.mixed_precision and self.dtype == "fp32":
            raise SpecError("mixed_precision", "--mixed-precision needs a 16-bit compute --dtype (bf16 or fp16)")
        if self.zero and self.dp == 1:
            warnings.append(f"--zero {self.zero} with --dp 1 shards over one device: it saves no memory")
        if self.device != "cuda" and self.attention == "flash":
            raise SpecError("attention", f"--attention flash needs --device cuda (FlashAttention has no {self.device} kernel)")
        if self.device != "cuda" and (self.tp > 1 or self.pp > 1):
            raise SpecError("device", "--tp/--pp need --device cuda in this estimator")
        if self.device != "cuda" and self.dtype == "fp16" and self.task != "inference":
            warnings.append("fp16 training on CPU is unusual; the CPU profile is modelled as for bf16")

    def _check_lora(self, warnings: list[str]) -> None:
        """``lora_rank`` only with a LoRA task, which defaults it to PEFT's ``r = 8`` (a
        warning appended to ``warnings``); ``lora_targets`` a non-empty tuple (or list) of roles."""
        lora_task = self.task in ("lora", "qlora")
        if self.lora_rank is not None:
            if not lora_task:
                raise SpecError("lora_rank", f"--lora-rank needs --task lora or qlora (task is {self.task})")
            _positive("lora_rank", self.lora_rank, 1 << 16)
        elif lora_task:
            object.__setattr__(self, "lora_rank", 8)
            warnings.append("LoRA rank not given: r = 8 (the PEFT default)")
        if not isinstance(self.lora_targets, tuple) or not self.lora_targets or any(
            t not in LORA_ROLES for t in self.lora_targets
        ):
            raise SpecError("lora_targets", f"lora_targets must be a non-empty tuple or list of {','.join(LORA_ROLES)}")

    def _check_task_fields(self) -> None:
        """Training-only fields refused for inference; inference-only ones (KV dtype,
        quantization outside QLoRA or LoRA over int8) refused for training."""
        if self.task == "inference":
            if self.grad_ckpt != "none":
                raise SpecError("grad_ckpt", "--grad-ckpt applies to training only (task is inference)")
            if self.mixed_precision:
                raise SpecError("mixed_precision", "--mixed-precision applies to training only")
            if self.zero in (1, 2):
                raise SpecError("zero", "ZeRO stages 1-2 shard optimizer states/gradients: no use for inference")
            if self.grad_accum != 1 or self.keep_grads:
                raise SpecError("grad_accum", "--grad-accum / --keep-grads apply to training only")
            if self.keep_outputs:
                raise SpecError("keep_outputs", "--keep-outputs applies to training only")
        else:
            if self.kv_dtype is not None:
                raise SpecError("kv_dtype", f"--kv-dtype applies to inference only (task is {self.task})")
            if self.quant != "none" and self.task != "qlora" and not (self.task == "lora" and self.quant == "int8"):
                raise SpecError("quant", f"--quant applies to inference, QLoRA or LoRA over int8, not task {self.task}")

    def _check_quant(self) -> None:
        """QLoRA's dtype and base format; a quantization format that matches ``quant``."""
        if self.task == "qlora" and self.dtype == "fp32":
            raise SpecError("dtype", "QLoRA computes in 16 bits: use --dtype bf16 or fp16")
        if self.task == "qlora" and self.quant == "int8":
            raise SpecError("quant", "QLoRA trains over a 4-bit base model; --quant must be nf4, fp4, gptq, awq or none")
        if self.quant_format is not None and (not isinstance(self.quant_format, QuantFormat)
                                              or self.quant_format.method != effective_method(self.task, self.quant)):
            raise SpecError("quant", "the quantization format does not match --quant")

    # ----- derived ----------------------------------------------------------------------
    @property
    def grads_persist(self) -> bool:
        """Gradients exist during forward/backward (accumulation, set_to_none=False, or a
        recipe whose ``zero_grad`` keeps them)."""
        return self.keep_grads or self.grad_accum > 1 or not RECIPES[self.recipe].zero_grad_set_to_none

    @property
    def resolved_optimizer_impl(self) -> str:
        """single | foreach | fused; ``auto`` resolves to the recipe's optimizer, else torch's
        default for the device."""
        if self.optimizer_impl != "auto":
            return self.optimizer_impl
        if self.zero >= 1:
            return "fused"  # DeepSpeed's default optimizer is its fused (multi-tensor) Adam
        if RECIPES[self.recipe].optimizer_impl is not None:
            return RECIPES[self.recipe].optimizer_impl  # type: ignore[return-value]
        from gpumem_tui.estimator.devices import profile_for

        return profile_for(self.device).default_optimizer_impl

    @property
    def is_training(self) -> bool:
        return self.task != "inference"

    @property
    def compute_bytes(self) -> int:
        """Bytes per element of activations and 16/32-bit weights in compute."""
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_bytes(self) -> int:
        """Bytes per KV-cache element."""
        return DTYPE_BYTES[self.kv_dtype or self.dtype]

    def replace(self, **changes: object) -> TrainingSpec:
        """Copy with changed fields (validated again)."""
        values = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "warnings"}  # type: ignore[attr-defined]
        if "task" in changes and changes["task"] not in ("lora", "qlora") and "lora_rank" not in changes:
            values["lora_rank"] = None
        values.update(changes)
        return TrainingSpec(**values)  # type: ignore[arg-type]


def check_spec_for(arch: ModelArchitecture, spec: TrainingSpec) -> list[str]:
    """Check a spec against an architecture; return warnings for the assumptions list.

    Raises:
        SpecError: ``tp`` that does not divide the heads / KV heads (field ``tp``), ``pp``
            beyond the layer count (field ``pp``), LoRA on a coarse ``--params`` model, a KV
            cache dtype or ``new_tokens`` for an encoder.
    """
    warnings = list(spec.warnings)
    if arch.max_position_embeddings is not None and spec.seq > arch.max_position_embeddings:
        warnings.append(
            f"sequence length {spec.seq} exceeds {arch.name}'s max_position_embeddings "
            f"{arch.max_position_embeddings}"
            + ("; a learned position table cannot index it" if arch.learned_positions else "")
        )
    if spec.tp > 1 and not arch.coarse:
        if arch.num_heads % spec.tp:
            raise SpecError("tp", f"--tp {spec.tp} does not divide {arch.num_heads} attention heads")
        if arch.num_kv_heads % spec.tp and arch.num_kv_heads > 1:
            raise SpecError("tp", f"--tp {spec.tp} does not divide {arch.num_kv_heads} KV heads")
    if spec.pp > arch.num_layers:
        raise SpecError("pp", f"--pp {spec.pp} exceeds the {arch.num_layers} layers")
    if spec.task in ("lora", "qlora") and arch.coarse:
        raise SpecError("task", "LoRA needs the model's layer shapes: give a catalogue name or config.json")
    if spec.task in ("lora", "qlora"):
        roles = {lin.role for lin in arch.layer_linears()}
        hit = [t for t in spec.lora_targets if t in roles or _fused_role(t) in roles]
        if not hit:
            raise SpecError("lora_targets", f"none of the LoRA targets {','.join(spec.lora_targets)} exist in {arch.name}")
    if arch.kind == "encoder" and spec.task == "inference" and spec.kv_dtype is not None:
        raise SpecError("kv_dtype", f"{arch.name} is an encoder: it has no KV cache")
    if arch.kind == "encoder" and spec.new_tokens:
        # generate() needs a decoder: an encoder has no next-token loop and no KV cache to grow
        raise SpecError("new_tokens", f"{arch.name} is an encoder: it does not generate tokens (drop --new-tokens)")
    return warnings


def _fused_role(role: str) -> str:
    return {"q": "qkv", "k": "qkv", "v": "qkv", "gate": "gate_up", "up": "gate_up"}.get(role, role)


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise SpecError(name, f"--{name.replace('_', '-')} must be one of {', '.join(allowed)}, got {value!r}")


def _positive(name: str, value: object, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(name, f"--{name.replace('_', '-')} must be an integer, got {value!r}")
    if value < 1:
        raise SpecError(name, f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if value > maximum:
        raise SpecError(name, f"--{name.replace('_', '-')} must be <= {maximum}, got {value}")
