"""Parameters: the stored weights and buffers on one device, and the transient 16-bit copy of a
quantized weight (bytes)."""

from __future__ import annotations

import math

from gpumem_tui.estimator import quantization as Q
from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.components.lora import adapter_bytes, lora_params
from gpumem_tui.estimator.precision import precision
from gpumem_tui.estimator.recipes import rules as R
from gpumem_tui.estimator.spec import DTYPE_BYTES, TrainingSpec


def parameter_bytes(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """Bytes of the stored weights on one device.

    - dtype bytes x N; LoRA adds the adapters in the same dtype.
    - QLoRA (``--task qlora``) or ``--quant nf4``: the layers' Linear weights in NF4 (4 bits)
      plus blocksize-64 quantization constants with double quantization, 0.127 bit/param
      (Dettmers et al. 2023, arXiv 2305.14314, Sec. 2); embeddings, head and norms stay 16-bit.
    - ``--quant int8``: LLM.int8() Linear weights 1 byte + one fp32 scale per row
      (Dettmers et al. 2022, arXiv 2208.07339).
    - ZeRO-3 divides by ``dp`` (Rajbhandari et al. 2020, Sec. 5.3); tensor parallelism divides
      the layer weights by ``t`` (Megatron, Shoeybi et al. 2019, arXiv 1909.08053), pipeline
      parallelism the layers by ``p`` (embeddings and head counted whole, as on the first or
      last stage).
    """
    prec = precision(spec)
    n = arch.total_params
    lin = arch.linear_weight_params
    layer_elems = arch.param_breakdown()["layers"]
    quant = Q.effective_method(spec.task, spec.quant)
    lin_bytes = Q.layer_linears_bytes(arch, spec.task, spec.quant, spec.quant_format) if quant != "none" else lin * prec.param
    # k-bit preparation (recipe) casts the unquantized 16-bit parameters to fp32
    other_b = prec.param if quant == "none" else R.non_quantized_param_bytes(spec, DTYPE_BYTES[spec.dtype])
    layer_bytes = lin_bytes + max(0, layer_elems - lin) * other_b
    rest_bytes = (n - layer_elems) * other_b
    total = rest_bytes + layer_bytes / (spec.tp * spec.pp)
    if spec.task in ("lora", "qlora"):
        total += lora_params(arch, spec) * adapter_bytes(spec, prec.param) / (spec.tp * spec.pp)
    if spec.zero == 3:
        total /= spec.dp
    return int(math.ceil(total)) + buffer_bytes(arch)


def buffer_bytes(arch: ModelArchitecture) -> int:
    """Non-parameter buffers that live with the weights (bytes): rotary ``inv_freq`` and
    ``original_inv_freq`` (``d/2`` fp32 each, transformers' RotaryEmbedding), BERT's
    ``position_ids`` and ``token_type_ids`` (``max_positions`` int64 each)."""
    if arch.coarse:
        return 0
    if arch.family.buffers == "position_ids":
        return 2 * 8 * (arch.max_position_embeddings or 0)
    if arch.family.buffers == "rotary" and not arch.learned_positions:
        return arch.family.rotary_sets * 2 * (arch.rotary_dims // 2) * 4
    return 0


def dequant_bytes(arch: ModelArchitecture, spec: TrainingSpec, backward: bool = False) -> int:
    """Transient 16-bit copy of one quantized weight (bytes): bitsandbytes dequantizes an NF4 Linear's
    weight to the compute dtype for each matmul, forward and backward (QLoRA, Dettmers et
    al. 2023, Sec. 3: "we dequantize the storage data type to the computation data type"); an
    LLM.int8() Linear only in backward, for its input gradient (``MatMul8bitLt.backward``:
    ``state.CB.to(ctx.dtype_A, copy=True).mul_(SCB / 127)``, bitsandbytes
    ``autograd/_functions.py``). The largest layer Linear (one expert for MoE); 0 without
    quantized weights. The 4-bit copy is in bitsandbytes' ``bnb_4bit_compute_dtype`` when the
    format is known (:func:`gpumem_tui.estimator.quantization.dequant_bytes_per_element`)."""
    method = Q.effective_method(spec.task, spec.quant)
    if arch.coarse or method not in ("nf4", "fp4", "gptq", "awq") and not (method == "int8" and backward):
        return 0
    e = precision(spec).compute if method == "int8" else Q.dequant_bytes_per_element(
        spec.quant_format, precision(spec).compute)
    return int(max(l.d_in * l.d_out for l in arch.layer_linears()) * e / spec.tp)
