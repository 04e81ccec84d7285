"""``torchtitan``: torchtitan's trainer (``torchtitan/train.py``) with its activation checkpointing.

Read from torchtitan ``torchtitan/distributed/activation_checkpoint.py`` (torchtitan 0.1/0.2,
``_apply_ac_to_transformer_block``): ``mode = "selective"`` with ``selective_ac_option = "op"``
(the shipped Llama 3 configs) wraps each block with ``ptd_checkpoint_wrapper`` (non-reentrant)
and a ``create_selective_checkpoint_contexts`` policy that saves the outputs of the ops in
``_save_list`` -- ``aten.mm``, the flash / efficient SDPA kernels, ``reduce_scatter_tensor``,
``aten.max`` -- "except every second mm" (a per-block mm counter: the 1st, 3rd, 5th ... mm
outputs are saved). ``mode = "full"`` wraps each block without a policy.
``torchtitan/components/loss.py``: ``cross_entropy(pred.flatten(0, 1).float(), labels)`` (fp32
upcast of the whole logits); ``train.py`` runs ``pred = model(inputs)``, the loss, ``del pred``,
``loss.backward()`` (no kept output). torchtitan's own models have no HF cache. The optimizer
(``torchtitan/components/optimizer.py``) defaults to ``implementation = "fused"``.
"""

from gpumem_tui.estimator.recipes.description import Recipe

RECIPE = Recipe(
    name="torchtitan",
    title="torchtitan trainer (op-level selective AC saves every other mm output; fused AdamW)",
    source="torchtitan/distributed/activation_checkpoint.py (_apply_ac_to_transformer_block, op SAC); "
    "torchtitan/components/loss.py; torchtitan/train.py",
    version="torchtitan 0.2",
    training_cache="off",
    selective_policy="op-every-other-mm",
    optimizer_impl="fused",
)
