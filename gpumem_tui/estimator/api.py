"""The library API: ``from gpumem_tui import estimate`` (pure Python: no torch, no Textual).

    >>> from gpumem_tui import estimate
    >>> est = estimate("llama-3.1-8b", task="lora", batch=4, seq=2048, dtype="bf16")
    >>> est.peak_bytes            # int, bytes
    >>> est                       # a readable summary; a table in Jupyter and rich.print

Same estimator, same rules as ``gpumem-tui estimate`` (:mod:`gpumem_tui.estimator.cli`):
a model becomes a :class:`~gpumem_tui.estimator.architecture.ModelArchitecture`, the keyword
arguments a :class:`~gpumem_tui.estimator.spec.TrainingSpec`, and the detailed method
(:func:`gpumem_tui.estimator.estimate.estimate`) gives the result.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from gpumem_tui.estimator.architecture import (
    ArchitectureError,
    ModelArchitecture,
    architecture_from_config,
    architecture_from_params,
    load_architecture,
)
from gpumem_tui.estimator.estimate import Estimate
from gpumem_tui.estimator.spec import SpecError, TrainingSpec, parse_lora_targets

__all__ = ["EstimateResult", "estimate", "ArchitectureError", "SpecError"]


@dataclasses.dataclass(frozen=True)
class EstimateResult(Estimate):
    """An :class:`~gpumem_tui.estimator.estimate.Estimate` (every field and ``to_json`` the
    same; bytes everywhere) that also keeps the ``spec`` it was made for and shows itself:
    ``repr`` (plain text), ``__rich__`` (a Rich table) and ``_repr_html_`` (Jupyter), all from
    :mod:`gpumem_tui.estimator.display`."""

    spec: TrainingSpec | None = None

    def __repr__(self) -> str:
        from gpumem_tui.estimator.display import as_text

        return as_text(self, self.spec)

    def __rich__(self) -> Any:
        from gpumem_tui.estimator.display import as_rich

        return as_rich(self, self.spec)

    def _repr_html_(self) -> str:
        from gpumem_tui.estimator.display import as_html

        return as_html(self, self.spec)


def resolve_model(model: Any) -> ModelArchitecture:
    """A :class:`ModelArchitecture` from what a user holds:

    - a catalogue name (``"gpt2"``, ``"meta-llama/Llama-3.1-8B"``: the ``org/`` prefix is
      ignored) or a path (str or ``os.PathLike``) to a ``config.json`` or a folder holding one;
    - a Hugging Face config as a dict, or an object with ``to_dict()`` (``PretrainedConfig``);
    - a parameter count (int or float, 1e5..1e13: a coarse shape, see ``architecture_from_params``);
    - a ``ModelArchitecture`` (returned as is).

    Raises:
        ArchitectureError: unknown name, unreadable or invalid config (one line naming it).
        TypeError: any other type.
    """
    if isinstance(model, ModelArchitecture):
        return model
    if isinstance(model, os.PathLike):
        return load_architecture(os.fspath(model))
    if isinstance(model, str):
        return load_architecture(model)
    if isinstance(model, (int, float)) and not isinstance(model, bool):
        return architecture_from_params(model)
    to_dict = getattr(model, "to_dict", None)
    config = to_dict() if callable(to_dict) and not isinstance(model, dict) else model
    if isinstance(config, dict):
        name = config.get("_name_or_path") or config.get("model_type") or "config"
        return architecture_from_config(dict(config), name=str(name))
    raise TypeError(
        f"model must be a catalogue name, a config.json path, a config dict or a parameter count, "
        f"not {type(model).__name__}"
    )


_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(TrainingSpec) if f.name != "warnings")


def estimate(
    model: Any,
    *,
    task: str = "train",
    batch: int = 1,
    seq: int = 512,
    dtype: str = "bf16",
    device: str = "cuda",
    head: str | None = None,
    num_labels: int = 2,
    **spec_fields: Any,
) -> EstimateResult:
    """Predict the peak memory of one training step (or one inference request) on one device.

    Args:
        model: see :func:`resolve_model` (name, config path, config dict, parameter count).
        task: ``train`` | ``lora`` | ``qlora`` | ``inference``.
        batch: micro-batch size ``b`` per device (sequences). seq: sequence length ``s`` in
            tokens (for inference the whole context).
        dtype: ``fp32`` | ``bf16`` | ``fp16`` (parameters / compute).
        device: ``cuda`` (peak = NVML used: tensors + allocator reserve + CUDA context) |
            ``cpu`` (live tensor bytes) | ``meta``.
        head / num_labels: count another head than the config's (``lm``, ``classification``,
            ``mlm``, ``none``), as ``gpumem-tui estimate --head``.
        spec_fields: any other :class:`TrainingSpec` field (``optimizer="adamw"``,
            ``grad_ckpt="full"``, ``mixed_precision=True``, ``zero=2``, ``dp=8``,
            ``lora_rank=16``, ``lora_targets="all-linear"`` or a tuple of roles, ...).

    Returns:
        An :class:`EstimateResult`: ``peak_bytes`` (int, bytes), ``peak_phase``,
        ``components_bytes`` (component -> bytes at the peak, summing to ``peak_bytes``),
        ``phases`` (each phase's peak), ``allocated_peak_bytes``, ``assumptions``, ``spec``,
        ``to_json()``.

    Raises:
        ArchitectureError: the model cannot be read (a ``ValueError``; one line).
        SpecError: an invalid or contradictory setting (a ``ValueError``; ``.field`` names it).
        TypeError: a keyword that is not a TrainingSpec field, or a model of another type.
    """
    unknown = sorted(set(spec_fields) - set(_SPEC_FIELDS))
    if unknown:
        raise TypeError(f"estimate() got unknown keyword {unknown[0]!r} (TrainingSpec fields: {', '.join(_SPEC_FIELDS)})")
    targets = spec_fields.get("lora_targets")
    if isinstance(targets, str):
        spec_fields["lora_targets"] = parse_lora_targets(targets)
    elif isinstance(targets, list):
        spec_fields["lora_targets"] = tuple(targets)
    arch = resolve_model(model)
    if head is not None:
        if arch.coarse:
            raise SpecError("head", "head= needs a model config, not a parameter count")
        arch = arch.with_head(head, num_labels)
    spec = TrainingSpec(task=task, batch=batch, seq=seq, dtype=dtype, device=device, **spec_fields)
    from gpumem_tui.estimator.estimate import estimate as run_estimate

    result = run_estimate(arch, spec)
    values = {f.name: getattr(result, f.name) for f in dataclasses.fields(Estimate)}
    return EstimateResult(**values, spec=spec)
