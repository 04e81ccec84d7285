"""The ``hf-trainer-2022`` recipe (transformers 4.1x Trainer on torch 1.10) and the eager
attention terms it changes, asserted against the saved tensors their cited sources give:
torch <= 1.10's ``_softmax`` kept its input (``derivatives.yaml``; pytorch/pytorch#64000), and
dropout keeps only its mask (``native_dropout``: ``result1``)."""

from __future__ import annotations

import pytest

from gpumem_tui.estimator import components as C
from gpumem_tui.estimator.architecture import load_architecture
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.recipes import RECIPES, list_recipes
from gpumem_tui.estimator.recipes import rules as R
from gpumem_tui.estimator.spec import TrainingSpec

B, S = 2, 512


@pytest.fixture(scope="module")
def bert():
    return load_architecture("bert-large-uncased").with_head("classification", 2)


def _spec(**kw) -> TrainingSpec:  # noqa: ANN003
    base = dict(batch=B, seq=S, attention="eager", device="cuda", dtype="fp32")
    base.update(kw)
    return TrainingSpec(**base)  # type: ignore[arg-type]


def test_recipe_describes_the_2022_trainer_loop() -> None:
    spec = _spec(recipe="hf-trainer-2022")
    assert R.softmax_saves_input(spec)
    assert not R.softmax_saves_input(_spec(recipe="hf-trainer"))
    assert spec.grads_persist  # torch 1.x zero_grad(set_to_none=False)
    assert spec.resolved_optimizer_impl == "single"  # transformers' own AdamW loop
    assert not RECIPES["hf-trainer-2022"].zero_grad_set_to_none


@pytest.mark.parametrize(("dtype", "mixed"), [("fp32", False), ("fp16", True)])
def test_softmax_input_adds_one_fp32_score_tensor_per_layer(bert, dtype, mixed) -> None:
    # the scores reach softmax in fp32 in both cases: fp32 training, or under autocast the
    # fp32 float mask promotes the 16-bit scores (and softmax is on autocast's fp32 list)
    new = C.layer_activations(bert, _spec(recipe="hf-trainer-2022", dtype=dtype, mixed_precision=mixed), B, S)
    old = C.layer_activations(bert, _spec(recipe="hf-trainer", dtype=dtype, mixed_precision=mixed), B, S)
    scores = B * bert.num_heads * S * S * 4
    assert new.quadratic - old.quadratic == scores
    assert new.total - old.total == scores


def test_fused_attention_keeps_no_scores_under_either_recipe(bert) -> None:
    new = C.layer_activations(bert, _spec(recipe="hf-trainer-2022", attention="sdpa", dtype="bf16"), B, S)
    old = C.layer_activations(bert, _spec(recipe="hf-trainer", attention="sdpa", dtype="bf16"), B, S)
    assert new.total == old.total


def test_cuda_autocast_bert_attention_keeps_probs_copy_and_mask_only(bert) -> None:
    # fp32 softmax output (4) + the matmul's 16-bit copy of the dropped probabilities (2) + the
    # 1-byte dropout mask; the fp32 dropout output is not saved
    la = C.layer_activations(bert, _spec(dtype="fp16", mixed_precision=True), B, S)
    assert la.quadratic == B * bert.num_heads * S * S * (4 + 2 + 1)


def test_estimate_grows_by_the_scores_of_every_layer(bert) -> None:
    spec = _spec(recipe="hf-trainer-2022")
    before = estimate(bert, spec.replace(recipe="hf-trainer", keep_grads=True, optimizer_impl="single"),
                      simulate_allocator=False)
    after = estimate(bert, spec, simulate_allocator=False)
    scores = B * bert.num_heads * S * S * 4 * bert.num_layers
    assert after.allocated_peak_bytes - before.allocated_peak_bytes == scores


def test_recipe_list_separates_long_names_from_titles() -> None:
    lines = list_recipes().splitlines()
    line = next(text for text in lines if text.startswith("hf-trainer-2022"))
    assert line.startswith("hf-trainer-2022 ")
