"""The setup keys the probe detects on the live job at attach (see :func:`detected_setup`).

Combines :mod:`gpumem_tui.probe.distributed` (rank, world size, parallel wrappers) and
:mod:`gpumem_tui.probe.recipe_state` (checkpointing, dtypes, quantized Linears). The
dashboard reads these keys through :mod:`gpumem_tui.analysis.probed_job`.
"""

from __future__ import annotations

import contextlib
from typing import Any

from gpumem_tui.probe.distributed import logical_param_count, original_class_name, parallel_setup, rank_setup, unwrap
from gpumem_tui.probe.recipe_state import checkpoint_setup, config_dtype, dtype_setup, quantization_setup
from gpumem_tui.telemetry.serialize import jsonable


def hf_config(model: Any) -> dict | None:
    """``model.config.to_dict()`` as JSON values, or None (no HF config, or one that fails)."""
    config = getattr(model, "config", None)
    to_dict = getattr(config, "to_dict", None)
    if not callable(to_dict):
        return None
    try:
        return jsonable(to_dict())
    except Exception:  # a config that cannot describe itself is not worth failing the job for
        return None


def _layers(config: dict | None) -> int | None:
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        value = (config or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def detected_setup(model: Any, optimizer: Any, torch: Any, params: list[Any],
                   config: dict | None, dtype_given: bool) -> dict[str, Any]:
    """Setup keys read from ``model`` (the object given to ``attach``, possibly wrapped) and
    ``optimizer``: ``model_class`` (the user's class inside DDP / FSDP / DeepSpeed),
    ``total_params`` (FSDP1 flat parameters as the original parameters), ``rank``,
    ``world_size``, ``local_rank``, ``job_id``, ``parallel``, ``grad_ckpt`` (+
    ``checkpoint_impl``, ``checkpointed_layers``), ``attention``, ``quantized_linears``,
    ``param_bytes_by_dtype``, ``fp32_cast``, and ``dtype`` (the loaded 16-bit dtype when k-bit
    preparation cast parameters to fp32 and the caller gave none: ``dtype_given``).
    Never raises: what cannot be read is left out."""
    inner = unwrap(model)
    setup: dict[str, Any] = {"model_class": original_class_name(inner)}
    with contextlib.suppress(Exception):
        setup["total_params"] = logical_param_count(params)
    ranks = rank_setup(torch)
    setup.update(ranks)
    parallel = parallel_setup(model, optimizer, torch, ranks.get("world_size"))
    if parallel is not None:
        setup["parallel"] = parallel
    # Class attribute lookup first: reading a deprecated property would warn.
    for attr in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(inner), attr):
            with contextlib.suppress(Exception):
                setup["grad_ckpt"] = bool(getattr(inner, attr))
            break
    setup.update(checkpoint_setup(inner, _layers(config)))
    attn = getattr(getattr(inner, "config", None), "_attn_implementation", None)
    if isinstance(attn, str):
        setup["attention"] = attn
    setup.update(quantization_setup(inner))
    setup.update(dtype_setup(params, config_dtype(inner)))
    cast = setup.get("fp32_cast")
    # k-bit preparation: the fp32 casts are not the compute dtype (a plain model.float() is)
    if not dtype_given and "quantized_linears" in setup and isinstance(cast, dict) and cast.get("from") in ("bf16", "fp16"):
        setup["dtype"] = cast["from"]
    return setup


__all__ = ["detected_setup", "hf_config"]
