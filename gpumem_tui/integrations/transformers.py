"""The probe as a transformers ``TrainerCallback``: one line in a Trainer (or TRL) script.

    from gpumem_tui.integrations.transformers import GpumemCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[GpumemCallback()])

TRL's trainers (``SFTTrainer``, ``DPOTrainer``...) subclass ``Trainer`` and take the same
``callbacks=``. What the probe publishes comes from the framework (transformers'
``trainer_callback.py`` hands callbacks ``args``, ``state``, ``model`` and ``optimizer``):

- batch: the first micro-batch's ``input_ids`` first dimension (else
  ``TrainingArguments.per_device_train_batch_size``); seq: its second dimension. The probe
  attaches in a forward pre-hook at the first forward, when both are known.
- ``grad_accum`` (``gradient_accumulation_steps``), ``grad_ckpt`` (``activation_checkpointing``,
  before transformers 5 ``gradient_checkpointing`` -> ``full``), ``dtype`` / ``mixed_precision`` (``bf16`` / ``fp16`` over fp32 parameters),
  the optimizer (the torch optimizer inside accelerate's wrapper: its class, hyperparameters
  and ``fused``/``foreach`` flags), ``optim`` (the argument's name, as a note);
- ``task`` / ``lora_rank`` / ``lora_targets`` / ``recipe`` from the model (peft LoRA, k-bit
  weights: :mod:`gpumem_tui.integrations.model_setup`), else ``recipe`` ``hf-trainer``;
- ``rank`` (``args.process_index``), ``local_rank``, ``world_size`` and ``dp``.

Phases: forward and backward are marked by the probe's hooks on the model (forward pre/post
hooks; the loss's ``grad_fn``), the optimizer step by its hooks on the torch optimizer;
``on_pre_optimizer_step`` / ``on_optimizer_step`` mark the same moments (gradient clipping
runs before them, in the backward phase). ``on_train_end`` closes the probe (its end record).

Raises:
    ImportError: transformers is not installed (one line naming the package), at import.
"""

from __future__ import annotations

from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without transformers
    raise ImportError(
        "gpumem_tui.integrations.transformers needs transformers (pip install transformers)"
    ) from exc

from gpumem_tui.integrations.model_setup import (
    model_setup,
    optimizer_setup,
    precision_setup,
    unwrap_optimizer,
)
from gpumem_tui.integrations.session import ProbeSession, check_version

__all__ = ["GpumemCallback", "trainer_setup"]
_FRAMEWORK = "transformers"


def _framework_version() -> object:
    import transformers  # looked up now: transformers replaces its module object while importing

    return getattr(transformers, "__version__", "unknown")


def _first_param_dtype(model: Any) -> Any:
    for param in model.parameters():
        if param.is_floating_point():
            return param.dtype
    return None


def trainer_setup(args: Any, model: Any, optimizer: Any) -> dict[str, Any]:
    """Setup keys (TrainingSpec field names and notes) from ``TrainingArguments``, the model and
    the torch optimizer. Reads attributes with defaults, so an older or newer transformers
    whose arguments lack one leaves that key out.

    Raises:
        AttributeError / TypeError: ``model`` has no ``parameters()`` (the callback warns).
    """
    setup: dict[str, Any] = {"framework": "transformers", "recipe": "hf-trainer"}
    accum = getattr(args, "gradient_accumulation_steps", 1)
    if isinstance(accum, int) and accum > 1:
        setup["grad_accum"] = accum
    # transformers 5 renamed gradient_checkpointing to activation_checkpointing (the old name warns)
    checkpointing = getattr(args, "activation_checkpointing", None)
    if checkpointing is None:
        checkpointing = getattr(args, "gradient_checkpointing", False)
    if checkpointing is True:
        setup["grad_ckpt"] = "full"
    autocast = "bf16" if getattr(args, "bf16", False) is True else "fp16" if getattr(args, "fp16", False) is True else None
    setup.update(precision_setup(_first_param_dtype(model), autocast))
    optim = getattr(args, "optim", None)
    if optim is not None:
        setup["optim"] = str(getattr(optim, "value", optim))
    setup.update(optimizer_setup(optimizer))
    world = getattr(args, "world_size", 1)
    if isinstance(world, int) and world > 0:
        setup["world_size"] = world
        if world > 1:
            setup["dp"] = world
    for key, attr in (("rank", "process_index"), ("local_rank", "local_process_index")):
        value = getattr(args, attr, None)
        if isinstance(value, int) and value >= 0:
            setup[key] = value
    setup.update(model_setup(model))  # peft-kbit (what the model is) wins over hf-trainer
    return setup


class GpumemCallback(TrainerCallback):
    """Attaches the gpumem-tui probe to the Trainer's model at its first forward, marks the
    optimizer step, and closes the probe when training ends.

    Keyword arguments go to :func:`gpumem_tui.probe.attach` (``directory``, ``interval``,
    ``min_step_interval``, ``extra``...; ``extra`` wins over what is read from the Trainer);
    ``batch`` / ``seq`` / ``task`` override what the callback reads. The probe directory is
    ``$GPUMEM_TUI_PROBE_DIR`` or the user's cache (``~/.cache/gpumem-tui/probes``).

    Never stops training: a model or arguments it cannot read, a second probe in the same
    process, or an unusable probe directory give one ``RuntimeWarning``.
    """

    def __init__(self, **probe_kwargs: Any) -> None:
        self.probe_kwargs = dict(probe_kwargs)
        self.session = ProbeSession("GpumemCallback (transformers)")
        check_version(self.session.name, _FRAMEWORK, _framework_version(), (4, 5))

    @property
    def probe(self) -> Any:
        """The attached :class:`gpumem_tui.probe.Probe`, or None (before the first forward,
        after training, or after a failure)."""
        return self.session.probe

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       optimizer: Any = None, **kwargs: Any) -> None:
        """Read the setup and arm a forward pre-hook that attaches at the first forward."""
        if model is None or self.session.probe is not None:
            return
        torch_optimizer = unwrap_optimizer(optimizer)
        setup = self.session.guarded("cannot read the Trainer's setup", trainer_setup, args, model, torch_optimizer)
        if setup is None:
            return
        max_steps = getattr(state, "max_steps", None)
        if isinstance(max_steps, int) and max_steps > 0:
            setup["max_steps"] = max_steps
        self.session.attach_at_first_forward(
            model, torch_optimizer, setup, self.probe_kwargs, getattr(args, "per_device_train_batch_size", None)
        )

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The optimizer step starts (after gradient clipping)."""
        self.session.mark("optimizer_step")

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The optimizer step is over (the learning-rate scheduler and ``zero_grad`` follow)."""
        self.session.mark("idle")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Close the probe: its last samples, peaks and end record are written."""
        self.session.close()
