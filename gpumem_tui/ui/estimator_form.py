"""The estimator panel's form fields (:class:`gpumem_tui.ui.estimator_panel.EstimatorPanel`).

Each field is a widget with the id ``est-NAME`` and a label ``est-NAME-label`` before it, in
the order the form shows them; the panel reads and marks them by those ids. The choices come
from :mod:`gpumem_tui.estimator.spec` (imported when the form is built, not at start-up).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from rich.text import Text
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Label, Select

# Select's parts are not exported by textual.widgets (Textual 8.2); the pin (<9) keeps this path.
from textual.widgets._select import SelectCurrent, SelectOverlay

_Field = TypeVar("_Field", bound=Widget)

#: The class Textual's ``compact`` reactive of Select, Input, Checkbox and OptionList toggles
#: (``reactive(False, toggle_class="-textual-compact")``; their DEFAULT_CSS styles it).
_COMPACT_CLASS = "-textual-compact"


def compact(field: _Field) -> _Field:
    """``field`` made compact as its ``compact=True`` argument would, before it mounts.

    Textual's constructors set ``compact`` through the reactive, whose class toggle restyles
    the widget although it is not mounted yet (``DOMNode.update_node_styles``: a stylesheet
    pass for nothing, its mount styles it again) -- 17 of the form's fields. The same value
    and class are set here without that pass.
    """
    field.set_reactive(type(field).compact, True)  # type: ignore[attr-defined]
    field.add_class(_COMPACT_CLASS, update=False)
    return field


class FormSelect(Select[str]):
    """Textual's Select whose parts start as its mount leaves them.

    On mount a Select shows its value in its SelectCurrent, whose ``has_value`` then adds the
    ``-has-value`` class (a restyle of it and its three labels), and its SelectOverlay takes
    the Select's ``compact`` through a data binding (a restyle for the class it toggles).
    Given before they mount, both states come with their first styling instead
    (textual/widgets/_select.py: ``SelectCurrent.update``, ``Select.compose``). ``shows_value``:
    the Select is built with a value (not blank).
    """

    def __init__(self, *args: Any, shows_value: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shows_value = shows_value

    def compose(self) -> ComposeResult:
        for part in super().compose():
            if isinstance(part, SelectCurrent) and self._shows_value:
                part.set_reactive(SelectCurrent.has_value, True)
                part.add_class("-has-value", update=False)
            elif isinstance(part, SelectOverlay) and self.compact:
                compact(part)
            yield part


def _select(name: str, values: Sequence[str], value: str, tip: str) -> Select[str]:
    widget = compact(FormSelect([(v, v) for v in values], value=value, allow_blank=False, id=f"est-{name}",
                                shows_value=True))
    widget.tooltip = tip
    return widget


def _number(name: str, value: str, tip: str, placeholder: str = "") -> Input:
    widget = compact(Input(value, placeholder=placeholder, restrict=r"-?[0-9]*", id=f"est-{name}"))
    widget.tooltip = tip
    return widget


def _wide_input(name: str, placeholder: str, tip: str) -> Input:
    field = compact(Input(placeholder=placeholder, id=f"est-{name}", classes="-wide"))
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
    model = compact(FormSelect(
        model_options,
        value=initial_model if initial_model else Select.BLANK,
        allow_blank=not model_options,
        type_to_search=True,
        id="est-model",
        classes="-wide",
        shows_value=bool(model_options),  # blank is allowed only without options
    ))
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
    mixed = compact(Checkbox("fp32 master", False, id="est-mixed_precision"))
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
