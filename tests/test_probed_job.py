"""Hostile and malformed job setups from a probe stream (another user's file): the
per-process estimate is still made, each bad value is dropped with an assumption line, and
nothing raises. Also the probe's own reading of a launcher's environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpumem_tui.analysis.probed_job import read_probed_job
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.analysis.process_estimate import from_probe_info
from gpumem_tui.telemetry.model import ProbeInfo

LLAMA = json.loads((Path(__file__).parent / "data" / "ranks" / "configs" / "llama-tiny.json").read_text())
BASE = {"batch": 2, "seq": 32, "dtype": "float32", "task": "train", "optimizer": "AdamW"}


def _process(**keys):
    return from_probe_info(ProbeInfo(pid=7, model_config=LLAMA, setup=tuple({**BASE, **keys}.items())), device="cpu")


def _single_device():
    plain = _process()
    assert plain.problem is None and plain.plan is None
    return plain.estimate


@pytest.mark.parametrize(("keys", "said"), [
    ({"parallel": {"strategy": "megatron-lm", "world_size": 8}}, "parallel strategy 'megatron-lm' is not one"),
    ({"parallel": "fsdp2"}, "parallel setup is not an object"),
    ({"parallel": {"strategy": "fsdp2"}}, "no world size"),
    ({"parallel": {"strategy": "fsdp2", "world_size": 0}, "world_size": True}, "no world size"),
    ({"parallel": {"strategy": "deepspeed", "world_size": 4, "zero_stage": 9}}, "not its ZeRO stage"),
    ({"parallel": {"strategy": "fsdp1", "world_size": 4, "sharding": "\x1b[31mevil"}}, "sharding '\\x1b[31mevil' is unknown"),
    ({"world_size": 4, "rank": 1}, "saw 4 ranks but no parallel wrapper"),
    ({"world_size": 2, "rank": 5}, "rank 5 is not below its world_size 2"),
    ({"world_size": "2"}, "world_size '2' is not a rank count"),
    ({"checkpoint_impl": "sideways", "grad_ckpt": "full"}, "checkpoint flavour 'sideways' is unknown"),
    ({"quantized_linears": {"method": "gptq", "bits": 5, "group_size": 128}, "task": "qlora", "dtype": "bf16"},
     "gptq bits 5 cannot be sized"),
    ({"quantized_linears": {"method": "nf4"}}, "task is 'train'"),
    ({"quantized_linears": [1, 2]}, "quantized_linears is not an object"),
    ({"use_cache": {"no": 1}}, "use_cache {'no': 1} is not true/false"),
])
def test_bad_values_are_dropped_with_an_assumption_line(keys, said):
    process = _process(**keys)
    assert process.problem is None and process.estimate is not None
    lines = [a for a in process.estimate.assumptions if said in a]
    assert len(lines) == 1, process.estimate.assumptions
    assert all("\x1b" not in a for a in process.estimate.assumptions)


def test_unusable_strategy_falls_back_to_one_device():
    process = _process(parallel={"strategy": "megatron-lm", "world_size": 8}, rank=0, world_size=8)
    assert process.plan is None
    assert process.estimate.peak_bytes == _single_device().peak_bytes


def test_a_plan_the_estimator_rejects_keeps_one_devices_estimate():
    # tensor parallel 2 over 8 heads fits; over 3 ranks the world size does not divide: tp dropped
    process = _process(parallel={"strategy": "fsdp2", "world_size": 3, "tp": 2}, rank=0, world_size=3)
    assert process.plan is not None and process.plan.tp == 1
    assert any("does not divide its 3 ranks" in a for a in process.estimate.assumptions)


def test_hybrid_shard_group_and_fsdp1_strategy_name():
    job = read_probed_job({"parallel": {"strategy": "fsdp2", "world_size": 8, "sharding": "hybrid",
                                        "shard_degree": 4, "replicate_degree": 2}, "world_size": 8, "rank": 3})
    assert (job.plan.kind, job.plan.sharding, job.plan.shard_group, job.rank) == ("fsdp2", "hybrid", 4, 3)
    job = read_probed_job({"parallel": {"strategy": "fsdp1", "world_size": 4, "sharding_strategy": "_HYBRID_SHARD_ZERO2"}})
    assert job.plan.sharding == "hybrid-grad-op"
    job = read_probed_job({"parallel": {"strategy": "fsdp2", "world_size": 8, "sharding": "hybrid", "shard_degree": 3}})
    assert job.plan.shard_group is None  # 3 does not divide 8: not used


def test_mixed_precision_policy_over_fp32_parameters():
    job = read_probed_job({**BASE, "parallel": {"strategy": "fsdp2", "world_size": 2, "param_dtype": "bf16"}})
    assert job.spec_fields == {"dtype": "bf16", "mixed_precision": True}
    job = read_probed_job({**BASE, "dtype": "bf16", "parallel": {"strategy": "fsdp2", "world_size": 2, "param_dtype": "bf16"}})
    assert job.spec_fields == {}


def test_deepspeed_stage_becomes_the_plan():
    process = _process(parallel={"strategy": "deepspeed", "world_size": 4, "zero_stage": 2}, rank=2, world_size=4)
    assert (process.plan.kind, process.plan.zero_stage, process.plan.world_size) == ("deepspeed", 2, 4)
    assert process.estimate.components_bytes["optimizer_states"] < _single_device().components_bytes["optimizer_states"]


def test_setup_that_is_not_pairs_does_not_raise():
    info = ProbeInfo(pid=9, model_config=LLAMA, setup=(("batch", 2), ("seq", 32), ("parallel", None)))
    assert from_probe_info(info, device="cpu").problem is None
    assert read_probed_job(["not", "a", "mapping"]).assumptions == ("the probe's setup is not an object",)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_KEYS = ("rank", "world_size", "local_rank", "job_id", "parallel", "checkpoint_impl", "checkpoint_every_layer",
         "checkpointed_layers", "checkpoint_impl_mixed", "quantized_linears", "fp32_cast", "use_cache", "recipe")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=6),
       st.fixed_dictionaries({}, optional={"strategy": st.sampled_from(["fsdp2", "fsdp1", "ddp", "deepspeed", "tp"]),
                                           "world_size": _JSON, "sharding": _JSON, "shard_degree": _JSON,
                                           "zero_stage": _JSON, "tp": _JSON, "param_dtype": _JSON}))
def test_any_json_in_the_probes_keys_never_raises(keys, parallel):
    keys = dict(keys)
    if parallel:
        keys["parallel"] = parallel
    job = read_probed_job({**BASE, **keys})
    for line in job.assumptions:
        assert isinstance(line, str) and "\n" not in line
    process = _process(**keys)
    # an unusable 'recipe' is the setup's own key (TrainingSpec field): the spec names it
    if process.problem is not None:
        assert "recipe" in process.problem
    else:
        assert process.estimate.peak_bytes > 0


def test_rank_setup_reads_valid_environment_only():
    import types

    from gpumem_tui.probe.distributed import rank_setup

    no_dist = types.SimpleNamespace(distributed=types.SimpleNamespace(is_available=lambda: False))
    assert rank_setup(no_dist, {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "n1",
                                "MASTER_PORT": "29500"}) == {"rank": 1, "world_size": 4, "local_rank": 1,
                                                            "job_id": "n1:29500"}
    for env in ({"RANK": "4", "WORLD_SIZE": "4"}, {"RANK": "-1", "WORLD_SIZE": "4"}, {"RANK": "x", "WORLD_SIZE": "2"},
                {"RANK": "0", "WORLD_SIZE": "1"}, {"RANK": "0", "WORLD_SIZE": str(2**40)}, {"WORLD_SIZE": "2"},
                {"RANK": "0", "WORLD_SIZE": "9" * 40}):
        assert rank_setup(no_dist, env) == {}, env
    odd = rank_setup(no_dist, {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "7", "TORCHELASTIC_RUN_ID": "a\x1b[2Jb",
                               "MASTER_PORT": "99999"})
    assert odd["local_rank"] == 0 and "\x1b" not in odd["job_id"]
    assert "job_id" not in rank_setup(no_dist, {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "0"})


def test_estimate_helper_is_the_estimators():
    # the single-device baseline used above is the estimator's own figure
    from gpumem_tui.analysis.comparison import spec_from_probe_info

    arch, spec = spec_from_probe_info(ProbeInfo(pid=7, model_config=LLAMA, setup=tuple(BASE.items())), device="cpu")
    assert _single_device().peak_bytes == estimate(arch, spec).peak_bytes


def test_checkpoint_flavour_reaches_the_estimate():
    def peak(impl):
        setup = {"batch": 4, "seq": 2048, "dtype": "bf16", "task": "train", "grad_ckpt": "full",
                 "checkpoint_impl": impl, "model": "llama-3.2-1b", "optimizer": "sgd"}
        process = from_probe_info(ProbeInfo(pid=1, setup=tuple(setup.items())), device="cuda")
        assert process.spec.checkpoint_impl == impl
        return process.estimate.peak_bytes

    # reentrant re-runs the block's forward with its output held (estimator/checkpointing.py)
    assert peak("reentrant") != peak("non-reentrant")
