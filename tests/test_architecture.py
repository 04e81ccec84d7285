"""ModelArchitecture from config.json: exact parameter counts, field variants, errors."""

from __future__ import annotations

import json

import pytest

from gpumem_tui.estimator.architecture import (
    CATALOGUE_DIR,
    ArchitectureError,
    architecture_from_config,
    architecture_from_params,
    catalogue_names,
    load_architecture,
)

# Published totals (model cards / `sum(p.numel())` of the transformers model with its head).
KNOWN_TOTALS = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-7b": 7_615_616_512,
    "phi-3-mini-4k": 3_821_079_552,
    "gemma-2-2b": 2_614_341_888,
}


@pytest.mark.parametrize("name,total", sorted(KNOWN_TOTALS.items()))
def test_catalogue_parameter_counts_are_exact(name: str, total: int) -> None:
    assert load_architecture(name).total_params == total


def test_bert_heads() -> None:
    base = load_architecture("bert-base-uncased")
    assert base.head == "mlm"  # config says BertForMaskedLM
    assert base.with_head("none").total_params == 109_482_240  # BertModel (with pooler)
    assert load_architecture("bert-large-uncased").with_head("none").total_params == 335_141_888
    cls = base.with_head("classification", 3)
    # pooler (h*h + h) + classifier (h*3 + 3) on top of the bare encoder minus the pooler
    assert cls.total_params == 109_482_240 + 768 * 3 + 3


def test_catalogue_has_the_required_models() -> None:
    names = set(catalogue_names())
    assert set(KNOWN_TOTALS) | {"bert-base-uncased", "bert-large-uncased"} <= names


def test_gqa_mqa_and_head_dim() -> None:
    llama = load_architecture("llama-3.1-8b")
    assert (llama.num_heads, llama.num_kv_heads, llama.head_dim, llama.kv_dim) == (32, 8, 128, 1024)
    gemma = load_architecture("gemma-2-2b")
    assert gemma.head_dim == 256 and gemma.q_dim == 2048 != gemma.hidden_size  # explicit head_dim
    star = load_architecture("starcoder")
    assert star.num_kv_heads == 1  # multi_query


def test_tied_vs_untied_differs_by_the_head() -> None:
    cfg = json.loads((CATALOGUE_DIR / "llama-3.2-1b.json").read_text())
    tied = architecture_from_config(cfg)
    untied = architecture_from_config({**cfg, "tie_word_embeddings": False})
    assert untied.total_params - tied.total_params == cfg["vocab_size"] * cfg["hidden_size"]


def test_sliding_window_layers() -> None:
    assert load_architecture("mistral-7b").sliding_layers == 32
    gemma = load_architecture("gemma-2-2b")
    assert (gemma.sliding_window, gemma.sliding_layers) == (4096, 13)
    qwen = load_architecture("qwen2.5-7b")
    assert qwen.sliding_window is None  # use_sliding_window is false


def test_moe_fields() -> None:
    mix = load_architecture("mixtral-8x7b")
    assert (mix.num_experts, mix.experts_per_token) == (8, 2)
    # all experts of one projection are one 3-D tensor in transformers
    assert mix.largest_param_elements == 8 * 2 * 14336 * 4096


def test_field_name_variants_give_the_same_model() -> None:
    a = architecture_from_config({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
                                  "vocab_size": 100, "n_positions": 32})
    b = architecture_from_config({"model_type": "gpt2", "hidden_size": 64, "num_attention_heads": 4,
                                  "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 32})
    assert a.total_params == b.total_params > 0


def test_names_are_case_insensitive_and_org_prefixed() -> None:
    assert load_architecture("meta-llama/Llama-3.1-8B").total_params == KNOWN_TOTALS["llama-3.1-8b"]
    assert load_architecture("GPT2-XL").total_params == KNOWN_TOTALS["gpt2-xl"]


def test_unknown_name_suggests_close_names() -> None:
    with pytest.raises(ArchitectureError, match="did you mean llama-3.1-8b"):
        load_architecture("lama-3.1-8b")


def test_unsupported_model_type_is_named() -> None:
    with pytest.raises(ArchitectureError, match="'t5'"):
        architecture_from_config({"model_type": "t5", "d_model": 512})


@pytest.mark.parametrize(
    "cfg,field",
    [
        ({"model_type": "llama", "num_attention_heads": 8, "num_hidden_layers": 2, "vocab_size": 10,
          "intermediate_size": 8}, "hidden_size"),
        ({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 8}, "vocab_size"),
        ({"model_type": "llama", "hidden_size": "big", "num_attention_heads": 8, "num_hidden_layers": 2,
          "vocab_size": 10, "intermediate_size": 8}, "hidden_size"),
        ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8, "num_hidden_layers": 0,
          "vocab_size": 10, "intermediate_size": 8}, "num_hidden_layers"),
        ({}, "model_type"),
    ],
)
def test_missing_or_invalid_field_is_named(cfg: dict, field: str) -> None:
    with pytest.raises(ArchitectureError, match=field):
        architecture_from_config(cfg)


def test_kv_heads_must_divide_heads() -> None:
    with pytest.raises(ArchitectureError, match="num_key_value_heads"):
        architecture_from_config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8,
                                  "num_key_value_heads": 3, "num_hidden_layers": 2, "vocab_size": 10,
                                  "intermediate_size": 8})


def test_config_files(tmp_path) -> None:
    good = tmp_path / "m"
    good.mkdir()
    (good / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
                                                  "vocab_size": 100, "n_positions": 32}))
    assert load_architecture(str(good)).num_layers == 2  # a directory holding config.json
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ArchitectureError, match="not valid JSON"):
        load_architecture(str(bad))
    with pytest.raises(ArchitectureError, match="no such config file"):
        load_architecture(str(tmp_path / "missing.json"))
    arr = tmp_path / "list.json"
    arr.write_text("[1, 2]")
    with pytest.raises(ArchitectureError, match="JSON object"):
        load_architecture(str(arr))


def test_params_only_architecture_is_coarse() -> None:
    arch = architecture_from_params(7e9)
    assert arch.coarse and arch.total_params == 7_000_000_000
    with pytest.raises(ArchitectureError):
        architecture_from_params(float("nan"))
    with pytest.raises(ArchitectureError):
        architecture_from_params(-5)
