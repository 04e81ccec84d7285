"""Families as data, the general reading of unknown configs, bad configs, the model lists."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_inprocess import run_cli
from shared_data import GPU_DIR, needs_gpu_dir

from gpumem_tui.estimator.architecture import ArchitectureError, architecture_from_config, load_architecture
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.families.known import KNOWN
from gpumem_tui.estimator.models import cached_choices, hf_cache_dir, search_models
from gpumem_tui.estimator.spec import TrainingSpec

ROOT = Path(__file__).resolve().parents[1]
FAMILIES_DATA = ROOT / "benchmarks" / "data" / "measured_families.json"

LLAMA_LIKE = {
    "model_type": "brandnewlm", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 2, "intermediate_size": 1408, "vocab_size": 1000, "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli("estimate", *args, cwd=ROOT,
                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})


def test_each_model_type_has_one_description() -> None:
    types = [mt for fam in KNOWN for mt in fam.model_types]
    assert len(types) == len(set(types))


def test_unknown_family_is_read_with_the_general_description_and_flagged() -> None:
    arch = architecture_from_config(LLAMA_LIKE, name="new")
    assert not arch.family.verified and "RMSNorm, gated MLP" in arch.family.name
    # GQA, gated MLP: q (512x512) k, v (512x128 each), o, gate/up/down (512x1408), 2 norms
    per_layer = 512 * 512 * 2 + 2 * 512 * 128 + 3 * 512 * 1408 + 2 * 512
    assert arch.total_params == 2 * per_layer + 1000 * 512 * 2 + 512  # untied head, final norm
    est = estimate(arch, TrainingSpec(device="cpu"))
    assert any("brandnewlm" in a and "not verified" in a for a in est.assumptions)


def test_general_description_follows_the_config_fields() -> None:
    gpt_like = {"model_type": "x", "n_embd": 256, "n_layer": 3, "n_head": 4, "vocab_size": 500,
                "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "multi_query": True}
    arch = architecture_from_config(gpt_like)
    assert (arch.norm, arch.gated_mlp, arch.num_kv_heads, arch.intermediate_size) == ("layernorm", False, 1, 1024)


@pytest.mark.parametrize("config,needle", [
    ({"model_type": "t5", "d_model": 512}, "'t5' is an encoder-decoder"),
    ({"model_type": "somethingnew", "is_encoder_decoder": True}, "encoder-decoder"),
    ({**LLAMA_LIKE, "num_hidden_layers": None}, "'num_hidden_layers'"),
    ({k: v for k, v in LLAMA_LIKE.items() if k != "vocab_size"}, "'vocab_size'"),
    ({**LLAMA_LIKE, "num_attention_heads": 7, "num_key_value_heads": 7}, "not divisible"),
    ({**LLAMA_LIKE, "num_key_value_heads": 3}, "must divide"),
    ({**LLAMA_LIKE, "hidden_size": 10**8, "head_dim": 64, "vocab_size": 10**8}, "not a plausible model"),
])
def test_bad_configs_name_the_problem(config: dict, needle: str) -> None:
    with pytest.raises(ArchitectureError, match=needle.replace("(", r"\(")):
        architecture_from_config(config)


def test_cli_refuses_encoder_decoder_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "bart", "d_model": 768}))
    res = _cli(str(path), "--device", "cpu")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "encoder-decoder" in res.stderr and "bart" in res.stderr


def test_list_and_help_name_the_catalogue() -> None:
    listed = _cli("--list")
    assert listed.returncode == 0
    for name in ("qwen3-8b", "pythia-160m", "opt-125m", "deepseek-v3", "gpt2"):
        assert name in listed.stdout
        assert name in _cli("--help").stdout.replace("\n", " ")


def test_hf_cache_is_found_offline(tmp_path: Path) -> None:
    snap = tmp_path / "hub" / "models--acme--tiny-lm" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA_LIKE))
    broken = tmp_path / "hub" / "models--acme--broken" / "snapshots" / "r1"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{not json")
    assert hf_cache_dir({"HF_HOME": str(tmp_path)}) == tmp_path / "hub"
    assert hf_cache_dir({"HF_HUB_CACHE": "/x", "HF_HOME": "/y"}) == Path("/x")
    found = {c.name: c for c in cached_choices(tmp_path / "hub")}
    assert found["acme/tiny-lm"].model_type == "brandnewlm" and found["acme/tiny-lm"].params
    assert found["acme/broken"].params is None and "not valid JSON" in found["acme/broken"].error
    assert cached_choices(tmp_path / "nowhere") == []
    hits = search_models("tiny", tmp_path / "hub")
    assert [c.name for c in hits] == ["acme/tiny-lm"]
    assert {c.name for c in search_models("qwen3 moe", tmp_path / "hub")} == {"qwen3-30b-a3b"}


@functools.cache
def _family_cases() -> tuple[dict, ...]:
    if not FAMILIES_DATA.exists():
        return ()
    return tuple(json.loads(FAMILIES_DATA.read_text())["cases"])


def _error(case: dict) -> tuple[float, bool, str]:
    from gpumem_tui.estimator.spec import parse_lora_targets

    arch = load_architecture(str(ROOT / case["config"]))
    fields = {k: v for k, v in case["spec"].items() if k in TrainingSpec.__dataclass_fields__}
    if "lora_targets" in fields:
        fields["lora_targets"] = parse_lora_targets(",".join(fields["lora_targets"]))
    est = estimate(arch, TrainingSpec(**fields))
    measured = case["measured"]["peak_bytes"]
    return (est.peak_bytes - measured) / measured, arch.family.verified, arch.model_type


@pytest.mark.parametrize("case", [c for c in _family_cases() if c["id"].startswith("unseen-")], ids=lambda c: c["id"])
def test_unseen_family_within_10_percent_of_measure_on_meta(case: dict) -> None:
    """Configs of families the estimator has no description for (starcoder2, helium), read
    with the general description, against ``measure --on meta``."""
    err, verified, _ = _error(case)
    assert not verified and abs(err) <= 0.10


# sum(p.numel()) of the transformers 5.24 model built from each catalogue config on the meta
# device (AutoModelForCausalLM.from_config), and the published totals where a model card has one
TRANSFORMERS_TOTALS = {
    "pythia-160m": 162_322_944,
    "pythia-1b": 1_011_781_632,
    "qwen3-0.6b": 596_049_920,
    "qwen3-8b": 8_190_735_360,
    "olmo-2-1b": 1_484_916_736,
    "phi-2": 2_779_683_840,
    "stablelm-2-1.6b": 1_644_515_328,
    "stablelm-3b-4e1t": 2_795_443_200,
    "qwen1.5-moe-a2.7b": 14_315_784_192,
    "qwen3-30b-a3b": 30_532_122_624,
    "falcon-7b": 6_921_720_704,
    "opt-125m": 125_239_296,
    "opt-350m": 331_196_416,
    "opt-1.3b": 1_315_758_080,
    "opt-6.7b": 6_658_473_984,
    "qwen3-4b": 4_022_468_096,
    "deepseek-v3": 671_026_404_352,
    "gemma-3-1b": 999_885_952,
    "olmo-2-7b": 7_298_617_344,
    "pythia-6.9b": 6_857_302_016,
}


@pytest.mark.parametrize("name,total", sorted(TRANSFORMERS_TOTALS.items()))
def test_new_family_parameter_counts_match_transformers(name: str, total: int) -> None:
    arch = load_architecture(name)
    assert arch.family.name == arch.model_type  # an exact description, not the general one
    assert arch.total_params == total


def test_moe_output_states_the_routing_assumption() -> None:
    est = estimate(load_architecture("qwen1.5-moe-a2.7b"), TrainingSpec(device="cpu"))
    text = " ".join(est.assumptions)
    assert "routing assumption: balanced" in text and "shared expert" in text and "worst case" in text


@functools.cache  # the parametrize below and each family's test read it: estimated once per process
def _per_family() -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for case in _family_cases():
        if case["id"].startswith("unseen-"):
            continue
        err, verified, model_type = _error(case)
        if verified:
            out.setdefault(model_type, []).append(abs(err))
    return out


@pytest.mark.parametrize("family", sorted(_per_family()))
def test_exact_family_within_1_percent_median_2_percent_worst(family: str) -> None:
    """``estimate --device cpu`` vs ``measure`` (meta eager at real widths, CPU SDPA/eager at
    narrow widths; MoE on the CPU) over at least three shapes per family."""
    import statistics

    errors = _per_family()[family]
    assert len(errors) >= 3
    assert statistics.median(errors) <= 0.01
    assert max(errors) <= 0.02


def test_general_reading_names_the_structure_it_does_not_model() -> None:
    config = json.loads((ROOT / "gpumem_tui/estimator/catalogue/deepseek-v3.json").read_text())
    arch = architecture_from_config({**config, "model_type": "deepseek_v9"})
    assert not arch.family.verified
    note = " ".join(arch.notes)
    assert "multi-head latent attention" in note and "dense first layers" in note and "shared experts" in note


def test_deepseek_v3_mla_uses_the_math_path_for_sdpa() -> None:
    arch = load_architecture("deepseek-v3")
    assert arch.family.verified and arch.mla == (1536, 512, 128, 64, 128) and arch.dense_layers == 3
    sdpa = estimate(arch, TrainingSpec(device="cpu", attention="sdpa", seq=1024))
    eager = estimate(arch, TrainingSpec(device="cpu", attention="eager", seq=1024))
    # values (128) narrower than keys (192): no fused kernel, the s x s probabilities are kept
    assert sdpa.components_bytes["activations"] > 0.9 * eager.components_bytes["activations"]


def test_estimate_with_the_new_modules_imports_neither_torch_nor_textual() -> None:
    code = (
        "import sys\n"
        "from gpumem_tui.estimator import cli, models\n"
        "from gpumem_tui.estimator.architecture import load_architecture\n"
        "from gpumem_tui.estimator.estimate import estimate\n"
        "from gpumem_tui.estimator.spec import TrainingSpec\n"
        "for name in ('deepseek-v3', 'opt-350m', 'gemma-3-1b'):\n"
        "    estimate(load_architecture(name), TrainingSpec(device='meta'))\n"
        "models.search_models('qwen')\n"
        "bad = [m for m in ('torch', 'textual', 'pynvml', 'transformers') if m in sys.modules]\n"
        "print(bad)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_meta_profile_puts_sdpa_on_the_math_path() -> None:
    arch = load_architecture("qwen3-0.6b")
    cpu = estimate(arch, TrainingSpec(device="cpu", attention="sdpa", batch=1, seq=2048))
    meta = estimate(arch, TrainingSpec(device="meta", attention="sdpa", batch=1, seq=2048))
    # the meta device stores the s x s probabilities that the CPU flash kernel does not
    assert meta.components_bytes["activations"] - cpu.components_bytes["activations"] >= 28 * 16 * 2048 * 2048


# `gpumem-tui measure CONFIG --on meta --attention sdpa --batch 2 --seq 512` (torch 2.13 CPU
# build, transformers 5.24): the meta device runs SDPA's math path
META_SDPA_MEASURED = [
    ("qwen3-0.6b-cpu-sdpa-fp32-b2-s256", "fp32", 151_222_632),
    ("qwen3-0.6b-cpu-sdpa-fp32-b2-s256", "bf16", 116_544_872),
    ("gpt2-small-L2-fp32-b2-s256-cpu-sdpa", "fp32", 264_380_536),
    ("gpt2-small-L2-fp32-b2-s256-cpu-sdpa", "bf16", 210_860_152),
]


@pytest.mark.parametrize("config,dtype,measured", META_SDPA_MEASURED)
def test_meta_profile_matches_measure_on_meta_with_sdpa(config: str, dtype: str, measured: int) -> None:
    arch = load_architecture(str(ROOT / "benchmarks" / "data" / "configs" / f"{config}.json"))
    est = estimate(arch, TrainingSpec(device="meta", attention="sdpa", batch=2, seq=512, dtype=dtype))
    assert abs(est.peak_bytes - measured) / measured < 0.005


def test_partial_rotary_is_read_where_transformers_5_keeps_it() -> None:
    """transformers 5 moved ``partial_rotary_factor`` into ``rope_parameters`` (the H100
    Pythia config has it there); older configs keep it (or GPT-NeoX's ``rotary_pct``) on top."""
    neox = {"model_type": "gpt_neox", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
            "intermediate_size": 2048, "vocab_size": 1000, "max_position_embeddings": 2048}
    nested = architecture_from_config({**neox, "rope_parameters": {"rope_type": "default",
                                                                   "partial_rotary_factor": 0.25}}, "a")
    top = architecture_from_config({**neox, "rotary_pct": 0.25}, "b")
    per_kind = architecture_from_config({**neox, "rope_parameters": {"full_attention": {
        "rope_type": "default", "partial_rotary_factor": 0.5}}}, "c")
    full = architecture_from_config(neox, "d")
    assert (nested.rotary_dims, top.rotary_dims, per_kind.rotary_dims, full.rotary_dims) == (16, 16, 32, 64)
    with pytest.raises(ArchitectureError, match="partial_rotary_factor"):
        architecture_from_config({**neox, "rope_parameters": {"partial_rotary_factor": "quarter"}}, "e")


@needs_gpu_dir
def test_partial_rotary_of_the_h100_pythia_config() -> None:
    base = json.loads((GPU_DIR / "configs" / "pythia-410m.json").read_text())
    assert architecture_from_config(base, "pythia-410m").rotary_dims == 16


def test_training_cache_rules_follow_the_device_and_checkpointing() -> None:
    """The training DynamicCache is a CUDA-loop rule (measure --on cpu passes use_cache=False),
    off under full checkpointing and with ``use_cache: false``; its unsaved copies are counted
    only where attention repeats grouped-query heads (a sliding-window mask here)."""
    from dataclasses import replace

    from gpumem_tui.estimator import components as C

    arch = load_architecture("mistral-7b")
    long = TrainingSpec(task="lora", batch=1, seq=8192, dtype="bf16", device="cuda")
    assert C.training_cache_copies(arch, long)
    per_layer = 2 * 1 * 8192 * arch.kv_dim * 2
    assert C.training_cache_forward_bytes(arch, long, 1, 8192) == arch.sliding_layers * per_layer
    assert C.training_cache_forward_bytes(arch, replace(long, seq=2048), 1, 2048) == 0  # no mask: enable_gqa
    assert C.training_cache_forward_bytes(arch, replace(long, device="cpu"), 1, 8192) == 0
    assert C.training_cache_forward_bytes(arch, replace(long, grad_ckpt="full"), 1, 8192) == 0
    assert not C.training_cache_copies(replace(arch, use_cache=False), long)
    eager = replace(long, seq=2048, attention="eager")
    assert C.training_cache_forward_bytes(arch, eager, 1, 2048) == arch.num_layers * 2 * 2048 * arch.kv_dim * 2


def test_rotary_concat_output_copy_depends_on_the_kernel() -> None:
    """GPT-NeoX's concatenated rotary q is (b, a, s, d)-contiguous: flash (CUDA bf16, CPU)
    writes its output in that layout and the o-projection copies it; CUDA's memory-efficient
    kernel (fp32) writes (b, s, a, d) and no copy is saved."""
    from gpumem_tui.estimator.components.kernels import sdpa_output_copied

    arch = load_architecture("pythia-160m")
    bf16 = TrainingSpec(batch=2, seq=512, dtype="bf16", device="cuda")
    fp32 = TrainingSpec(batch=2, seq=512, dtype="fp32", device="cuda")
    assert sdpa_output_copied(arch, bf16) and not sdpa_output_copied(arch, fp32)
    assert sdpa_output_copied(arch, TrainingSpec(batch=2, seq=512, dtype="fp32", device="cpu"))
    assert not sdpa_output_copied(load_architecture("llama-3.2-1b"), bf16)
