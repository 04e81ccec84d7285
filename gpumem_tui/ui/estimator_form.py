"""The estimator panel's form fields (:class:`gpumem_tui.ui.estimator_panel.EstimatorPanel`).

Each field is a widget with the id ``est-NAME`` and a label ``est-NAME-label`` before it, in
the order the form shows them; the panel reads and marks them by those ids. The choices come
from :mod:`gpumem_tui.estimator.spec` (imported when the form is built, not at start-up).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from rich.text import Text
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Label, Select


def _select(name: str, values: Sequence[str], value: str, tip: str) -> Select[str]:
    widget: Select[str] = Select([(v, v) for v in values], value=value, allow_blank=False, compact=True,
                                 id=f"est-{name}")
    widget.tooltip = tip
    return widget


def _number(name: str, value: str, tip: str, placeholder: str = "") -> Input:
    widget = Input(value, placeholder=placeholder, restrict=r"-?[0-9]*", compact=True, id=f"est-{name}")
    widget.tooltip = tip
    return widget


def _wide_input(name: str, placeholder: str, tip: str) -> Input:
    field = Input(placeholder=placeholder, compact=True, id=f"est-{name}", classes="-wide")
    field.tooltip = tip
    return field


def _label(name: str, text: str) -> Label:
    return Label(text, id=f"est-{name}-label")


def model_fields(catalogue: Sequence[str], cached_models: Sequence[tuple[str, str]],
                 initial_model: str | None) -> Iterator[Widget]:
    """The model picker and the config field.

    ``catalogue``: the bundled model names; ``cached_models``: (label, config path) of the
    Hugging Face cache's configs (their labels shown literally); ``initial_model``: the
    catalogue name selected at first, or None (blank).
    """
    yield _label("model", "model")
    model_options = [(name, name) for name in catalogue]
    model_options += [(Text(label), path) for label, path in cached_models]
    model: Select[str] = Select(
        model_options,
        value=initial_model if initial_model else Select.BLANK,
        allow_blank=not model_options,
        compact=True,
        type_to_search=True,
        id="est-model",
        classes="-wide",
    )
    model.tooltip = "Bundled model configs: open and type to search"
    yield model
    yield _label("config", "config")
    yield _wide_input("config", "path/to/config.json or a count (7e9)",
                      "A Hugging Face config.json (file or folder), or a bare parameter count")


def setup_fields() -> Iterator[Widget]:
    """The run's settings (task, kernels, batch, sequence, dtypes, optimizer, checkpointing,
    attention, ZeRO / dp / tp / pp, LoRA rank) and the memory budget, with their defaults."""
    from gpumem_tui.estimator.spec import ATTENTION, DEVICES, DTYPES, GRAD_CKPT, OPTIMIZERS, TASKS

    yield _label("task", "task")
    yield _select("task", TASKS, "train", "train: full training; lora/qlora: adapters; inference: KV cache")
    yield _label("device", "kernels")
    yield _select("device", DEVICES, "cuda", "cuda adds the CUDA context and allocator reserve")
    yield _label("batch", "batch")
    yield _number("batch", "1", "Micro-batch size per device")
    yield _label("seq", "seq")
    yield _number("seq", "1024", "Sequence length in tokens (inference: prompt + generated)")
    yield _label("dtype", "dtype")
    yield _select("dtype", DTYPES, "bf16", "Parameter / compute dtype")
    yield _label("mixed_precision", "mixed")
    mixed = Checkbox("fp32 master", False, compact=True, id="est-mixed_precision")
    mixed.tooltip = "Mixed precision: fp32 master weights and optimizer states, 16-bit compute"
    yield mixed
    yield _label("optimizer", "optim")
    yield _select("optimizer", OPTIMIZERS, "adamw", "Optimizer (states per parameter)")
    yield _label("grad_ckpt", "ckpt")
    yield _select("grad_ckpt", GRAD_CKPT, "none", "Activation (gradient) checkpointing")
    yield _label("attention", "attn")
    yield _select("attention", ATTENTION, "sdpa", "Attention kernel: eager stores the s x s probabilities")
    yield _label("zero", "ZeRO")
    yield _select("zero", ("0", "1", "2", "3"), "0", "ZeRO stage: 1 shards optimizer states, 2 + gradients, 3 + parameters")
    yield _label("dp", "dp")
    yield _number("dp", "1", "Data-parallel degree (ZeRO shards over it)")
    yield _label("tp", "tp")
    yield _number("tp", "1", "Tensor-parallel degree")
    yield _label("pp", "pp")
    yield _number("pp", "1", "Pipeline-parallel degree")
    yield _label("lora_rank", "LoRA r")
    yield _number("lora_rank", "", "LoRA rank (tasks lora / qlora)", placeholder="8")
    yield _label("budget", "GPU mem")
    yield _wide_input("budget", "selected GPU (or type e.g. 24GiB, 80GB)",
                      "Memory to fit in: binary GiB/MiB or decimal GB/MB; empty = selected GPU")
