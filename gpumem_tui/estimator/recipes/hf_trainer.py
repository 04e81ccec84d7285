"""``hf-trainer``: transformers ``Trainer`` over a transformers model.

Read from transformers 4.57 ``src/transformers/trainer.py`` and ``training_args.py``, checked
against transformers 5.24's (installed) and measured with 5.17 on an H100:

- ``training_step``: ``loss = self.compute_loss(model, inputs)``; ``compute_loss`` calls
  ``outputs = model(**inputs)`` and returns only the loss (``return_outputs=False``), so the
  output and its logits are dropped before ``accelerator.backward(loss)``: no kept output.
- the collator's batch carries no ``use_cache``, so the model's config value applies: with
  ``use_cache=true`` a training forward fills a ``DynamicCache`` (turned off under gradient
  checkpointing by ``GradientCheckpointingLayer``).
- the loss is the model's own ``ForCausalLMLoss`` (fp32 upcast of the whole logits).
- checkpointing: transformers 4.57's ``gradient_checkpointing_enable()`` (``modeling_utils.py``)
  defaulted to ``{"use_reentrant": True}``; transformers 5 defaults to non-reentrant: the Trainer
  passes ``activation_checkpointing_kwargs=gc_kwargs or None`` (``trainer.py``, 5.24) and
  ``_activation_checkpointing_enable`` turns None into ``{"use_reentrant": False}``
  (``modeling_utils.py``, 5.24). Seen on the H100 with transformers 5.17 (``checkpoint_seen``
  of ``tests/data/recipes_cuda``: non-reentrant in every checkpointed Trainer case).
- ``TrainingArguments.optim`` defaults to ``adamw_torch_fused`` with torch >= 2.8
  (``adamw_torch`` before): ``torch.optim.AdamW(fused=True)``.
- ``model.zero_grad()`` after each step: ``set_to_none=True`` (torch >= 2.0).
- ``bf16=True`` / ``fp16=True`` is accelerate's native AMP whatever the weights' dtype
  (accelerate 1.15 ``accelerator.py``, ``prepare_model``: ``model.forward =
  convert_outputs_to_fp32(autocast_context(model_forward_func))``), so a 16-bit model trains
  under autocast too (``autocast_16bit_weights``; assumed set with a 16-bit ``--dtype``):
  peft's fp32 LoRA adapters then save 16-bit input casts (measured, H100, transformers 5.17).
"""

from gpumem_tui.estimator.recipes.description import Recipe

RECIPE = Recipe(
    name="hf-trainer",
    title="transformers Trainer (compute_loss drops the output; fused AdamW; non-reentrant checkpointing)",
    source="transformers/trainer.py (training_step, compute_loss); transformers/training_args.py (optim); "
    "transformers/modeling_utils.py (gradient_checkpointing_enable)",
    version="transformers 5.17-5.24 (4.57 before: reentrant checkpointing) with torch >= 2.8",
    training_cache="config",
    checkpoint_impl="non-reentrant",
    optimizer_impl="fused",
    autocast_16bit_weights=True,
)
