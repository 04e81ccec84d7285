"""Predicted vs measured: the arithmetic, like-with-like figures, groups and unsplittable parts.

These use hand-built Estimate-like inputs (the ``to_json`` dict shape and an object with the
same attributes) so every expected number is derived here from the inputs, not copied from a
run. tests/test_comparison_estimator.py repeats the key checks with the real estimator.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gpumem_tui.analysis.comparison import (
    CATEGORY_COMPONENTS,
    COMPONENTS,
    FIGURE_ALLOCATED,
    FIGURE_CPU_LIVE,
    FIGURE_NVML_USED,
    FIGURE_RESERVED,
    ComparisonError,
    compare,
    percent_error,
)
from gpumem_tui.telemetry.model import ProbeSample, ProcessSample, ProcessType

MiB = 1 << 20

PRED = {
    "parameters": 500 * MiB,
    "gradients": 500 * MiB,
    "optimizer_states": 1000 * MiB,
    "optimizer_intermediates": 0,
    "activations": 300 * MiB,
    "logits_and_loss": 200 * MiB,
    "kv_cache": 0,
    "cuda_context": 400 * MiB,
    "allocator_reserve": 100 * MiB,
}
PEAK = sum(PRED.values())
GROUP3 = "activations+logits_and_loss+optimizer_intermediates"


def _estimate(components=PRED, peak=None, as_object=False):
    data = {"components_bytes": dict(components), "peak_bytes": peak if peak is not None else sum(components.values()), "peak_phase": "backward"}
    return SimpleNamespace(**data) if as_object else data


def _cuda_samples(pid=7):
    # Three samples; the middle one is the peak (most live bytes in its categories).
    cats_low = (("parameters", 500 * MiB), ("optimizer_states", 1000 * MiB), ("activations", 100 * MiB))
    cats_peak = (
        ("parameters", 500 * MiB),
        ("gradients", 450 * MiB),
        ("optimizer_states", 1000 * MiB),
        ("activations", 600 * MiB),
    )
    cats_after = (("parameters", 500 * MiB), ("gradients", 500 * MiB), ("optimizer_states", 1000 * MiB))
    return [
        ProbeSample(time=1.0, pid=pid, device="cuda:0", allocated_bytes=1600 * MiB, reserved_bytes=1800 * MiB,
                    peak_allocated_bytes=1600 * MiB, categories=cats_low),
        ProbeSample(time=2.0, pid=pid, device="cuda:0", allocated_bytes=2550 * MiB, reserved_bytes=2700 * MiB,
                    peak_allocated_bytes=2560 * MiB, categories=cats_peak),
        ProbeSample(time=3.0, pid=pid, device="cuda:0", allocated_bytes=2000 * MiB, reserved_bytes=2700 * MiB,
                    peak_allocated_bytes=2560 * MiB, categories=cats_after),
    ]


def _nvml(pid=7, used=(3000 * MiB, 3150 * MiB, None)):
    return [
        ProcessSample(pid=pid, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=u) for u in used
    ] + [ProcessSample(pid=pid + 1, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=9000 * MiB)]


def test_percent_error_sign_and_zero():
    assert percent_error(110, 100) == pytest.approx(10.0)
    assert percent_error(90, 100) == pytest.approx(-10.0)
    assert percent_error(5, 0) is None
    assert percent_error(0, 0) == 0.0
    assert percent_error(5, None) is None


@pytest.mark.parametrize("as_object", [False, True])
def test_cuda_peaks_compare_like_with_like(as_object):
    result = compare(_estimate(as_object=as_object), _cuda_samples(), _nvml())
    assert result.device == "cuda"
    assert result.measured_figure == FIGURE_ALLOCATED
    peaks = {p.figure: p for p in result.peaks}
    assert list(peaks) == [FIGURE_ALLOCATED, FIGURE_RESERVED, FIGURE_NVML_USED]
    ctx, res = PRED["cuda_context"], PRED["allocator_reserve"]
    # allocated: no context, no reserve; measured is the highest peak_allocated/allocated.
    assert peaks[FIGURE_ALLOCATED].predicted_bytes == PEAK - ctx - res
    assert peaks[FIGURE_ALLOCATED].measured_bytes == 2560 * MiB
    # reserved: + allocator reserve
    assert peaks[FIGURE_RESERVED].predicted_bytes == PEAK - ctx
    assert peaks[FIGURE_RESERVED].measured_bytes == 2700 * MiB
    # NVML used: everything; only this pid's samples, None skipped.
    assert peaks[FIGURE_NVML_USED].predicted_bytes == PEAK
    assert peaks[FIGURE_NVML_USED].measured_bytes == 3150 * MiB
    head = result.headline
    assert head.error_bytes == (PEAK - ctx - res) - 2560 * MiB
    assert head.error_percent == pytest.approx(100 * ((PEAK - ctx - res) - 2560 * MiB) / (2560 * MiB))


def test_components_come_from_the_peak_sample_and_groups_are_not_split():
    result = compare(_estimate(), _cuda_samples(), _nvml())
    params = result.row("parameters")
    assert params.measured_bytes == 500 * MiB and params.error_percent == pytest.approx(0.0)
    grads = result.row("gradients")  # 450 at the peak sample, not 500 from the last one
    assert grads.measured_bytes == 450 * MiB
    assert grads.error_percent == pytest.approx(100 * 50 / 450)
    # Without "temporaries" (no tensor tracker) the probe's "activations" is allocated minus
    # the model states: the estimator's activations, logits_and_loss and optimizer temporaries.
    group = result.row(GROUP3)
    assert group is not None and group.components == ("activations", "logits_and_loss", "optimizer_intermediates")
    assert group.predicted_bytes == PRED["activations"] + PRED["logits_and_loss"] + PRED["optimizer_intermediates"]
    assert group.measured_bytes == 600 * MiB
    for member in group.components:
        row = result.row(member)
        assert row.measured_bytes is None and row.error_percent is None
        assert "not split" in row.source
    # Nothing in the probe holds a KV cache: not invented.
    assert result.row("kv_cache").measured_bytes is None


def test_context_and_reserve_are_measured_as_differences():
    result = compare(_estimate(), _cuda_samples(), _nvml())
    reserve = result.row("allocator_reserve")
    assert reserve.measured_bytes == 2700 * MiB - 2560 * MiB
    assert "reserved - torch allocated" in reserve.source
    context = result.row("cuda_context")
    assert context.measured_bytes == 3150 * MiB - 2700 * MiB
    assert "NVML used - torch reserved" in context.source
    # Without NVML the context is not measured, and the NVML peak is absent.
    no_nvml = compare(_estimate(), _cuda_samples())
    assert no_nvml.row("cuda_context").measured_bytes is None
    assert FIGURE_NVML_USED not in {p.figure for p in no_nvml.peaks}
    assert any("NVML" in n for n in no_nvml.notes)


def test_cpu_job_uses_live_tensors_and_leaves_context_out():
    samples = [
        ProbeSample(time=1.0, pid=3, device="cpu", allocated_bytes=900 * MiB,
                    categories=(("parameters", 400 * MiB), ("activations", 450 * MiB), ("temporaries", 50 * MiB))),
        ProbeSample(time=2.0, pid=3, device="cpu", allocated_bytes=700 * MiB, peak_allocated_bytes=950 * MiB,
                    categories=(("parameters", 400 * MiB), ("gradients", 300 * MiB))),
    ]
    result = compare(_estimate(), samples)
    assert result.device == "cpu"
    assert result.measured_figure == FIGURE_CPU_LIVE
    assert [p.figure for p in result.peaks] == [FIGURE_CPU_LIVE]
    assert result.headline.predicted_bytes == PEAK - PRED["cuda_context"] - PRED["allocator_reserve"]
    assert result.headline.measured_bytes == 950 * MiB
    # the category split is from the sample with most categorised bytes (900 > 700)
    assert result.row("parameters").measured_bytes == 400 * MiB
    assert result.row("gradients").measured_bytes is None  # not live at that sample -> not a row
    assert result.row(GROUP3).measured_bytes == 500 * MiB
    # context and reserve are not compared on a CPU job; the note says why.
    assert result.row("cuda_context") is None and result.row("allocator_reserve") is None
    assert any("CPU" in n for n in result.notes)


def test_temporaries_merge_with_activations_into_one_group():
    # With a tracker the probe splits activations (made in forward) from temporaries; both
    # hold part of the logits and loss buffers, so they are compared together.
    samples = [
        ProbeSample(time=1.0, pid=3, device="cpu", allocated_bytes=1000,
                    categories=(("activations", 600), ("temporaries", 300), ("parameters", 100), ("buffers", 5))),
    ]
    comps = dict(PRED, cuda_context=0, allocator_reserve=0, optimizer_intermediates=7 * MiB)
    result = compare(_estimate(comps), samples)
    group = result.row(GROUP3)
    assert group is not None
    assert group.measured_bytes == 900
    assert group.predicted_bytes == comps["optimizer_intermediates"] + comps["activations"] + comps["logits_and_loss"]
    assert any("buffers" in n for n in result.notes)  # unknown category reported, not compared


def test_to_json_shape_is_the_issue_shape_and_json_serialisable():
    result = compare(_estimate(), _cuda_samples(), _nvml())
    data = json.loads(json.dumps(result.to_json()))
    for key in ("predicted", "measured", "error_percent", "peak_predicted_bytes", "peak_measured_bytes"):
        assert key in data
    assert set(COMPONENTS) <= set(data["predicted"])
    assert set(data["predicted"]) == set(data["measured"]) == set(data["error_percent"])
    assert data["measured"]["activations"] is None
    assert data["measured"][GROUP3] == 600 * MiB
    assert data["groups"] == {GROUP3: ["activations", "logits_and_loss", "optimizer_intermediates"]}
    assert data["measured_figure"] == FIGURE_ALLOCATED
    assert data["peak_measured_bytes"] == 2560 * MiB
    assert all(isinstance(v, int) for v in data["predicted"].values())
    assert data["error_percent"]["parameters"] == 0.0
    assert {p["figure"] for p in data["peaks"]} == {FIGURE_ALLOCATED, FIGURE_RESERVED, FIGURE_NVML_USED}


def test_bad_inputs_raise_one_clear_error():
    with pytest.raises(ComparisonError, match="no probe samples"):
        compare(_estimate(), [])
    mixed = _cuda_samples(pid=1) + _cuda_samples(pid=2)
    with pytest.raises(ComparisonError, match="several processes"):
        compare(_estimate(), mixed)
    assert compare(_estimate(), mixed, pid=2).pid == 2
    devices = [_cuda_samples()[0], ProbeSample(time=5.0, pid=7, device="cpu", allocated_bytes=1)]
    with pytest.raises(ComparisonError, match="several devices"):
        compare(_estimate(), devices)
    with pytest.raises(ComparisonError, match="components_bytes"):
        compare({"peak_bytes": 1}, _cuda_samples())


def test_no_categories_means_no_component_is_measured():
    samples = [ProbeSample(time=1.0, pid=1, device="cuda", allocated_bytes=10 * MiB, reserved_bytes=12 * MiB)]
    result = compare(_estimate(), samples)
    for name in ("parameters", "gradients", "optimizer_states", "activations"):
        assert result.row(name).measured_bytes is None
    assert result.row("allocator_reserve").measured_bytes == 2 * MiB
    assert any("per-category" in n for n in result.notes)


def test_every_mapped_category_names_real_components():
    for category, comps in CATEGORY_COMPONENTS.items():
        assert comps and set(comps) <= set(COMPONENTS), category
