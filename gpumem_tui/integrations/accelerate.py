"""The probe for an accelerate training loop: one line after ``accelerator.prepare``.

    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    from gpumem_tui.integrations.accelerate import attach
    probe = attach(accelerator, model, optimizer)

What is published comes from the ``Accelerator`` (accelerate's ``accelerator.py``):
``rank`` (``process_index``), ``local_rank`` (``local_process_index``), ``world_size`` /
``dp`` (``num_processes``), ``dtype`` / ``mixed_precision`` (``mixed_precision``: ``bf16`` /
``fp16`` autocast over fp32 parameters), ``grad_accum`` (``gradient_accumulation_steps``),
``zero`` (``DistributedType.DEEPSPEED``: the DeepSpeed plugin's ``zero_stage``; FSDP: 3), and
from the model (:mod:`gpumem_tui.integrations.model_setup`: LoRA, k-bit). ``b`` and ``s`` come
from ``batch=`` / ``seq=`` or, when not both given, from the first forward's ``input_ids``.

Phases are the probe's own (forward hooks on the unwrapped model, the loss's ``grad_fn``,
step hooks on the torch optimizer inside accelerate's ``AcceleratedOptimizer``, whose
``step`` skips the inner step while gradients accumulate). The probe closes at interpreter
exit, or with ``probe.close()``.

Raises:
    ImportError: accelerate is not installed (one line), at import.
"""

from __future__ import annotations

from typing import Any

try:
    import accelerate as _accelerate
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without accelerate
    raise ImportError("gpumem_tui.integrations.accelerate needs accelerate (pip install accelerate)") from exc

from gpumem_tui.integrations.model_setup import (
    model_setup,
    optimizer_setup,
    precision_setup,
    unwrap_optimizer,
)
from gpumem_tui.integrations.session import ProbeSession, check_version, probe_options

__all__ = ["accelerator_setup", "attach"]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def accelerator_setup(accelerator: Any, model: Any, optimizer: Any) -> dict[str, Any]:
    """Setup keys (TrainingSpec field names and notes) from an ``Accelerator``, the unwrapped
    model and the torch optimizer; attributes an accelerate version lacks are left out.

    Raises:
        AttributeError / TypeError: ``model`` has no ``parameters()`` (attach warns).
    """
    setup: dict[str, Any] = {"framework": "accelerate"}
    world = _int(getattr(accelerator, "num_processes", None))
    if world:
        setup["world_size"] = world
        if world > 1:
            setup["dp"] = world
    for key, attr in (("rank", "process_index"), ("local_rank", "local_process_index")):
        if _int(getattr(accelerator, attr, None)) is not None:
            setup[key] = getattr(accelerator, attr)
    accum = _int(getattr(accelerator, "gradient_accumulation_steps", None))
    if accum and accum > 1:
        setup["grad_accum"] = accum
    kind = str(getattr(getattr(accelerator, "distributed_type", None), "value", ""))
    if kind == "DEEPSPEED":
        stage = _int(getattr(getattr(getattr(accelerator, "state", None), "deepspeed_plugin", None), "zero_stage", None))
        if stage is not None:
            setup["zero"] = stage
    elif kind == "FSDP":
        setup["zero"] = 3
    if kind:
        setup["distributed_type"] = kind
    param_dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    precision = str(getattr(accelerator, "mixed_precision", "no"))
    setup.update(precision_setup(param_dtype, precision if precision in ("bf16", "fp16") else None))
    setup.update(optimizer_setup(optimizer))
    setup.update(model_setup(model))
    return setup


def attach(accelerator: Any, model: Any, optimizer: Any = None, **probe_kwargs: Any) -> ProbeSession:
    """Attach the gpumem-tui probe to an accelerate job (call after ``accelerator.prepare``).

    ``model`` and ``optimizer`` as ``prepare`` returned them (wrappers are looked through:
    ``accelerator.unwrap_model``, ``AcceleratedOptimizer.optimizer``). Keyword arguments go to
    :func:`gpumem_tui.probe.attach` (``batch``, ``seq`` in tokens, ``task``, ``directory``,
    ``extra``...). With both ``batch`` and ``seq`` the probe attaches now; otherwise at the
    first forward, reading them from its ``input_ids``.

    Returns the :class:`~gpumem_tui.integrations.session.ProbeSession`: ``.probe`` is the
    :class:`gpumem_tui.probe.Probe` once attached (None before, or after a failure);
    ``.close()`` ends it. Never raises: what it cannot read or use gives one
    ``RuntimeWarning`` and training goes on.
    """
    session = ProbeSession("gpumem_tui.integrations.accelerate.attach")
    check_version(session.name, "accelerate", getattr(_accelerate, "__version__", "unknown"), (0, 1))
    unwrap = getattr(accelerator, "unwrap_model", None)
    inner = session.guarded("cannot unwrap the model", unwrap, model) if callable(unwrap) else model
    if inner is None:
        return session
    torch_optimizer = unwrap_optimizer(optimizer)
    setup = session.guarded("cannot read the Accelerator's setup", accelerator_setup, accelerator, inner, torch_optimizer)
    if setup is None:
        return session
    user = dict(probe_kwargs)
    if user.get("batch") is not None and user.get("seq") is not None:
        session.attach(inner, torch_optimizer, **probe_options(setup, user, None, None))
    else:
        session.attach_at_first_forward(inner, torch_optimizer, setup, user)
    return session
