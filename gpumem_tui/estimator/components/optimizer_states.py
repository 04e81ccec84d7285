"""Optimizer states (moments, momentum, factored second moments, master weights) and the
temporary buffers ``optimizer.step()`` allocates (bytes per device)."""

from __future__ import annotations

import dataclasses
import math

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.components.lora import lora_targets, peft_fp32, trainable_params, trainable_tensor_count
from gpumem_tui.estimator.devices import peft_lora, profile_for
from gpumem_tui.estimator.precision import Precision, precision
from gpumem_tui.estimator.spec import TrainingSpec


def _state_precision(spec: TrainingSpec) -> Precision:
    """The spec's precision, with fp32 states for peft's fp32 adapters (:func:`.lora.peft_fp32`)."""
    prec = precision(spec)
    if peft_fp32(spec):
        prec = dataclasses.replace(prec, state=peft_lora.PEFT_ADAPTER_BYTES)
    return prec


def optimizer_state_bytes(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """Optimizer states per device, in bytes.

    - AdamW / Adam: ``exp_avg`` and ``exp_avg_sq`` per trainable parameter (Loshchilov &
      Hutter 2019; PyTorch ``torch.optim.AdamW``), in the parameter dtype, or fp32 with a
      4-byte master copy under DeepSpeed mixed precision: (2+2+K)Psi, K=12 (ZeRO paper Sec 3.1).
    - SGD with momentum: one ``momentum_buffer``; plain SGD: none.
    - Adafactor: factored second moment (see ``_adafactor_state_elements``).
    - 8-bit AdamW (bitsandbytes): 2 bytes/param plus one fp32 absmax per 256-element block for
      each of the two states, tensors under 4096 elements stay 32-bit (Dettmers et al. 2022,
      arXiv 2110.02861, Sec. 2; bitsandbytes ``min_8bit_size``).
    - ``--device cpu``: torch keeps each parameter's ``step`` as a 0-d fp32 tensor (4 B; on
      CUDA it lives on the host unless ``capturable``/``fused``).
    ZeRO-1+ divides by ``dp``; model parallelism by ``t * p``.
    """
    if spec.task == "inference":
        return 0
    prec = _state_precision(spec)
    n = trainable_params(arch, spec)
    opt = spec.optimizer
    tensors = trainable_tensor_count(arch, spec)
    if opt in ("adamw", "adam"):
        states = 2 * n * prec.state
    elif opt == "sgd-momentum":
        states = n * prec.state
    elif opt == "sgd":
        states = 0
    elif opt == "adafactor":
        states = _adafactor_state_elements(arch, spec) * prec.state
    else:  # adamw-8bit
        states = 2 * n + 2 * 4 * math.ceil(n / 256)
    states += n * prec.master
    if profile_for(spec.device).optimizer_step_tensors and opt != "sgd" and opt != "sgd-momentum":
        states += 4 * tensors
    states /= spec.tp * spec.pp
    if spec.zero >= 1:
        states /= spec.dp
    return int(math.ceil(states))


def _adafactor_state_elements(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """torch.optim.Adafactor: 2-D weights keep a row (d_out) and a column (d_in) second-moment
    factor; 1-D tensors a full one (Shazeer & Stern 2018, arXiv 1804.04235, Alg. 4; PyTorch
    ``torch.optim.Adafactor`` docs)."""
    if spec.task in ("lora", "qlora"):
        r = spec.lora_rank or 0
        return arch.num_layers * sum(l.count * (r + l.d_in + l.d_out + r) for l in lora_targets(arch, spec))
    if arch.coarse:
        return 2 * int(math.sqrt(max(1, arch.total_params))) * (8 * arch.num_layers + 2)
    h, V = arch.hidden_size, arch.vocab_size
    elems = V + h  # token embedding
    if arch.learned_positions:
        elems += arch.learned_positions + h
    if arch.type_vocab_size:
        elems += arch.type_vocab_size + h
    per_layer = 0
    for lin in arch.layer_linears():
        if lin.count > 1:  # a 3-D expert tensor: factors over its last two dims per expert
            per_layer += lin.count * (lin.d_out + lin.d_in)
        else:
            per_layer += lin.d_out + lin.d_in
        if lin.bias:
            per_layer += lin.d_out * lin.count
    norm_1d = (2 if arch.norm == "layernorm" else 1) * h
    per_layer += arch.norms_per_layer * norm_1d + arch.qk_norm_params
    if arch.family.embedding_norm:
        elems += 2 * h  # embeddings LayerNorm
    final = norm_1d if arch.final_norm else 0
    return elems + arch.num_layers * per_layer + final + _adafactor_head_elements(arch)


def _adafactor_head_elements(arch: ModelArchitecture) -> int:
    """Adafactor state elements of the head's tensors (factored 2-D weights, full 1-D ones)."""
    h, V = arch.hidden_size, arch.vocab_size
    if arch.param_breakdown()["head"] == 0:
        return 0
    if arch.head == "lm":
        return (0 if arch.tie_word_embeddings else V + h) + (V if arch.family.head_bias else 0)
    if arch.head == "mlm":
        # transform dense (factored) + bias, LayerNorm, decoder bias (+ an untied decoder weight)
        return 2 * h + h + 2 * h + V + (0 if arch.tie_word_embeddings else V + h)
    if arch.head == "classification" and arch.kind == "decoder":
        return max(1, arch.num_labels) + h  # score Linear, no bias, no pooler
    if arch.head == "classification":
        nl = max(1, arch.num_labels)
        return (2 * h + h) + (nl + h + nl)  # pooler dense + bias, classifier + bias
    return 2 * h + h  # BERT's pooler


def optimizer_intermediate_bytes(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """Temporaries allocated inside ``optimizer.step()`` (bytes per device).

    torch's single-tensor AdamW (the CPU default) computes
    ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` per parameter: two
    parameter-sized temporaries, so 2 x the largest tensor. The ``foreach`` implementation
    (the CUDA default) calls ``torch._foreach_sqrt`` on the whole list: one state-sized copy of
    every trainable parameter (PyTorch ``torch/optim/adamw.py``, ``_single_tensor_adamw`` and
    ``_multi_tensor_adamw``). SGD updates in place (no temporaries); Adafactor builds the
    full-size variance estimate and update (2 x the largest tensor, or the whole list with
    foreach); bitsandbytes 8-bit AdamW and ``fused=True`` run fused kernels (no temporaries).
    ``spec.optimizer_impl`` picks the implementation (auto = torch's device default).
    """
    if spec.task == "inference":
        return 0
    prec = _state_precision(spec)
    opt = spec.optimizer
    if opt in ("sgd", "sgd-momentum", "adamw-8bit"):
        return 0
    if spec.task in ("lora", "qlora"):
        largest = max(((spec.lora_rank or 0) * max(l.d_in, l.d_out) for l in lora_targets(arch, spec)), default=0)
    else:
        largest = arch.largest_param_elements
    n = trainable_params(arch, spec) / (spec.tp * spec.pp)
    if spec.zero >= 1:
        n /= spec.dp
    impl = spec.resolved_optimizer_impl
    if impl == "fused":
        return 0
    if impl == "single":
        # Adafactor keeps one full-size temporary (the row x column outer product), AdamW two
        # (MemTracker, torch 2.13 CPU)
        return int((1 if opt == "adafactor" else 2) * min(largest, n) * prec.state)
    return int(n * prec.state)
