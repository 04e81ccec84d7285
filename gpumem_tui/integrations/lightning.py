"""The probe as a Lightning ``Callback``: one line in a Lightning script.

    from gpumem_tui.integrations.lightning import GpumemCallback
    trainer = lightning.pytorch.Trainer(..., callbacks=[GpumemCallback()])

Works with ``lightning`` (``lightning.pytorch``) and, when only that is installed, the older
``pytorch_lightning`` package. The probe attaches at the first ``on_train_batch_start``, when the
batch shows ``b`` and ``s``, to the LightningModule's transformers model (the submodule with a
Hugging Face ``config``; :func:`gpumem_tui.integrations.model_setup.find_config_holder`) when
that holds every parameter, else to the LightningModule itself. What it publishes:

- batch and seq: the first batch's ``input_ids`` (or first tensor) shape;
- ``grad_accum`` (``Trainer.accumulate_grad_batches``), ``dtype`` / ``mixed_precision``
  (``Trainer.precision``: ``bf16-mixed`` / ``16-mixed`` over fp32 parameters), the optimizer
  (``Trainer.optimizers[0]``: class, hyperparameters, ``fused``/``foreach``);
- task, LoRA and ``recipe`` from the model (:mod:`gpumem_tui.integrations.model_setup`);
- ``rank`` (``Trainer.global_rank``), ``local_rank``, ``world_size``, ``dp``, ``strategy``;
- ``zero_grad``: ``before_backward``: Lightning's automatic optimization calls
  ``zero_grad`` inside its closure after ``training_step`` and before ``backward``
  (``loops/optimization/automatic.py``, ``Closure.closure``), so the previous step's gradients
  are alive through the next forward.

Phases (Lightning's hooks, in the order ``fit`` calls them): ``on_train_batch_start`` ->
forward (the probe's forward hooks on the model mark it too), ``on_before_backward`` ->
backward, ``on_before_optimizer_step`` -> optimizer step (then gradient clipping and the update
itself), and the optimizer's step post-hook (or ``on_train_batch_end``) -> idle. The probe's own
optimizer step *pre*-hook is off (``step_start_hook=False``): Lightning calls
``optimizer.step(closure)`` and the closure runs forward and backward inside the step
(``plugins/precision/precision.py``, ``_wrap_closure``). ``on_train_end`` (and
``on_exception``) closes the probe.

Raises:
    ImportError: neither lightning nor pytorch_lightning is installed (one line), at import.
"""

from __future__ import annotations

from typing import Any

try:
    import lightning.pytorch as _pl
    from lightning.pytorch import Callback

    _FRAMEWORK = "lightning"
except ImportError:
    try:
        import pytorch_lightning as _pl
        from pytorch_lightning import Callback

        _FRAMEWORK = "pytorch_lightning"
    except ImportError as exc:  # pragma: no cover - exercised in a subprocess without either
        raise ImportError(
            "gpumem_tui.integrations.lightning needs lightning (pip install lightning) or pytorch_lightning"
        ) from exc

from gpumem_tui.integrations.model_setup import (
    find_config_holder,
    model_setup,
    optimizer_setup,
    precision_setup,
)
from gpumem_tui.integrations.session import ProbeSession, check_version, probe_options, sequence_length

__all__ = ["GpumemCallback", "lightning_setup", "probed_module"]


def _framework_version() -> object:
    return getattr(_pl, "__version__", "unknown")


_AUTOCAST = {"bf16-mixed": "bf16", "16-mixed": "fp16", "bf16": "bf16", "16": "fp16"}


def probed_module(pl_module: Any) -> Any:
    """The module the probe attaches to: the transformers model inside ``pl_module`` when it
    holds all of ``pl_module``'s parameters (its config, class and hooks then describe the
    model), else ``pl_module``."""
    holder = find_config_holder(pl_module)
    if holder is None or holder is pl_module:
        return pl_module
    inner = {id(p) for p in holder.parameters()}
    return holder if all(id(p) in inner for p in pl_module.parameters()) else pl_module


def lightning_setup(trainer: Any, module: Any, optimizer: Any) -> dict[str, Any]:
    """Setup keys (TrainingSpec field names and notes) from a Lightning ``Trainer``, the probed
    module and the torch optimizer; attributes a Lightning version lacks are left out.

    Raises:
        AttributeError / TypeError: ``module`` has no ``parameters()`` (the callback warns).
    """
    setup: dict[str, Any] = {"framework": _FRAMEWORK, "zero_grad": "before_backward"}
    accum = getattr(trainer, "accumulate_grad_batches", 1)
    if isinstance(accum, int) and accum > 1:
        setup["grad_accum"] = accum
    param_dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), None)
    setup.update(precision_setup(param_dtype, _AUTOCAST.get(str(getattr(trainer, "precision", "")))))
    setup.update(optimizer_setup(optimizer))
    world = getattr(trainer, "world_size", 1)
    if isinstance(world, int) and world > 0:
        setup["world_size"] = world
        if world > 1:
            setup["dp"] = world
    for key, attr in (("rank", "global_rank"), ("local_rank", "local_rank")):
        value = getattr(trainer, attr, None)
        if isinstance(value, int) and value >= 0:
            setup[key] = value
    strategy = getattr(trainer, "strategy", None)
    if strategy is not None:
        setup["strategy"] = type(strategy).__name__
    setup.update(model_setup(module))
    return setup


class GpumemCallback(Callback):
    """Attaches the gpumem-tui probe at the first training batch, marks forward, backward and
    the optimizer step from Lightning's hooks, and closes the probe when training ends.

    Keyword arguments go to :func:`gpumem_tui.probe.attach` (``directory``, ``interval``,
    ``extra``...); ``batch`` / ``seq`` / ``task`` override what is read from the batch and the
    model. Never stops training: what it cannot read or use gives one ``RuntimeWarning``.
    """

    def __init__(self, **probe_kwargs: Any) -> None:
        self.probe_kwargs = dict(probe_kwargs)
        self.session = ProbeSession("GpumemCallback (lightning)")
        check_version(self.session.name, _FRAMEWORK, _framework_version(), (2,))
        self._tried = False

    @property
    def probe(self) -> Any:
        """The attached :class:`gpumem_tui.probe.Probe`, or None."""
        return self.session.probe

    def _attach(self, trainer: Any, pl_module: Any, batch: Any) -> None:
        self._tried = True
        optimizers = list(getattr(trainer, "optimizers", None) or [])
        if len(optimizers) > 1:
            self.session.warn(f"{len(optimizers)} optimizers: the probe follows one model and one optimizer")
            return
        optimizer = optimizers[0] if optimizers else None
        module = self.session.guarded("cannot read the LightningModule", probed_module, pl_module)
        if module is None:
            return
        setup = self.session.guarded("cannot read the Lightning setup", lightning_setup, trainer, module, optimizer)
        if setup is None:
            return
        b, s = sequence_length((batch,), {})
        options = probe_options(setup, self.probe_kwargs, b, s)
        if options["seq"] is None:
            self.session.warn("the first batch has no (batch, sequence) shaped tensor; pass seq=")
            return
        self.session.attach(module, optimizer, step_start_hook=False, **options)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """Attach at the first batch; mark forward (the closure's ``training_step`` is next)."""
        if not self._tried:
            self._attach(trainer, pl_module, batch)
        self.session.mark("forward")

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        """Backward starts (after ``training_step`` and ``zero_grad``)."""
        self.session.mark("backward")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """The optimizer step starts (gradient clipping, then the update)."""
        self.session.mark("optimizer_step")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """The batch is done (the probe's step post-hook already marked idle after a step)."""
        self.session.mark("idle")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Close the probe: its last samples, peaks and end record are written (a later
        ``fit`` attaches a new one)."""
        self.session.close()
        self._tried = False

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Training failed: close the probe so the stream ends cleanly."""
        self.session.close()
