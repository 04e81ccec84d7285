"""The training forward's KV cache of a probed process follows what its probe published.

The built-in demo calls its model with ``use_cache=False`` whatever the config says; the
estimate of its job must hold no training cache. On CUDA the torch loop's recipe otherwise
follows the config's ``use_cache`` (true for GPT-2), which put the demo's H100 trace at +4.0 %.
"""

from __future__ import annotations

import json

import pytest
from shared_data import H100_TRACE as TRACE
from shared_data import needs_h100_trace

from gpumem_tui.analysis.process_estimate import from_probe_info
from gpumem_tui.telemetry.model import ProbeInfo

GPT2_CONFIG = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
               "n_head": 12, "use_cache": True, "tie_word_embeddings": True}
BASE_SETUP = (("task", "train"), ("batch", 8), ("seq", 1024), ("dtype", "float32"), ("device", "cuda:0"),
              ("model_class", "GPT2LMHeadModel"), ("optimizer", "AdamW"), ("attention", "sdpa"))


def _estimate(*extra: tuple[str, object]):
    process = from_probe_info(ProbeInfo(pid=7, model_config=dict(GPT2_CONFIG), setup=BASE_SETUP + extra), "cuda:0")
    assert process.estimate is not None, process.problem
    return process


def test_published_use_cache_false_drops_the_training_cache():
    with_cache = _estimate()
    without = _estimate(("use_cache", False))
    assert with_cache.architecture.use_cache and not without.architecture.use_cache
    # the cache is 2 * L * b * s * h fp32 bytes; the peak must lose part of it at least
    cache = 2 * 12 * 8 * 1024 * 768 * 4
    assert with_cache.estimate.peak_bytes - without.estimate.peak_bytes > cache // 4


@pytest.mark.parametrize("flag", [True, "true"])
def test_published_use_cache_true_keeps_the_config_rule(flag):
    assert _estimate(("use_cache", flag)).estimate.peak_bytes == _estimate().estimate.peak_bytes


def test_the_demo_job_key_means_no_training_cache():
    """Traces recorded before the demo published ``use_cache`` carry its ``demo_model`` key."""
    demo = _estimate(("demo_model", "hf"))
    assert demo.estimate.peak_bytes == _estimate(("use_cache", False)).estimate.peak_bytes
    # an explicit use_cache wins over the demo key
    assert _estimate(("demo_model", "hf"), ("use_cache", True)).architecture.use_cache


@needs_h100_trace
def test_recorded_demo_trace_on_h100_within_half_a_percent():
    """PID 1089 of validation/gpu/trace_h100.jsonl: the demo job on an H100; the estimate's
    peak vs the probe's torch peak allocated (the record has no ``use_cache`` in its setup)."""
    info = peak = None
    for line in TRACE.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        for item in record.get("probe_infos") or ():
            if item["pid"] == 1089:
                info = ProbeInfo(pid=1089, model_config=item["model_config"], setup=tuple(item["setup"].items()))
        for sample in record.get("probes") or ():
            if sample["pid"] == 1089 and sample.get("peak_allocated_bytes"):
                peak = max(peak or 0, sample["peak_allocated_bytes"])
    assert info is not None and peak
    process = from_probe_info(info, "cuda:0")
    assert process.estimate is not None, process.problem
    error = (process.estimate.allocated_peak_bytes - peak) / peak
    assert abs(error) < 0.005, f"{error:+.2%}"  # the estimate's error is -0.0 % (+4.0 % with the cache)
