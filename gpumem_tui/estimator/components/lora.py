"""LoRA / QLoRA: which parameters train, how many adapter elements, and in which dtype.

Every other component reads these rules: parameters and gradients count the adapters,
optimizer states are kept for them only, and activations change with which Linears are
adapted (a frozen Linear saves no input).
"""

from __future__ import annotations

from gpumem_tui.estimator.architecture import LinearShape, ModelArchitecture
from gpumem_tui.estimator.devices import peft_lora
from gpumem_tui.estimator.precision import precision
from gpumem_tui.estimator.spec import TrainingSpec


def peft_fp32(spec: TrainingSpec) -> bool:
    """peft LoRA with a 16-bit base: fp32 adapters and fp32 input copies
    (:mod:`gpumem_tui.estimator.devices.peft_lora`). Applied on the CUDA profile, whose ground
    truth (``../shared/validation/gpu``) was measured with peft; the CPU/meta ground truth of
    ``benchmarks/data`` was measured with the project's own 16-bit adapter."""
    prec = precision(spec)
    return spec.task in ("lora", "qlora") and spec.device == "cuda" and peft_lora.upcasts_input(prec.compute, prec.amp)


def adapter_bytes(spec: TrainingSpec, default: int) -> int:
    """Bytes per LoRA adapter element (parameter, gradient, optimizer state):
    ``peft_lora.PEFT_ADAPTER_BYTES`` (fp32) under :func:`peft_fp32`, else ``default``."""
    return peft_lora.PEFT_ADAPTER_BYTES if peft_fp32(spec) else default


def lora_targets(arch: ModelArchitecture, spec: TrainingSpec) -> list[LinearShape]:
    """The layer Linears ``spec.lora_targets`` adapts, in ``arch.layer_linears()`` order; a
    fused projection (GPT-2's ``c_attn`` = q, k, v; Phi-3's ``gate_up_proj``) is adapted whole
    when any of its roles is targeted, as PEFT adapts the module."""
    wanted = set(spec.lora_targets)
    fused = {"qkv": {"q", "k", "v"}, "gate_up": {"gate", "up"}}
    out = []
    for lin in arch.layer_linears():
        roles = fused.get(lin.role, {lin.role})
        if roles & wanted:
            out.append(lin)
    return out


def lora_params(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """LoRA adapter elements: ``L * sum(r (d_in + d_out))`` over targeted Linears (fused
    projections such as GPT-2's ``c_attn`` are adapted as one Linear, as PEFT does); experts
    each get their own adapter. Source: Hu et al. 2021, arXiv 2106.09685, Sec. 4.1."""
    r = spec.lora_rank or 0
    return arch.num_layers * sum(lin.count * r * (lin.d_in + lin.d_out) for lin in lora_targets(arch, spec))


def trainable_params(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """Trainable parameter elements: all for full training, the LoRA adapters for LoRA/QLoRA
    (Hu et al. 2021, arXiv 2106.09685: ``r (d_in + d_out)`` per adapted Linear), 0 for inference."""
    if spec.task == "inference":
        return 0
    if spec.task in ("lora", "qlora"):
        return lora_params(arch, spec)
    return arch.total_params


def trainable_tensor_count(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """Trainable parameter tensors (each keeps a ``step`` on the CPU optimizer, see
    :func:`gpumem_tui.estimator.components.optimizer_states.optimizer_state_bytes`): two per
    adapted Linear per layer (``lora_A``, ``lora_B``) for LoRA, else every parameter tensor."""
    if spec.task in ("lora", "qlora"):
        return 2 * arch.num_layers * sum(1 for _ in lora_targets(arch, spec))
    return arch.param_tensor_count
