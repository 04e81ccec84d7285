"""``litgpt``: LitGPT's fine-tuning scripts (``litgpt/finetune/lora.py``, ``full.py``).

Read from litgpt 0.5: the loop runs ``logits = model(input_ids, lm_head_chunk_size=128)`` (the
LM head applied to 128-position pieces, a list of logit chunks), ``loss =
chunked_cross_entropy(logits, targets[..., 1:])`` (``litgpt/utils.py``: one
``F.cross_entropy`` per chunk on the logits as they are, no fp32 upcast; with
``precision="bf16-true"`` the log-probabilities are bf16) and ``fabric.backward(loss)`` while
``logits`` is still referenced, so the logits stay alive through backward and the optimizer
step (until the next iteration rebinds the name). LitGPT's ``GPT`` model has its own KV cache
for generation only, none in training; ``torch.optim.AdamW`` is built with torch's defaults
(foreach on CUDA); ``optimizer.zero_grad()`` sets to None.
"""

from gpumem_tui.estimator.recipes.description import Recipe

RECIPE = Recipe(
    name="litgpt",
    title="LitGPT finetune (LM head and loss in 128-position chunks, no upcast, logits kept through backward)",
    source="litgpt/finetune/lora.py (fit loop); litgpt/utils.py (chunked_cross_entropy); litgpt/model.py (GPT.forward)",
    version="litgpt 0.5",
    training_cache="off",
    keep_outputs=True,
    loss_upcast_fp32=False,
    loss_chunking="positions",
    loss_chunk=128,
)
