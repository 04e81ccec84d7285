"""What a checkpointing policy keeps per layer and recomputes in backward (bytes, one device).

The policy is the spec's ``grad_ckpt`` read through its recipe
(:mod:`gpumem_tui.estimator.recipes.rules`):

- ``none``: every layer keeps its whole saved set
  (:func:`gpumem_tui.estimator.components.activations_per_layer.layer_activations`).
- ``selective`` with ``attention-core`` (Megatron; Korthikanti et al. 2022, arXiv 2205.05198,
  Sec. 5): the ``s^2`` attention terms are recomputed, the rest kept.
- ``selective`` with ``op-every-other-mm`` (torchtitan op SAC,
  ``torchtitan/distributed/activation_checkpoint.py``): a block keeps its input, the outputs of
  its 1st, 3rd, 5th ... ``aten.mm`` (a bias-free Linear is one ``mm``; Linears with a bias run
  ``addmm``, which is not on the save list, and experts run grouped matmuls, neither counted)
  and the fused SDPA kernel's outputs (output + fp32 log-sum-exp); in backward the block is
  re-run for the rest, so one block's full saved set (less what was kept) is live again.
- ``full``: a layer keeps its input; one layer is re-run in backward (HF gradient
  checkpointing, Chen et al. 2016, arXiv 1604.06174). ``torch.utils.checkpoint`` with
  ``use_reentrant=True`` (``CheckpointFunction.backward``) re-runs the whole block and holds
  its output tensor while ``torch.autograd.backward`` runs on it; the non-reentrant
  implementation stops recomputing once the last saved tensor is rebuilt
  (``_checkpoint_early_stop``), so the block output is never rebuilt: the reentrant flavour
  holds one more ``b s h`` hidden state during a layer's backward.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.components.activations import (
    activation_bytes, checkpoint_input_bytes, checkpoint_mask_bytes, checkpoint_recompute_shared_bytes)
from gpumem_tui.estimator.components.activations_per_layer import layer_activations
from gpumem_tui.estimator.precision import precision
from gpumem_tui.estimator.recipes import rules as R
from gpumem_tui.estimator.spec import TrainingSpec


@dataclass(frozen=True, slots=True)
class CheckpointTerms:
    """Bytes on one device. ``activations``: every saved activation at the end of forward
    (excluding logits); ``per_layer``: one layer's saved set when it runs backward normally;
    ``per_saved``: what one layer keeps from forward to backward; ``recompute``: what a re-run
    layer adds during its backward; ``masks_freed``: float masks freed before layer 0's
    backward; ``reruns``: layers run forward again in backward (a transient forward moment)."""

    activations: float
    per_layer: float
    per_saved: float
    recompute: float
    masks_freed: float
    reruns: bool


def op_sac_saved_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """What one block keeps under torchtitan's op-level SAC (bytes, before tensor parallelism):
    the block input + every odd-numbered ``mm`` output + the SDPA output and log-sum-exp."""
    e = precision(spec).compute
    kept = checkpoint_input_bytes(arch, spec, b, s)
    mm = 0
    for lin in arch.layer_linears():
        if lin.count != 1 or lin.bias:
            continue  # grouped expert matmuls and addmm are not on the save list
        mm += 1
        if mm % 2 == 1:
            kept += b * s * lin.d_out * e
    if spec.attention != "eager" and arch.family.sdpa:
        kept += b * s * arch.q_dim * e + b * arch.num_heads * s * 4
    return kept


def checkpoint_terms(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> CheckpointTerms:
    """The activation terms of ``spec``'s checkpointing policy (see the module docstring)."""
    t, L = spec.tp, arch.num_layers
    layer = layer_activations(arch, spec, b, s)
    full_layer = layer.total / t
    if spec.grad_ckpt == "selective" and R.selective_policy(spec) == "op-every-other-mm":
        saved = op_sac_saved_bytes(arch, spec, b, s) / t
        kept_beyond_input = saved - checkpoint_input_bytes(arch, spec, b, s) / t
        whole = activation_bytes(arch, spec.replace(grad_ckpt="none"), b, s)
        return CheckpointTerms(activations=whole - L * (full_layer - saved), per_layer=full_layer,
                               per_saved=saved, recompute=max(0.0, full_layer - kept_beyond_input),
                               masks_freed=0, reruns=True)
    A = activation_bytes(arch, spec, b, s)
    if spec.grad_ckpt != "full":
        per = full_layer - (layer.quadratic / t if spec.grad_ckpt == "selective" else 0)
        return CheckpointTerms(activations=A, per_layer=per, per_saved=per, recompute=0, masks_freed=0, reruns=False)
    # one layer re-run in backward (its input is the checkpointed tensor, counted once)
    recompute = full_layer - checkpoint_recompute_shared_bytes(arch, spec, b, s) / t
    if R.reentrant_checkpoint(spec):
        recompute += checkpoint_input_bytes(arch, spec, b, s) / t  # the re-run block's output
    # while layer 0 runs backward only its own kind of attention mask is left
    masks_freed = checkpoint_mask_bytes(arch, spec, b, s) - checkpoint_mask_bytes(arch, spec, b, s, first_layer=True)
    return CheckpointTerms(activations=A, per_layer=full_layer, per_saved=checkpoint_input_bytes(arch, spec, b, s) / t,
                           recompute=recompute, masks_freed=masks_freed, reruns=True)
