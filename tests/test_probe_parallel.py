"""The probe sees the parallel layout and the recipe in a REAL 2-rank job, and the dashboard's
per-process estimate of each rank is the estimator's per-rank estimate for that layout.

Each case starts 2 processes over gloo on the CPU (:func:`gpumem_tui.measure.ranks.launch`, the
launcher ``measure --nproc`` uses), wraps a tiny Llama with the strategy through
:mod:`gpumem_tui.measure.parallel` (FSDP2 ``fully_shard``, FSDP1, DDP), attaches the probe in
each rank, runs one training step with ``use_cache=False`` and returns the last info line the
probe wrote. The parent checks what each rank published and compares
:func:`gpumem_tui.analysis.process_estimate.from_probe_info` with
:func:`gpumem_tui.estimator.parallel.per_rank.estimate_job` on a plan and spec written here
by hand from what the rank did.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from gpumem_tui.estimator.architecture import architecture_from_config  # noqa: E402
from gpumem_tui.estimator.estimate import estimate  # noqa: E402
from gpumem_tui.estimator.parallel import ParallelPlan  # noqa: E402
from gpumem_tui.estimator.parallel.per_rank import estimate_job  # noqa: E402
from gpumem_tui.estimator.spec import TrainingSpec  # noqa: E402
from gpumem_tui.measure.parallel import ParallelSpec, transformer_blocks, wrap_before_tracker, wrap_in_tracker  # noqa: E402
from gpumem_tui.measure.ranks import launch  # noqa: E402
from gpumem_tui.analysis.process_estimate import from_probe_info  # noqa: E402
from gpumem_tui.telemetry.model import ProbeInfo  # noqa: E402

# torch_in_process: these tests import torch here; under xdist they share one worker (tests/conftest.py)
pytestmark = [pytest.mark.torch, pytest.mark.torch_in_process]

LLAMA = json.loads((Path(__file__).parent / "data" / "ranks" / "configs" / "llama-tiny.json").read_text())
BATCH, SEQ = 2, 32


def _checkpoint(model, how: str) -> None:
    """Turn on activation checkpointing as a training script would."""
    if how == "hf-reentrant":
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
    elif how == "torch-wrapper":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            CheckpointImpl,
            apply_activation_checkpointing,
            checkpoint_wrapper,
        )
        from functools import partial

        classes = tuple({type(b) for b in transformer_blocks(model)})
        apply_activation_checkpointing(
            model, checkpoint_wrapper_fn=partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
            check_fn=lambda m: isinstance(m, classes))


def _hsdp_bf16(model) -> None:
    """HSDP over a (replicate 2, shard 1) mesh with bf16 parameters over fp32 ones (FSDP2
    ``MixedPrecisionPolicy``), each block then the root, as torchtitan shards a model."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("replicate", "shard"))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in transformer_blocks(model):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def _probed_rank(rank: int, nproc: int, spec: ParallelSpec, ckpt: str, env: dict[str, str]) -> dict:
    """One rank: build, wrap, probe, one training step; return the probe's last info record."""
    import torch
    import transformers

    import gpumem_tui.probe

    os.environ.update(env)
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**LLAMA)
    config._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(config)
    _checkpoint(model, ckpt)
    if ckpt == "hsdp-bf16":
        _hsdp_bf16(model)
    else:
        model = wrap_in_tracker(wrap_before_tracker(model, spec, torch), spec)
    if spec.kind == "zero-redundancy":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4,
                                            foreach=False)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    with tempfile.TemporaryDirectory() as tmp:
        probe = gpumem_tui.probe.attach(model, optimizer, batch=BATCH, seq=SEQ, directory=tmp, task="train")
        ids = torch.randint(0, LLAMA["vocab_size"], (BATCH, SEQ), generator=torch.Generator().manual_seed(rank))
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        probe.close()
        lines = [json.loads(line) for line in Path(probe.path).read_text().splitlines() if line.strip()]
    infos = [r for r in lines if r.get("kind") == "info"]
    return {"info": infos[-1], "info_lines": len(infos), "pid": os.getpid()}


def _run(spec: ParallelSpec, ckpt: str = "none", env: dict[str, str] | None = None) -> list[dict]:
    # imported here, in the test process, before the ranks fork: they inherit it instead of
    # importing it each (seconds each); not at the top, where every xdist worker would pay for
    # it while collecting (these tests run on one worker: tests/conftest.py)
    import transformers.models.llama.modeling_llama  # noqa: F401  (the dev extra installs it)

    return launch(_probed_rank, (spec, ckpt, env or {}), spec.world_size, timeout_s=120)


def _probe_info(result: dict) -> ProbeInfo:
    info = result["info"]
    return ProbeInfo(pid=info["pid"], model_config=info["model_config"], setup=tuple(info["setup"].items()))


def _expected(plan: ParallelPlan, **spec_fields) -> object:
    """The estimator's per-rank estimate, from inputs written here (not read from the probe);
    checked to differ from one device's estimate, so that matching it needs the plan."""
    arch = replace(architecture_from_config(dict(LLAMA), name="llama-tiny"), use_cache=False)
    spec_fields = {"dtype": "fp32", **spec_fields}
    spec = TrainingSpec(task="train", batch=BATCH, seq=SEQ, optimizer="adamw", device="cpu",
                        optimizer_impl="single", **spec_fields)
    per_rank = estimate_job(arch, spec, plan).ranks[0].estimate
    assert per_rank.components_bytes != estimate(arch, spec).components_bytes
    return per_rank


def _check_rank_estimate(result: dict, expected) -> None:
    process = from_probe_info(_probe_info(result), device="cpu")
    assert process.problem is None
    # the model as built, not this rank's shard (FSDP1 flat parameters, FSDP2 DTensors)
    assert result["info"]["setup"]["total_params"] == expected.total_params
    assert process.estimate.peak_bytes == expected.peak_bytes
    assert process.estimate.components_bytes == expected.components_bytes
    assert any("per-rank estimate for rank" in a for a in process.estimate.assumptions)


def _check_ranks(results: list[dict]) -> None:
    for rank, result in enumerate(results):
        setup = result["info"]["setup"]
        assert (setup["rank"], setup["world_size"], setup["local_rank"]) == (rank, 2, rank)
        assert setup["use_cache"] is False  # the forward's argument, published in a second info line
        assert result["info_lines"] >= 2
        assert setup["model_class"] == "LlamaForCausalLM"
        assert setup["total_params"] == results[0]["info"]["setup"]["total_params"]


def test_fsdp2_with_torch_checkpoint_wrapper():
    results = _run(ParallelSpec("fsdp2", 2, reshard_after_forward=True), ckpt="torch-wrapper",
                   env={"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29511"})
    _check_ranks(results)
    for result in results:
        setup = result["info"]["setup"]
        assert setup["job_id"] == "10.0.0.7:29511"
        parallel = setup["parallel"]
        assert parallel["strategy"] == "fsdp2" and parallel["shard_degree"] == 2 and parallel["replicate_degree"] == 1
        assert parallel["reshard_after_forward"] is True and parallel["sharding"] == "full"
        assert (setup["grad_ckpt"], setup["checkpoint_impl"]) == ("full", "non-reentrant")
        assert setup["checkpointed_layers"] == LLAMA["num_hidden_layers"]
        expected = _expected(ParallelPlan("fsdp2", 2), grad_ckpt="full", checkpoint_impl="non-reentrant")
        _check_rank_estimate(result, expected)


def test_fsdp1_shard_grad_op():
    results = _run(ParallelSpec("fsdp1", 2, sharding_strategy="SHARD_GRAD_OP"),
                   env={"TORCHELASTIC_RUN_ID": "run-42", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    _check_ranks(results)
    for result in results:
        setup = result["info"]["setup"]
        assert setup["job_id"] == "run-42"
        parallel = setup["parallel"]
        assert (parallel["strategy"], parallel["sharding"], parallel["shard_degree"]) == ("fsdp1", "grad-op", 2)
        assert "grad_ckpt" not in setup or setup["grad_ckpt"] in (False, "none")
        _check_rank_estimate(result, _expected(ParallelPlan("fsdp1", 2, sharding="grad-op")))


def test_ddp_with_hf_reentrant_checkpointing():
    results = _run(ParallelSpec("ddp", 2), ckpt="hf-reentrant", env={"TORCHELASTIC_RUN_ID": "none"})
    _check_ranks(results)
    for result in results:
        setup = result["info"]["setup"]
        assert "job_id" not in setup  # torchrun's default run id names no job; no MASTER_ADDR either
        parallel = setup["parallel"]
        assert parallel["strategy"] == "ddp" and parallel["world_size"] == 2
        assert parallel["bucket_cap_bytes"] == 25 * 2**20 and parallel["gradient_as_bucket_view"] is False
        assert (setup["grad_ckpt"], setup["checkpoint_impl"]) == ("full", "reentrant")
        expected = _expected(ParallelPlan("ddp", 2), grad_ckpt="full", checkpoint_impl="reentrant")
        _check_rank_estimate(result, expected)


def test_zero_redundancy_optimizer_over_ddp():
    results = _run(ParallelSpec("zero-redundancy", 2))
    _check_ranks(results)
    for result in results:
        assert result["info"]["setup"]["parallel"]["strategy"] == "zero-redundancy"
        _check_rank_estimate(result, _expected(ParallelPlan("zero-redundancy", 2)))


def test_dtensor_tensor_parallel_degree():
    results = _run(ParallelSpec("tp", 2))
    _check_ranks(results)
    for result in results:
        parallel = result["info"]["setup"]["parallel"]
        assert (parallel["strategy"], parallel["tp"], parallel["world_size"]) == ("tp", 2, 2)
        _check_rank_estimate(result, _expected(ParallelPlan("tp", 2, tp=2)))


def test_hsdp_replicate_degree_and_mixed_precision_policy():
    results = _run(ParallelSpec("fsdp2", 2), ckpt="hsdp-bf16")
    _check_ranks(results)
    for result in results:
        setup = result["info"]["setup"]
        parallel = setup["parallel"]
        assert (parallel["sharding"], parallel["shard_degree"], parallel["replicate_degree"]) == ("hybrid", 1, 2)
        assert (parallel["param_dtype"], parallel["reduce_dtype"], setup["dtype"]) == ("bf16", "fp32", "float32")
        expected = _expected(ParallelPlan("fsdp2", 2, sharding="hybrid", shard_group=1), mixed_precision=True,
                             dtype="bf16")
        _check_rank_estimate(result, expected)
