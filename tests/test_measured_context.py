"""The CUDA context measured on the box (issue 9: "let the panel use the context measured
there"): NVML used minus torch reserved, counted only while reserved held still."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpumem_tui.telemetry.measured_context import ContextMeter, init_context
from gpumem_tui.telemetry.model import ProbeSample, ProcessSample, ProcessType, Snapshot

MiB = 1 << 20
from shared_data import H100_TRACE as TRACE  # noqa: E402
from shared_data import needs_h100_trace  # noqa: E402


def _probe(t, reserved, pid=7, device="cuda:0"):
    return ProbeSample(time=t, pid=pid, device=device, allocated_bytes=reserved // 2, reserved_bytes=reserved)


def test_a_reading_between_two_equal_reserved_samples_counts():
    meter = ContextMeter()
    meter.add_probe(_probe(1.0, 600 * MiB))
    meter.add_nvml(7, 1.5, 1300 * MiB)  # pending: no sample after it yet
    assert meter.context(7) is None
    meter.add_probe(_probe(2.0, 600 * MiB))
    assert meter.context(7) == 700 * MiB
    meter.add_nvml(7, 1.8, 1310 * MiB)  # late, but inside the same bracket
    assert meter.context(7) == 710 * MiB


@pytest.mark.parametrize("second", [
    _probe(2.0, 900 * MiB),  # reserved moved: the reading may be from either side
    _probe(3.5, 600 * MiB),  # too far apart to say reserved held still
    _probe(2.0, 600 * MiB, device="cpu"),  # a CPU job has no context
])
def test_a_reading_that_is_not_bracketed_does_not_count(second):
    meter = ContextMeter()
    meter.add_probe(_probe(1.0, 600 * MiB))
    meter.add_nvml(7, 1.5, 1300 * MiB)
    meter.add_probe(second)
    assert meter.context(7) is None


def test_negative_or_absurd_differences_are_dropped_and_the_latest_wins():
    meter = ContextMeter()
    for t in (1.0, 2.0, 3.0):
        meter.add_probe(_probe(t, 600 * MiB))
    meter.add_nvml(7, 2.5, 500 * MiB)  # used below reserved: not a context
    assert meter.context(7) is None
    meter.add_nvml(7, 2.6, 1358 * MiB)
    meter.add_nvml(7, 2.2, 1200 * MiB)  # older than the reading already taken
    assert meter.context(7) == 758 * MiB


def test_a_process_on_two_gpus_is_not_measured():
    meter = ContextMeter()
    rows = tuple(ProcessSample(pid=7, device_index=i, type=ProcessType.COMPUTE, used_memory_bytes=900 * MiB)
                 for i in (0, 1))
    meter.add_snapshot(Snapshot(time=1.0, probes=(_probe(0.5, 100 * MiB),)))
    meter.add_snapshot(Snapshot(time=1.5, processes=rows, probes=(_probe(1.0, 100 * MiB),)))
    meter.add_snapshot(Snapshot(time=2.5, probes=(_probe(2.0, 100 * MiB),)))
    assert meter.context(7) is None


def test_init_context_gives_back_the_measured_figure_for_the_own_setup():
    from gpumem_tui.estimator.architecture import load_architecture
    from gpumem_tui.estimator.estimate import estimate
    from gpumem_tui.estimator.spec import TrainingSpec

    arch = load_architecture("llama-3.2-1b")
    spec = TrainingSpec(device="cuda", batch=1, seq=512, dtype="bf16")
    init = init_context(800 * MiB, arch, spec)
    assert 0 < init < 800 * MiB
    assert estimate(arch, replace(spec, measured_context=init)).components_bytes["cuda_context"] == 800 * MiB
    inference = replace(spec, task="inference", measured_context=init)  # a what-if on the same box
    assert estimate(arch, inference).components_bytes["cuda_context"] < 800 * MiB
    assert init_context(10 * MiB, arch, spec) == 0  # never negative


@needs_h100_trace
def test_on_the_h100_trace_the_context_is_what_the_h100_cases_measured():
    """The H100 figures of ../shared/validation/gpu/README.md: 610 MiB of context after
    initialisation (``cuda_context`` of dev_truth_h100.jsonl), 686-758 MiB at the peaks; in
    trace_h100.jsonl (PID 1088 Llama-3.2-1B bf16 SDPA, 1089 GPT-2) NVML used minus torch
    reserved between two still probe samples is 758 and 742 MiB, which the meter must read."""
    from gpumem_tui.analysis.process_estimate import from_probe_info
    from gpumem_tui.telemetry.replay import read_trace

    snapshots, _ = read_trace(TRACE)
    meter = ContextMeter()
    infos = {}
    for snap in snapshots:
        meter.add_snapshot(snap)
        infos.update({i.pid: i for i in snap.probe_infos})
    assert meter.context(1088) == 758 * MiB
    assert meter.context(1089) == 742 * MiB
    for pid in (1088, 1089):
        own = from_probe_info(infos[pid], device="cuda:0", measured_context=meter.context(pid))
        assert own.spec.measured_context == 610 * MiB  # the box's figure after initialisation
        assert own.estimate.components_bytes["cuda_context"] == meter.context(pid)
