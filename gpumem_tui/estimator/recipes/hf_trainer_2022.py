"""``hf-trainer-2022``: a transformers 4.1x ``Trainer`` on torch 1.10 (January 2022).

The stack of the measurements in transformers' "Efficient Training on a Single GPU" guide
(``docs/source/perf_train_gpu_one.mdx``; its ``nvidia-smi`` output is dated Tue Jan 11 2022,
driver 460.91.03, CUDA 11.2, a V100). torch 1.11 came out in March 2022, so that run used
torch 1.10 or older. What differs from
:mod:`.hf_trainer` (transformers 4.57, torch >= 2.8):

- the optimizer was transformers' own ``optimization.AdamW`` (``adamw_hf``), a Python loop
  over the parameters (one tensor at a time).
- ``model.zero_grad()`` after each step with torch 1.x's default ``set_to_none=False``: the
  gradients stay allocated between steps (``torch/nn/modules/module.py``, ``zero_grad``).
- ``torch.utils.checkpoint.checkpoint`` had only the reentrant implementation.
- torch <= 1.10 autograd saved the input of ``softmax`` as well as its output
  (``tools/autograd/derivatives.yaml``: ``_softmax_backward_data(grad, result, dim, self)``;
  pytorch/pytorch#64000 "Softmax/logsoftmax use more memory for backward than needed", fixed
  by #65242, relanded as #66018 on 2021-10-01, after the release/1.10 branch cut): eager
  attention keeps the ``b a s s`` scores of every layer until backward.
"""

from gpumem_tui.estimator.recipes.description import Recipe

RECIPE = Recipe(
    name="hf-trainer-2022",
    title="transformers 4.1x Trainer on torch 1.10 (adamw_hf, zero_grad keeps gradients, softmax keeps its input)",
    source="transformers/trainer.py, training_args.py, optimization.py (4.1x, January 2022); torch tools/autograd/derivatives.yaml "
    "(1.10: _softmax); pytorch/pytorch#64000",
    version="transformers 4.1x with torch 1.10",
    training_cache="config",
    checkpoint_impl="reentrant",
    optimizer_impl="single",
    zero_grad_set_to_none=False,
    softmax_saves_input=True,
)
