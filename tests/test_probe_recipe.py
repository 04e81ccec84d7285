"""The probe reads the recipe on the model in one process: k-bit preparation's fp32 casts
(real peft ``prepare_model_for_kbit_training``), quantized Linears, HF / torch checkpointing
flavours, and the forward's ``use_cache`` (published in a second info line that the reader
takes even after a torn line).

bitsandbytes, auto-gptq and autoawq are not installed here: the quantized Linears are small
stand-in classes named and shaped like the real ones (bitsandbytes/nn/modules.py
``Linear4bit`` + ``Params4bit`` with ``quant_type`` / ``compress_statistics`` /
``quant_state``, ``Linear8bitLt`` + ``Int8Params``; auto-gptq ``QuantLinear`` with ``bits`` /
``group_size``; autoawq ``WQLinear_GEMM`` with ``w_bit`` / ``group_size``). They stand in for
the libraries, not for any code of ours: the probe's recognition and the estimator run as is.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import gpumem_tui.probe  # noqa: E402
from gpumem_tui.probe.recipe_state import checkpoint_setup, quantization_setup  # noqa: E402
from gpumem_tui.analysis.process_estimate import from_probe_info  # noqa: E402
from gpumem_tui.telemetry.model import ProbeInfo  # noqa: E402
from gpumem_tui.telemetry.probe_source import ProbeSource  # noqa: E402

# torch_in_process: these tests import torch here; under xdist they share one worker (tests/conftest.py)
pytestmark = [pytest.mark.torch, pytest.mark.torch_in_process]

LLAMA = json.loads((Path(__file__).parent / "data" / "ranks" / "configs" / "llama-tiny.json").read_text())


def _llama(dtype=None):
    """The tiny Llama of tests/data/ranks, its parameters in ``dtype`` (torch.bfloat16 unless given)."""
    import torch
    import transformers
    dtype = torch.bfloat16 if dtype is None else dtype
    config = transformers.AutoConfig.for_model(**LLAMA)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)


def _quantize_layers(model, make) -> int:
    """Replace every layer Linear by ``make(d_in, d_out)`` (what a k-bit loader does)."""
    import torch
    count = 0
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.Linear):
                    setattr(parent, name, make(child.in_features, child.out_features))
                    count += 1
    return count


def _setup(probe) -> dict:
    return probe._info["setup"]


def test_kbit_preparation_fp32_casts_nf4_and_reentrant_checkpointing(tmp_path):
    import torch
    import peft
    from recipe_stand_ins import Linear4bit
    model = _llama()
    quantized = _quantize_layers(model, lambda i, o: Linear4bit(i, o))
    model.is_loaded_in_4bit = True  # what transformers' bitsandbytes loader sets; peft reads it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.prepare_model_for_kbit_training(model)  # gradient_checkpointing_kwargs None -> {}
    probe = gpumem_tui.probe.attach(model, batch=2, seq=32, directory=tmp_path, task="qlora", hooks=False)
    try:
        setup = _setup(probe)
    finally:
        probe.close()
    assert setup["quantized_linears"] == {"count": quantized, "method": "nf4", "double_quant": True,
                                          "storage_bytes": 1, "compute_dtype": "bf16"}
    by_dtype = setup["param_bytes_by_dtype"]
    assert set(by_dtype) == {"float32", "uint8"}  # every bf16 parameter cast, the packed weights left
    fp32 = sum(int(p.numel()) * 4 for p in model.parameters() if p.dtype == torch.float32)
    assert by_dtype["float32"] == fp32 and setup["fp32_cast"]["bytes"] == fp32 and setup["fp32_cast"]["from"] == "bf16"
    assert setup["dtype"] == "bf16"  # the compute dtype, not the fp32 of the cast embeddings
    # peft passes {} to gradient_checkpointing_enable: torch.utils.checkpoint's default, reentrant
    assert (setup["grad_ckpt"], setup["checkpoint_impl"], setup["checkpoint_every_layer"]) == ("full", "reentrant", True)

    process = from_probe_info(ProbeInfo(pid=1, model_config=LLAMA, setup=tuple(setup.items())), device="cpu")
    spec = process.spec
    assert process.problem is None
    assert (spec.task, spec.quant, spec.recipe, spec.dtype, spec.checkpoint_impl) == ("qlora", "nf4", "peft-kbit", "bf16", "reentrant")
    assert spec.quant_format.double_quant is True and spec.quant_format.compute_dtype == "bf16"


def test_quantized_linear_stand_ins_map_to_the_estimators_formats():
    import torch
    from recipe_stand_ins import Linear4bit, Linear8bitLt, QuantLinear, WQLinear_GEMM
    for make, expected in (
        (lambda i, o: Linear4bit(i, o), {"method": "nf4", "double_quant": True}),
        (lambda i, o: Linear8bitLt(i, o), {"method": "int8"}),
        (lambda i, o: QuantLinear(4, 128, i, o), {"method": "gptq", "bits": 4, "group_size": 128}),
        (lambda i, o: WQLinear_GEMM(4, 64, i, o), {"method": "awq", "bits": 4, "group_size": 64}),
    ):
        model = _llama(torch.float32)
        count = _quantize_layers(model, make)
        found = quantization_setup(model)["quantized_linears"]
        assert found["count"] == count == 14
        assert {k: found[k] for k in expected} == expected
    assert quantization_setup(_llama(torch.float32)) == {}


def test_gptq_setup_becomes_the_estimate_quant_format(tmp_path):
    setup = {"batch": 1, "seq": 16, "task": "inference", "dtype": "fp16",
             "quantized_linears": {"count": 14, "method": "gptq", "bits": 8, "group_size": -1}}
    process = from_probe_info(ProbeInfo(pid=2, model_config=LLAMA, setup=tuple(setup.items())), device="cpu")
    assert (process.spec.quant, process.spec.quant_format.bits, process.spec.quant_format.group_size) == ("gptq", 8, -1)
    plain = from_probe_info(ProbeInfo(pid=2, model_config=LLAMA, setup=tuple(
        (k, v) for k, v in setup.items() if k != "quantized_linears")), device="cpu")
    assert process.estimate.components_bytes["parameters"] < plain.estimate.components_bytes["parameters"]


def test_checkpoint_flavours_torch_wrapper_and_hf():
    import torch
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    model = _llama(torch.float32)
    layers = model.model.layers
    layers[0] = checkpoint_wrapper(layers[0], checkpoint_impl=CheckpointImpl.REENTRANT)
    found = checkpoint_setup(model, layers=len(layers))
    assert found == {"grad_ckpt": "full", "checkpointed_layers": 1, "checkpoint_impl": "reentrant",
                     "checkpoint_every_layer": False}

    hf = _llama(torch.float32)
    hf.activation_checkpointing_enable()  # transformers 5: {"use_reentrant": False} by default
    assert checkpoint_setup(hf, layers=2)["checkpoint_impl"] == "non-reentrant"
    assert checkpoint_setup(_llama(torch.float32), layers=2) == {}


def test_use_cache_of_the_forward_is_published_once_and_read_after_a_torn_line(tmp_path):
    import torch
    model = _llama(torch.float32)
    probe = gpumem_tui.probe.attach(model, batch=1, seq=8, directory=tmp_path, track_tensors=False)
    ids = torch.zeros(1, 8, dtype=torch.long)
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
        model(input_ids=ids, use_cache=True)  # later calls are not read: the hook removed itself
    probe.close()
    lines = [json.loads(x) for x in probe.path.read_text().splitlines()]
    infos = [r for r in lines if r["kind"] == "info"]
    assert [r["setup"].get("use_cache") for r in infos] == [None, False]

    # a reader that meets a torn line between the two info lines still takes the newest
    stream = tmp_path / "other" / "4242.jsonl"
    stream.parent.mkdir()
    first, second = (dict(r, pid=4242) for r in infos)
    stream.write_bytes((json.dumps(first) + "\n{\"kind\": \"info\", \"setup\": {\"use_c\n"
                        + json.dumps(second) + "\n").encode())
    (info,) = ProbeSource(stream.parent, alive=lambda pid, created: True).poll().probe_infos
    assert dict(info.setup)["use_cache"] is False


def test_deepspeed_engine_stand_in_is_read_without_deepspeed(tmp_path, monkeypatch):
    import torch
    from recipe_stand_ins import DeepSpeedEngine
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "ds-job")
    engine = DeepSpeedEngine(_llama(torch.float32), stage=2)
    probe = gpumem_tui.probe.attach(engine, batch=1, seq=16, directory=tmp_path, hooks=False, track_tensors=False)
    setup = _setup(probe)
    probe.close()
    assert setup["parallel"] == {"strategy": "deepspeed", "zero_stage": 2, "offload_optimizer": True,
                                 "offload_params": False, "world_size": 4}
    assert (setup["rank"], setup["world_size"], setup["job_id"], setup["model_class"]) == (1, 4, "ds-job", "LlamaForCausalLM")
    process = from_probe_info(ProbeInfo(pid=3, model_config=probe._info["model_config"], setup=tuple(setup.items())),
                              device="cpu")
    assert (process.plan.kind, process.plan.zero_stage, process.plan.offload_optimizer) == ("deepspeed", 2, True)
    assert process.estimate.components_bytes["optimizer_states"] == 0  # offloaded to the CPU


def test_modules_that_only_look_like_the_real_ones_never_stop_attach(tmp_path):
    import torch
    class CheckpointWrapper(torch.nn.Module):  # no checkpoint_impl, no checkpoint_fn
        def __init__(self) -> None:
            super().__init__()
            self.inner = torch.nn.Linear(4, 4)

    class Linear4bit(torch.nn.Linear):  # a plain weight, not a Params4bit: not quantized
        pass

    class DeepSpeedEngine(torch.nn.Module):  # every question raises
        def __init__(self) -> None:
            super().__init__()
            self.module = torch.nn.Sequential(CheckpointWrapper(), Linear4bit(4, 4))

        def zero_optimization_stage(self):
            raise RuntimeError("not initialised")

        zero_offload_optimizer = zero_offload_param = zero_optimization_stage

    probe = gpumem_tui.probe.attach(DeepSpeedEngine(), batch=1, seq=4, directory=tmp_path, hooks=False,
                                    track_tensors=False)
    setup = _setup(probe)
    probe.close()
    assert setup["parallel"] == {"strategy": "deepspeed"}  # no stage: the estimate says so, one device
    assert (setup["grad_ckpt"], setup["checkpointed_layers"]) == ("full", 1) and "checkpoint_impl" not in setup
    assert "quantized_linears" not in setup and setup["model_class"] == "Sequential"


def test_a_later_info_line_without_a_setup_object_keeps_the_setup(tmp_path):
    first = {"kind": "info", "format": "gpumem-tui-probe", "version": 1, "pid": 77, "time": 1.0,
             "model_config": LLAMA, "setup": {"batch": 2, "seq": 8, "use_cache": False}}
    stream = tmp_path / "77.jsonl"
    stream.write_bytes((json.dumps(first) + "\n" + json.dumps({**first, "setup": ["use_cache", True]}) + "\n").encode())
    reading = ProbeSource(tmp_path, alive=lambda pid, created: True).poll()
    (info,) = reading.probe_infos
    assert dict(info.setup) == {"batch": 2, "seq": 8, "use_cache": False}
    assert any("1 unreadable line" in n for n in reading.notices)
