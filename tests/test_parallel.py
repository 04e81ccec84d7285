"""Per-rank estimates of parallel jobs: figures derived from the strategies' cited rules."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
from cli_inprocess import run_cli

from gpumem_tui.estimator import components as C
from gpumem_tui.estimator.architecture import load_architecture
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.parallel import STRATEGIES, ParallelPlan
from gpumem_tui.estimator.parallel.configs import ConfigFileError
from gpumem_tui.estimator.parallel.configs_read import deepspeed_from_dict, read_accelerate, read_deepspeed
from gpumem_tui.estimator.parallel.per_rank import _extras, estimate_job, rank_spec
from gpumem_tui.estimator.spec import TrainingSpec

DATA = Path(__file__).parent / "data" / "parallel"


@pytest.fixture(scope="module")
def llama1b():
    return load_architecture("llama-3.2-1b")


def _phase(est, name):
    return next(p for p in est.phases if p.name == name).components


def test_every_strategy_cites_its_source() -> None:
    assert set(STRATEGIES) == {"fsdp2", "fsdp1", "ddp", "zero-redundancy", "deepspeed", "tp", "pp", "cp"}
    for s in STRATEGIES.values():
        assert s.source and s.version and s.title


def test_zero3_rank_holds_a_dth_of_the_parameters(llama1b) -> None:
    d = 8
    spec = TrainingSpec(batch=1, seq=512)
    job = estimate_job(llama1b, spec, ParallelPlan("deepspeed", d, zero_stage=3))
    step = _phase(job.largest.estimate, "optimizer_step")
    # ZeRO paper: stage 3 keeps P x 2 / d bytes of bf16 parameters per rank (+ rotary buffers)
    assert step["parameters"] == math.ceil(llama1b.total_params * 2 / d) + C.buffer_bytes(llama1b)
    # stage 3 allocates its reduce bucket (5e8 elements, bf16 gradients) at initialisation
    assert _phase(job.largest.estimate, "forward")["gradients"] == 500_000_000 * 2


def test_ddp_buckets_hold_every_gradient_again(llama1b) -> None:
    spec = TrainingSpec(batch=1, seq=256)
    grads = llama1b.total_params * 2  # bf16 gradients of every parameter
    job = estimate_job(llama1b, spec, ParallelPlan("ddp", 4))
    est = job.largest.estimate
    assert _phase(est, "forward")["gradients"] == grads  # the Reducer's flat buckets, from construction
    assert _phase(est, "optimizer_step")["gradients"] == 2 * grads  # .grad tensors + their bucket copies
    views = estimate_job(llama1b, spec, ParallelPlan("ddp", 4, grad_as_bucket_view=True)).largest.estimate
    assert _phase(views, "optimizer_step")["gradients"] == grads
    single = estimate(llama1b, rank_spec(spec, ParallelPlan("ddp", 4)))
    assert est.peak_bytes > single.peak_bytes


def test_fsdp_gathers_the_root_and_the_next_unit(llama1b) -> None:
    spec = TrainingSpec(batch=1, seq=512)  # a 128k vocabulary: the peaks are at the loss
    parts = llama1b.param_breakdown()
    layer = parts["layers"] / llama1b.num_layers
    root = parts["embeddings"] + parts["final_norm"] + parts["head"]
    for kind, forward_units in (("fsdp2", 1), ("fsdp1", 0)):
        plan = ParallelPlan(kind, 8)
        est = estimate_job(llama1b, spec, plan).largest.estimate
        base = estimate(llama1b, rank_spec(spec, plan))
        # end of forward: the root stays unsharded (FSDP's root heuristic); FSDP2 also holds the
        # last unit's all-gather buffer
        fwd = _phase(est, "forward")["parameters"] - _phase(base, "forward")["parameters"]
        assert fwd == int(root * 2 + forward_units * layer * 2), kind
        # log-softmax backward: the root and the last unit, prefetched for backward
        bwd = _phase(est, "backward")["parameters"] - _phase(base, "backward")["parameters"]
        assert bwd == int(root * 2 + layer * 2), kind
        assert _phase(est, "backward")["gradients"] == _phase(base, "backward")["gradients"]


def test_shard_grad_op_keeps_every_layer_unsharded(llama1b) -> None:
    spec = TrainingSpec(batch=1, seq=512)
    full = estimate_job(llama1b, spec, ParallelPlan("fsdp2", 8)).largest.estimate
    grad_op = estimate_job(llama1b, spec, ParallelPlan("fsdp2", 8, sharding="grad-op")).largest.estimate
    layer = llama1b.param_breakdown()["layers"] / llama1b.num_layers
    # parameters stay sharded at rest in both; grad-op keeps all L layers gathered after their forward
    diff = _phase(grad_op, "forward")["parameters"] - _phase(full, "forward")["parameters"]
    assert diff == pytest.approx(llama1b.num_layers * layer * 2, abs=2)


def test_zero2_overlap_comm_allocates_two_reduce_buffers(llama1b) -> None:
    job = read_deepspeed(str(DATA / "ds_zero2.json"), None, llama1b.hidden_size)
    assert job.plan.world_size == 64 // (4 * 2)  # train_batch_size / (micro x accumulation)
    assert job.spec_fields == {"dtype": "bf16", "mixed_precision": True, "batch": 4, "grad_accum": 2}
    spec = TrainingSpec(batch=4, grad_accum=2, seq=256, mixed_precision=True)
    est = estimate_job(llama1b, spec, job.plan).largest.estimate
    base = estimate(llama1b, rank_spec(spec, job.plan))
    added = _phase(est, "backward")["gradients"] - _phase(base, "backward")["gradients"]
    assert added == 2 * 200_000_000 * 2  # overlap_comm: two ipg buffers of reduce_bucket_size bf16 elements


def test_deepspeed_auto_values_follow_transformers(llama1b) -> None:
    job = read_deepspeed(str(DATA / "ds_zero3_auto.json"), 8, llama1b.hidden_size)
    h = llama1b.hidden_size
    assert job.plan.reduce_bucket == h * h and job.plan.prefetch_bucket == int(0.9 * h * h)
    assert job.plan.offload_optimizer and job.plan.offload_params and job.plan.zero_stage == 3
    assert job.spec_fields == {}
    est = estimate_job(llama1b, TrainingSpec(seq=256), job.plan).largest.estimate
    step = _phase(est, "optimizer_step")
    assert step["parameters"] == step["optimizer_states"] == step["optimizer_intermediates"] == 0


def test_accelerate_configs_as_accelerate_writes_them(llama1b) -> None:
    fsdp2 = read_accelerate(str(DATA / "accelerate_fsdp2.yaml"), llama1b.hidden_size)
    assert (fsdp2.plan.kind, fsdp2.plan.world_size, fsdp2.plan.sharding) == ("fsdp2", 8, "full")
    assert fsdp2.spec_fields == {"dtype": "bf16", "mixed_precision": True}
    fsdp1 = read_accelerate(str(DATA / "accelerate_fsdp1_shard_grad_op.yaml"), llama1b.hidden_size)
    assert (fsdp1.plan.kind, fsdp1.plan.world_size, fsdp1.plan.sharding) == ("fsdp1", 4, "grad-op")
    assert fsdp1.plan.use_orig_params is True
    ds = read_accelerate(str(DATA / "accelerate_deepspeed_zero3.yaml"), llama1b.hidden_size)
    assert (ds.plan.kind, ds.plan.zero_stage, ds.plan.offload_optimizer, ds.plan.offload_params) == ("deepspeed", 3, True, False)
    assert ds.spec_fields["grad_accum"] == 4


@pytest.mark.parametrize("text, key", [
    ("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_shardng_strategy: FULL_SHARD\n", "fsdp_shardng_strategy"),
    ("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_sharding_strategy: HALF_SHARD\n",
     "fsdp_sharding_strategy"),
    ("distributed_type: TPU\nnum_processes: 2\n", "distributed_type"),
    ("num_processes: [1\n", "file"),
    ("mixed_precision: fp64\n", "mixed_precision"),
    ("num_processes: -3\n", "num_processes"),
])
def test_bad_accelerate_files_name_the_key(tmp_path, text, key) -> None:
    path = tmp_path / "acc.yaml"
    path.write_text(text)
    with pytest.raises(ConfigFileError) as err:
        read_accelerate(str(path), 2048)
    assert err.value.key == key and (key in str(err.value) or key == "file")


def test_bad_deepspeed_values_name_the_key() -> None:
    with pytest.raises(ConfigFileError, match="zero_optimization.stage"):
        deepspeed_from_dict({"zero_optimization": {"stage": 4}}, 8, 2048)
    with pytest.raises(ConfigFileError, match="reduce_bucket_size"):
        deepspeed_from_dict({"zero_optimization": {"stage": 2, "reduce_bucket_size": "big"}}, 8, 2048)
    with pytest.raises(ConfigFileError, match="offload_optimizer.device"):
        deepspeed_from_dict({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}}, 8, 2048)
    with pytest.raises(ConfigFileError, match="world-size"):
        deepspeed_from_dict({"zero_optimization": {"stage": 2}}, None, 2048)


def test_context_parallel_splits_the_sequence(llama1b) -> None:
    spec = TrainingSpec(batch=1, seq=8192, attention="flash")
    plan = ParallelPlan("cp", 4, cp=4)
    rs = rank_spec(spec, plan)
    assert rs.seq == 2048
    kv = 2 * 1 * 2048 * llama1b.kv_dim * 2  # one (k, v) shard of s / cp positions, bf16
    ring = _extras(llama1b, rs, plan, STRATEGIES["cp"])
    assert ring("backward", "last layer backward") == {"activations": 2 * kv}  # the shard and its gradients
    assert ring("forward", "checkpointed layer forward") == {"activations": kv}
    assert ring("backward", "log-softmax backward") == {}
    est = estimate_job(llama1b, spec, plan).largest.estimate
    assert est.peak_bytes >= estimate(llama1b, rs, simulate_allocator=False).peak_bytes


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return run_cli("estimate", "llama-3.2-1b", *argv)


def test_cli_json_reports_ranks_and_the_largest_peak() -> None:
    out = _cli("--accelerate-config", str(DATA / "accelerate_fsdp2.yaml"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ranks"] and data["peak_bytes"] == max(r["peak_bytes"] for r in data["ranks"])
    assert data["parallel"]["world_size"] == 8 and data["parallel"]["kind"] == "fsdp2"
    assert data["parallel"]["job_total_bytes"] == sum(r["peak_bytes"] * r["ranks"] for r in data["ranks"])
    text = _cli("--parallel", "ddp", "--world-size", "2").stdout
    assert "PER RANK" in text and "for the job" in text


def test_cli_refuses_a_flag_that_contradicts_the_file(tmp_path) -> None:
    out = _cli("--accelerate-config", str(DATA / "accelerate_fsdp2.yaml"), "--world-size", "4")
    assert out.returncode == 2 and "num_processes" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = _cli("--deepspeed", str(DATA / "ds_zero2.json"), "--batch", "8")
    assert out.returncode == 2 and "train_micro_batch_size_per_gpu" in out.stderr
    bad = tmp_path / "ds.json"
    bad.write_text('{"zero_optimization": {"stage": 2, "bucket": 1}}')
    out = _cli("--deepspeed", str(bad), "--world-size", "2")
    assert out.returncode == 2 and "bucket" in out.stderr


def test_pipeline_stage_zero_and_last_stage(llama1b) -> None:
    spec = TrainingSpec(batch=1, seq=1024)
    job = estimate_job(llama1b, spec, ParallelPlan("pp", 8, pp=4))
    first, last = job.ranks
    assert first.ranks == 6 and last.ranks == 2  # 2 data-parallel pipelines of 4 stages
    parts = llama1b.param_breakdown()
    f_step = _phase(first.estimate, "optimizer_step")
    # stage 0: the embeddings whole and a quarter of the layers (bf16), no LM head
    assert f_step["parameters"] == math.ceil(parts["embeddings"] * 2 + parts["layers"] * 2 / 4) + C.buffer_bytes(llama1b)
    b_first, b_last = _phase(first.estimate, "forward"), _phase(last.estimate, "forward")
    n = spec.batch * spec.seq * llama1b.vocab_size
    assert b_first["logits_and_loss"] < n  # no vocabulary-sized logits on stage 0
    assert b_last["logits_and_loss"] >= 4 * n  # the last stage computes the loss
    # 1F1B: stage 0 holds p micro-batches of L/p layers, the last stage one micro-batch of L/p layers
    assert b_first["activations"] > b_last["activations"]


def test_cli_flags_that_do_not_add_up() -> None:
    out = _cli("--parallel", "ddp", "--world-size", "8", "--dp", "2")
    assert out.returncode == 2 and "--world-size" in out.stderr
    out = _cli("--parallel", "fsdp2", "--world-size", "8", "--zero", "2")
    assert out.returncode == 2 and "--sharding" in out.stderr
    out = _cli("--world-size", "8")
    assert out.returncode == 2 and "--parallel" in out.stderr


def test_hybrid_shard_shards_within_a_node(tmp_path, llama1b) -> None:
    path = tmp_path / "hybrid.yaml"
    path.write_text("distributed_type: FSDP\nnum_machines: 2\nnum_processes: 16\nmixed_precision: 'no'\n"
                    "fsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD\n  fsdp_version: 1\n")
    plan = read_accelerate(str(path), llama1b.hidden_size).plan
    assert (plan.sharding, plan.shard_degree, plan.data_parallel) == ("hybrid", 8, 16)
    est = estimate_job(llama1b, TrainingSpec(seq=256), plan).largest.estimate
    # ZeRO-3 over the 8 ranks of a node: bf16 parameters P x 2 / 8 at the optimizer step
    assert _phase(est, "optimizer_step")["parameters"] == math.ceil(llama1b.total_params * 2 / 8) + C.buffer_bytes(llama1b)


def test_fsdp_cpu_offload_leaves_only_gathered_units(llama1b) -> None:
    spec = TrainingSpec(seq=256)
    est = estimate_job(llama1b, spec, ParallelPlan("fsdp2", 8, offload_params=True)).largest.estimate
    step = _phase(est, "optimizer_step")
    assert step["parameters"] == step["gradients"] == step["optimizer_states"] == 0
    parts = llama1b.param_breakdown()
    root = parts["embeddings"] + parts["final_norm"] + parts["head"]
    # end of forward: the root and FSDP2's all-gather buffer of the last unit stay on the device
    assert _phase(est, "forward")["parameters"] == int(root * 2 + parts["layers"] / llama1b.num_layers * 2)


def test_dtensor_tensor_parallel_splits_layer_linears_and_their_regions(llama1b) -> None:
    spec = TrainingSpec(batch=1, seq=512)
    t = 4
    est = estimate_job(llama1b, spec, ParallelPlan("tp", t, tp=t)).largest.estimate
    one = estimate(llama1b, spec)
    lin = llama1b.linear_weight_params
    f = 1 - 1 / t
    step_t, step_1 = _phase(est, "optimizer_step"), _phase(one, "optimizer_step")
    # Colwise/Rowwise: each layer Linear's weight 1/t; embeddings (tied head) and norms whole
    assert step_1["parameters"] - step_t["parameters"] == int(lin * 2 * f)
    layer = C.layer_activations(llama1b, spec, 1, 512)
    fwd_t, fwd_1 = _phase(est, "forward"), _phase(one, "forward")
    # every layer's attention / MLP region tensors 1/t, the residual stream and norms whole
    assert fwd_1["activations"] - fwd_t["activations"] == pytest.approx(llama1b.num_layers * layer.parallel * f, abs=2)
    megatron = estimate_job(llama1b, spec, ParallelPlan("tp", t, tp=t, sequence_parallel=True)).largest.estimate
    assert megatron.peak_bytes < est.peak_bytes  # sequence parallelism also splits the replicated tensors


def test_zero_redundancy_hands_out_whole_tensors_largest_first() -> None:
    from gpumem_tui.estimator.parallel.zero_redundancy import largest_partition_fraction, parameter_tensor_sizes

    gpt2 = load_architecture("gpt2")
    sizes = parameter_tensor_sizes(gpt2)
    assert sum(sizes) == gpt2.total_params  # the same tensors the architecture counts
    assert largest_partition_fraction(gpt2, 1) == 1.0
    # 2 ranks: the 38.6M-element token embedding alone outweighs everything else but not all of it
    loads = [0, 0]
    for size in sorted(sizes, reverse=True):
        loads[loads.index(min(loads))] += size
    assert largest_partition_fraction(gpt2, 2) == max(loads) / sum(sizes) > 0.5


def test_fsdp1_flat_parameters_set_the_single_tensor_step(llama1b) -> None:
    """FSDP1 (use_orig_params=False) steps one flat parameter per unit: on the CPU (single-tensor
    AdamW) the step holds the previous unit's ``denom`` beside the current one's two
    temporaries, and one ``step`` tensor per flat parameter; with use_orig_params the model's
    own tensors (the single-device rule) again."""
    spec = TrainingSpec(seq=128, device="cpu", dtype="fp32")
    parts = llama1b.param_breakdown()
    root = parts["embeddings"] + parts["final_norm"] + parts["head"]
    layer = parts["layers"] // llama1b.num_layers
    for sharding, d in (("none", 1), ("full", 4)):
        flat = estimate_job(llama1b, spec, ParallelPlan("fsdp1", 4, sharding=sharding)).largest.estimate
        r, l = math.ceil(root / d), math.ceil(layer / d)
        assert _phase(flat, "optimizer_step")["optimizer_intermediates"] == 4 * max(2 * r, r + 2 * l, 3 * l)
        assert _phase(flat, "optimizer_step")["optimizer_states"] == 2 * 4 * (r + llama1b.num_layers * l) \
            + 4 * (1 + llama1b.num_layers)
    orig = estimate_job(llama1b, spec, ParallelPlan("fsdp1", 4, sharding="none", use_orig_params=True)).largest.estimate
    assert _phase(orig, "optimizer_step")["optimizer_intermediates"] == C.optimizer_intermediate_bytes(llama1b, spec)
