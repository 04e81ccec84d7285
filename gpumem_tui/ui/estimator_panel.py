"""The estimator panel: a what-if form whose every change redraws the predicted memory.

:class:`EstimatorPanel` holds the estimator's inputs (model from the bundled catalogue with
type-to-search, or a ``config.json`` path / parameter count, task, batch, sequence, dtype,
optimizer, checkpointing, ZeRO / dp / tp / pp, LoRA rank, kernel profile) and shows, after
every change, a stacked bar of the predicted components against the selected GPU's total
memory, whether the job fits and by how much, and the largest micro-batch that fits.

How the app uses it:

- ``panel.set_gpu_total(bytes | None, label)`` when the selected GPU changes (the user can
  still type a budget such as ``24GiB`` in the panel, which wins);
- ``panel.apply_probe_info(info, device=...)`` when a probed process is selected;
- handle :class:`EstimatorPanel.EstimateChanged` (``bands`` from :func:`bands_from_estimate`)
  to draw the prediction over the memory chart.

Bad input never raises: the field is marked (CSS class ``-invalid`` on the field and its
label), a message says what is wrong, and the last good estimate stays on screen.

Colours come only from theme variables, looked up at render time so that a theme switch
restyles the bar: ``$band-parameters``, ``$band-gradients``, ``$band-optimizer-states``,
``$band-kv-cache``, ``$band-activations``, ``$band-cuda-context``, ``$bar-free`` and
``$line-total`` (defined by gpumem-tui's themes and ``gpumem_tui.ui.themes.APP_VARIABLES``;
a host app without them should return them from ``App.get_theme_variable_defaults``; until
then each falls back to a standard Textual variable: primary, secondary, accent, warning,
success, panel-lighten-3, panel, error).

Units on screen are binary (KiB, MiB, GiB = 2**10, 2**20, 2**30 bytes).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.color import Color, ColorParseError
from textual.containers import Container, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Label, Select, Static

from gpumem_tui.background import DONE, PENDING, BackgroundLoads
from gpumem_tui.telemetry.model import ProbeInfo
from gpumem_tui.text import printable
from gpumem_tui.units import format_bytes, parse_bytes

__all__ = [
    "BAND_SEGMENTS",
    "EstimatorPanel",
    "MemoryBar",
    "bands_from_estimate",
    "theme_colour",
]

#: Stacked groups of estimator components, bottom to top:
#: (label, components, theme variable, fallback Textual variable).
#: Temporaries (logits and loss buffers, optimizer intermediates) sit with the activations:
#: together they are what is live at the peak beyond the model states, so the top of that band
#: is the predicted torch *allocated* peak and the top of the last band the predicted peak in
#: NVML terms (CUDA context and allocator reserve included; ESTIMATOR.md).
BAND_SEGMENTS: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    ("parameters", ("parameters",), "band-parameters", "primary"),
    ("gradients", ("gradients",), "band-gradients", "secondary"),
    ("optimizer states", ("optimizer_states",), "band-optimizer-states", "accent"),
    ("KV cache", ("kv_cache",), "band-kv-cache", "warning"),
    (
        "activations & temporaries",
        ("activations", "logits_and_loss", "optimizer_intermediates"),
        "band-activations",
        "success",
    ),
    ("CUDA context & reserve", ("cuda_context", "allocator_reserve"), "band-cuda-context", "panel-lighten-3"),
)

_BAND_LABELS = {
    "parameters": "parameters",
    "gradients": "+ gradients",
    "optimizer states": "+ optimizer states",
    "KV cache": "+ KV cache",
    "activations & temporaries": "+ activations (peak)",
    "CUDA context & reserve": "+ CUDA context & reserve",
}

_COMPONENT_LABELS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "optimizer_intermediates": "optimizer temporaries",
    "activations": "activations",
    "logits_and_loss": "logits & loss",
    "kv_cache": "KV cache",
    "cuda_context": "CUDA context",
    "allocator_reserve": "allocator reserve",
}

_FALLBACKS = {variable: fallback for _, _, variable, fallback in BAND_SEGMENTS}
_FALLBACKS.update({"bar-free": "panel", "line-total": "error"})


def _components(estimate: Any) -> dict[str, int]:
    comps = estimate.get("components_bytes") if isinstance(estimate, Mapping) else getattr(
        estimate, "components_bytes", None
    )
    return {str(k): int(v or 0) for k, v in dict(comps or {}).items()}


def _peak(estimate: Any) -> int:
    value = estimate.get("peak_bytes") if isinstance(estimate, Mapping) else getattr(estimate, "peak_bytes", None)
    return int(value) if value is not None else sum(_components(estimate).values())


def _segment_bytes(estimate: Any) -> list[tuple[str, int, str]]:
    """(segment label, bytes, theme variable) for every segment, zeros included."""
    comps = _components(estimate)
    return [(label, sum(comps.get(c, 0) for c in members), variable) for label, members, variable, _ in BAND_SEGMENTS]


def bands_from_estimate(estimate: Any) -> list[tuple[str, int, str]]:
    """Cumulative prediction bands for the memory chart overlay.

    Args:
        estimate: an ``Estimate`` (or its ``to_json()`` dict) whose ``components_bytes`` is the
            breakdown at the predicted peak.

    Returns:
        ``[(label, cumulative_bytes, theme_variable), ...]`` bottom to top: parameters;
        + gradients; + optimizer states; + KV cache; + activations at the peak (with the logits
        / loss buffers and optimizer temporaries, so this top is the predicted torch-allocated
        peak); + CUDA context and allocator reserve (this top is the predicted NVML-used peak).
        Bands that add nothing are left out, except parameters. ``cumulative_bytes`` is
        non-decreasing; theme variables are names without the ``$`` (e.g. ``band-gradients``).
    """
    bands: list[tuple[str, int, str]] = []
    total = 0
    for label, size, variable in _segment_bytes(estimate):
        if size <= 0 and bands:
            continue
        total += max(size, 0)
        bands.append((_BAND_LABELS[label], total, variable))
    return bands


def theme_colour(widget: Widget, variable: str, fallback: str | None = None) -> str:
    """The app's theme colour ``$variable`` as a hex string (falls back to ``$fallback``, then
    to the known fallback for gpumem-tui's own variables, then to the foreground).

    Never raises: a missing or unparseable variable falls through to the next.
    """
    try:
        variables = widget.app.theme_variables
    except Exception:  # noqa: BLE001 - not mounted: no app, no theme
        variables = {}
    for name in (variable, fallback, _FALLBACKS.get(variable), "foreground"):
        if not name:
            continue
        value = variables.get(name)
        if not value:
            continue
        try:
            return Color.parse(value).hex6
        except ColorParseError:
            continue
    return "default"


class MemoryBar(Widget):
    """A stacked horizontal bar of the predicted components against a memory total.

    Line 1: one coloured run per segment, scaled to ``max(total, peak)``; free memory up to
    the total is drawn in ``$bar-free``; memory beyond the total is hatched (``▒``).
    Line 2: a ruler marking the total (``▲``) with its size, or the scale when there is none.
    """

    DEFAULT_CSS = """
    MemoryBar {
        height: 2;
        width: 1fr;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._segments: list[tuple[str, int, str]] = []
        self._total: int | None = None
        self._stale = False
        self.render_count = 0

    def set_data(self, segments: Sequence[tuple[str, int, str]], total: int | None, stale: bool = False) -> None:
        """Draw ``segments`` ((label, bytes, theme variable)) against ``total`` bytes (or None)."""
        self._segments = [(label, max(int(size), 0), var) for label, size, var in segments]
        self._total = total if total and total > 0 else None
        self._stale = stale
        self.refresh()

    def render(self) -> Text:
        self.render_count += 1
        width = max(self.size.width, 8)
        used = sum(size for _, size, _ in self._segments)
        scale = max(used, self._total or 0)
        if scale <= 0:
            return Text("no estimate yet", style="italic")
        cells: list[tuple[str, str]] = []
        running = 0
        edge = 0
        for _, size, variable in self._segments:
            running += size
            new_edge = round(running / scale * width)
            colour = theme_colour(self, variable)
            cells.extend(("█", colour) for _ in range(new_edge - edge))
            edge = new_edge
        free = theme_colour(self, "bar-free")
        cells.extend(("░", free) for _ in range(width - edge))
        total_cell = None
        if self._total is not None:
            total_cell = min(round(self._total / scale * width), width)
            for i in range(total_cell, edge):  # beyond the GPU: hatched
                cells[i] = ("▒", cells[i][1])
            if 0 < total_cell < edge:  # the GPU's last cell, marked where the bar overflows it
                end = total_cell - 1
                cells[end] = ("┃", f"bold {theme_colour(self, 'line-total')} on {cells[end][1]}")
        bar = Text()
        for char, colour in cells:
            bar.append(char, style=f"{colour} dim" if self._stale else colour)
        ruler = self._ruler(width, total_cell, scale)
        return Text("\n").join([bar, ruler])

    def _ruler(self, width: int, total_cell: int | None, scale: int) -> Text:
        line_colour = theme_colour(self, "line-total")
        if total_cell is None:
            label = f" {format_bytes(scale)} (no GPU total)"
            return Text("─" * max(0, width - len(label)) + label, style="dim")
        label = f"GPU {format_bytes(self._total)}"
        pos = max(0, min(total_cell, width) - 1)
        ruler = Text()
        if pos + 2 + len(label) <= width:
            ruler.append("─" * pos, style="dim")
            ruler.append("▲ " + label, style=line_colour)
        else:
            ruler.append("─" * max(0, pos + 1 - len(label) - 2), style="dim")
            ruler.append(label + " ▲", style=line_colour)
        ruler.truncate(width)
        return ruler


# ---------------------------------------------------------------------------------------------

#: field -> its on-screen label (messages name the field the way the form shows it)
_FIELD_LABELS = {
    "model": "model", "config": "config", "task": "task", "device": "kernels", "batch": "batch",
    "seq": "seq", "dtype": "dtype", "mixed_precision": "mixed", "optimizer": "optim",
    "grad_ckpt": "ckpt", "attention": "attn", "zero": "ZeRO", "dp": "dp", "tp": "tp", "pp": "pp",
    "lora_rank": "LoRA r", "budget": "GPU mem",
}  # fmt: skip
_PROBE_KEY = "\x00probe"  # Select value of a probed model's config (never a catalogue name)
_INT_FIELDS = ("batch", "seq", "dp", "tp", "pp", "lora_rank")
_PLAIN_NUMBER = re.compile(r"^\s*[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?\s*$")


class EstimatorPanel(VerticalScroll):
    """What-if memory estimate form (see the module docstring).

    Public state (read-only): ``estimate`` (last good Estimate or None), ``architecture``,
    ``spec``, ``invalid_fields`` (field -> message), ``max_batch_value`` (int or None),
    ``budget_bytes`` (the total the fit is checked against, or None), ``solving`` (a
    largest-batch solve is running or queued in a worker thread).
    """

    @property
    def solving(self) -> bool:
        """True while the largest-batch solve for the current form is not on screen yet."""
        return self._solving or self._pending_solve is not None

    DEFAULT_CSS = """
    EstimatorPanel {
        height: 1fr;
        padding: 0 1;
        scrollbar-size-vertical: 1;
    }
    EstimatorPanel #est-form {
        layout: grid;
        grid-size: 4;
        grid-columns: auto 1fr auto 1fr;
        grid-gutter: 0 1;
        grid-rows: 1;
        height: auto;
    }
    EstimatorPanel #est-form > * {
        height: 1;
    }
    EstimatorPanel #est-form > Label {
        color: $text-muted;
        width: auto;
        height: 1;
    }
    EstimatorPanel #est-form > Label.-invalid {
        color: $text-error;
        text-style: bold;
    }
    EstimatorPanel #est-form > .-wide {
        column-span: 3;
    }
    EstimatorPanel #est-form > Input, EstimatorPanel #est-form > Select {
        width: 1fr;
    }
    EstimatorPanel #est-form > Checkbox {
        width: 1fr;
        height: 1;
    }
    EstimatorPanel Select.-invalid > SelectCurrent {
        background-tint: $error 30%;
    }
    EstimatorPanel Checkbox.-invalid {
        background-tint: $error 30%;
    }
    EstimatorPanel #est-message {
        color: $text-error;
        height: auto;
    }
    EstimatorPanel #est-message.-empty {
        display: none;
    }
    EstimatorPanel MemoryBar {
        margin-top: 1;
    }
    EstimatorPanel #est-fit {
        height: 2;
        text-style: bold;
    }
    EstimatorPanel #est-fit.-fits {
        color: $text-success;
    }
    EstimatorPanel #est-fit.-nofit {
        color: $text-error;
    }
    EstimatorPanel #est-fit.-nobudget, EstimatorPanel #est-notes {
        color: $text-muted;
        text-style: none;
    }
    EstimatorPanel #est-maxbatch {
        height: 1;
    }
    EstimatorPanel #est-breakdown, EstimatorPanel #est-notes {
        height: auto;
    }
    """

    class EstimateChanged(Message):
        """A new valid estimate is on screen (posted only when it differs from the last).

        Attributes: ``estimate`` (Estimate), ``architecture``, ``spec`` (TrainingSpec), ``bands``
        (:func:`bands_from_estimate`), ``panel``.
        """

        def __init__(self, panel: EstimatorPanel, estimate: Any, architecture: Any, spec: Any) -> None:
            super().__init__()
            self.panel = panel
            self.estimate = estimate
            self.architecture = architecture
            self.spec = spec
            self.bands = bands_from_estimate(estimate)

        @property
        def control(self) -> EstimatorPanel:
            return self.panel

    class _MaxBatchDone(Message):
        def __init__(self, generation: int, value: int | None, error: str | None) -> None:
            super().__init__()
            self.generation = generation
            self.value = value
            self.error = error

    def __init__(
        self,
        *,
        model: str = "llama-3.2-1b",
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.can_focus = False
        from gpumem_tui.estimator.architecture import catalogue_names

        try:
            self._catalogue = catalogue_names()
        except Exception:  # noqa: BLE001 - a broken install must not kill the dashboard
            self._catalogue = []
        self._initial_model = model if model in self._catalogue else (self._catalogue[0] if self._catalogue else None)
        self._arch_cache: dict[tuple[str, float | None], Any] = {}
        # config files the user types are read off the UI thread (a FIFO or a huge file)
        self._file_loads = BackgroundLoads(lambda key: self.app.call_from_thread(self.recompute))
        self._probe_arch: Any = None
        self._probe_label: str | None = None
        self._gpu_total: int | None = None
        self._gpu_label: str | None = None
        self.estimate: Any = None
        self.architecture: Any = None
        self.spec: Any = None
        self.invalid_fields: dict[str, str] = {}
        self.max_batch_value: int | None = None
        self.budget_bytes: int | None = None
        self.last_update_seconds: float | None = None
        self._posted_key: tuple[Any, ...] | None = None
        self._generation = 0
        self._solving = False
        self._pending_solve: tuple[Any, ...] | None = None

    # ----- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        from gpumem_tui.estimator.spec import ATTENTION, DEVICES, DTYPES, GRAD_CKPT, OPTIMIZERS, TASKS

        def opts(values: Sequence[str]) -> list[tuple[str, str]]:
            return [(v, v) for v in values]

        def sel(name: str, values: Sequence[str], value: str, tip: str) -> Select[str]:
            widget: Select[str] = Select(opts(values), value=value, allow_blank=False, compact=True, id=f"est-{name}")
            widget.tooltip = tip
            return widget

        def num(name: str, value: str, tip: str, placeholder: str = "") -> Input:
            widget = Input(value, placeholder=placeholder, restrict=r"-?[0-9]*", compact=True, id=f"est-{name}")
            widget.tooltip = tip
            return widget

        def label(name: str, text: str | None = None) -> Label:
            return Label(text or _FIELD_LABELS[name], id=f"est-{name}-label")

        with Container(id="est-form"):
            yield label("model", "model")
            model_options = [(name, name) for name in self._catalogue]
            model: Select[str] = Select(
                model_options,
                value=self._initial_model if self._initial_model else Select.BLANK,
                allow_blank=not model_options,
                compact=True,
                type_to_search=True,
                id="est-model",
                classes="-wide",
            )
            model.tooltip = "Bundled model configs: open and type to search"
            yield model
            yield label("config", "config")
            config = Input(
                placeholder="path/to/config.json or a count (7e9)",
                compact=True,
                id="est-config",
                classes="-wide",
            )
            config.tooltip = "A Hugging Face config.json (file or folder), or a bare parameter count"
            yield config
            yield label("task", "task")
            yield sel("task", TASKS, "train", "train: full training; lora/qlora: adapters; inference: KV cache")
            yield label("device", "kernels")
            yield sel("device", DEVICES, "cuda", "cuda adds the CUDA context and allocator reserve")
            yield label("batch", "batch")
            yield num("batch", "1", "Micro-batch size per device")
            yield label("seq", "seq")
            yield num("seq", "1024", "Sequence length in tokens (inference: prompt + generated)")
            yield label("dtype", "dtype")
            yield sel("dtype", DTYPES, "bf16", "Parameter / compute dtype")
            yield label("mixed_precision", "mixed")
            mixed = Checkbox("fp32 master", False, compact=True, id="est-mixed_precision")
            mixed.tooltip = "Mixed precision: fp32 master weights and optimizer states, 16-bit compute"
            yield mixed
            yield label("optimizer", "optim")
            yield sel("optimizer", OPTIMIZERS, "adamw", "Optimizer (states per parameter)")
            yield label("grad_ckpt", "ckpt")
            yield sel("grad_ckpt", GRAD_CKPT, "none", "Activation (gradient) checkpointing")
            yield label("attention", "attn")
            yield sel("attention", ATTENTION, "sdpa", "Attention kernel: eager stores the s x s probabilities")
            yield label("zero", "ZeRO")
            yield sel("zero", ("0", "1", "2", "3"), "0", "ZeRO stage: 1 shards optimizer states, 2 + gradients, 3 + parameters")
            yield label("dp", "dp")
            yield num("dp", "1", "Data-parallel degree (ZeRO shards over it)")
            yield label("tp", "tp")
            yield num("tp", "1", "Tensor-parallel degree")
            yield label("pp", "pp")
            yield num("pp", "1", "Pipeline-parallel degree")
            yield label("lora_rank", "LoRA r")
            yield num("lora_rank", "", "LoRA rank (tasks lora / qlora)", placeholder="8")
            yield label("budget", "GPU mem")
            budget = Input(
                placeholder="selected GPU (or type e.g. 24GiB, 80GB)",
                compact=True,
                id="est-budget",
                classes="-wide",
            )
            budget.tooltip = "Memory to fit in: binary GiB/MiB or decimal GB/MB; empty = selected GPU"
            yield budget
        yield Static("", id="est-message", classes="-empty")
        yield MemoryBar(id="est-bar")
        yield Static("", id="est-fit")
        yield Static("", id="est-maxbatch")
        yield Static("", id="est-breakdown")
        yield Static("", id="est-notes")

    def on_mount(self) -> None:
        self._sync_enabled()
        self.recompute()
        # Colours are looked up from the theme when drawn: redraw when the theme changes.
        self.watch(self.app, "theme", self._theme_changed, init=False)

    def _theme_changed(self) -> None:
        # The app rebuilds its theme variables after its own watcher: redraw once that is done.
        self.call_after_refresh(self._redraw_for_theme)

    def _redraw_for_theme(self) -> None:
        for widget in self.query(Static):
            if hasattr(widget, "_gpumem_text"):
                del widget._gpumem_text  # force the next redraw to rebuild its colours
        self.query_one(MemoryBar).refresh()
        if self.estimate is not None:
            self._render_estimate(stale=bool(self.invalid_fields))

    def on_resize(self) -> None:
        self.query_one(MemoryBar).refresh()

    # ----- public API ------------------------------------------------------------------------

    def set_gpu_total(self, total_bytes: int | None, label: str | None = None) -> None:
        """The selected GPU's total memory in bytes (None: no GPU). ``label`` names it on screen
        (e.g. "GPU 0 A100"). A budget typed in the panel takes precedence."""
        self._gpu_total = int(total_bytes) if total_bytes and total_bytes > 0 else None
        self._gpu_label = label
        self.recompute()

    def apply_probe_info(self, info: ProbeInfo, device: str | None = None) -> str | None:
        """Set the form to match a probed job (its model config and published setup).

        ``device`` is where the probe measured ("cpu" or "cuda[:n]"), which picks the kernel
        profile when the setup does not say. The user can override every field afterwards.

        Returns:
            None when the whole setup was applied, else a one-line reason shown in the panel
            (e.g. the probe published no batch); whatever could be applied still is.
        """
        from gpumem_tui.comparison import ComparisonError, spec_from_probe_info

        overrides: dict[str, object] = {}
        if device is not None:
            overrides["device"] = "cuda" if str(device).lower().startswith("cuda") else str(device).lower()
        problem: str | None = None
        arch = spec = None
        try:
            arch, spec = spec_from_probe_info(info, **overrides)
        except ComparisonError as exc:
            problem = str(exc)
            if info.model_config is not None:
                try:
                    from gpumem_tui.estimator.architecture import architecture_from_config

                    arch = architecture_from_config(dict(info.model_config), name=f"pid {info.pid}")
                except Exception:  # noqa: BLE001 - reported through `problem` already
                    arch = None
        except Exception as exc:  # noqa: BLE001 - never kill the dashboard
            problem = f"pid {info.pid}: cannot read the probe's setup: {exc}"
        with self.prevent(Input.Changed, Select.Changed, Checkbox.Changed):
            if arch is not None:
                name = str(getattr(arch, "name", "") or "")
                model_name = _setup_value(info, "model") or _setup_value(info, "model_name")
                if info.model_config is None and isinstance(model_name, str) and model_name in self._catalogue:
                    self._select_catalogue(model_name)
                else:
                    self._probe_arch = arch
                    self._probe_label = printable(f"probe pid {info.pid}: {name or 'model config'}", limit=60)
                    self._set_model_options()
                    self.query_one("#est-model", Select).value = _PROBE_KEY
                self.query_one("#est-config", Input).value = ""
            if spec is not None:
                self._set_form_from_spec(spec)
        self._sync_enabled()
        self.recompute()
        if problem:
            self._show_message(problem)
        return problem

    def set_form(self, **values: object) -> None:
        """Set form fields by TrainingSpec field name (``batch=8, task="lora"``), plus
        ``model`` (catalogue name), ``config`` (path or count) and ``budget`` (text), then
        recompute once. Unknown names raise ``KeyError`` (a programming error, not user input).
        """
        with self.prevent(Input.Changed, Select.Changed, Checkbox.Changed):
            for name, value in values.items():
                if name == "model":
                    self._select_catalogue(str(value))
                    continue
                widget = self.query_one(f"#est-{name}")
                if isinstance(widget, Input):
                    widget.value = "" if value is None else str(value)
                elif isinstance(widget, Checkbox):
                    widget.value = bool(value)
                elif isinstance(widget, Select):
                    widget.value = str(value)
        self._sync_enabled()
        self.recompute()

    # ----- events ----------------------------------------------------------------------------

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    def _on_field_changed(self, event: Message) -> None:
        event.stop()
        if isinstance(event, Select.Changed) and event.select.id == "est-task":
            self._sync_enabled()
        self.recompute()

    # ----- the computation -------------------------------------------------------------------

    def recompute(self) -> None:
        """Read the form, estimate, and redraw; mark bad fields. Never raises."""
        started = time.perf_counter()
        try:
            self._recompute()
        except Exception as exc:  # noqa: BLE001 - the dashboard must survive estimator bugs
            self._mark_invalid({"": f"estimator failed: {type(exc).__name__}: {exc}"})
        self.last_update_seconds = time.perf_counter() - started

    def _recompute(self) -> None:
        from gpumem_tui.estimator.architecture import ArchitectureError
        from gpumem_tui.estimator.estimate import estimate as run_estimate
        from gpumem_tui.estimator.spec import SpecError, TrainingSpec

        errors: dict[str, str] = {}
        budget = self._read_budget(errors)
        arch = self._read_architecture(errors, ArchitectureError)
        kwargs = self._read_spec_fields(errors)
        spec = None
        if "" not in errors and not any(k in errors for k in kwargs):
            try:
                spec = TrainingSpec(**kwargs)
            except SpecError as exc:
                errors[self._field_for(exc.field)] = str(exc)
            except (TypeError, ValueError) as exc:
                errors[""] = str(exc)
        est = None
        if arch is not None and spec is not None:
            try:
                est = run_estimate(arch, spec)
            except SpecError as exc:
                errors[self._field_for(exc.field)] = str(exc)
            except ArchitectureError as exc:
                errors[self._model_field()] = str(exc)
            except ValueError as exc:
                errors[""] = str(exc)
        self.budget_bytes = budget if "budget" not in errors else self.budget_bytes

        self._mark_invalid(errors)
        if est is not None:
            self.estimate, self.architecture, self.spec = est, arch, spec
            key = (id(arch), spec)
            if key != self._posted_key:
                self._posted_key = key
                self.post_message(self.EstimateChanged(self, est, arch, spec))
        self._render_estimate(stale=bool(errors))
        if est is not None or "budget" not in errors:
            self._start_max_batch()

    def _read_budget(self, errors: dict[str, str]) -> int | None:
        text = self.query_one("#est-budget", Input).value.strip()
        if not text:
            return self._gpu_total
        if _PLAIN_NUMBER.match(text):
            errors["budget"] = f"{text!r} needs a unit: e.g. {text}GiB or {text}GB"
            return None
        try:
            value = parse_bytes(text)
        except ValueError as exc:
            errors["budget"] = str(exc)
            return None
        if value <= 0:
            errors["budget"] = "must be more than 0"
            return None
        return value

    def _model_field(self) -> str:
        return "config" if self.query_one("#est-config", Input).value.strip() else "model"

    def _read_architecture(self, errors: dict[str, str], arch_error: type[Exception]) -> Any:
        from gpumem_tui.estimator.architecture import architecture_from_params, load_architecture

        source = self.query_one("#est-config", Input).value.strip()
        if source:
            field = "config"
            mtime: float | None = None
            if _PLAIN_NUMBER.match(source):
                key = (f"params:{source}", None)
                loader = lambda: architecture_from_params(float(source))  # noqa: E731
            else:
                try:
                    path = Path(source).expanduser()
                    mtime = (path / "config.json" if path.is_dir() else path).stat().st_mtime
                except OSError:
                    mtime = None
                key = (source, mtime)
                loader = lambda: load_architecture(source)  # noqa: E731
        else:
            field = "model"
            value = self.query_one("#est-model", Select).value
            if value == _PROBE_KEY:
                if self._probe_arch is None:
                    errors["model"] = "the probed model's config is gone: pick a model"
                return self._probe_arch
            if not isinstance(value, str):
                errors["model"] = "pick a model or give a config.json path"
                return None
            key = (value, None)
            loader = lambda: load_architecture(value)  # noqa: E731
        if key in self._arch_cache:
            return self._arch_cache[key]
        if field == "config" and not _PLAIN_NUMBER.match(source):
            state, loaded = self._file_loads.get(key, loader)
            if state == PENDING:
                errors[field] = f"reading {source}…"
                return None
            loader = (lambda: loaded) if state == DONE else _raiser(loaded)  # noqa: E731
        try:
            arch = loader()
        except (arch_error, ValueError, OSError) as exc:
            errors[field] = str(exc)
            return None
        if len(self._arch_cache) > 32:
            self._arch_cache.clear()
        self._arch_cache[key] = arch
        return arch

    def _read_spec_fields(self, errors: dict[str, str]) -> dict[str, object]:
        task = self._select_value("task")
        kwargs: dict[str, object] = {"task": task, "device": self._select_value("device")}
        for name in ("batch", "seq", "dp", "tp", "pp"):
            kwargs[name] = self._read_int(name, errors)
        kwargs["dtype"] = self._select_value("dtype")
        kwargs["attention"] = self._select_value("attention")
        kwargs["zero"] = int(self._select_value("zero"))
        if task != "inference":
            kwargs["optimizer"] = self._select_value("optimizer")
            kwargs["grad_ckpt"] = self._select_value("grad_ckpt")
            kwargs["mixed_precision"] = self.query_one("#est-mixed_precision", Checkbox).value
        if task in ("lora", "qlora") and self.query_one("#est-lora_rank", Input).value.strip():
            kwargs["lora_rank"] = self._read_int("lora_rank", errors)
        return kwargs

    def _read_int(self, name: str, errors: dict[str, str]) -> int:
        text = self.query_one(f"#est-{name}", Input).value.strip()
        label = name.replace("_", " ")
        if not text or text == "-":
            errors[name] = f"{label} is empty: give a whole number"
            return 0
        try:
            return int(text)
        except ValueError:
            errors[name] = f"{label} must be a whole number, got {text!r}"
            return 0

    def _select_value(self, name: str) -> str:
        value = self.query_one(f"#est-{name}", Select).value
        return str(value)

    def _field_for(self, spec_field: str | None) -> str:
        if spec_field in ("task", "batch", "seq", "dtype", "mixed_precision", "optimizer", "grad_ckpt",
                          "attention", "zero", "dp", "tp", "pp", "lora_rank", "device"):
            return str(spec_field)
        return ""

    # ----- form helpers ----------------------------------------------------------------------

    def _select_catalogue(self, name: str) -> None:
        from gpumem_tui.estimator.architecture import _normalise  # same aliasing as load_architecture

        key = _normalise(name)
        if key not in self._catalogue:
            raise KeyError(f"not a catalogue model: {name!r}")
        self.query_one("#est-model", Select).value = key
        self.query_one("#est-config", Input).value = ""

    def _set_model_options(self) -> None:
        select = self.query_one("#est-model", Select)
        options: list[tuple[str, str]] = []
        if self._probe_arch is not None:
            # Text, not str: a str prompt is parsed as markup, and this name comes from the job.
            options.append((Text(self._probe_label or "probed model"), _PROBE_KEY))
        options += [(name, name) for name in self._catalogue]
        select.set_options(options)

    def _set_form_from_spec(self, spec: Any) -> None:
        for name in ("task", "device", "dtype", "optimizer", "grad_ckpt", "attention"):
            self.query_one(f"#est-{name}", Select).value = str(getattr(spec, name))
        self.query_one("#est-zero", Select).value = str(spec.zero)
        for name in ("batch", "seq", "dp", "tp", "pp"):
            self.query_one(f"#est-{name}", Input).value = str(getattr(spec, name))
        rank = getattr(spec, "lora_rank", None)
        self.query_one("#est-lora_rank", Input).value = "" if rank is None else str(rank)
        self.query_one("#est-mixed_precision", Checkbox).value = bool(spec.mixed_precision)

    def _sync_enabled(self) -> None:
        """Fields that do not apply to the task are disabled (and not passed to the spec)."""
        task = self._select_value("task")
        training = task != "inference"
        for name in ("optimizer", "grad_ckpt", "mixed_precision"):
            self.query_one(f"#est-{name}").disabled = not training
        self.query_one("#est-lora_rank").disabled = task not in ("lora", "qlora")

    def _mark_invalid(self, errors: dict[str, str]) -> None:
        self.invalid_fields = dict(errors)
        for widget in self.query_one("#est-form").children:
            wid = widget.id or ""
            name = wid.removeprefix("est-").removesuffix("-label")
            widget.set_class(name in errors, "-invalid")
        if errors:
            lines = [f"{_FIELD_LABELS.get(k, k)}: {v}" if k else v for k, v in errors.items()]
            if self.estimate is not None:
                lines.append("(showing the last valid estimate)")
            self._show_message("\n".join(lines))
        else:
            self._show_message("")

    def _show_message(self, text: str) -> None:
        message = self.query_one("#est-message", Static)
        safe = "\n".join(printable(line, limit=500) for line in text.splitlines())
        _set_text(message, safe)
        message.set_class(not text, "-empty")

    # ----- drawing ---------------------------------------------------------------------------

    def _render_estimate(self, stale: bool) -> None:
        est = self.estimate
        bar = self.query_one(MemoryBar)
        fit = self.query_one("#est-fit", Static)
        breakdown = self.query_one("#est-breakdown", Static)
        notes = self.query_one("#est-notes", Static)
        if est is None:
            bar.set_data([], self.budget_bytes)
            _set_text(fit, "", fixed_height=True)
            _set_text(breakdown, "")
            _set_text(notes, "")
            return
        bar.set_data(_segment_bytes(est), self.budget_bytes, stale=stale)
        peak = _peak(est)
        budget = self.budget_bytes
        where = f" ({self._gpu_label})" if self._gpu_label and not self.query_one("#est-budget", Input).value.strip() else ""
        if budget is None:
            state = "-nobudget"
            text = f"peak {format_bytes(peak, precision=2)}: select a GPU or type a GPU memory to check the fit"
        elif peak <= budget:
            state = "-fits"
            spare = budget - peak
            text = (
                f"fits: peak {format_bytes(peak, precision=2)} of {format_bytes(budget, precision=2)}{where}, "
                f"{format_bytes(spare, precision=2)} ({100 * spare / budget:.0f}%) to spare"
            )
        else:
            state = "-nofit"
            over = peak - budget
            text = (
                f"does not fit: peak {format_bytes(peak, precision=2)} is {format_bytes(over, precision=2)} "
                f"({100 * over / budget:.0f}%) over {format_bytes(budget, precision=2)}{where}"
            )
        for name in ("-fits", "-nofit", "-nobudget"):
            fit.set_class(name == state, name)
        _set_text(fit, text, fixed_height=True)
        _set_text(breakdown, self._breakdown_text(est))
        _set_text(notes, self._notes_text(est))
        assumptions = getattr(est, "assumptions", None) or ()
        tip = "\n".join(printable(str(a), limit=300) for a in assumptions)
        breakdown.tooltip = Text(tip) if tip else None  # literal: names come from config files

    def _breakdown_text(self, est: Any) -> Text:
        comps = _components(est)
        out = Text()
        width = max(len(v) for v in _COMPONENT_LABELS.values())
        for label, members, variable, _ in BAND_SEGMENTS:
            colour = theme_colour(self, variable)
            for i, comp in enumerate(members):
                size = comps.get(comp, 0)
                if size <= 0:
                    continue
                out.append("■ " if i == 0 or not out else "  ", style=colour)
                out.append(f"{_COMPONENT_LABELS[comp]:<{width}} {format_bytes(size, precision=2):>11}\n")
        phase = getattr(est, "peak_phase", None)
        total = getattr(est, "total_params", None)
        trainable = getattr(est, "trainable_params", None)
        summary = f"peak {format_bytes(_peak(est), precision=2)}"
        if phase:
            summary += f" in {phase}"
        if total:
            summary += f" · {_count(total)} params"
            if trainable is not None and trainable != total:
                summary += f" ({_count(trainable)} trainable)"
        out.append(summary, style="bold")
        out.append("  (GiB = 2^30 B)", style="dim")
        return out

    def _notes_text(self, est: Any) -> Text:
        warnings = list(getattr(self.spec, "warnings", ()) or ())
        try:  # the spec's own warnings plus those against the model (e.g. seq > max positions)
            from gpumem_tui.estimator.spec import check_spec_for

            warnings = list(check_spec_for(self.architecture, self.spec))
        except Exception:  # noqa: BLE001 - the estimate already passed these checks
            pass
        lines = [f"! {w}" for w in warnings[:4]]
        assumptions = getattr(est, "assumptions", None) or ()
        if assumptions:
            count = len(assumptions)
            lines.append(f"{count} assumption{'' if count == 1 else 's'} (hover the breakdown)")
        return Text("\n".join(printable(line, limit=300) for line in lines))

    # ----- largest batch (in a worker: a solve is a few dozen estimates) --------------------

    def _start_max_batch(self) -> None:
        self._generation += 1
        label = self.query_one("#est-maxbatch", Static)
        arch, spec, budget = self.architecture, self.spec, self.budget_bytes
        if arch is None or spec is None:
            _set_text(label, "", fixed_height=True)
            return
        if budget is None:
            self.max_batch_value = None
            _set_text(label, Text("largest micro-batch: needs a GPU or a typed GPU memory", style="dim"), fixed_height=True)
            return
        request = (self._generation, arch, spec, budget)
        if self._solving:
            # One solve at a time, never cancelled (a cancelled worker would fail an app's
            # wait_for_complete); the newest request waits and older ones are dropped.
            self._pending_solve = request
            return
        self._solving = True
        self._solve_max_batch(*request)

    @work(thread=True, group="estimator-max-batch", exit_on_error=False)
    def _solve_max_batch(self, generation: int, arch: Any, spec: Any, budget: int) -> None:
        from gpumem_tui.estimator.solve import max_batch

        try:
            value: int | None = int(max_batch(arch, spec, budget))
            error = None
        except Exception as exc:  # noqa: BLE001 - shown in the panel
            value, error = None, f"{type(exc).__name__}: {exc}"
        self.post_message(self._MaxBatchDone(generation, value, error))

    @on(_MaxBatchDone)
    def _on_max_batch_done(self, message: _MaxBatchDone) -> None:
        message.stop()
        self._solving = False
        if self._pending_solve is not None:
            request, self._pending_solve = self._pending_solve, None
            self._solving = True
            self._solve_max_batch(*request)
        if message.generation != self._generation:
            return  # a newer form state is being solved
        label = self.query_one("#est-maxbatch", Static)
        self.max_batch_value = message.value
        if message.error is not None:
            text = Text(printable(f"largest micro-batch: could not solve ({message.error})", limit=300))
        elif message.value == 0:
            text = Text("largest micro-batch that fits: none, not even 1")
        else:
            text = Text(f"largest micro-batch that fits: {message.value}")
        _set_text(label, text, fixed_height=True)


def _raiser(exc: BaseException) -> Any:
    def load() -> Any:
        raise exc
    return load


def _set_text(widget: Static, text: Text | str, *, fixed_height: bool = False) -> None:
    """Update ``widget`` only when its text changes; skip the relayout when its height is fixed.

    Every relayout repaints the whole screen, which is what makes a form change slow.
    """
    new = text if isinstance(text, Text) else Text(text)
    old = getattr(widget, "_gpumem_text", None)
    if old is not None and old == new:
        return
    widget._gpumem_text = new  # type: ignore[attr-defined]
    if fixed_height:
        widget.update(new, layout=False)
    else:
        lines_before = old.plain.count("\n") if old is not None else -1
        widget.update(new, layout=lines_before != new.plain.count("\n"))


def _setup_value(info: ProbeInfo, key: str) -> object:
    for k, v in info.setup:
        if k == key:
            return v
    return None


def _count(n: int | float) -> str:
    """12_345_678 -> "12.3 M" (decimal: parameter counts are counts, not bytes)."""
    if not isinstance(n, (int, float)) or not math.isfinite(n):
        return "?"
    for unit, factor in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= factor:
            return f"{n / factor:.2f} {unit}"
    return str(int(n))
