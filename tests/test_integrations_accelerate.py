"""gpumem_tui.integrations.accelerate and what every integration reads from a model
(gpumem_tui.integrations.model_setup): LoRA through peft, k-bit weights, wrapped optimizers."""

from __future__ import annotations

import time
import types
import warnings

import pytest

from integration_jobs import BATCH, SEQ, tiny_gpt2
from integration_record import run_job_here

from gpumem_tui.analysis.process_estimate import compare_snapshots
from gpumem_tui.telemetry.model import Snapshot
from gpumem_tui.telemetry.probe_source import ProbeSource

# torch_in_process: these tests import torch here; under xdist they share one worker (tests/conftest.py)
pytestmark = pytest.mark.torch_in_process


def test_accelerate_loop_streams_a_setup_the_estimator_matches(tmp_path):
    probes = tmp_path / "probes"
    probes.mkdir(mode=0o700)
    run_job_here("accelerate", probes, "--steps", "4")  # the user's loop, in this process
    reading = ProbeSource(probes, alive=lambda pid, create_time: False).poll()
    (info,) = reading.probe_infos
    setup = dict(info.setup)
    # b and s read from the first forward's input_ids; the rest from the Accelerator
    assert (setup["batch"], setup["seq"], setup["framework"], setup["rank"]) == (BATCH, SEQ, "accelerate", 0)
    assert setup["optimizer"] == "AdamW"  # the torch optimizer inside AcceleratedOptimizer
    marks = [m.phase.value for m in reading.phase_marks if m.step == 1]
    assert marks == ["forward", "backward", "optimizer_step", "idle"]
    snap = Snapshot(time=time.time(), probes=reading.probes, probe_infos=reading.probe_infos,
                    phase_marks=reading.phase_marks)
    head = compare_snapshots([snap]).headline
    assert abs(head.error_percent) <= 1.0, (head.predicted_bytes, head.measured_bytes)


def test_accelerator_setup_reads_rank_world_size_precision_and_zero():
    import torch
    from gpumem_tui.integrations.accelerate import accelerator_setup
    accelerator = types.SimpleNamespace(
        num_processes=4, process_index=2, local_process_index=0, gradient_accumulation_steps=8,
        mixed_precision="bf16", distributed_type=types.SimpleNamespace(value="DEEPSPEED"),
        state=types.SimpleNamespace(deepspeed_plugin=types.SimpleNamespace(zero_stage=2)),
    )
    model = tiny_gpt2()
    setup = accelerator_setup(accelerator, model, torch.optim.AdamW(model.parameters(), fused=True))
    assert (setup["world_size"], setup["dp"], setup["rank"], setup["local_rank"]) == (4, 4, 2, 0)
    assert (setup["grad_accum"], setup["zero"], setup["distributed_type"]) == (8, 2, "DEEPSPEED")
    assert (setup["dtype"], setup["mixed_precision"], setup["optimizer_impl"]) == ("bf16", True, "fused")


def test_attach_with_an_object_it_cannot_read_warns_once(tmp_path):
    from gpumem_tui.integrations.accelerate import attach
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = attach(types.SimpleNamespace(unwrap_model=lambda m: m), object(), None, batch=2, seq=8,
                         directory=tmp_path)
    ours = [str(w.message) for w in caught if "accelerate.attach" in str(w.message)]
    assert len(ours) == 1 and "training goes on" in ours[0], ours
    assert session.probe is None
    session.close()  # harmless


def test_lora_model_publishes_task_rank_and_targets():
    from gpumem_tui.integrations.model_setup import model_setup
    import peft  # here, not at the top: importing it costs every xdist worker seconds at collection

    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=128)
    base = LlamaForCausalLM(config)
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"]))
    setup = model_setup(lora)
    assert (setup["task"], setup["lora_rank"], setup["lora_targets"]) == ("lora", 4, ["q", "v", "down"])
    assert "recipe" not in setup  # full-precision weights
    base.is_loaded_in_4bit = True  # what transformers' bitsandbytes quantizer sets
    setup = model_setup(lora)
    assert (setup["task"], setup["recipe"], setup["quantized_bits"]) == ("qlora", "peft-kbit", 4)


def test_plain_model_and_wrapped_optimizer():
    import torch
    from gpumem_tui.integrations.model_setup import model_setup, unwrap_optimizer
    model = tiny_gpt2()
    assert model_setup(model) == {}
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    wrapper = types.SimpleNamespace(optimizer=types.SimpleNamespace(optimizer=inner))
    assert unwrap_optimizer(wrapper) is inner and unwrap_optimizer(None) is None
