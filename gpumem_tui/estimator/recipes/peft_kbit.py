"""``peft-kbit``: ``peft.prepare_model_for_kbit_training`` + transformers ``Trainer`` (QLoRA).

Read from peft ``src/peft/utils/other.py`` (``prepare_model_for_kbit_training``, peft 0.x) and
the transformers ``Trainer`` (see :mod:`.hf_trainer`):

- every parameter is frozen, then "cast all non INT8 parameters to fp32": each fp16 / bf16
  parameter (embeddings, norms, LM head, biases; not the packed ``Params4bit`` / ``Int8Params``
  weights) becomes fp32. The embedding output is then fp32, each norm returns fp32 and each
  bitsandbytes Linear casts its output back to its input's dtype, so the residual stream and
  the gated MLP's tensors are fp32. Under the Trainer's ``bf16=True`` autocast (see
  :mod:`.hf_trainer`) the fp32 LM head is an autocast ``linear``: its 16-bit weight cast is
  held until its backward and the logits are 16-bit (without autocast they are fp32).
- ``use_gradient_checkpointing=True`` (default) calls ``model.gradient_checkpointing_enable``:
  reentrant unless ``gradient_checkpointing_kwargs={"use_reentrant": False}``, and with
  reentrant checkpointing ``model.enable_input_require_grads()`` makes the embedding output
  require grad.
- the rest is the Trainer's: no kept output, config ``use_cache`` (off under checkpointing),
  fused AdamW with torch >= 2.8, autocast over the 16-bit compute dtype.
- measured on an H100 (``tests/data/recipes_cuda``, transformers 5.17, peft 0.21, bitsandbytes
  0.50): Llama-3.2-1B nf4, b=2 s=1024 and b=4 s=1024 with checkpointing, allocated within 0.4 %;
  torch reserved -0.3 % and +1.0 % with the allocator replay of :mod:`~gpumem_tui.estimator.
  devices.cuda_kbit_events` (the analytic reserve share gave +1.1 % and -8.9 %).
"""

from gpumem_tui.estimator.recipes.description import Recipe

RECIPE = Recipe(
    name="peft-kbit",
    title="peft prepare_model_for_kbit_training + Trainer (fp32 non-quantized params, checkpointing on)",
    source="peft/utils/other.py (prepare_model_for_kbit_training); transformers/trainer.py",
    version="peft 0.x, transformers 4.57",
    training_cache="config",
    checkpoint_impl="reentrant",
    default_grad_ckpt="full",
    optimizer_impl="fused",
    autocast_16bit_weights=True,
    kbit_fp32_non_quantized=True,
    input_requires_grad=True,
)
