"""``torch``: a plain PyTorch loop over a transformers model, as ``gpumem-tui measure`` runs it.

Read from gpumem-tui's own ``gpumem_tui/measure/runner.py`` (this repository) and torch 2.11
``torch/optim/optimizer.py`` (``_default_to_fused_or_foreach``): ``out = model(input_ids=ids,
labels=ids)``, ``loss = out.loss``, ``del out``, ``loss.backward()``, ``opt.step()``,
``opt.zero_grad(set_to_none=True)``. The runner leaves ``use_cache`` at the config's value on
CUDA and passes ``use_cache=False`` on cpu/meta, so the cache follows the device profile.
The estimator's default: today's behaviour, unchanged.
"""

from gpumem_tui.estimator.recipes.description import Recipe

RECIPE = Recipe(
    name="torch",
    title="plain PyTorch loop over a transformers model (gpumem-tui measure's loop; the default)",
    source="gpumem_tui/measure/runner.py; torch/optim/optimizer.py (_default_to_fused_or_foreach)",
    version="gpumem-tui measure, torch 2.11",
    training_cache="device",
)
