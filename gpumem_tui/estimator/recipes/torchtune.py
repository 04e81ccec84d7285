"""``torchtune``: torchtune's single-device recipes (``recipes/lora_finetune_single_device.py``,
``recipes/full_finetune_single_device.py``).

Read from torchtune 0.6: ``torchtune/modules/loss/ce_chunked_output_loss.py``
(``CEWithChunkedOutputLoss``, ``num_output_chunks=8``: the model returns its logits as 8
chunks along the tokens and the loss upcasts one chunk at a time, ``F.cross_entropy(
logits.float(), ...)``); the recipe's ``_loss_step`` runs ``logits = self._model(**batch)``,
the loss, then ``del logits`` before ``loss.backward()`` (no kept output); torchtune's own
``TransformerDecoder`` has no Hugging Face cache in training; the shipped configs build
``torch.optim.AdamW`` with ``fused: True``; ``optimizer.zero_grad(set_to_none=True)``;
activation checkpointing wraps each layer non-reentrantly (``training.set_activation_checkpointing``).
"""

from gpumem_tui.estimator.recipes.description import Recipe

RECIPE = Recipe(
    name="torchtune",
    title="torchtune single-device recipe (chunked CE over 8 output chunks, fused AdamW, no HF cache)",
    source="torchtune/modules/loss/ce_chunked_output_loss.py; recipes/lora_finetune_single_device.py; "
    "recipes/configs/*_lora_single_device.yaml (optimizer fused: True)",
    version="torchtune 0.6",
    training_cache="off",
    loss_chunking="count",
    loss_chunk=8,
    optimizer_impl="fused",
)
