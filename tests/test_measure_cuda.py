"""``measure --on cuda`` without a GPU: argument validation, error paths, and the device-agnostic
parts (peft LoRA, generate, the kept forward) run on the CPU at tiny shapes."""

from __future__ import annotations

import pytest

from gpumem_tui.measure.cli import main

TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128,
    "tie_word_embeddings": False,
}


def _one_line_exit_2(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpumem-tui measure:") and "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("argv, words", [
    (["gpt2", "--new-tokens", "8"], "inference only"),
    (["gpt2", "--logits", "all"], "inference only"),
    (["gpt2", "--task", "inference", "--new-tokens", "8", "--logits", "all"], "generate()"),
    (["gpt2", "--task", "inference", "--logits", "some"], "--logits"),
    (["gpt2", "--task", "inference", "--new-tokens", "-1"], "--new-tokens"),
    (["gpt2", "--task", "inference", "--new-tokens", "4", "--on", "cpu"], "use --on cuda"),
    (["gpt2", "--on", "tpu"], "meta, cpu or cuda"),
])
def test_contradictory_or_bad_flags_exit_2_with_one_line(capsys, argv, words):
    assert words in _one_line_exit_2(capsys, argv)


@pytest.mark.torch_in_process
def test_no_cuda_build_or_no_gpu_is_one_line(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    err = _one_line_exit_2(capsys, ["gpt2", "--on", "cuda", "--batch", "1", "--seq", "16"])
    assert ("CUDA build" in err) if torch.version.cuda is None else ("no CUDA GPU" in err)


def test_oom_message_names_asked_and_free():
    from gpumem_tui.measure.cuda import oom_message

    exc = RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79 GiB")
    msg = oom_message(exc, 512 << 20)
    assert "asked 2.00 GiB" in msg and "512 MiB free" in msg and "\n" not in msg


def _tiny(torch, dtype):
    import transformers

    transformers.logging.set_verbosity_error()
    cfg = transformers.AutoConfig.for_model(**TINY_LLAMA)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")


@pytest.mark.torch_in_process
def test_peft_lora_adapters_are_fp32_and_counted_as_the_estimator_does():
    import torch
    import peft  # noqa: F401 -- installed by setup (README): missing is a failure
    from gpumem_tui.estimator import components as C
    from gpumem_tui.estimator.architecture import architecture_from_config
    from gpumem_tui.estimator.spec import TrainingSpec
    from gpumem_tui.measure.cuda import apply_peft_lora

    model = apply_peft_lora(_tiny(torch, torch.bfloat16), 4, ["q_proj", "v_proj", "down_proj"])
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)  # peft's autocast_adapter_dtype
    spec = TrainingSpec(task="lora", lora_rank=4, lora_targets=("q", "v", "down"), dtype="bf16")
    assert sum(p.numel() for p in trainable) == C.lora_params(architecture_from_config(dict(TINY_LLAMA)), spec)
    # the CUDA profile counts those adapters, their gradients and their AdamW states in fp32
    n = C.lora_params(architecture_from_config(dict(TINY_LLAMA)), spec)
    assert C.gradient_bytes(architecture_from_config(dict(TINY_LLAMA)), spec) == 4 * n


@pytest.mark.torch_in_process
def test_peft_lora_on_meta_and_bad_targets():
    import torch
    import peft  # noqa: F401 -- installed by setup (README): missing is a failure
    from gpumem_tui.measure.cuda import apply_peft_lora
    from gpumem_tui.measure.runner import MeasureError

    with torch.device("meta"):
        model = _tiny(torch, torch.bfloat16)
    wrapped = apply_peft_lora(model, 8, ["q_proj"])
    assert any("lora_A" in n for n, _ in wrapped.named_parameters())
    with pytest.raises(MeasureError):
        apply_peft_lora(_tiny(torch, torch.float32), 8, ["no_such_proj"])


@pytest.mark.parametrize("new_tokens, logits", [(5, "last"), (0, "all"), (0, "last")])
@pytest.mark.torch_in_process
def test_inference_modes_run_on_cpu(new_tokens, logits):
    import torch
    from gpumem_tui.measure.cuda import _Stats, run_steps

    model = _tiny(torch, torch.float32)
    ids = torch.randint(0, 256, (2, 12))
    phases = run_steps(model, ids, task="inference", steps=1, optimizer=None, amp=None,
                       stats=_Stats(torch, torch.device("cpu")), new_tokens=new_tokens, logits=logits)
    assert set(phases) == {"forward", "_before"}


@pytest.mark.torch_in_process
def test_training_loop_runs_on_cpu_and_reports_three_phases():
    import torch
    import contextlib

    from gpumem_tui.measure.cuda import _Stats, run_steps

    model = _tiny(torch, torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    before = [p.detach().clone() for p in model.parameters()]
    phases = run_steps(model, torch.randint(0, 256, (2, 12)), task="train", steps=2, optimizer=opt,
                       amp=contextlib.nullcontext, stats=_Stats(torch, torch.device("cpu")))
    assert set(phases) == {"forward", "backward", "optimizer_step"}
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the steps trained


def test_nvml_sampler_reads_own_process_and_pairs_init_with_shutdown(fake_nvml):
    """The sampler of `measure --on cuda` reads this process's NVML used memory (None once the
    binding answers not available) and gives back its nvmlInit reference when stopped."""
    import os

    from fake_pynvml import MiB, ULLONG_MAX

    from gpumem_tui.measure.cuda import NvmlSampler

    proc = fake_nvml.add_process(0, pid=os.getpid(), used=300 * MiB)
    sampler = NvmlSampler(interval=0.001)
    assert fake_nvml.init_count == 1 and sampler.used() == 300 * MiB
    proc.used = ULLONG_MAX
    assert sampler.used() is None
    sampler.start()
    sampler.stop()
    assert fake_nvml.init_count == 0
