"""TrainingSpec validation: each bad input names its field; contradictions are caught."""

from __future__ import annotations

import argparse

import pytest

from gpumem_tui.estimator.architecture import ArchitectureError, load_architecture
from gpumem_tui.estimator.cli_args import add_spec_arguments, spec_from_args
from gpumem_tui.estimator.spec import SpecError, TrainingSpec, check_spec_for, parse_lora_targets


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"batch": 0}, "batch"),
        ({"batch": -3}, "batch"),
        ({"batch": 2.5}, "batch"),
        ({"seq": 0}, "seq"),
        ({"dtype": "fp64"}, "dtype"),
        ({"optimizer": "lion"}, "optimizer"),
        ({"task": "pretrain"}, "task"),
        ({"zero": 4}, "zero"),
        ({"dp": 0}, "dp"),
        ({"dtype": "fp32", "mixed_precision": True}, "mixed_precision"),
        ({"task": "qlora", "dtype": "fp32"}, "dtype"),
        ({"kv_dtype": "fp8"}, "kv_dtype"),
        ({"lora_rank": 8}, "lora_rank"),
        ({"task": "lora", "lora_rank": 0}, "lora_rank"),
        ({"task": "inference", "grad_ckpt": "full"}, "grad_ckpt"),
        ({"task": "inference", "zero": 2, "dp": 2}, "zero"),
        ({"device": "cpu", "attention": "flash"}, "attention"),
        ({"quant": "nf4"}, "quant"),
        ({"lora_targets": ()}, "lora_targets"),
    ],
)
def test_invalid_specs_name_their_field(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        TrainingSpec(**kwargs)
    assert info.value.field == field


def test_zero_without_data_parallel_is_a_warning() -> None:
    spec = TrainingSpec(zero=3, dp=1)
    assert any("saves no memory" in w for w in spec.warnings)


def test_lora_rank_defaults_to_8() -> None:
    assert TrainingSpec(task="lora").lora_rank == 8


def test_sequence_beyond_max_positions_warns() -> None:
    warnings = check_spec_for(load_architecture("gpt2"), TrainingSpec(seq=4096))
    assert any("max_position_embeddings 1024" in w for w in warnings)


def test_tensor_parallel_must_divide_heads() -> None:
    with pytest.raises(SpecError) as info:
        check_spec_for(load_architecture("gpt2"), TrainingSpec(tp=5))  # 12 heads
    assert info.value.field == "tp"


def test_lora_targets_parse() -> None:
    assert parse_lora_targets("q_proj,v_proj") == ("q", "v")
    assert parse_lora_targets("all-linear") == ("q", "k", "v", "o", "gate", "up", "down")
    with pytest.raises(SpecError):
        parse_lora_targets("c_fc2")


def _parse(argv: list[str]):
    parser = argparse.ArgumentParser()
    add_spec_arguments(parser)
    return spec_from_args(parser.parse_args(argv))


def test_spec_from_args() -> None:
    arch, spec = _parse(["llama-3.2-1b", "--task", "lora", "--lora-rank", "16", "--lora-targets", "all-linear",
                         "--batch", "4", "--seq", "1024", "--dtype", "bf16", "--device", "cpu"])
    assert arch.name == "llama-3.2-1b"
    assert (spec.task, spec.lora_rank, spec.batch, spec.seq, spec.device) == ("lora", 16, 4, 1024, "cpu")
    assert "down" in spec.lora_targets


def test_spec_from_args_errors() -> None:
    with pytest.raises(ArchitectureError):
        _parse([])  # no model
    with pytest.raises(ArchitectureError):
        _parse(["gpt2", "--params", "1e9"])
    with pytest.raises(SpecError):
        _parse(["gpt2", "--batch", "-1"])
    with pytest.raises(ArchitectureError):
        _parse(["gpt2", "--head", "nonsense"])


def test_replace_revalidates() -> None:
    spec = TrainingSpec(batch=2)
    assert spec.replace(batch=5).batch == 5
    with pytest.raises(SpecError):
        spec.replace(batch=0)
