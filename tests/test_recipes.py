"""Recipes as data: each recipe's effect, asserted against the formula its cited source gives."""

from __future__ import annotations

import argparse
import math

import pytest
from cli_inprocess import run_cli

from gpumem_tui.estimator import components as C
from gpumem_tui.estimator.architecture import load_architecture
from gpumem_tui.estimator.checkpointing import checkpoint_terms, op_sac_saved_bytes
from gpumem_tui.estimator.cli_args import add_estimate_arguments, add_spec_arguments, spec_from_args
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.recipes import RECIPES, list_recipes
from gpumem_tui.estimator.recipes.description import Recipe
from gpumem_tui.estimator.spec import SpecError, TrainingSpec


@pytest.fixture(scope="module")
def llama8b():
    return load_architecture("llama-3.1-8b")


@pytest.fixture(scope="module")
def llama1b():
    return load_architecture("llama-3.2-1b")


def test_every_recipe_names_its_source_and_version() -> None:
    assert {"torch", "hf-trainer", "peft-kbit", "torchtune", "litgpt", "torchtitan"} <= set(RECIPES)
    text = list_recipes()
    for r in RECIPES.values():
        assert r.source and r.version
        assert r.name in text and r.version in text


def test_recipe_description_rejects_unknown_values() -> None:
    with pytest.raises(ValueError, match="training_cache"):
        Recipe(name="x", title="x", source="x", version="1", training_cache="sometimes")
    with pytest.raises(ValueError, match="loss_chunk"):
        Recipe(name="x", title="x", source="x", version="1", loss_chunk=0)


def test_unknown_recipe_is_a_spec_error() -> None:
    with pytest.raises(SpecError) as err:
        TrainingSpec(recipe="keras")
    assert err.value.field == "recipe"


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_torch_recipe_is_the_default(llama1b, device) -> None:
    spec = TrainingSpec(batch=2, seq=256, device=device)
    assert spec.recipe == "torch"
    assert estimate(llama1b, spec).to_json() == estimate(llama1b, spec.replace(recipe="torch")).to_json()


def test_training_cache_follows_the_recipe(llama1b) -> None:
    # the torch recipe is gpumem-tui's loop: cache on CUDA, use_cache=False on cpu
    assert C.training_cache_copies(llama1b, TrainingSpec(device="cuda"))
    assert not C.training_cache_copies(llama1b, TrainingSpec(device="cpu"))
    # Trainer passes no use_cache: the config's use_cache=true fills the cache on any device
    assert C.training_cache_copies(llama1b, TrainingSpec(device="cpu", recipe="hf-trainer"))
    for name in ("torchtune", "litgpt", "torchtitan"):  # no HF cache in those models
        assert not C.training_cache_copies(llama1b, TrainingSpec(device="cuda", recipe=name))


def test_torchtune_chunked_loss_upcasts_one_of_eight_chunks(llama1b) -> None:
    b, s = 2, 1024
    n = b * s * llama1b.vocab_size
    spec = TrainingSpec(batch=b, seq=s, recipe="torchtune")
    ll = C.logits_loss_bytes(llama1b, spec, b, s)
    # saved fp32 log-probs of every chunk; bf16 logits; one chunk's fp32 copy (forward)
    assert ll.saved == 4 * n
    assert ll.forward_peak == 4 * n + 2 * n + 4 * n // 8
    # one chunk's fp32 log-prob gradient and logits gradient at a time (backward)
    assert ll.backward_peak == 4 * n + 2 * 4 * n // 8
    whole = C.logits_loss_bytes(llama1b, TrainingSpec(batch=b, seq=s), b, s)
    assert whole.backward_peak - ll.backward_peak == 8 * n - n


def test_litgpt_loss_keeps_bf16_logprobs_and_the_logits(llama1b) -> None:
    b, s = 1, 1000
    n = b * s * llama1b.vocab_size
    spec = TrainingSpec(batch=b, seq=s, recipe="litgpt")
    ll = C.logits_loss_bytes(llama1b, spec, b, s)
    chunks = math.ceil(s / 128)  # lm_head_chunk_size=128
    assert ll.saved == 2 * n  # F.cross_entropy on bf16 logits: bf16 log-probs, no upcast
    assert ll.forward_peak == 2 * n + 2 * n
    assert ll.backward_peak == 2 * n + 2 * 2 * n // chunks
    # `logits` is still referenced when fabric.backward(loss) runs
    assert C.kept_output_bytes(llama1b, spec, b, s) == 2 * n
    assert C.kept_output_bytes(llama1b, TrainingSpec(batch=b, seq=s), b, s) == 0


def test_recipe_optimizer_defaults() -> None:
    assert TrainingSpec(recipe="hf-trainer").resolved_optimizer_impl == "fused"  # adamw_torch_fused
    assert TrainingSpec(recipe="torchtune").resolved_optimizer_impl == "fused"
    assert TrainingSpec(recipe="torchtitan").resolved_optimizer_impl == "fused"
    assert TrainingSpec(recipe="litgpt").resolved_optimizer_impl == "foreach"  # torch's CUDA default
    assert TrainingSpec(recipe="torch", device="cpu").resolved_optimizer_impl == "single"
    assert TrainingSpec(recipe="hf-trainer", optimizer_impl="foreach").resolved_optimizer_impl == "foreach"


def test_peft_kbit_casts_unquantized_parameters_to_fp32(llama8b) -> None:
    base = TrainingSpec(task="qlora", grad_ckpt="full")
    kbit = base.replace(recipe="peft-kbit")
    unquantized = llama8b.total_params - llama8b.linear_weight_params
    assert C.parameter_bytes(llama8b, kbit) - C.parameter_bytes(llama8b, base) == unquantized * (4 - 2)
    b, s, h = 2, 512, llama8b.hidden_size
    # the residual stream is fp32 (fp32 embedding output; norms and Linear4bit return their input dtype)
    assert C.checkpoint_input_bytes(llama8b, kbit, b, s) == b * s * h * 4
    assert C.checkpoint_input_bytes(llama8b, base, b, s) == b * s * h * 2
    # the fp32 LM head runs under the Trainer's bf16 autocast (accelerate wraps the forward):
    # 16-bit logits, then the loss's fp32 copy and fp32 log-probs (measured, H100 QLoRA cases)
    n = b * s * llama8b.vocab_size
    assert C.logits_loss_bytes(llama8b, kbit, b, s).forward_peak == 4 * n + 2 * n + 4 * n
    # the gated MLP's Linear4bit outputs keep the fp32 stream's dtype: gate, act, up in fp32;
    # and under autocast each adapted Linear (q, v) saves a 16-bit, not an fp32, input copy
    f, r = llama8b.intermediate_size, kbit.lora_rank
    assert r and kbit.lora_targets == ("q", "v")
    gap = (C.layer_activations(llama8b, kbit.replace(grad_ckpt="none"), b, s).total
           - C.layer_activations(llama8b, base.replace(grad_ckpt="none"), b, s).total)
    assert gap == 3 * b * s * f * (4 - 2) - 2 * b * s * (h + r) * (4 - 2)


def test_peft_kbit_turns_checkpointing_on_unless_told() -> None:
    parser = argparse.ArgumentParser()
    add_spec_arguments(parser)
    add_estimate_arguments(parser)
    _, spec = spec_from_args(parser.parse_args(["llama-3.2-1b", "--task", "qlora", "--recipe", "peft-kbit"]))
    assert spec.grad_ckpt == "full"
    _, spec = spec_from_args(parser.parse_args(
        ["llama-3.2-1b", "--task", "qlora", "--recipe", "peft-kbit", "--grad-ckpt", "none"]))
    assert spec.grad_ckpt == "none"
    _, spec = spec_from_args(parser.parse_args(["llama-3.2-1b", "--task", "qlora"]))
    assert spec.grad_ckpt == "none"


def test_reentrant_checkpointing_holds_the_rerun_block_output(llama1b) -> None:
    b, s = 2, 1024
    plain = checkpoint_terms(llama1b, TrainingSpec(batch=b, seq=s, grad_ckpt="full"), b, s)
    reentrant = checkpoint_terms(llama1b, TrainingSpec(batch=b, seq=s, grad_ckpt="full", checkpoint_impl="reentrant"), b, s)
    assert reentrant.recompute - plain.recompute == b * s * llama1b.hidden_size * 2
    assert reentrant.activations == plain.activations


def test_torchtitan_op_sac_keeps_every_other_mm(llama8b) -> None:
    b, s, e = 1, 4096, 2
    h, kv, f, a = llama8b.hidden_size, llama8b.kv_dim, llama8b.intermediate_size, llama8b.num_heads
    spec = TrainingSpec(batch=b, seq=s, grad_ckpt="selective", attention="flash", recipe="torchtitan")
    # mm order wq, wk, wv, wo, w1, w3, w2: the 1st, 3rd, 5th, 7th are saved (q, v, gate, down);
    # the SDPA output and its fp32 log-sum-exp; the block input
    expected = b * s * (h + h + kv + f + h) * e + b * s * h * e + b * a * s * 4
    assert op_sac_saved_bytes(llama8b, spec, b, s) == expected
    terms = checkpoint_terms(llama8b, spec, b, s)
    none = checkpoint_terms(llama8b, spec.replace(grad_ckpt="none"), b, s)
    L = llama8b.num_layers
    assert terms.activations == pytest.approx(none.activations - L * (none.per_layer - expected))
    # Megatron-style selective drops nothing with flash attention (no s x s terms to drop)
    megatron = checkpoint_terms(llama8b, spec.replace(recipe="torch"), b, s)
    assert megatron.activations == none.activations
    assert estimate(llama8b, spec).peak_bytes < estimate(llama8b, spec.replace(recipe="torch")).peak_bytes


def test_cli_lists_recipes_and_rejects_an_unknown_one() -> None:
    listed = run_cli("estimate", "--list-recipes")
    assert listed.returncode == 0, listed.stderr
    out = listed.stdout
    for name in RECIPES:
        assert name in out
    assert "torchtitan/distributed/activation_checkpoint.py" in out
    bad = run_cli("estimate", "gpt2", "--recipe", "nope")
    assert bad.returncode == 2 and "--recipe" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
