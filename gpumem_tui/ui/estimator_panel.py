"""The estimator panel: a what-if form whose every change redraws the predicted memory.

:class:`EstimatorPanel` holds the estimator's inputs (model from the bundled catalogue with
type-to-search, or a ``config.json`` path / parameter count, task, batch, sequence, dtype,
optimizer, checkpointing, ZeRO / dp / tp / pp, LoRA rank, kernel profile) and shows, after
every change, a stacked bar of the predicted components against the selected GPU's total
memory, whether the job fits and by how much, and the largest micro-batch that fits.

How the app uses it:

- ``panel.set_gpu_total(bytes | None, label)`` when the selected GPU changes (the user can
  still type a budget such as ``24GiB`` in the panel, which wins);
- ``panel.show_process(pid, process_estimate, job)`` when the selection changes: the form
  takes that process's estimate (a :class:`gpumem_tui.analysis.process_estimate.ProcessEstimate`,
  built from its own probe or set by the user); without one the form keeps the what-if.
  ``job`` is the estimate from the process's probe: a line over the form says whether the
  form shows it or a what-if, and which settings differ ("what-if on PID 1088: batch 8
  (job: 4)"); for a rank of a probed parallel job the form estimates one rank of the probe's
  plan (:func:`gpumem_tui.analysis.probed_job.rank_estimate`) and that line says "per rank";
- handle :class:`EstimatorPanel.EstimateChanged`: it names the PID the form was showing, so
  the app records the user's estimate for that process and nowhere else.

Bad input never raises: the field is marked (CSS class ``-invalid`` on the field and its
label), a message in the form's own words says what is wrong (never a CLI flag), and no figure
is shown for a form that cannot be estimated (the bar is empty and the fit line says why): a
number from an earlier state of the form would read as the estimate of what it says now. The bar, bands and colours are :mod:`gpumem_tui.ui.memory_bar`'s;
the texts under the bar are :mod:`gpumem_tui.ui.estimate_text`'s.

Units on screen are binary (KiB, MiB, GiB = 2**10, 2**20, 2**30 bytes).
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Container, VerticalScroll
from textual.message import Message
from textual.widgets import Checkbox, Input, Select, Static

from gpumem_tui.support.background import DONE, PENDING, BackgroundLoads
from gpumem_tui.support.text import printable
from gpumem_tui.ui import estimate_text, estimator_form
from gpumem_tui.ui.memory_bar import MemoryBar, bands_from_estimate, estimate_peak, segment_bytes, theme_colour
from gpumem_tui.support.units import parse_bytes

__all__ = ["EstimatorPanel"]

# ---------------------------------------------------------------------------------------------

#: field -> its on-screen label (messages name the field the way the form shows it)
_FIELD_LABELS = {
    "model": "model", "config": "config", "task": "task", "device": "kernels", "batch": "batch",
    "seq": "seq", "dtype": "dtype", "mixed_precision": "mixed", "optimizer": "optim",
    "grad_ckpt": "ckpt", "attention": "attn", "zero": "ZeRO", "dp": "dp", "tp": "tp", "pp": "pp",
    "lora_rank": "LoRA r", "budget": "GPU mem",
    "params": "config",  # the CLI's --params is a count typed in the config field
}  # fmt: skip
_PROBE_KEY = "\x00probe"  # Select value of a probed model's config (never a catalogue name)
_INT_FIELDS = ("batch", "seq", "dp", "tp", "pp", "lora_rank")
_CSS_PATH = Path(__file__).with_name("estimator_panel.tcss")
_UNREAD = object()  # no value read for a field (never equal to a field's value)
_PLAIN_NUMBER = re.compile(r"^\s*[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?\s*$")


class EstimatorPanel(VerticalScroll):
    """What-if memory estimate form (see the module docstring).

    Public state (read-only): ``estimate`` (last good Estimate or None; not shown while the
    form has an error), ``architecture``,
    ``spec``, ``invalid_fields`` (field -> message), ``max_batch_value`` (int or None),
    ``budget_bytes`` (the total the fit is checked against, or None), ``solving`` (a
    largest-batch solve is running or queued in a worker thread), ``estimates_run`` (how many
    times the form was read and estimated since it was built).
    """

    @property
    def solving(self) -> bool:
        """True while the largest-batch solve for the current form is not on screen yet."""
        return self._solving or self._pending_solve is not None

    DEFAULT_CSS = _CSS_PATH.read_text(encoding="utf-8")

    class EstimateChanged(Message):
        """A new valid estimate is on screen (posted only when it differs from the last).

        Attributes: ``estimate`` (Estimate), ``architecture``, ``spec`` (TrainingSpec), ``bands``
        (:func:`~gpumem_tui.ui.memory_bar.bands_from_estimate`), ``panel``, ``pid`` (the
        process the form belongs to once the user changed a field since the form took that
        process's estimate, or None: a what-if for no process, or the form only showing a
        process's estimate; one equal to that process's own estimate is no change),
        ``model`` (the model's name as the form shows it).
        """

        def __init__(
            self, panel: EstimatorPanel, estimate: Any, architecture: Any, spec: Any, pid: int | None, model: str
        ) -> None:
            super().__init__()
            self.panel = panel
            self.pid = pid
            self.model = model
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
        try:  # models already downloaded on this box (offline): their config.json paths
            from gpumem_tui.estimator.models import cached_configs

            self._cached_models = [(f"{repo} (HF cache)", path) for repo, path in cached_configs()]
        except Exception:  # noqa: BLE001 - an unreadable cache must not kill the dashboard
            self._cached_models = []
        self._arch_cache: dict[tuple[str, float | None], Any] = {}
        # config files the user types are read off the UI thread (a FIFO or a huge file)
        self._file_loads = BackgroundLoads(lambda key: self.app.call_from_thread(self.recompute))
        self._probe_arch: Any = None
        self._probe_label: str | None = None
        self._base_spec: Any = None
        self._shown_process: tuple[int | None, int | None, int | None] = (None, None, None)
        self._job: Any = None  # the shown process's estimate from its probe (what-ifs differ from it)
        # The shown probed rank's parallel plan: the form then estimates one rank of that job.
        self._plan: Any = None
        # A process shown before the form's fields are mounted waits here: setting a Select's
        # options before it is composed raises, and its mount would reset its value.
        self._fields_mounted = False
        self._pending_process: tuple[int | None, Any] | None = None
        self.process_pid: int | None = None
        # The user changed a field since the form took process_pid's estimate: only then is a
        # new estimate the user's for that process (not when the GPU or a loaded file redraws
        # the form, nor the form's first estimate of a process it was not showing).
        self._user_edit = False
        self._gpu_total: int | None = None
        self._gpu_label: str | None = None
        self._gpu_context: int | None = None
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
        #: the fields' values the last recompute read (id -> value); a field's Changed event
        #: carrying the value read is no change (_on_field_changed)
        self._values_read: dict[str | None, Any] = {}
        self.estimates_run = 0  # recomputes since the panel was built (tests count them)

    # ----- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Container(id="est-form"):
            yield from estimator_form.model_fields(self._catalogue, self._cached_models, self._initial_model)
            yield from estimator_form.setup_fields()
        yield Static("", id="est-message", classes="-empty")
        yield Static("", id="est-whatif", classes="-empty")
        yield MemoryBar(id="est-bar")
        yield Static("", id="est-fit")
        yield Static("", id="est-maxbatch")
        yield Static("", id="est-breakdown")
        yield Static("", id="est-notes")

    def on_mount(self) -> None:
        # The app's selection (the GPU's total, the process) first, whichever came first, its
        # first snapshot or this mount: the first estimate below is made with it, and it is
        # the only one (a push after the mount would estimate a second time).
        push_selection = getattr(self.app, "update_side_pane", None)
        if push_selection is not None:
            push_selection()
        self._fields_mounted = True  # children are mounted before their parent's Mount
        self._sync_enabled()
        runs = self.estimates_run
        if self._pending_process is not None:
            pid, process, job = self._pending_process
            self._pending_process = None
            self.show_process(pid, process, job)  # recomputes when the process has an estimate
        if self.estimates_run == runs:
            # The form's first estimate (with the GPU total pushed before the mount, if any):
            # the fields' first values, posted as they mount, are no change then.
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
            self._render_estimate(stale=any(name != "budget" for name in self.invalid_fields))

    def on_resize(self) -> None:
        self.query_one(MemoryBar).refresh()

    # ----- public API ------------------------------------------------------------------------

    def set_gpu_total(self, total_bytes: int | None, label: str | None = None,
                      measured_context: int | None = None) -> None:
        """The selected GPU's total memory in bytes (None: no GPU). ``label`` names it on screen
        (e.g. "GPU 0 A100"). A budget typed in the panel takes precedence.
        ``measured_context``: the CUDA context after initialisation measured on this GPU
        (bytes, :mod:`gpumem_tui.telemetry.measured_context`), used by what-if estimates on CUDA instead
        of the profile's figure; None: the profile's."""
        self._gpu_total = int(total_bytes) if total_bytes and total_bytes > 0 else None
        self._gpu_label = label
        self._gpu_context = measured_context
        # What the box measured is no edit of the user's: only a change made through a focused
        # field counts as one (_on_field_changed), so this recompute never claims the PID.
        # Before the fields are mounted, on_mount estimates with it (once, not twice).
        if self._fields_mounted:
            self.recompute()

    def show_process(self, pid: int | None, process: Any = None, job: Any = None) -> None:
        """The form now belongs to ``pid`` (None: a what-if for no process).

        ``process`` is that PID's :class:`~gpumem_tui.analysis.process_estimate.ProcessEstimate` (from
        its probe, or set by the user earlier), or None when it has none. With one, the form
        shows its model and setup, and every field the form has no widget for (keep-outputs,
        gradient accumulation, LoRA targets, ...) is kept from its spec, so the form's estimate
        is the process's own. Without one, the form keeps what it shows (nothing is predicted
        for that process until the user changes the form). A later change of the form is
        posted with ``pid`` in :class:`EstimateChanged`. ``job`` is the process's estimate from
        its probe (None: not probed); the what-if line compares the form with it.
        """
        if not self._fields_mounted:
            self._pending_process = (pid, process, job)
            return
        shown = (pid, None if process is None else id(process), None if job is None else id(job))
        if shown == self._shown_process:
            return
        try:
            self._show_process(pid, process, job)
        except Exception:
            self._shown_process = (None, None, None)  # not shown: the next push tries again
            raise
        self._shown_process = shown

    def _show_process(self, pid: int | None, process: Any, job: Any) -> None:
        self.process_pid = pid
        self._job = job if pid is not None else None
        # a what-if on a probed rank stays a what-if on one rank of the job the probe saw
        self._plan = getattr(job if job is not None else process, "plan", None) if pid is not None else None
        self._user_edit = False
        if process is None:
            if pid is None and self._base_spec is not None:
                self._base_spec = None  # a what-if holds only what the form shows
                self.recompute()
            else:
                self._show_what_if()
            return
        arch, spec = process.architecture, process.spec
        with self.prevent(Input.Changed, Select.Changed, Checkbox.Changed):
            if arch is not None:
                self._probe_arch = arch
                # the model's name and whose it is (a what-if's label lists its changes instead)
                whose = "probe" if process.source == "probe" else "set by you"
                self._probe_label = printable(f"{process.model or 'model'} ({whose}, pid {pid})", limit=60)
                self._set_model_options()
                select = self.query_one("#est-model", Select)
                if select.value == _PROBE_KEY and self._catalogue:
                    # Select redraws its label only when the value changes: step off and back.
                    select.value = self._catalogue[0]
                select.value = _PROBE_KEY
                self.query_one("#est-config", Input).value = ""
            if spec is not None:
                self._set_form_from_spec(spec)
        self._base_spec = spec
        self._sync_enabled()
        self.recompute()
        if process.problem:
            self._show_message(process.problem)

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
        self._user_edit = True
        self.recompute()

    # ----- events ----------------------------------------------------------------------------

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    def _on_field_changed(self, event: Message) -> None:
        event.stop()
        if isinstance(event, Select.Changed) and event.select.id == "est-task":
            self._sync_enabled()
        # The user's change comes through the field that has the focus (typing, a click, the
        # Select's list); a field setting its first value when mounted has none.
        control, focused = getattr(event, "control", None), self.app.focused
        if control is not None and focused is not None and (focused is control or control in focused.ancestors):
            self._user_edit = True
        # A change the last estimate already read is no change: each field posts its first
        # value when it mounts, after the form estimated with it (on_mount; 13 estimates of
        # the same form per start without this). A later change of the field posts its new value.
        if control is not None and self._values_read.get(control.id, _UNREAD) == getattr(event, "value", _UNREAD):
            return
        self.recompute()

    # ----- the computation -------------------------------------------------------------------

    def recompute(self) -> None:
        """Read the form, estimate, and redraw; mark bad fields. Never raises."""
        started = time.perf_counter()
        self.estimates_run += 1
        self._values_read = {}
        try:
            self._values_read = self._field_values()
            self._recompute()
        except Exception as exc:  # noqa: BLE001 - the dashboard must survive estimator bugs
            self._mark_invalid({"": f"estimator failed: {type(exc).__name__}: {exc}"})
        self.last_update_seconds = time.perf_counter() - started

    def _field_values(self) -> dict[str | None, Any]:
        """Each input field's value by its id (what the estimate reads from the form)."""
        return {field.id: field.value for field in self.query_one("#est-form").children
                if isinstance(field, (Input, Select, Checkbox))}

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
                # A process's spec keeps the fields the form has no widget for (keep-outputs,
                # LoRA targets, ...) while the task is the process's own.
                base = self._base_spec
                spec = replace(base, **kwargs) if base is not None and base.task == kwargs["task"] else TrainingSpec(**kwargs)
            except SpecError as exc:
                errors[self._field_for(exc.field)] = str(exc)
            except (TypeError, ValueError) as exc:
                errors[""] = str(exc)
        est = None
        if arch is not None and spec is not None:
            try:
                est = run_estimate(arch, spec) if self._plan is None else self._rank_estimate(arch, spec)
            except SpecError as exc:
                errors[self._field_for(exc.field)] = str(exc)
            except ArchitectureError as exc:
                errors[self._model_field()] = str(exc)
            except ValueError as exc:
                errors[""] = str(exc)
        # A budget that cannot be read is none (not the last one read): the fit is not checked.
        self.budget_bytes = budget if "budget" not in errors else None

        self._mark_invalid(errors)
        if est is not None:
            self.estimate, self.architecture, self.spec = est, arch, spec
            key = (id(arch), spec)
            if key != self._posted_key:
                self._posted_key = key
                pid = self.process_pid if self._user_edit else None
                self.post_message(self.EstimateChanged(self, est, arch, spec, pid, self.model_name()))
        # The estimate needs every field but the budget; without a budget it has no fit line.
        stale = any(name != "budget" for name in errors)
        self._render_estimate(stale=stale)
        self._show_what_if()
        if not stale:
            self._start_max_batch()
        else:
            self._generation += 1  # a solve still running is for an earlier form: not shown
            self.max_batch_value = None
            _set_text(self.query_one("#est-maxbatch", Static), "", fixed_height=True)

    def _rank_estimate(self, arch: Any, spec: Any) -> Any:
        """One rank's estimate of the shown probed job's plan (raises as ``estimate``)."""
        from gpumem_tui.analysis.probed_job import rank_estimate

        return rank_estimate(arch, spec, self._plan).estimate

    def _per_rank_title(self) -> str:
        """``", per rank (ddp, 2 ranks)"`` when the form estimates one rank of a probed job, else ``""``."""
        plan = self._plan
        return f", per rank ({plan.kind}, {plan.world_size} ranks)" if plan is not None else ""

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

    def model_name(self) -> str:
        """The model as the form shows it: a catalogue name, a config path or count, or the
        probed model's label."""
        source = self.query_one("#est-config", Input).value.strip()
        if source:
            return source
        value = self.query_one("#est-model", Select).value
        if value == _PROBE_KEY:
            return (self._probe_label or "probed model").split(" (", 1)[0]
        return str(value) if isinstance(value, str) else "model"

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
        if self._gpu_context is not None and kwargs["device"] == "cuda" and self._base_spec is None:
            kwargs["measured_context"] = self._gpu_context  # a what-if on this box's GPU
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
        options += [(Text(label), path) for label, path in self._cached_models]
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
            lines = [
                f"{_FIELD_LABELS.get(k, k)}: {estimate_text.in_form_words(v, _FIELD_LABELS)}"
                if k
                else estimate_text.in_form_words(v, _FIELD_LABELS)
                for k, v in errors.items()
            ]
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
        if est is None or stale:
            # No figure for a form that cannot be estimated: the message above says why.
            bar.set_data([], self.budget_bytes)
            for name in ("-fits", "-nofit", "-nobudget"):
                fit.set_class(name == "-nobudget", name)
            _set_text(fit, "no estimate for this form: fix the field marked above" if stale else "",
                      fixed_height=True)
            _set_text(breakdown, "")
            _set_text(notes, "")
            return
        bar.set_data(segment_bytes(est), self.budget_bytes)
        typed_budget = bool(self.query_one("#est-budget", Input).value.strip())
        where = f" ({self._gpu_label})" if self._gpu_label and not typed_budget else ""
        state, text = estimate_text.fit_line(estimate_peak(est), self.budget_bytes, where)
        for name in ("-fits", "-nofit", "-nobudget"):
            fit.set_class(name == state, name)
        _set_text(fit, text, fixed_height=True)
        _set_text(breakdown, estimate_text.breakdown_text(est, lambda variable: theme_colour(self, variable)))
        _set_text(notes, estimate_text.notes_text(est, self._warnings(), _FIELD_LABELS))

    def _show_what_if(self) -> None:
        """The line over the result: whether the form shows the selected job's own estimate
        (from its probe) or a what-if, and which settings differ from the job's."""
        from gpumem_tui.analysis.process_estimate import what_if_changes

        line = self.query_one("#est-whatif", Static)
        job, pid = self._job, self.process_pid
        text = ""
        if pid is not None and job is not None and job.estimate is not None:
            if any(name != "budget" for name in self.invalid_fields):
                text = f"what-if on PID {pid}: not estimated (see above) · p / ctrl+r: the job's estimate"
            else:
                changes = what_if_changes(job, self.architecture, self.spec, self.model_name())
                rank = self._per_rank_title()
                text = (f"what-if on PID {pid}{rank}: {', '.join(changes)} · p / ctrl+r: the job's estimate" if changes
                        else f"PID {pid}: the job's own estimate (from its probe){rank}")
        line.set_class(not text, "-empty")
        line.set_class(text.startswith("what-if"), "-what-if")
        _set_text(line, printable(text, limit=300))

    def _warnings(self) -> list[str]:
        """The spec's own warnings plus those against the model (e.g. seq > max positions)."""
        try:
            from gpumem_tui.estimator.spec import check_spec_for

            return list(check_spec_for(self.architecture, self.spec))
        except Exception:  # noqa: BLE001 - the estimate already passed these checks
            return list(getattr(self.spec, "warnings", ()) or ())

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
        request = (self._generation, arch, spec, budget, self._plan)
        if self._solving:
            # One solve at a time, never cancelled (a cancelled worker would fail an app's
            # wait_for_complete); the newest request waits and older ones are dropped.
            self._pending_solve = request
            return
        self._solving = True
        self._solve_max_batch(*request)

    @work(thread=True, group="estimator-max-batch", exit_on_error=False)
    def _solve_max_batch(self, generation: int, arch: Any, spec: Any, budget: int, plan: Any = None) -> None:
        from gpumem_tui.estimator.cli_parallel import max_batch_job
        from gpumem_tui.estimator.solve import max_batch

        try:  # a probed rank: the largest micro-batch whose largest rank fits
            value: int | None = int(max_batch(arch, spec, budget) if plan is None else max_batch_job(arch, spec, plan, budget))
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
