"""gpumem-tui measure: the torch ground truth (tiny configs, meta and real CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_inprocess import run_cli

from gpumem_tui.measure.runner import COMPONENTS, MeasureError, MeasureRequest, run  # noqa: E402

if TYPE_CHECKING:  # the tests import torch themselves (tests/conftest.py: torch_in_process)
    import torch

# torch_in_process: these tests import torch here; under xdist they share one worker (tests/conftest.py)
pytestmark = [pytest.mark.torch, pytest.mark.torch_in_process]

B, S, V, H, L = 2, 64, 1000, 128, 2
TINY = {"model_type": "gpt2", "n_layer": L, "n_embd": H, "n_head": 4, "vocab_size": V, "n_positions": 256}
TINY_LLAMA = {
    "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 352,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}


def _param_and_buffer_bytes(config: dict, dtype: torch.dtype) -> tuple[int, int]:
    """Exact parameter and buffer storage bytes, built independently of the runner."""
    import torch
    import transformers

    cfg = dict(config)
    cfg = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg)
    finally:
        torch.set_default_dtype(old)
    params = {p.untyped_storage()._cdata: p.untyped_storage().nbytes() for p in model.parameters()}
    buffers = {b.untyped_storage()._cdata: b.untyped_storage().nbytes() for b in model.buffers()}
    return sum(params.values()), sum(buffers.values())


@pytest.fixture(scope="module")
def tiny_meta():
    return run(MeasureRequest(config=TINY, batch=B, seq=S, on="meta", attention="eager"))


@pytest.fixture(scope="module")
def tiny_cpu():
    return run(MeasureRequest(config=TINY, batch=B, seq=S, on="cpu", attention="eager"))


def test_components_sum_to_peak(tiny_meta):
    comps = tiny_meta.components_bytes
    assert set(comps) == set(COMPONENTS)
    assert sum(comps.values()) == tiny_meta.peak_bytes
    assert sum(tiny_meta.tracker_categories.values()) == tiny_meta.peak_bytes
    assert tiny_meta.peak_bytes == max(p["live_bytes"] for p in tiny_meta.phases)
    assert tiny_meta.peak_phase in {p["name"] for p in tiny_meta.phases}
    assert comps["cuda_context"] == 0 and comps["allocator_reserve"] == 0


def test_parameters_and_optimizer_states_are_exact(tiny_meta):
    import torch
    params, buffers = _param_and_buffer_bytes(TINY, torch.float32)
    assert tiny_meta.components_bytes["parameters"] == params + buffers
    n = tiny_meta.total_params
    assert params == 4 * n  # tied LM head counted once
    # AdamW: exp_avg + exp_avg_sq (fp32) per parameter + one fp32 `step` scalar per tensor
    n_tensors = 4 + L * 12  # wte, wpe, ln_f.{w,b}; per block ln_1/ln_2 w,b + attn/mlp c_attn,c_proj,c_fc,c_proj w,b
    assert tiny_meta.components_bytes["optimizer_states"] == 8 * n + 4 * n_tensors


def test_logits_terms_present_at_backward_peak(tiny_meta):
    # With V >> h the peak is at the start of backward: fp32 log-softmax plus its gradients.
    assert tiny_meta.peak_phase == "backward"
    assert tiny_meta.components_bytes["logits_and_loss"] >= 2 * 4 * B * S * V
    ops = {t["op"] for t in tiny_meta.top_tensors if t["tag"] == "logits"}
    assert "_log_softmax.default" in ops


def test_meta_eager_matches_real_cpu(tiny_meta, tiny_cpu):
    # ESTIMATOR.md: with eager attention the meta device and the real CPU agree to the byte.
    assert tiny_cpu.peak_bytes == tiny_meta.peak_bytes
    assert tiny_cpu.components_bytes == tiny_meta.components_bytes
    assert [p["live_bytes"] for p in tiny_cpu.phases] == [p["live_bytes"] for p in tiny_meta.phases]


def test_lora_trains_only_adapters():
    r = 4
    m = run(MeasureRequest(config=TINY_LLAMA, task="lora", batch=1, seq=32, on="meta", lora_rank=r,
                           lora_targets=("q_proj", "v_proj")))
    h, kv = 128, 128 // 4 * 2
    expected = 2 * (r * (h + h) + r * (h + kv))  # per layer: q (h->h) and v (h->kv)
    assert m.trainable_params == expected
    # AdamW states only for the adapters: 2 fp32 moments + one step scalar per adapter tensor
    assert m.components_bytes["optimizer_states"] == 8 * expected + 4 * (2 * 2 * 2)


def test_inference_kv_cache_is_tagged():
    b, s = 2, 48
    m = run(MeasureRequest(config=TINY_LLAMA, task="inference", batch=b, seq=s, on="meta"))
    kv_per_token = 2 * 2 * 2 * 32 * 4  # K and V, L=2 layers, k=2 heads, head_dim 32, fp32
    assert 0 < m.components_bytes["kv_cache"] <= kv_per_token * b * (s + 1)
    assert m.components_bytes["gradients"] == 0 and m.components_bytes["optimizer_states"] == 0
    assert {p["name"] for p in m.phases} == {"prefill", "decode"}


def test_bad_requests_raise_measure_error():
    with pytest.raises(MeasureError, match="batch"):
        run(MeasureRequest(config=TINY, batch=0))
    with pytest.raises(MeasureError, match="mixed precision"):
        run(MeasureRequest(config=TINY, dtype="bf16", mixed_precision=True, on="meta"))
    with pytest.raises(MeasureError, match="model_type"):
        run(MeasureRequest(config={"model_type": "no-such-model-type"}))


def _cli(*args: str, extra: str = "") -> subprocess.CompletedProcess:
    """In a fresh interpreter, for what needs one (``extra`` blocks an import); the other CLI
    tests run it in this process (tests/cli_inprocess.py)."""
    code = f"import sys{extra}\nfrom gpumem_tui.cli import main\nsys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_cli_json_shape(tmp_path: Path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY), encoding="utf-8")
    proc = run_cli("measure", str(cfg), "--batch", "2", "--seq", "64", "--dtype", "fp32", "--attention", "eager",
                   "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["measured"] is True and data["on"] == "meta" and data["attention"] == "eager"
    assert set(data["components_bytes"]) == set(COMPONENTS)
    assert sum(data["components_bytes"].values()) == data["peak_bytes"]
    assert "math path" in data["note"]


@pytest.mark.parametrize(
    "args, text",
    [
        (("measure", "no-such-model"), "unknown model"),
        (("measure", "gpt2", "--on", "gpu"), "--on"),
        (("measure", "gpt2", "--zero", "2", "--dp", "2"), "one process"),
        (("measure", "gpt2", "--batch", "0"), "batch"),
        (("measure", "gpt2", "--task", "qlora"), "QLoRA"),
        (("measure", "gpt2", "--attention", "flash", "--device", "cuda"), "flash"),
    ],
)
def test_cli_bad_input_exits_2(args, text):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert text in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cli_without_torch_names_the_extra():
    proc = _cli("measure", "gpt2", extra="\nsys.modules['torch'] = None")
    assert proc.returncode == 2
    assert "torch extra" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_adafactor_refused_on_meta():
    with pytest.raises(MeasureError, match="adafactor"):
        run(MeasureRequest(config=TINY, optimizer="adafactor", on="meta"))


def test_tiny_case_matches_the_estimator(tiny_cpu):
    from gpumem_tui.estimator import estimate as estimate_mod
    from gpumem_tui.estimator.architecture import architecture_from_config
    from gpumem_tui.estimator.spec import TrainingSpec

    arch = architecture_from_config(dict(TINY), name="tiny-gpt2")
    spec = TrainingSpec(batch=B, seq=S, dtype="fp32", attention="eager", device="cpu")
    predicted = estimate_mod.estimate(arch, spec)
    assert predicted.total_params == tiny_cpu.total_params
    assert predicted.components_bytes["parameters"] == tiny_cpu.components_bytes["parameters"]
    error = abs(predicted.peak_bytes - tiny_cpu.peak_bytes) / tiny_cpu.peak_bytes
    assert error <= 0.05, f"peak: predicted {predicted.peak_bytes:,} vs measured {tiny_cpu.peak_bytes:,}"


def test_foreach_adamw_holds_one_state_sized_copy(tiny_meta):
    # The CUDA default (foreach) keeps list-wide temporaries: torch._foreach_sqrt over every
    # exp_avg_sq = one state-sized copy of all parameters; the CPU default (single tensor) holds
    # temporaries of one parameter at a time. The single-tensor run is the module's tiny_meta
    # (optimizer_impl "single" is MeasureRequest's default); the foreach run has its shape.
    import torch
    single = tiny_meta
    foreach = run(MeasureRequest(config=TINY, batch=B, seq=S, on="meta", attention="eager", optimizer_impl="foreach"))
    params, _ = _param_and_buffer_bytes(TINY, torch.float32)
    step = {p["name"]: p["live_bytes"] for p in foreach.phases}["optimizer_step"]
    base = {p["name"]: p["live_bytes"] for p in foreach.phases}["zero_grad"]  # params + states + grads
    assert step - base >= params
    single_step = {p["name"]: p["live_bytes"] for p in single.phases}["optimizer_step"]
    assert single_step < step


def test_grad_accumulation_keeps_gradients_through_the_next_micro_batch(tiny_meta):
    import torch
    one = tiny_meta  # the same request without grad_accum, measured once for the module
    accum = run(MeasureRequest(config=TINY, batch=B, seq=S, on="meta", attention="eager", grad_accum=2))
    params, _ = _param_and_buffer_bytes(TINY, torch.float32)
    # the second micro-batch runs forward and backward with every fp32 gradient allocated
    assert accum.components_bytes["gradients"] == params
    assert accum.peak_bytes == one.peak_bytes + params


def test_classification_head_replaces_the_lm_head():
    import torch
    import transformers

    cfg = dict(TINY_LLAMA)
    cfg = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        bare = sum(p.numel() for p in transformers.AutoModel.from_config(cfg).parameters())
    m = run(MeasureRequest(config=TINY_LLAMA, head="classification", num_labels=3, batch=2, seq=32, on="meta"))
    assert m.model_class == "LlamaForSequenceClassification"
    assert m.total_params == bare + 128 * 3  # score = Linear(h, 3, bias=False), no pooler
    assert m.components_bytes["logits_and_loss"] == 0  # no (..., V) tensors without an LM head
    assert sum(m.components_bytes.values()) == m.peak_bytes


def test_cli_lora_all_linear_adapts_every_gpt2_linear(tmp_path: Path, capsys):
    from gpumem_tui.measure.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY), encoding="utf-8")
    r = 4
    assert main([str(cfg), "--task", "lora", "--lora-rank", str(r), "--lora-targets", "all-linear",
                 "--batch", "1", "--seq", "16", "--dtype", "fp32", "--attention", "eager", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # per layer: c_attn h->3h, attn.c_proj h->h, c_fc h->4h, mlp.c_proj 4h->h: r*(4h + 2h + 5h + 5h)
    assert data["trainable_params"] == L * r * 16 * H


@pytest.mark.parametrize("model_type,extra", [
    ("gpt_neox", {"intermediate_size": 256, "rotary_pct": 0.25}),
    ("falcon", {"multi_query": False, "parallel_attn": False}),
])
def test_cli_lora_all_linear_adapts_every_neox_and_falcon_linear(tmp_path: Path, capsys, model_type, extra):
    """GPT-NeoX / Falcon name their Linears query_key_value, (self_)attention.dense,
    dense_h_to_4h, dense_4h_to_h: all-linear must adapt each (4 per layer)."""
    from gpumem_tui.measure.cli import main

    h, layers, r = 64, 2, 4
    config = {"model_type": model_type, "hidden_size": h, "num_attention_heads": 4, "num_hidden_layers": layers,
              "vocab_size": 128, **extra}
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config), encoding="utf-8")
    assert main([str(cfg), "--task", "lora", "--lora-rank", str(r), "--lora-targets", "all-linear",
                 "--batch", "1", "--seq", "16", "--dtype", "fp32", "--attention", "eager", "--json", "--on", "meta"]) == 0
    data = json.loads(capsys.readouterr().out)
    # qkv h->3h, dense h->h, h->4h, 4h->h: r * (4h + 2h + 5h + 5h) per layer
    assert data["trainable_params"] == layers * r * 16 * h
