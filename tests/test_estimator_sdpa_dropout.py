"""CPU SDPA with attention dropout: the estimator's kernel profile against measured ground truth.

torch's CPU dispatcher runs SDPA's fused flash kernel only without dropout; in training with
attention dropout it takes the math path (s x s softmax, dropout noise and product saved, and
16-bit q/k/v upcast to fp32). Ground truth: benchmarks/data/measured_sdpa_dropout.json
(``gpumem-tui measure --on cpu``, torch MemTracker), plus small live measurements with torch.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gpumem_tui.estimator.architecture import architecture_from_config, load_architecture
from gpumem_tui.estimator.components import activation_bytes
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.spec import TrainingSpec

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "measured_sdpa_dropout.json"
CASES = json.loads(DATA.read_text(encoding="utf-8"))["cases"]


def _spec(fields: dict) -> TrainingSpec:
    fields = dict(fields)
    if "lora_targets" in fields:
        fields["lora_targets"] = tuple(fields["lora_targets"])
    return TrainingSpec(**fields)


def _predict(case: dict) -> int:
    return estimate(load_architecture(str(ROOT / case["config"])), _spec(case["spec"])).peak_bytes


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_estimate_matches_measured_sdpa_dropout_case(case):
    measured = case["measured"]["peak_bytes"]
    error = 100 * (_predict(case) - measured) / measured
    limit = 3.0 if case["spec"]["task"] == "inference" else 1.0
    assert abs(error) <= limit, f"{case['id']}: {error:+.2f} %"


def test_dropout_cost_matches_measured_difference():
    """Dropout on vs off at equal shapes: the estimator's difference (math path minus flash)
    is the measured one."""
    by_id = {c["id"]: c for c in CASES}
    pairs = [(k, k.replace("sdpa-drop-", "sdpa-nodrop-")) for k in by_id
             if k.startswith("sdpa-drop-") and k.replace("sdpa-drop-", "sdpa-nodrop-") in by_id]
    assert len(pairs) >= 2
    for drop, nodrop in pairs:
        measured = by_id[drop]["measured"]["peak_bytes"] - by_id[nodrop]["measured"]["peak_bytes"]
        predicted = _predict(by_id[drop]) - _predict(by_id[nodrop])
        assert measured > 0
        assert abs(predicted - measured) <= 0.02 * measured, (drop, predicted, measured)


def _gpt2(**overrides):
    config = {"model_type": "gpt2", "vocab_size": 1024, "n_positions": 2048, "n_embd": 128, "n_layer": 2,
              "n_head": 4, "attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}
    config.update(overrides)
    return architecture_from_config(config, name="tiny-gpt2")


def _activations(arch, spec) -> int:
    """All saved activations at the end of the forward (bytes)."""
    return activation_bytes(arch, spec, spec.batch, spec.seq)


def test_math_path_only_on_cpu_in_training_with_dropout():
    drop, nodrop = _gpt2(), _gpt2(attn_pdrop=0.0)
    base = TrainingSpec(batch=2, seq=512, dtype="bf16", attention="sdpa", device="cpu")
    # CPU training: dropout costs the s x s terms (several b a s^2 tensors per layer)
    sq = 2 * 4 * 512 * 512
    assert _activations(drop, base) - _activations(nodrop, base) >= 2 * sq * 4 * drop.num_layers
    # CUDA's fused kernels support dropout: no s x s terms either way
    cuda = dataclasses.replace(base, device="cuda")
    assert _activations(drop, cuda) - _activations(nodrop, cuda) < sq
    # inference (eval mode) has no dropout: the CPU flash kernel runs whatever the config says
    infer = dataclasses.replace(base, task="inference")
    assert estimate(drop, infer).peak_bytes == estimate(nodrop, infer).peak_bytes
    # eager attention is unaffected by the SDPA dispatch
    eager = dataclasses.replace(base, attention="eager")
    assert _activations(drop, eager) == _activations(drop, dataclasses.replace(eager, device="cpu"))


def test_math_path_upcasts_16_bit_attention_to_fp32():
    """On the math path the s x s tensors are fp32 whatever the compute dtype, so they cost the
    same bytes in bf16 and fp32; elsewhere they scale with the dtype."""
    arch = _gpt2()
    spec = TrainingSpec(batch=1, seq=1024, dtype="bf16", attention="sdpa", device="cpu")
    s2 = dataclasses.replace(spec, seq=2048)
    # the quadratic part: activations(2s) - 2 activations(s) = 2 L b a s^2 per s^2 byte
    quad_bf16 = _activations(arch, s2) - 2 * _activations(arch, spec)
    fp32 = dataclasses.replace(spec, dtype="fp32")
    quad_fp32 = _activations(arch, dataclasses.replace(fp32, seq=2048)) - 2 * _activations(arch, fp32)
    assert quad_bf16 > 0 and quad_bf16 == quad_fp32
    eager = dataclasses.replace(spec, attention="eager")
    quad_eager = _activations(arch, dataclasses.replace(eager, seq=2048)) - 2 * _activations(arch, eager)
    assert quad_eager < quad_bf16


# -- live: torch on the real CPU (small shapes, a few seconds) --------------------------------


@pytest.mark.torch_in_process
def test_cpu_dispatcher_picks_math_with_dropout():
    import torch
    from torch.nn.attention import SDPBackend

    q = torch.randn(2, 4, 64, 32, requires_grad=True)
    assert SDPBackend(torch._fused_sdp_choice(q, q, q, None, 0.1, True)) == SDPBackend.MATH
    assert SDPBackend(torch._fused_sdp_choice(q, q, q, None, 0.0, True)) != SDPBackend.MATH


@pytest.mark.parametrize(
    "config, spec",
    [
        ({"model_type": "gpt2", "vocab_size": 512, "n_positions": 256, "n_embd": 64, "n_layer": 2, "n_head": 2},
         dict(batch=2, seq=256, dtype="bf16")),
        ({"model_type": "gpt2", "vocab_size": 512, "n_positions": 256, "n_embd": 64, "n_layer": 1, "n_head": 2},
         dict(batch=1, seq=256, dtype="fp32")),
        ({"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 176,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 512, "attention_dropout": 0.1, "tie_word_embeddings": False},
         dict(batch=2, seq=256, dtype="bf16")),
    ],
    ids=["gpt2-bf16", "gpt2-fp32-b1", "llama-gqa-bf16"],
)
@pytest.mark.torch_in_process
def test_estimate_matches_live_cpu_measurement(tmp_path, config, spec):
    import torch  # noqa: F401 -- installed by setup (README): missing is a failure
    import transformers  # noqa: F401 -- installed by setup (README): missing is a failure
    from gpumem_tui.measure.cli import request_from_spec
    from gpumem_tui.measure.runner import run

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    arch = load_architecture(str(path))
    assert arch.attention_dropout > 0
    training = TrainingSpec(attention="sdpa", device="cpu", **spec)
    measured = run(request_from_spec(arch, training, on="cpu")).to_json()["peak_bytes"]
    predicted = estimate(arch, training).peak_bytes
    assert abs(predicted - measured) <= 0.01 * measured, (predicted, measured)


def test_kept_model_output_adds_its_logits_after_the_forward():
    """``keep_outputs``: the loop's reference keeps b x s x V logits (compute dtype) alive in
    backward and the optimizer step; the forward is unchanged (they are alive there anyway)."""
    arch = _gpt2()
    for dtype, e in (("fp32", 4), ("bf16", 2)):
        base = TrainingSpec(batch=2, seq=128, dtype=dtype, attention="sdpa", device="cpu")
        kept = dataclasses.replace(base, keep_outputs=True)
        phases = {p.name: p.live_bytes for p in estimate(arch, base).phases}
        kept_phases = {p.name: p.live_bytes for p in estimate(arch, kept).phases}
        logits = 2 * 128 * arch.vocab_size * e
        assert kept_phases["forward"] == phases["forward"]
        assert kept_phases["backward"] - phases["backward"] == logits
        assert kept_phases["optimizer_step"] - phases["optimizer_step"] == logits
    from gpumem_tui.estimator.spec import SpecError

    with pytest.raises(SpecError) as err:
        TrainingSpec(task="inference", keep_outputs=True)
    assert err.value.field == "keep_outputs"


def test_estimate_cli_keep_outputs(capsys):
    from gpumem_tui.estimator import cli

    argv = ["gpt2", "--batch", "2", "--seq", "128", "--dtype", "fp32", "--device", "cpu", "--json"]
    assert cli.main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert cli.main([*argv, "--keep-outputs"]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert kept["peak_bytes"] - plain["peak_bytes"] == 2 * 128 * plain_vocab() * 4
    assert any("keeps the model output" in a for a in kept["assumptions"])
    assert cli.main(["gpt2", "--task", "inference", "--keep-outputs"]) == 2
    assert "training only" in capsys.readouterr().err


def plain_vocab() -> int:
    return load_architecture("gpt2").vocab_size
