"""Quantized weights sized from the libraries' layouts (bitsandbytes, GPTQ, AWQ)."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
from cli_inprocess import run_cli

from gpumem_tui.estimator import components as C
from gpumem_tui.estimator.architecture import load_architecture
from gpumem_tui.estimator.quantization import (
    QuantConfigError,
    QuantFormat,
    apply_flags,
    format_from_config,
    linear_bytes,
)
from gpumem_tui.estimator.spec import SpecError, TrainingSpec

CATALOGUE = "gpumem_tui/estimator/catalogue/llama-3.1-8b.json"


def test_nf4_without_double_quant_is_packed_weight_plus_fp32_absmax_per_64() -> None:
    n = 4096 * 4096
    # uint8 storage holds two 4-bit values per byte; one fp32 absmax per 64-element block;
    # the 16-entry fp32 NF4 code
    assert linear_bytes(QuantFormat("nf4"), 4096, 4096) == n // 2 + 4 * (n // 64) + 16 * 4


def test_nf4_double_quant_stores_8bit_absmax_and_fp32_per_256_blocks() -> None:
    n = 4096 * 14336
    blocks = n // 64
    expected = n // 2 + blocks + 4 * math.ceil(blocks / 256) + 4 + 16 * 4
    assert linear_bytes(QuantFormat("nf4", double_quant=True), 4096, 14336) == expected
    # about 0.127 bits per parameter of constants (QLoRA paper, Sec. 2)
    assert (expected - n // 2 - 68) * 8 / n == pytest.approx(0.127, abs=0.001)


def test_quant_storage_changes_the_packing_not_the_bytes() -> None:
    u8 = linear_bytes(QuantFormat("nf4", storage_bytes=1), 2048, 8192)
    bf16 = linear_bytes(QuantFormat("nf4", storage_bytes=2), 2048, 8192)
    assert u8 == bf16


def test_int8_is_one_byte_plus_a_row_scale() -> None:
    assert linear_bytes(QuantFormat("int8", bits=8), 4096, 11008) == 4096 * 11008 + 4 * 11008


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_gptq_and_awq_pack_int32_with_fp16_group_scales(method) -> None:
    d_in, d_out, g = 4096, 11008, 128
    groups = d_in // g
    qweight = d_in * d_out * 4 // 32 * 4  # int32 words of eight 4-bit values
    qzeros = groups * (d_out * 4 // 32) * 4
    scales = groups * d_out * 2
    g_idx = 4 * d_in if method == "gptq" else 0
    assert linear_bytes(QuantFormat(method, bits=4, group_size=g), d_in, d_out) == qweight + qzeros + scales + g_idx
    one_group = linear_bytes(QuantFormat(method, bits=4, group_size=-1), d_in, d_out)
    assert one_group == qweight + (d_out * 4 // 32) * 4 + d_out * 2 + g_idx


def test_config_formats_are_read_as_transformers_writes_them() -> None:
    fmt = format_from_config({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                              "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16",
                              "bnb_4bit_quant_storage": "bfloat16"})
    assert fmt == QuantFormat("nf4", double_quant=True, storage_bytes=2, compute_dtype="bf16")
    assert format_from_config({"load_in_4bit": True}).method == "fp4"  # BitsAndBytesConfig default
    assert format_from_config({"quant_method": "bitsandbytes", "load_in_8bit": True}).method == "int8"
    assert format_from_config({"quant_method": "gptq", "bits": 8, "group_size": -1}) == QuantFormat(
        "gptq", bits=8, group_size=-1)


@pytest.mark.parametrize("qc, key", [
    ({"quant_method": "hqq"}, "quant_method"),
    ({"quant_method": "gptq", "bits": 5}, "bits"),
    ({"quant_method": "awq", "group_size": 0}, "group_size"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "int4"}, "bnb_4bit_quant_type"),
    ({"quant_method": "bitsandbytes"}, "load_in_4bit"),
    ([1, 2], "quantization_config"),
])
def test_unsizable_configs_name_the_key(qc, key) -> None:
    with pytest.raises(QuantConfigError) as err:
        format_from_config(qc)
    assert err.value.key == key and key in str(err.value)


def test_flags_that_contradict_the_config_name_the_key() -> None:
    nf4 = QuantFormat("nf4", double_quant=False)
    with pytest.raises(QuantConfigError, match="bnb_4bit_use_double_quant"):
        apply_flags(nf4, "none", True, None, None)
    with pytest.raises(QuantConfigError, match="gptq"):
        apply_flags(nf4, "gptq", None, None, None)
    with pytest.raises(QuantConfigError, match="group_size"):
        apply_flags(QuantFormat("awq"), "awq", None, None, 64)
    assert apply_flags(nf4, "nf4", False, None, None) is nf4
    assert apply_flags(None, "nf4", None, None, None) is None  # the paper's rate, as before
    assert apply_flags(None, "fp4", True, None, None) == QuantFormat("fp4", double_quant=True)


def test_double_quant_saves_its_constants_in_the_parameter_bytes() -> None:
    arch = load_architecture("llama-3.1-8b")
    plain = TrainingSpec(task="inference", quant="nf4", quant_format=QuantFormat("nf4"))
    dq = plain.replace(quant_format=QuantFormat("nf4", double_quant=True))
    saved = 0
    for lin in arch.layer_linears():
        blocks = math.ceil(lin.d_in * lin.d_out / 64)
        saved += lin.count * (4 * blocks - (blocks + 4 * math.ceil(blocks / 256) + 4))
    assert C.parameter_bytes(arch, plain) - C.parameter_bytes(arch, dq) == arch.num_layers * saved


def test_a_format_must_match_quant() -> None:
    with pytest.raises(SpecError):
        TrainingSpec(task="inference", quant="gptq", quant_format=QuantFormat("awq"))


def _config(tmp_path, qc) -> str:
    cfg = json.loads(open(CATALOGUE).read())
    cfg["quantization_config"] = qc
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _estimate(*argv: str) -> subprocess.CompletedProcess:
    return run_cli("estimate", *argv)


def test_cli_reads_quantization_config(tmp_path) -> None:
    path = _config(tmp_path, {"quant_method": "gptq", "bits": 4, "group_size": 128})
    out = _estimate(path, "--task", "inference", "--json")
    assert out.returncode == 0, out.stderr
    arch = load_architecture("llama-3.1-8b")
    fmt = QuantFormat("gptq", bits=4, group_size=128)
    linears = arch.num_layers * sum(l.count * linear_bytes(fmt, l.d_in, l.d_out) for l in arch.layer_linears())
    other = (arch.total_params - arch.linear_weight_params) * 2
    assert json.loads(out.stdout)["components_bytes"]["parameters"] == linears + other + C.buffer_bytes(arch)


def test_cli_refuses_what_it_cannot_size_or_a_contradiction(tmp_path) -> None:
    bad = _estimate(_config(tmp_path, {"quant_method": "hqq", "nbits": 4}), "--task", "inference")
    assert bad.returncode == 2 and "quant_method" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    path = _config(tmp_path, {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"})
    clash = _estimate(path, "--task", "qlora", "--double-quant")
    assert clash.returncode == 2 and "bnb_4bit_use_double_quant" in clash.stderr


def test_dequantized_weight_is_in_bnb_compute_dtype() -> None:
    arch = load_architecture("llama-3.1-8b")
    largest = max(l.d_in * l.d_out for l in arch.layer_linears())
    spec = TrainingSpec(task="inference", quant="nf4")
    assert C.dequant_bytes(arch, spec) == largest * 2  # no format known: the compute dtype, as before
    # BitsAndBytesConfig without bnb_4bit_compute_dtype computes (and dequantizes) in float32
    fp32 = spec.replace(quant_format=format_from_config({"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}))
    assert C.dequant_bytes(arch, fp32) == largest * 4
    bf16 = spec.replace(quant_format=QuantFormat("nf4", compute_dtype="bf16"))
    assert C.dequant_bytes(arch, bf16) == largest * 2


def test_lora_over_an_int8_base(tmp_path) -> None:
    path = _config(tmp_path, {"quant_method": "bitsandbytes", "load_in_8bit": True})
    out = _estimate(path, "--task", "lora", "--json", "--device", "cpu")
    assert out.returncode == 0, out.stderr
    arch = load_architecture("llama-3.1-8b")
    spec = TrainingSpec(task="lora", device="cpu")
    lora = C.parameter_bytes(arch, spec)
    rows = arch.num_layers * sum(l.count * l.d_out for l in arch.layer_linears())
    # LLM.int8(): each layer Linear weight 1 byte per element + an fp32 scale per output row
    expected = lora - arch.linear_weight_params * 2 + arch.linear_weight_params + 4 * rows
    assert json.loads(out.stdout)["components_bytes"]["parameters"] == expected
    qlora = _estimate(path, "--task", "qlora")
    assert qlora.returncode == 2 and "load_in_8bit" in qlora.stderr
    with pytest.raises(SpecError):
        TrainingSpec(task="train", quant="int8")


def test_int8_weight_is_dequantized_for_backward_only() -> None:
    arch = load_architecture("llama-3.1-8b")
    largest = max(l.d_in * l.d_out for l in arch.layer_linears())
    spec = TrainingSpec(task="lora", quant="int8")
    assert C.dequant_bytes(arch, spec) == 0  # LLM.int8() forward runs int8 matmuls
    assert C.dequant_bytes(arch, spec, backward=True) == largest * 2  # MatMul8bitLt.backward: CB -> bf16
