"""What a training framework's model and optimizer tell the probe (no framework imports).

The probe publishes a setup (``gpumem_tui.probe.core``: batch, seq, dtype, task, optimizer...)
that the dashboard turns into the estimator's ``TrainingSpec``
(``gpumem_tui.analysis.comparison.spec_from_probe_info``). The callbacks read what the framework knows
(its arguments, the first batch) themselves; this module reads what the model and optimizer
say, for every framework alike:

- the module that holds the Hugging Face config (a LightningModule wraps one; a peft
  ``PeftModel`` forwards ``.config`` to its base model);
- LoRA (peft's ``peft_config``: ``PeftType.LORA``, rank ``r``, ``target_modules``) and k-bit
  loading (``is_loaded_in_4bit`` / ``is_loaded_in_8bit``, set by transformers' bitsandbytes
  quantizer; else the config's ``quantization_config``), which decide the task (``lora`` /
  ``qlora``) and the ``peft-kbit`` recipe;
- the torch optimizer inside a wrapper (accelerate's ``AcceleratedOptimizer`` and
  transformers' Trainer keep it as ``.optimizer``) and its implementation (torch's
  ``fused`` / ``foreach`` flags in ``Optimizer.defaults``).

Nothing here raises on a model it cannot read: a field it cannot find is left out and the
estimator's default applies.
"""

from __future__ import annotations

import contextlib
from typing import Any

#: peft ``target_modules`` names -> the estimator's LoRA roles (``TrainingSpec.lora_targets``).
#: Llama / Mistral / Qwen use ``*_proj``; OPT and BART ``out_proj``; GPT-NeoX ``dense``.
_LORA_ROLE_OF = {
    "q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "out_proj": "o", "dense": "o",
    "gate_proj": "gate", "up_proj": "up", "down_proj": "down", "query": "q", "key": "k", "value": "v",
}
_ALL_ROLES = ("q", "k", "v", "o", "gate", "up", "down")


def unwrap_optimizer(optimizer: Any) -> Any:
    """The torch optimizer inside framework wrappers (``.optimizer`` chains, at most 4 deep):
    accelerate's ``AcceleratedOptimizer`` overrides ``step`` without torch's step hooks, so the
    probe must hook the optimizer it wraps. None stays None."""
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None)
        if inner is None or inner is optimizer:
            break
        optimizer = inner
    return optimizer


def find_config_holder(module: Any, *, max_depth: int = 2) -> Any:
    """``module`` itself when it has a Hugging Face config (``.config.to_dict``), else the
    first child (breadth first, ``max_depth`` levels) that has one, else None. A
    LightningModule usually keeps its transformers model as an attribute."""
    level = [module]
    for _ in range(max_depth + 1):
        following = []
        for candidate in level:
            if callable(getattr(getattr(candidate, "config", None), "to_dict", None)):
                return candidate
            children = getattr(candidate, "children", None)
            if callable(children):
                with contextlib.suppress(Exception):
                    following.extend(children())
        level = following
    return None


def _quantized_bits(model: Any) -> int | None:
    """4 or 8 when the weights were loaded in k-bit (bitsandbytes), else None."""
    for bits in (4, 8):
        if getattr(model, f"is_loaded_in_{bits}bit", False) is True:
            return bits
    quant = getattr(getattr(model, "config", None), "quantization_config", None)
    if quant is None:
        return None
    get = quant.get if isinstance(quant, dict) else lambda key, default=None: getattr(quant, key, default)
    for bits in (4, 8):
        if get(f"load_in_{bits}bit", False) is True:
            return bits
    return None


def _lora_config(model: Any) -> Any:
    """The active LoRA adapter's config of a peft model, or None (not peft, or not LoRA)."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return None
    name = getattr(model, "active_adapter", None)
    config = configs.get(name) if isinstance(name, str) else None
    config = config if config is not None else next(iter(configs.values()))
    kind = getattr(config, "peft_type", None)
    return config if str(getattr(kind, "value", kind)).upper() == "LORA" else None


def _lora_roles(targets: Any) -> tuple[str, ...] | None:
    """peft ``target_modules`` (a set of names, a regex string, or ``"all-linear"``) as the
    estimator's roles, or None where no name maps (GPT-2's fused ``c_attn``, a regex)."""
    if isinstance(targets, str):
        return _ALL_ROLES if targets == "all-linear" else None
    if not isinstance(targets, (set, list, tuple, frozenset)):
        return None
    roles = {_LORA_ROLE_OF.get(str(name).rsplit(".", 1)[-1]) for name in targets}
    roles.discard(None)
    return tuple(r for r in _ALL_ROLES if r in roles) or None


def model_setup(model: Any) -> dict[str, Any]:
    """Setup keys the model itself says (TrainingSpec field names, plus notes):
    ``task`` (``lora``, ``qlora`` for LoRA over 4-bit weights), ``lora_rank``,
    ``lora_targets``, ``recipe`` (``peft-kbit`` for k-bit weights), ``quantized_bits``.
    Empty for a plain model. Never raises."""
    setup: dict[str, Any] = {}
    try:
        bits = _quantized_bits(model)
        base = getattr(model, "get_base_model", None)
        if bits is None and callable(base):
            bits = _quantized_bits(base())
        lora = _lora_config(model)
    except Exception:  # an exotic model: the estimator's defaults apply
        return setup
    if bits is not None:
        setup["quantized_bits"] = bits
        setup["recipe"] = "peft-kbit"
    if lora is not None:
        setup["task"] = "qlora" if bits == 4 else "lora"
        rank = getattr(lora, "r", None)
        if isinstance(rank, int) and not isinstance(rank, bool) and rank > 0:
            setup["lora_rank"] = rank
        roles = _lora_roles(getattr(lora, "target_modules", None))
        if roles:
            setup["lora_targets"] = list(roles)
    return setup


def optimizer_setup(optimizer: Any) -> dict[str, Any]:
    """``optimizer_impl`` from torch's ``fused`` / ``foreach`` flags (``Optimizer.defaults``;
    None means torch picks: ``auto``). Empty when the optimizer says nothing."""
    defaults = getattr(optimizer, "defaults", None)
    if not isinstance(defaults, dict):
        return {}
    if defaults.get("fused") is True:
        return {"optimizer_impl": "fused"}
    if defaults.get("foreach") is True:
        return {"optimizer_impl": "foreach"}
    if defaults.get("foreach") is False:
        return {"optimizer_impl": "single"}
    return {}


def precision_setup(param_dtype: Any, autocast: str | None) -> dict[str, Any]:
    """``dtype`` and ``mixed_precision`` from the parameters' dtype and the framework's
    autocast (``"bf16"``, ``"fp16"`` or None): fp32 parameters under a 16-bit autocast are
    mixed precision (fp32 master weights and states, 16-bit compute: TrainingSpec's
    ``mixed_precision``); 16-bit parameters compute in their own dtype."""
    name = str(param_dtype).removeprefix("torch.")
    if autocast in ("bf16", "fp16") and name == "float32":
        return {"dtype": autocast, "mixed_precision": True}
    return {}
