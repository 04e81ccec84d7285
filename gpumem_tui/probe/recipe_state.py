"""What the probe reads of the training recipe on the model: checkpointing, parameter dtypes
after k-bit preparation, quantized Linears, and the forward's ``use_cache`` argument.

Read on the live modules, by class name and attributes (no import of bitsandbytes, GPTQ or
AWQ libraries, which the job may not have). Every reader returns plain JSON values and never
raises. Sources read:

- torch's ``CheckpointWrapper`` (torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py,
  torch 2.13): ``checkpoint_impl`` is ``CheckpointImpl.REENTRANT`` or ``NO_REENTRANT``; a
  custom ``checkpoint_fn`` is a ``functools.partial`` whose ``use_reentrant`` keyword decides.
- transformers' gradient checkpointing (transformers/modeling_utils.py,
  ``_activation_checkpointing_enable`` / ``_set_gradient_checkpointing``, transformers 5.24):
  each ``GradientCheckpointingLayer`` gets ``gradient_checkpointing = True`` and
  ``_gradient_checkpointing_func = functools.partial(checkpoint, **kwargs)``; the kwargs default
  to ``{"use_reentrant": False}`` there (4.x defaulted to ``True``). ``torch.utils.checkpoint``
  itself treats a missing ``use_reentrant`` as ``True`` (torch/utils/checkpoint.py, torch 2.13).
- peft ``prepare_model_for_kbit_training`` (peft/utils/other.py, peft 0.21): casts every
  fp16 / bf16 parameter whose class is not ``Params4bit`` to fp32.
- bitsandbytes ``Linear4bit`` (bitsandbytes/nn/modules.py): weight ``Params4bit`` with
  ``quant_type`` (nf4 | fp4), ``compress_statistics`` (double quantization),
  ``quant_storage``, ``quant_state`` (``QuantState.quant_type`` / ``nested``); module
  ``compute_dtype``. ``Linear8bitLt``: weight ``Int8Params``. peft reads the same attributes
  (peft/tuners/lora/bnb.py, ``dispatch_bnb_4bit``).
- GPTQ ``QuantLinear`` classes (auto-gptq ``QuantLinear``, gptqmodel ``*QuantLinear``):
  ``bits``, ``group_size``; AWQ ``WQLinear_*`` (autoawq awq/modules/linear/gemm.py):
  ``w_bit``, ``group_size``.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from typing import Any

_DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
_STORAGE_BYTES = {"uint8": 1, "int8": 1, "float16": 2, "bfloat16": 2, "float32": 4}
#: most modules looked at (a model is walked once, at attach)
_MAX_MODULES = 200_000


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _reentrant_of(func: Any) -> bool | None:
    """``use_reentrant`` of a checkpoint function built with ``functools.partial`` (nested
    partials searched), torch's default (True) when the partial does not pass it; None when
    ``func`` is not a partial (unknown)."""
    for _ in range(4):
        if not isinstance(func, functools.partial):
            return None
        if "use_reentrant" in func.keywords:
            value = func.keywords["use_reentrant"]
            return value if isinstance(value, bool) else True
        inner = func.func
        if not isinstance(inner, functools.partial):
            return True  # torch.utils.checkpoint: use_reentrant=None means True
        func = inner
    return None


def checkpoint_setup(model: Any, layers: int | None = None) -> dict[str, Any]:
    """``{"grad_ckpt": "full", "checkpoint_impl": "reentrant"|"non-reentrant",
    "checkpointed_layers": n}`` when torch ``CheckpointWrapper`` modules or transformers
    layers with ``gradient_checkpointing`` on are found; ``{}`` otherwise. A mix of flavours
    publishes the majority's and ``checkpoint_impl_mixed: true``; an unknown checkpoint
    function publishes no ``checkpoint_impl``. ``layers``: the model's layer count, to
    publish ``checkpoint_every_layer`` when fewer layers are checkpointed."""
    flavours: Counter[str] = Counter()
    count = 0
    try:
        for index, module in enumerate(model.modules()):
            if index > _MAX_MODULES:
                break
            if not _checkpoints(module):
                continue
            count += 1
            reentrant = _module_reentrant(module)
            if reentrant is not None:
                flavours["reentrant" if reentrant else "non-reentrant"] += 1
    except Exception:  # noqa: BLE001 - an exotic model: no checkpointing published
        return {}
    if not count:
        return {}
    out: dict[str, Any] = {"grad_ckpt": "full", "checkpointed_layers": count}
    if flavours:
        out["checkpoint_impl"] = flavours.most_common(1)[0][0]
        if len(flavours) > 1:
            out["checkpoint_impl_mixed"] = True
    if isinstance(layers, int) and layers > 0:
        out["checkpoint_every_layer"] = count >= layers
    return out


def _checkpoints(module: Any) -> bool:
    """The module re-runs in backward: a CheckpointWrapper, or an HF layer with checkpointing on."""
    return type(module).__name__ == "CheckpointWrapper" or _hf_layer_on(module)


def _hf_layer_on(module: Any) -> bool:
    flag = module.__dict__.get("gradient_checkpointing")
    has_children = bool(getattr(module, "_modules", None))
    # the HF model/stack modules carry the flag too; only layers with their own function count
    return flag is True and has_children and "_gradient_checkpointing_func" in module.__dict__ \
        and any(c.__name__ == "GradientCheckpointingLayer" for c in type(module).__mro__)


def _module_reentrant(module: Any) -> bool | None:
    """True / False: the module checkpoints reentrant / not; None: not known (or not checkpointed)."""
    if type(module).__name__ == "CheckpointWrapper":
        impl = getattr(getattr(module, "checkpoint_impl", None), "name", None)
        fn = _reentrant_of(getattr(module, "checkpoint_fn", None))
        if fn is not None:
            return fn
        return {"REENTRANT": True, "NO_REENTRANT": False}.get(str(impl))
    if _hf_layer_on(module):
        return _reentrant_of(module.__dict__.get("_gradient_checkpointing_func"))
    return None


def _bnb_4bit(module: Any, weight: Any) -> dict[str, Any] | None:
    state = getattr(weight, "quant_state", None)
    qtype = getattr(state, "quant_type", None) or getattr(weight, "quant_type", None)
    if qtype not in ("nf4", "fp4"):
        return None
    nested = getattr(state, "nested", None)
    double = nested if isinstance(nested, bool) else getattr(weight, "compress_statistics", False) is True
    out = {"method": qtype, "double_quant": bool(double)}
    storage = _dtype_name(getattr(weight, "quant_storage", "uint8"))
    if storage in _STORAGE_BYTES:
        out["storage_bytes"] = _STORAGE_BYTES[storage]
    compute = _DTYPE_SHORT.get(_dtype_name(getattr(module, "compute_dtype", None)))
    if compute:
        out["compute_dtype"] = compute
    return out


def _quantized_linear(module: Any) -> dict[str, Any] | None:
    """The estimator's quantization format of one quantized Linear module (the module that
    owns the packed weight), or None."""
    name = type(module).__name__
    own = getattr(module, "_parameters", {}) or {}
    weight = own.get("weight")
    wclass = type(weight).__name__ if weight is not None else ""
    if name == "Linear4bit" and wclass == "Params4bit":
        return _bnb_4bit(module, weight)
    if name == "Linear8bitLt" and wclass == "Int8Params":
        return {"method": "int8"}
    if name.endswith("QuantLinear"):
        bits, group = getattr(module, "bits", None), getattr(module, "group_size", None)
        if isinstance(bits, int) and not isinstance(bits, bool) and isinstance(group, int):
            return {"method": "gptq", "bits": bits, "group_size": group}
    if name.startswith("WQLinear"):
        bits, group = getattr(module, "w_bit", None), getattr(module, "group_size", None)
        if isinstance(bits, int) and not isinstance(bits, bool) and isinstance(group, int):
            return {"method": "awq", "bits": bits, "group_size": group}
    return None


def quantization_setup(model: Any) -> dict[str, Any]:
    """``{"quantized_linears": {"count", "method", ...format}}`` for the most common format
    among the model's quantized Linears (``quantized_formats``: how many of each method when
    several), or ``{}``. Never raises."""
    formats: list[dict[str, Any]] = []
    try:
        for index, module in enumerate(model.modules()):
            if index > _MAX_MODULES:
                break
            fmt = _quantized_linear(module)
            if fmt is not None:
                formats.append(fmt)
    except Exception:  # noqa: BLE001
        return {}
    if not formats:
        return {}
    keyed = Counter(tuple(sorted(f.items())) for f in formats)
    top = dict(keyed.most_common(1)[0][0])
    out: dict[str, Any] = {"quantized_linears": {"count": len(formats), **top}}
    methods = Counter(f["method"] for f in formats)
    if len(keyed) > 1:
        out["quantized_formats"] = dict(methods)
    return out


def dtype_setup(params: list[Any], config_dtype: Any = None) -> dict[str, Any]:
    """Bytes of the parameters per dtype (``param_bytes_by_dtype``, e.g. ``{"float32": n,
    "bfloat16": m, "uint8": k}``; shared parameters once) and, when the model was loaded in a
    16-bit dtype (``config_dtype``: the HF config's ``torch_dtype`` / ``dtype``) but some
    floating parameters are fp32, ``fp32_cast``: ``{"params", "bytes", "from"}`` -- what peft's
    ``prepare_model_for_kbit_training`` leaves (every non-``Params4bit`` 16-bit parameter cast
    to fp32). Never raises."""
    by_dtype: Counter[str] = Counter()
    fp32 = [0, 0]
    seen: set[int] = set()
    try:
        for param in params:
            if id(param) in seen:
                continue
            seen.add(id(param))
            name = _dtype_name(param.dtype)
            size = int(param.numel()) * int(param.element_size())
            by_dtype[name] += size
            if name == "float32":
                fp32[0] += 1
                fp32[1] += size
    except Exception:  # noqa: BLE001
        return {}
    out: dict[str, Any] = {"param_bytes_by_dtype": dict(by_dtype)}
    loaded = _DTYPE_SHORT.get(_dtype_name(config_dtype)) if config_dtype is not None else None
    if loaded in ("bf16", "fp16") and fp32[0]:
        out["fp32_cast"] = {"params": fp32[0], "bytes": fp32[1], "from": loaded}
    return out


def config_dtype(model: Any) -> Any:
    """The dtype the HF config says the model was loaded in (``dtype``, older
    ``torch_dtype``), or None."""
    config = getattr(model, "config", None)
    # transformers 5 names it ``dtype`` and warns on reading the deprecated ``torch_dtype``
    key = "dtype" if hasattr(type(config), "dtype") or "dtype" in getattr(config, "__dict__", {}) else "torch_dtype"
    with contextlib.suppress(Exception):
        return getattr(config, key, None)
    return None


def use_cache_of_call(kwargs: Any) -> bool | None:
    """The ``use_cache`` keyword a forward was called with (a bool), else None (not passed:
    the model's config decides)."""
    if isinstance(kwargs, dict):
        value = kwargs.get("use_cache")
        if isinstance(value, bool):
            return value
    return None


__all__ = ["checkpoint_setup", "config_dtype", "dtype_setup", "quantization_setup", "use_cache_of_call"]
