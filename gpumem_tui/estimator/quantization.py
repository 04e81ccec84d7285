"""Quantized weights as users load them: formats read from ``quantization_config`` or flags,
sized tensor by tensor from the libraries' layouts (bytes).

Layouts (per quantized ``Linear`` of ``d_in x d_out``, ``n = d_in d_out`` elements):

- bitsandbytes 4-bit (``nf4`` / ``fp4``; ``bitsandbytes/functional.py`` ``quantize_4bit``,
  bitsandbytes 0.45): packed weight ``((n + 1) // (2 s)) x s`` bytes (``s`` = bytes of
  ``bnb_4bit_quant_storage``, uint8 by default), ``blocks = ceil(n / 64)`` absmax values in fp32
  (``Linear4bit`` blocksize 64) and the 16-entry fp32 code of the 4-bit type. With
  ``bnb_4bit_use_double_quant`` (``compress_statistics``) the absmax are quantized by
  ``quantize_blockwise(absmax - mean, blocksize=256)``: ``blocks`` uint8 + ``ceil(blocks / 256)``
  fp32 second-level absmax + one fp32 offset (the 256-entry dynamic map is shared, cached in
  ``name2qmap``).
- bitsandbytes 8-bit (``load_in_8bit``, LLM.int8(); ``Int8Params``): ``CB`` int8 ``n`` bytes +
  ``SCB`` one fp32 scale per output row.
- GPTQ (auto-gptq / GPTQModel ``QuantLinear``): ``qweight`` int32 ``(d_in bits / 32, d_out)``,
  ``qzeros`` int32 ``(groups, d_out bits / 32)``, ``scales`` fp16 ``(groups, d_out)``,
  ``g_idx`` int32 ``(d_in)``, ``groups = ceil(d_in / group_size)`` (``group_size = -1``: 1).
- AWQ (AutoAWQ ``WQLinear_GEMM``): ``qweight`` int32 ``(d_in, d_out bits / 32)``, ``qzeros``
  int32 ``(groups, d_out bits / 32)``, ``scales`` fp16 ``(groups, d_out)``; no ``g_idx``.

Without any format detail (``--task qlora`` or ``--quant nf4`` alone) the QLoRA paper's rate
is used, as before: 4 + 0.127 bits per parameter (Dettmers et al. 2023, arXiv 2305.14314,
Sec. 2, double quantization).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

METHODS = ("nf4", "fp4", "int8", "gptq", "awq")
#: bitsandbytes ``Linear4bit`` / ``Params4bit`` blocksize
BNB_BLOCKSIZE = 64
#: ``quantize_blockwise`` blocksize of the double-quantized absmax
BNB_NESTED_BLOCKSIZE = 256
_STORAGE_BYTES = {"uint8": 1, "int8": 1, "float16": 2, "bfloat16": 2, "float32": 4}
_COMPUTE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp32": "fp32"}


class QuantConfigError(ValueError):
    """A quantization config or flag the estimator cannot size or that contradicts another;
    ``key`` names the offending key or flag."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True, slots=True)
class QuantFormat:
    """How the layer Linears are stored. ``bits`` and ``group_size`` apply to GPTQ / AWQ;
    ``double_quant``, ``storage_bytes`` and ``compute_dtype`` to bitsandbytes 4-bit."""

    method: str
    bits: int = 4
    group_size: int = 128
    double_quant: bool = False
    storage_bytes: int = 1
    compute_dtype: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields that apply to this format's library."""
        if self.method in ("nf4", "fp4"):
            return {"method": self.method, "blocksize": BNB_BLOCKSIZE, "double_quant": self.double_quant,
                    "storage_bytes": self.storage_bytes, "compute_dtype": self.compute_dtype or "fp32"}
        if self.method == "int8":
            return {"method": "int8", "scale": "fp32 per output row"}
        return {"method": self.method, "bits": self.bits, "group_size": self.group_size}


def linear_bytes(fmt: QuantFormat, d_in: int, d_out: int) -> int:
    """Bytes of one quantized ``d_in x d_out`` Linear weight in ``fmt`` (module docstring)."""
    n = d_in * d_out
    if fmt.method in ("nf4", "fp4"):
        mod = 2 * fmt.storage_bytes
        blocks = math.ceil(n / BNB_BLOCKSIZE)
        stats = blocks + 4 * math.ceil(blocks / BNB_NESTED_BLOCKSIZE) + 4 if fmt.double_quant else 4 * blocks
        return (n + 1) // mod * fmt.storage_bytes + stats + 16 * 4
    if fmt.method == "int8":
        return n + 4 * d_out
    groups = 1 if fmt.group_size == -1 else math.ceil(d_in / fmt.group_size)
    packed = math.ceil(n * fmt.bits / 32) * 4
    zeros = groups * math.ceil(d_out * fmt.bits / 32) * 4
    scales = groups * d_out * 2
    return packed + zeros + scales + (4 * d_in if fmt.method == "gptq" else 0)


def _bits(qc: dict[str, Any], key: str, allowed: tuple[int, ...]) -> int:
    value = qc.get(key, 4)
    if isinstance(value, bool) or value not in allowed:
        raise QuantConfigError(key, f"quantization_config.{key} = {value!r}: the estimator sizes {allowed} bits")
    return int(value)


def _group(qc: dict[str, Any], key: str) -> int:
    value = qc.get(key, 128)
    if isinstance(value, bool) or not isinstance(value, int) or not (value == -1 or 1 <= value <= 1 << 20):
        raise QuantConfigError(key, f"quantization_config.{key} = {value!r}: must be -1 or a positive integer")
    return value


def _bnb(qc: dict[str, Any]) -> QuantFormat:
    if qc.get("load_in_8bit") is True:
        return QuantFormat("int8", bits=8)
    if qc.get("load_in_4bit") is not True:
        raise QuantConfigError("load_in_4bit", "bitsandbytes quantization_config sets neither load_in_4bit nor load_in_8bit")
    qtype = qc.get("bnb_4bit_quant_type", "fp4")  # transformers' BitsAndBytesConfig default
    if qtype not in ("nf4", "fp4"):
        raise QuantConfigError("bnb_4bit_quant_type", f"quantization_config.bnb_4bit_quant_type = {qtype!r}: not nf4 or fp4")
    storage = qc.get("bnb_4bit_quant_storage", "uint8")
    if storage not in _STORAGE_BYTES:
        raise QuantConfigError("bnb_4bit_quant_storage", f"quantization_config.bnb_4bit_quant_storage = {storage!r} unknown")
    compute = qc.get("bnb_4bit_compute_dtype")
    if compute is not None and compute not in _COMPUTE:
        raise QuantConfigError("bnb_4bit_compute_dtype", f"quantization_config.bnb_4bit_compute_dtype = {compute!r} unknown")
    dq = qc.get("bnb_4bit_use_double_quant", False)
    if not isinstance(dq, bool):
        raise QuantConfigError("bnb_4bit_use_double_quant", "quantization_config.bnb_4bit_use_double_quant must be true or false")
    return QuantFormat(qtype, double_quant=dq, storage_bytes=_STORAGE_BYTES[storage],
                       compute_dtype=_COMPUTE.get(compute) if compute else None)


def format_from_config(qc: Any) -> QuantFormat:
    """The format of a ``config.json`` ``quantization_config`` (transformers'
    ``BitsAndBytesConfig`` / ``GPTQConfig`` / ``AwqConfig`` ``to_dict()`` shapes).

    Raises:
        QuantConfigError: not an object, an unknown ``quant_method``, or a value the estimator
            cannot size (the message names the key).
    """
    if not isinstance(qc, dict):
        raise QuantConfigError("quantization_config", "quantization_config must be a JSON object")
    method = qc.get("quant_method", "bitsandbytes" if ("load_in_4bit" in qc or "load_in_8bit" in qc) else None)
    if method == "bitsandbytes":
        return _bnb(qc)
    if method == "gptq":
        return QuantFormat("gptq", bits=_bits(qc, "bits", (2, 3, 4, 8)), group_size=_group(qc, "group_size"))
    if method == "awq":
        return QuantFormat("awq", bits=_bits(qc, "bits", (4,)), group_size=_group(qc, "group_size"))
    raise QuantConfigError("quant_method", f"quantization_config.quant_method = {method!r}: the estimator cannot size it "
                           "(it sizes bitsandbytes, gptq, awq)")


def apply_flags(fmt: QuantFormat | None, quant: str, double_quant: bool | None, bits: int | None,
                group_size: int | None) -> QuantFormat | None:
    """Combine flags with the config's format (``fmt``; None: the config has none).

    Returns None when nothing beyond ``--quant nf4`` / QLoRA's default is known (the paper's
    rate applies). Raises :class:`QuantConfigError` naming the flag/key on a contradiction.
    """
    if fmt is not None:
        if quant not in ("none", fmt.method):
            raise QuantConfigError("quant_method", f"--quant {quant} contradicts config.json quantization_config ({fmt.method})")
        dq_flag = "--double-quant" if double_quant else "--no-double-quant"
        for flag, key, value, have in ((dq_flag, "bnb_4bit_use_double_quant", double_quant, fmt.double_quant),
                                       ("--quant-bits", "bits", bits, fmt.bits),
                                       ("--group-size", "group_size", group_size, fmt.group_size)):
            if value is not None and value != have:
                raise QuantConfigError(key, f"{flag} contradicts config.json quantization_config.{key} = "
                                       f"{str(have).lower() if isinstance(have, bool) else have}")
        return fmt
    if quant == "none":
        if any(v is not None for v in (double_quant, bits, group_size)):
            raise QuantConfigError("--quant", "--double-quant / --quant-bits / --group-size need --quant")
        return None
    if quant not in METHODS:
        raise QuantConfigError("--quant", f"--quant must be one of none, {', '.join(METHODS)}, got {quant!r}")
    if quant in ("nf4", "int8") and double_quant is None and bits is None and group_size is None:
        return None  # today's rule: the paper's rate (nf4), the LLM.int8() layout (int8)
    if quant in ("nf4", "fp4"):
        if bits not in (None, 4) or group_size not in (None, BNB_BLOCKSIZE):
            raise QuantConfigError("--quant-bits", f"--quant {quant} is bitsandbytes 4-bit, blocksize {BNB_BLOCKSIZE}")
        return QuantFormat(quant, double_quant=bool(double_quant))
    if double_quant is not None:
        raise QuantConfigError("--double-quant", f"--double-quant applies to bitsandbytes 4-bit, not {quant}")
    base = QuantFormat(quant, bits=8 if quant == "int8" else 4)
    return replace(base, bits=bits or base.bits, group_size=group_size or base.group_size)


def effective_method(task: str, quant: str) -> str:
    """The weight format of the layer Linears: ``quant``, or NF4 for QLoRA without one."""
    return "nf4" if task == "qlora" and quant == "none" else quant


def layer_linears_bytes(arch: Any, task: str, quant: str, fmt: QuantFormat | None) -> float:
    """Bytes of every layer Linear weight (all layers, experts included) when quantized.

    ``fmt`` None: the paper's NF4 rate (4.127 bits) or the LLM.int8() layout, as before."""
    method = effective_method(task, quant)
    linears = arch.layer_linears()
    if fmt is None and method == "nf4":
        return arch.linear_weight_params * (4 + 0.127) / 8
    if fmt is None:
        fmt = QuantFormat(method, bits=8 if method == "int8" else 4)
    return arch.num_layers * sum(lin.count * linear_bytes(fmt, lin.d_in, lin.d_out) for lin in linears)


def dequant_bytes_per_element(fmt: QuantFormat | None, compute: int) -> int:
    """Bytes per element of the weight a 4-bit Linear dequantizes for its matmul:
    bitsandbytes ``Linear4bit`` casts its input to ``compute_dtype`` and dequantizes to it
    (``bitsandbytes/nn/modules.py``), and transformers' ``BitsAndBytesConfig`` leaves
    ``bnb_4bit_compute_dtype`` at float32 when it is not given; GPTQ / AWQ kernels dequantize
    to fp16. Without a known format: ``compute`` (the job's compute dtype), as before."""
    if fmt is None:
        return compute
    if fmt.method in ("gptq", "awq"):
        return 2
    return {"fp32": 4, "bf16": 2, "fp16": 2}[fmt.compute_dtype or "fp32"]
