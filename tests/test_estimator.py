"""The detailed estimator: each term against its source, phases, sharding, JSON shape."""

from __future__ import annotations

import pytest

from gpumem_tui.estimator import components as C
from gpumem_tui.estimator.architecture import load_architecture
from gpumem_tui.estimator.estimate import COMPONENT_KEYS, estimate
from gpumem_tui.estimator.methods import METHODS, korthikanti, run_method
from gpumem_tui.estimator.solve import max_batch, max_seq
from gpumem_tui.estimator.spec import TrainingSpec

GiB = 1 << 30
MiB = 1 << 20


@pytest.fixture(scope="module")
def gpt2():
    return load_architecture("gpt2")


@pytest.fixture(scope="module")
def llama8b():
    return load_architecture("llama-3.1-8b")


def test_kv_cache_matches_the_llama_31_post(llama8b) -> None:
    # HF "Llama 3.1" post: 8B, 1K tokens, 16-bit KV cache = 0.125 GiB
    spec = TrainingSpec(task="inference", batch=1, seq=1024, dtype="bf16")
    assert C.kv_cache_bytes(llama8b, spec, 1, 1024) == GiB // 8
    fp8 = TrainingSpec(task="inference", batch=1, seq=1024, dtype="bf16", kv_dtype="fp8")
    assert C.kv_cache_bytes(llama8b, fp8, 1, 1024) == GiB // 16


def test_kv_cache_sliding_window_caps_positions() -> None:
    mistral = load_architecture("mistral-7b")  # window 4096 on every layer
    spec = TrainingSpec(task="inference", seq=16384)
    assert C.kv_cache_bytes(mistral, spec, 1, 16384) == C.kv_cache_bytes(mistral, spec, 1, 4096)
    gemma = load_architecture("gemma-2-2b")  # half the layers slide
    short, long_ = C.kv_cache_bytes(gemma, spec, 1, 4096), C.kv_cache_bytes(gemma, spec, 1, 8192)
    assert short < long_ < 2 * short


def test_adamw_states_and_zero_paper_16_bytes(llama8b) -> None:
    n = llama8b.total_params
    fp32 = TrainingSpec(dtype="fp32", device="cuda")
    assert C.optimizer_state_bytes(llama8b, fp32) == 8 * n
    assert C.parameter_bytes(llama8b, fp32) == 4 * n + C.buffer_bytes(llama8b)
    # DeepSpeed mixed precision: (2 + 2 + 12) bytes per parameter
    ds = TrainingSpec(dtype="bf16", mixed_precision=True, zero=1, dp=1)
    total = C.parameter_bytes(llama8b, ds) + C.gradient_bytes(llama8b, ds) + C.optimizer_state_bytes(llama8b, ds)
    assert total == 16 * n + C.buffer_bytes(llama8b)


def test_cpu_profile_counts_step_tensors(gpt2) -> None:
    cpu = C.optimizer_state_bytes(gpt2, TrainingSpec(dtype="fp32", device="cpu"))
    cuda = C.optimizer_state_bytes(gpt2, TrainingSpec(dtype="fp32", device="cuda"))
    assert cpu - cuda == 4 * 148  # one 0-d fp32 step per parameter tensor


@pytest.mark.parametrize("opt,per_param", [("sgd", 0), ("sgd-momentum", 4), ("adamw", 8), ("adam", 8)])
def test_optimizer_state_sizes(gpt2, opt: str, per_param: int) -> None:
    spec = TrainingSpec(dtype="fp32", optimizer=opt)
    assert C.optimizer_state_bytes(gpt2, spec) == per_param * gpt2.total_params


def test_factored_and_8bit_optimizers_are_smaller(llama8b) -> None:
    adamw = C.optimizer_state_bytes(llama8b, TrainingSpec(optimizer="adamw"))
    ada = C.optimizer_state_bytes(llama8b, TrainingSpec(optimizer="adafactor"))
    bnb = C.optimizer_state_bytes(llama8b, TrainingSpec(optimizer="adamw-8bit"))
    assert ada < adamw / 100  # rows + columns only
    assert 2 * llama8b.total_params <= bnb < 2.1 * llama8b.total_params


def test_zero_stages_shard_in_order(llama8b) -> None:
    def states(zero: int) -> tuple[int, int, int]:
        spec = TrainingSpec(dtype="bf16", zero=zero, dp=8)
        return (C.parameter_bytes(llama8b, spec), C.gradient_bytes(llama8b, spec), C.optimizer_state_bytes(llama8b, spec))

    p0, g0, o0 = states(0)
    p1, g1, o1 = states(1)
    p2, g2, o2 = states(2)
    p3, g3, o3 = states(3)
    assert (p1, g1) == (p0, g0) and o1 == pytest.approx(o0 / 8, abs=1)
    assert p2 == p0 and g2 == pytest.approx(g0 / 8, abs=1)
    assert p3 == pytest.approx(p0 / 8, rel=1e-6) and o3 == o1


def test_lora_trainable_count_matches_peft(llama8b) -> None:
    # PEFT prints "trainable params: 3,407,872" for Llama-3-8B, r=8 on q_proj, v_proj
    spec = TrainingSpec(task="lora", lora_rank=8)
    assert C.trainable_params(llama8b, spec) == 3_407_872
    est = estimate(llama8b, spec)
    assert est.trainable_params == 3_407_872
    # peft upcasts bf16 adapters to fp32 (autocast_adapter_dtype): AdamW's two states are fp32
    # on the CUDA profile; the CPU profile keeps the project's 16-bit adapter ground truth
    assert est.components_bytes["optimizer_states"] == 3_407_872 * 2 * 4
    cpu = estimate(llama8b, spec.replace(device="cpu"))
    assert cpu.components_bytes["optimizer_states"] < 3_407_872 * 2 * 2 + 4 * 64 * 4 + 1


def test_qlora_stores_about_half_a_byte_per_linear_weight(llama8b) -> None:
    lora = C.parameter_bytes(llama8b, TrainingSpec(task="lora"))
    qlora = C.parameter_bytes(llama8b, TrainingSpec(task="qlora"))
    lin = llama8b.linear_weight_params
    assert lora - qlora == pytest.approx(lin * (2 - 4.127 / 8), rel=1e-6)


def test_checkpointing_and_fused_attention_cut_activations(llama8b) -> None:
    base = TrainingSpec(batch=2, seq=4096, attention="eager")
    none = C.activation_bytes(llama8b, base, 2, 4096)
    selective = C.activation_bytes(llama8b, base.replace(grad_ckpt="selective"), 2, 4096)
    full = C.activation_bytes(llama8b, base.replace(grad_ckpt="full"), 2, 4096)
    flash = C.activation_bytes(llama8b, base.replace(attention="flash"), 2, 4096)
    assert full < selective < none
    assert flash < none
    # the s^2 terms: fp32 softmax + bf16 copy of b*a*s^2 per layer
    quad = 2 * 32 * 4096 * 4096 * (4 + 2) * 32
    assert none - selective == quad


def test_tensor_parallel_divides_activations(llama8b) -> None:
    one = C.activation_bytes(llama8b, TrainingSpec(batch=1, seq=2048), 1, 2048)
    four = C.activation_bytes(llama8b, TrainingSpec(batch=1, seq=2048, tp=4), 1, 2048)
    fixed = C.fixed_activation_bytes(llama8b, TrainingSpec(), 1, 2048)
    assert four - fixed == pytest.approx((one - fixed) / 4, rel=1e-6)


def test_logits_terms(gpt2) -> None:
    spec = TrainingSpec(batch=2, seq=256, dtype="fp32")
    ll = C.logits_loss_bytes(gpt2, spec, 2, 256)
    n = 2 * 256 * gpt2.vocab_size
    assert ll.saved == 4 * n  # fp32 log-probs
    assert ll.backward_peak == 3 * 4 * n  # log-probs + their gradient + the logits gradient
    bf16 = C.logits_loss_bytes(gpt2, spec.replace(dtype="bf16"), 2, 256)
    assert bf16.forward_peak == n * (2 + 4 + 4)  # bf16 logits, fp32 upcast, fp32 log-probs


def test_estimate_json_shape_and_sums(gpt2) -> None:
    est = estimate(gpt2, TrainingSpec(batch=4, seq=512))
    data = est.to_json()
    assert {"total_params", "trainable_params", "components_bytes", "peak_bytes", "peak_phase", "phases",
            "assumptions"} <= set(data)
    assert list(data["components_bytes"]) == list(COMPONENT_KEYS)
    assert sum(data["components_bytes"].values()) == data["peak_bytes"]
    assert data["peak_phase"] in {p["name"] for p in data["phases"]}
    assert max(p["live_bytes"] for p in data["phases"]) == data["peak_bytes"]
    assert data["components_bytes"]["cuda_context"] == C.cuda_context_bytes(TrainingSpec(device="cuda"))
    assert data["figures"]["allocated"] < data["peak_bytes"]


def test_cpu_profile_has_no_context_or_reserve(gpt2) -> None:
    est = estimate(gpt2, TrainingSpec(device="cpu"))
    assert est.components_bytes["cuda_context"] == 0 == est.components_bytes["allocator_reserve"]
    assert est.peak_bytes == est.allocated_peak_bytes


def _anchor(model: str, overrides: dict, spec: dict) -> dict:
    """The measured case of tests/data/estimator_anchors.json (where and how it says)."""
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parent / "data" / "estimator_anchors.json").read_text())
    (case,) = [c for c in doc["cases"] if (c["model"], c["overrides"], c["spec"]) == (model, overrides, spec)]
    return case


def test_gpt2_matches_memtracker_to_the_byte(gpt2) -> None:
    # torch MemTracker on the meta device (eager, dropout on, AdamW, second step): 2,599,607,896
    # bytes, peak in backward (tests/data/estimator_anchors.json)
    measured = _anchor("gpt2", {}, {"batch": 2, "seq": 256, "dtype": "fp32"})
    assert (measured["measured_peak_bytes"], measured["measured_peak_phase"]) == (2_599_607_896, "backward")
    est = estimate(gpt2, TrainingSpec(batch=2, seq=256, dtype="fp32", attention="eager", device="cpu"))
    assert est.peak_phase == "backward"
    assert abs(est.peak_bytes - 2_599_607_896) <= 8192


def test_peak_moves_to_the_optimizer_step_for_short_sequences() -> None:
    mistral = load_architecture("mistral-7b")
    est = estimate(mistral, TrainingSpec(batch=1, seq=512, dtype="bf16", attention="eager", device="cpu"))
    assert est.peak_phase == "optimizer_step"
    assert est.components_bytes["optimizer_intermediates"] == 2 * 32000 * 4096 * 2


def test_inference_phases(llama8b) -> None:
    est = estimate(llama8b, TrainingSpec(task="inference", batch=4, seq=8192))
    names = [p.name for p in est.phases]
    assert names == ["prefill", "decode"]
    assert est.components_bytes["gradients"] == 0 == est.components_bytes["optimizer_states"]
    assert est.components_bytes["kv_cache"] >= C.kv_cache_bytes(llama8b, TrainingSpec(task="inference"), 4, 8192)


def test_max_batch_is_the_boundary(gpt2) -> None:
    spec = TrainingSpec(batch=1, seq=1024, dtype="bf16")
    budget = 24 * GiB
    b = max_batch(gpt2, spec, budget)
    assert b >= 1
    assert estimate(gpt2, spec.replace(batch=b)).peak_bytes <= budget
    assert estimate(gpt2, spec.replace(batch=b + 1)).peak_bytes > budget
    assert max_batch(gpt2, spec, 10 * MiB) == 0
    assert max_seq(gpt2, spec, 6 * GiB) == 1024  # bounded by max_position_embeddings
    s = max_seq(gpt2, spec, 5 * GiB // 2)
    assert 1 <= s < 1024  # here memory is the bound
    # (on CUDA the simulated allocator reserve makes the peak not strictly monotone; the
    # bisection still ends on a value that fits next to one that does not)
    assert estimate(gpt2, spec.replace(seq=s)).peak_bytes <= 5 * GiB // 2
    assert estimate(gpt2, spec.replace(seq=s + 1)).peak_bytes > 5 * GiB // 2


def test_seed_methods(gpt2) -> None:
    spec = TrainingSpec(batch=2, seq=1024)
    for name in METHODS:
        est = run_method(name, gpt2, spec)
        assert est.peak_bytes > 0 and sum(est.components_bytes.values()) == est.peak_bytes
    k = korthikanti(gpt2, spec)
    s, b, h, a, L = 1024, 2, 768, 12, 12
    assert k.components_bytes["activations"] == int(s * b * h * (34 + 5 * a * s / h) * L)
    assert run_method("zero16", gpt2, spec).peak_bytes == 16 * gpt2.total_params
    with pytest.raises(ValueError, match="unknown --method"):
        run_method("magic", gpt2, spec)


def test_coarse_params_model_is_flagged() -> None:
    from gpumem_tui.estimator.architecture import architecture_from_params

    est = estimate(architecture_from_params(7e9), TrainingSpec())
    assert any("coarse" in a for a in est.assumptions)
    assert est.total_params == 7_000_000_000


def _ground_truth_cases() -> list:
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "measured_cpu.json"
    return json.loads(path.read_text())["cases"]  # in the repository: missing is a failure


def _relative_error(case: dict) -> float:
    from pathlib import Path

    from gpumem_tui.estimator.spec import parse_lora_targets

    root = Path(__file__).resolve().parents[1]
    arch = load_architecture(str(root / case["config"]))
    fields = {k: v for k, v in case["spec"].items() if k in TrainingSpec.__dataclass_fields__}
    if "lora_targets" in fields:
        targets = fields["lora_targets"]
        fields["lora_targets"] = parse_lora_targets(",".join(targets) if isinstance(targets, list) else targets)
    est = estimate(arch, TrainingSpec(**fields))
    measured = case["measured"]["peak_bytes"]
    return (est.peak_bytes - measured) / measured


@pytest.mark.parametrize("case", _ground_truth_cases(), ids=lambda c: c["id"])
def test_matches_measured_ground_truth(case: dict) -> None:
    """Every MemTracker ground-truth case (benchmarks/data/measured_cpu.json, written by
    `gpumem-tui measure`) within the worst-case target of 5 % of the measured peak."""
    assert abs(_relative_error(case)) < 0.05


def _held_out_cases() -> list:
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "measured_random.json"
    return json.loads(path.read_text())["cases"]


def test_held_out_random_cases_within_the_documented_targets() -> None:
    """The 40 held-out random cases (benchmarks/data/measured_random.json, seed 11; the
    estimator was not tuned on them) within the targets benchmarks/estimator_accuracy.py
    documents: median |error| <= 2 %, worst <= 5 % of the measured peak."""
    import statistics

    cases = _held_out_cases()
    assert len(cases) == 40
    errors = {c["id"]: abs(_relative_error(c)) for c in cases}
    assert statistics.median(errors.values()) <= 0.02
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 0.05, (worst, errors[worst])


def test_median_error_over_ground_truth() -> None:
    """Median |error| of the peak over all ground-truth cases <= 2 % (issue 3 target)."""
    import statistics

    cases = _ground_truth_cases()
    assert len(cases) >= 12  # the collected set (benchmarks/data/README.md)
    assert statistics.median(abs(_relative_error(c)) for c in cases) <= 0.02


# Measured with `gpumem-tui measure --on meta` (torch 2.13 MemTracker, two AdamW steps, eager
# attention; tests/data/estimator_anchors.json says how, and test_anchors_are_the_data_file_s
# holds these figures to it), shrunk configs where the peak is inside a layer's backward
# (small vocabulary) -- the regime the loss-dominated ground truth does not reach.
LAYER_BACKWARD_ANCHORS = [
    ("gpt2", {"n_layer": 2, "vocab_size": 1000}, dict(batch=2, seq=1024, dtype="fp32"), 1_239_479_416, 0.01),
    ("llama-3.2-1b", {"num_hidden_layers": 2, "vocab_size": 1000}, dict(batch=1, seq=2048), 3_573_789_016, 0.01),
    ("gemma-2-2b", {"num_hidden_layers": 2, "vocab_size": 1000}, dict(batch=1, seq=2048), 2_314_050_666, 0.01),
    ("bert-base-uncased", {"num_hidden_layers": 2, "vocab_size": 1000}, dict(batch=2, seq=512, dtype="fp32"),
     489_257_776, 0.02),
    ("qwen2.5-0.5b", {"num_hidden_layers": 2, "vocab_size": 1000},
     dict(batch=1, seq=512, task="lora", lora_rank=8, grad_ckpt="full"), 126_230_056, 0.03),
    ("gpt2", {}, dict(batch=1, seq=128, dtype="fp32", optimizer_impl="foreach"), 2_488_797_776, 0.001),
]


@pytest.mark.parametrize("name,overrides,kwargs,measured,tol", LAYER_BACKWARD_ANCHORS,
                         ids=[f"{a[0]}-{i}" for i, a in enumerate(LAYER_BACKWARD_ANCHORS)])
def test_anchors_are_the_data_file_s(name, overrides, kwargs, measured, tol) -> None:  # noqa: ANN001
    assert _anchor(name, overrides, kwargs)["measured_peak_bytes"] == measured


@pytest.mark.parametrize("name,overrides,kwargs,measured,tol", LAYER_BACKWARD_ANCHORS,
                         ids=[f"{a[0]}-{i}" for i, a in enumerate(LAYER_BACKWARD_ANCHORS)])
def test_layer_backward_regime_matches_measurements(name, overrides, kwargs, measured, tol) -> None:  # noqa: ANN001
    import json

    from gpumem_tui.estimator.architecture import CATALOGUE_DIR, architecture_from_config

    cfg = json.loads((CATALOGUE_DIR / f"{name}.json").read_text())
    cfg.update(overrides)
    arch = architecture_from_config(cfg, name)
    spec = TrainingSpec(attention="eager", device="cpu", **{"dtype": "bf16", **kwargs})
    est = estimate(arch, spec)
    assert abs(est.peak_bytes - measured) / measured < tol


@pytest.mark.parametrize("analytic,exact", [(10, 12), (10, 7), (10, 30), (0, 2), (5, 0), (0, 0), (10, 10)])
def test_the_solver_checks_the_analytic_answer_with_the_exact_figure(analytic: int, exact: int) -> None:
    """Bisection on the analytic reserve, then moved to where the simulated one says the
    boundary is (walking a few values, bisecting when far apart)."""
    from gpumem_tui.estimator.solve import _largest_checked

    calls = []

    def fits(v: int, precise: bool) -> bool:
        calls.append(precise)
        return v <= (exact if precise else analytic)

    assert _largest_checked(fits, 1 << 24) == exact
    assert calls.count(True) <= 2 * 24 + 9


def test_max_batch_on_cuda_fits_by_the_simulated_reserve(gpt2) -> None:
    spec = TrainingSpec(batch=1, seq=1024, dtype="bf16", device="cuda")
    b = max_batch(gpt2, spec, 24 * GiB)
    fit, over = (estimate(gpt2, spec.replace(batch=v)) for v in (b, b + 1))
    assert fit.simulated_reserve_bytes is not None  # the figure the user sees, not the analytic one
    assert fit.peak_bytes <= 24 * GiB < over.peak_bytes
