"""The comparison with the real estimator and real trace files (probe helper's recorder).

Expected figures are computed here from the estimator's own output, so the checks are about
what is compared with what (like with like) and the JSON shape, not copied numbers.
"""

from __future__ import annotations

import json

import pytest

from gpumem_tui.analysis.comparison import (
    FIGURE_ALLOCATED,
    FIGURE_NVML_USED,
    FIGURE_RESERVED,
    ComparisonError,
    compare,
    percent_error,
    spec_from_probe_info,
)
from gpumem_tui.analysis.process_estimate import compare_snapshots, compare_trace
from gpumem_tui.estimator.architecture import CATALOGUE_DIR
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.telemetry.model import (
    Phase,
    PhaseMark,
    ProbeInfo,
    ProbeSample,
    ProcessSample,
    ProcessType,
    Snapshot,
)
from gpumem_tui.telemetry.replay import TraceError, TraceRecorder

MiB = 1 << 20
GPT2 = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())


def _info(pid=500, config=GPT2, **setup):
    base = {"task": "train", "batch": 2, "seq": 128, "dtype": "float32", "device": "cuda:0",
            "optimizer": "AdamW", "grad_ckpt": False, "attention": "sdpa"}
    base.update(setup)
    return ProbeInfo(pid=pid, model_config=config, setup=tuple(base.items()))


def test_spec_from_probe_info_normalises_what_the_probe_publishes():
    arch, spec = spec_from_probe_info(_info(dtype="bfloat16", optimizer="torch.optim.adamw.AdamW"))
    assert arch.model_type == "gpt2" and arch.num_layers == GPT2["n_layer"]
    assert (spec.task, spec.batch, spec.seq, spec.dtype, spec.optimizer, spec.grad_ckpt, spec.device) == (
        "train", 2, 128, "bf16", "adamw", "none", "cuda")
    _, sgd = spec_from_probe_info(_info(optimizer="SGD", momentum=0.9, grad_ckpt=True))
    assert sgd.optimizer == "sgd-momentum" and sgd.grad_ckpt == "full"
    _, plain = spec_from_probe_info(_info(optimizer="SGD", momentum=0.0))
    assert plain.optimizer == "sgd"
    _, flash = spec_from_probe_info(_info(attention="flash_attention_2"))
    assert flash.attention == "flash"
    _, cpu = spec_from_probe_info(_info(), device="cpu")  # overrides win over the setup
    assert cpu.device == "cpu"


def test_lora_targets_read_from_a_stream_as_a_json_array():
    """The Trainer callback publishes ``lora_targets`` as a list, and a probe stream is JSON: a
    LoRA job's setup read back from its stream (compare, the dashboard) must give a LoRA spec,
    not "lora_targets must be a non-empty tuple" (found on a probed Trainer + PEFT LoRA job)."""
    published = json.loads(json.dumps({"task": "lora", "lora_rank": 16, "lora_targets": ["q", "v"]}))
    _, spec = spec_from_probe_info(_info(**published))
    assert (spec.task, spec.lora_rank, spec.lora_targets) == ("lora", 16, ("q", "v"))
    with pytest.raises(ComparisonError, match="lora_targets"):
        spec_from_probe_info(_info(task="lora", lora_targets=["not-a-role"]))


def test_spec_from_probe_info_errors_are_one_line_and_name_the_problem():
    with pytest.raises(ComparisonError, match="no model config"):
        spec_from_probe_info(ProbeInfo(pid=1, setup=(("batch", 1), ("seq", 8))))
    with pytest.raises(ComparisonError, match="model_type"):
        spec_from_probe_info(_info(config={"model_type": "not-a-model"}))
    with pytest.raises(ComparisonError, match="'batch'"):
        spec_from_probe_info(ProbeInfo(pid=1, model_config=GPT2, setup=(("seq", 8),)))
    with pytest.raises(ComparisonError, match=r"\(batch\)"):
        spec_from_probe_info(_info(batch=0))
    with pytest.raises(ComparisonError) as info:
        spec_from_probe_info(_info(dtype="complex128"))
    assert "\n" not in str(info.value) and "dtype" in str(info.value)
    # a catalogue name in the setup stands in for a missing config
    arch, _ = spec_from_probe_info(ProbeInfo(pid=1, setup=(("model", "gpt2"), ("batch", 1), ("seq", 8))))
    assert arch.model_type == "gpt2"


def test_real_estimate_peaks_are_compared_like_with_like():
    arch, spec = spec_from_probe_info(_info())
    est = estimate(arch, spec)
    comps = est.components_bytes
    samples = [ProbeSample(time=1.0, pid=500, device="cuda:0", allocated_bytes=300 * MiB, reserved_bytes=340 * MiB,
                           peak_allocated_bytes=310 * MiB,
                           categories=(("parameters", comps["parameters"]), ("activations", 100 * MiB)))]
    nvml = [ProcessSample(pid=500, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=800 * MiB)]
    result = compare(est, samples, nvml)
    peaks = {p.figure: p.predicted_bytes for p in result.peaks}
    assert peaks[FIGURE_ALLOCATED] == est.allocated_peak_bytes
    assert peaks[FIGURE_RESERVED] == est.allocated_peak_bytes + comps["allocator_reserve"]
    assert peaks[FIGURE_NVML_USED] == est.peak_bytes
    assert result.row("parameters").error_percent == pytest.approx(0.0)
    assert result.row("gradients").measured_bytes is None  # not in the probe's sample
    # the JSON form of a real Estimate works as input too
    assert compare(est.to_json(), samples, nvml).to_json()["peak_predicted_bytes"] == est.allocated_peak_bytes


def _snapshots(pid=500, device="cpu", setup=None):
    info = _info(pid=pid, device=device, **(setup or {}))
    arch, spec = spec_from_probe_info(info)
    est = estimate(arch, spec)
    comps = est.components_bytes
    states = comps["parameters"] + comps["optimizer_states"]
    snaps = []
    phases = [Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER_STEP]
    for i, phase in enumerate(phases):
        t = 100.0 + i
        act = (60 + 40 * (phase is Phase.BACKWARD)) * MiB
        cats = (("parameters", comps["parameters"]), ("optimizer_states", comps["optimizer_states"]),
                ("gradients", 10 * MiB * i), ("activations", act), ("temporaries", 5 * MiB))
        live = sum(v for _, v in cats)
        probe = ProbeSample(time=t + 0.5, pid=pid, device=device, allocated_bytes=live,
                            peak_allocated_bytes=live + 2 * MiB, categories=cats)
        snaps.append(Snapshot(time=t + 0.6, probes=(probe,), probe_infos=(info,) if i == 0 else (),
                              phase_marks=(PhaseMark(time=t, pid=pid, phase=phase, step=1),)))
    return snaps, est, states


def test_compare_snapshots_estimates_from_the_probe_and_names_the_peak_phase():
    snaps, est, _ = _snapshots()
    result = compare_snapshots(snaps)
    assert result.device == "cpu" and result.pid == 500
    assert result.headline.predicted_bytes == est.allocated_peak_bytes
    assert result.measured_peak_phase == "backward"  # the sample with most live bytes
    assert result.headline.measured_bytes == result.components_sample_bytes + 2 * MiB
    assert any("fell between samples" in n for n in result.notes)
    with pytest.raises(ComparisonError, match="no probed process"):
        compare_snapshots([Snapshot(time=1.0)])


def test_compare_trace_json_shape_from_a_recorded_trace(tmp_path):
    snaps, est, _ = _snapshots()
    path = tmp_path / "trace.jsonl"
    with TraceRecorder(path) as rec:
        for snap in snaps:
            rec.write(snap)
    data = compare_trace(path)
    json.dumps(data, allow_nan=False)
    for key in ("predicted", "measured", "error_percent", "peak_predicted_bytes", "peak_measured_bytes"):
        assert key in data
    assert data["measured_figure"] == "CPU live tensors"
    assert data["predicted"]["parameters"] == est.components_bytes["parameters"]
    assert data["measured"]["parameters"] == est.components_bytes["parameters"]
    assert data["error_percent"]["parameters"] == 0.0
    group = "activations+logits_and_loss+optimizer_intermediates"
    assert data["measured"][group] == 100 * MiB + 5 * MiB
    expected = percent_error(data["predicted"][group], data["measured"][group])
    assert data["error_percent"][group] == pytest.approx(expected, abs=1e-3)
    assert data["measured"]["activations"] is None and data["measured"]["kv_cache"] is None
    assert data["peak_predicted_bytes"] == est.allocated_peak_bytes
    assert data["trace_notices"] == []
    # a torn last line still compares, with a notice
    with path.open("ab") as f:
        f.write(b'{"time": 1')
    torn = compare_trace(path)
    assert torn["trace_notices"] and torn["peak_measured_bytes"] == data["peak_measured_bytes"]


def test_compare_trace_bad_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(TraceError):
        compare_trace(empty)
    no_probe = tmp_path / "noprobe.jsonl"
    with TraceRecorder(no_probe) as rec:
        rec.write(Snapshot(time=1.0))
    with pytest.raises(ComparisonError, match="no probed process"):
        compare_trace(no_probe)
    two = tmp_path / "two.jsonl"
    a, _, _ = _snapshots(pid=1)
    b, _, _ = _snapshots(pid=2)
    with TraceRecorder(two) as rec:
        for snap in a + b:
            rec.write(snap)
    with pytest.raises(ComparisonError, match="several probed processes"):
        compare_trace(two)
    assert compare_trace(two, pid=2)["pid"] == 2


def test_compare_cli_prints_the_json(tmp_path, capsys):
    from gpumem_tui.analysis import compare_cli

    snaps, est, _ = _snapshots()
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as rec:
        for snap in snaps:
            rec.write(snap)
    assert compare_cli.main([str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["peak_predicted_bytes"] == est.allocated_peak_bytes
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert compare_cli.main([str(bad), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_model_class_picks_the_head():
    bert = json.loads((CATALOGUE_DIR / "bert-base-uncased.json").read_text())
    bare, _ = spec_from_probe_info(_info(config=bert, model_class="BertModel"))
    mlm, _ = spec_from_probe_info(_info(config=bert, model_class="BertForMaskedLM"))
    cls, _ = spec_from_probe_info(_info(config=bert, model_class="BertForSequenceClassification"))
    assert (bare.head, mlm.head, cls.head) == ("none", "mlm", "classification")
    assert bare.total_params < mlm.total_params  # the MLM head's transform + bias are counted
    lm, _ = spec_from_probe_info(_info(model_class="GPT2LMHeadModel"))
    assert lm.head == "lm"


def test_a_device_mismatch_is_said():
    arch, spec = spec_from_probe_info(_info())  # cuda estimate
    est = estimate(arch, spec)
    cpu = [ProbeSample(time=1.0, pid=500, device="cpu", allocated_bytes=100 * MiB)]
    result = compare(est, cpu)
    assert any("models cuda kernels but the job ran on cpu" in n for n in result.notes)
    assert result.headline.predicted_bytes == est.allocated_peak_bytes  # context/reserve left out
    arch, spec = spec_from_probe_info(_info(), device="cpu")
    assert not any("kernels" in n for n in compare(estimate(arch, spec), cpu).notes)


def test_compare_trace_on_cuda_reports_all_three_figures(tmp_path):
    info = _info(pid=42, device="cuda:0")
    arch, spec = spec_from_probe_info(info)
    est = estimate(arch, spec)
    comps = est.components_bytes
    path = tmp_path / "cuda.jsonl"
    with TraceRecorder(path) as rec:
        for i, used in enumerate((900 * MiB, 1100 * MiB)):
            probe = ProbeSample(time=10.0 + i, pid=42, device="cuda:0", allocated_bytes=500 * MiB + i * MiB,
                                reserved_bytes=600 * MiB, peak_allocated_bytes=520 * MiB,
                                categories=(("parameters", comps["parameters"]), ("activations", 80 * MiB)))
            proc = ProcessSample(pid=42, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=used)
            rec.write(Snapshot(time=10.5 + i, processes=(proc,), probes=(probe,),
                               probe_infos=(info,) if i == 0 else ()))
    data = compare_trace(path)
    assert data["device"] == "cuda" and data["measured_figure"] == "torch allocated"
    peaks = {p["figure"]: p for p in data["peaks"]}
    assert peaks["torch allocated"]["measured_bytes"] == 520 * MiB
    assert peaks["torch allocated"]["predicted_bytes"] == est.allocated_peak_bytes
    assert peaks["torch reserved"]["measured_bytes"] == 600 * MiB
    assert peaks["torch reserved"]["predicted_bytes"] == est.allocated_peak_bytes + comps["allocator_reserve"]
    assert peaks["NVML used"]["measured_bytes"] == 1100 * MiB
    # The prediction takes the context measured for this process: NVML used - reserved at
    # t=10.5, bracketed by two probe samples with the same reserved (900 - 600 MiB).
    from dataclasses import replace

    from gpumem_tui.telemetry.measured_context import init_context

    here = estimate(arch, replace(spec, measured_context=init_context(300 * MiB, arch, spec)))
    assert here.components_bytes["cuda_context"] == 300 * MiB
    assert peaks["NVML used"]["predicted_bytes"] == here.peak_bytes == est.peak_bytes - comps["cuda_context"] + 300 * MiB
    assert any("measured for this process" in n for n in data["notes"])
    assert data["measured"]["cuda_context"] == 1100 * MiB - 600 * MiB
    assert data["measured"]["allocator_reserve"] == 600 * MiB - 520 * MiB
    assert data["measured_source"]["cuda_context"].startswith("NVML used - torch reserved")


def test_a_users_estimate_takes_the_context_measured_after_it_was_set():
    # the context measured on the box is a fact, not a pane choice: an edit made before it
    # was measured takes it when the probe's estimate is rebuilt with it (and the other way
    # round), so the user's figure and the probe's count the same context
    from dataclasses import replace

    from gpumem_tui.analysis.process_estimate import ProcessEstimates

    registry = ProcessEstimates()
    info = _info()
    probed = registry.update_probe(info, device="cuda:0")
    assert probed.spec.measured_context is None
    spec = replace(probed.spec, batch=4)
    mine = registry.set_user(info.pid, probed.architecture, spec, estimate(probed.architecture, spec), "gpt2")
    assert mine.spec.measured_context is None
    registry.update_probe(info, device="cuda:0", measured_context=900 * MiB)
    context = registry.probe_estimate(info.pid).spec.measured_context
    now = registry.get(info.pid)
    assert now.source == "user" and now.spec == replace(spec, measured_context=context)
    assert now.estimate.peak_bytes == estimate(probed.architecture, now.spec).peak_bytes
    assert now.estimate.peak_bytes != mine.estimate.peak_bytes
    # an edit made after the context was measured keeps it too
    later = registry.set_user(info.pid, probed.architecture, spec, estimate(probed.architecture, spec), "gpt2")
    assert later.spec.measured_context == context
