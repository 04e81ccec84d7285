"""gpumem_tui.integrations.transformers: the probe from one line in a Trainer script.

End to end: a 2-layer GPT-2 trained on the CPU by the real ``Trainer`` with ``GpumemCallback``,
recorded with ``gpumem-tui record`` and compared with ``gpumem-tui compare --json``. In process:
what the callback reads from ``TrainingArguments`` and the model, and that what it cannot
use gives one warning while training goes on.
"""

from __future__ import annotations

import os
import sys
import types
import warnings

import pytest

from integration_jobs import BATCH, SEQ, token_rows, tiny_gpt2
from integration_record import compare_json, phase_order, record_job, setup_of

# torch_in_process: these tests import torch here; under xdist they share one worker (tests/conftest.py)
pytestmark = pytest.mark.torch_in_process


def test_trainer_job_recorded_and_compared_within_one_percent(tmp_path):
    trace, pid = record_job("trainer", tmp_path, "--steps", "4")  # the job in this process
    setup = setup_of(trace, pid)
    # what the callback read from the framework
    assert (setup["batch"], setup["seq"], setup["task"]) == (BATCH, SEQ, "train")
    assert setup["framework"] == "transformers" and setup["recipe"] == "hf-trainer"
    assert setup["optimizer"] == "AdamW" and setup["rank"] == 0 and setup["world_size"] == 1
    expected_impl = "fused" if setup["optim"] == "adamw_torch_fused" else None
    assert setup.get("optimizer_impl") == expected_impl  # the Trainer's default optim decides
    assert setup["model_class"] == "GPT2LMHeadModel"
    assert phase_order(trace, pid, 1) == ["forward", "backward", "optimizer_step", "idle"]
    result = compare_json(trace, pid)
    assert result["peak_measured_bytes"] > 0
    assert abs(result["peak_error_percent"]) <= 1.0, (result["peak_predicted_bytes"], result["peak_measured_bytes"])


def _args(tmp_path, **changes):
    import transformers
    base = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH, max_steps=2, use_cpu=True,
                report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True, learning_rate=1e-4)
    return transformers.TrainingArguments(**{**base, **changes})


def test_trainer_setup_reads_the_training_arguments(tmp_path):
    import torch
    import transformers
    from gpumem_tui.integrations.transformers import trainer_setup
    checkpointing = "activation_checkpointing" if hasattr(transformers.TrainingArguments, "activation_checkpointing") \
        else "gradient_checkpointing"
    args = _args(tmp_path, gradient_accumulation_steps=4, bf16=True, optim="adamw_torch", **{checkpointing: True})
    model = tiny_gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), foreach=False)
    setup = trainer_setup(args, model, optimizer)
    assert setup["grad_accum"] == 4 and setup["grad_ckpt"] == "full"
    assert setup["dtype"] == "bf16" and setup["mixed_precision"] is True  # fp32 weights, bf16 autocast
    assert setup["optim"] == "adamw_torch" and setup["optimizer_impl"] == "single"
    assert "task" not in setup  # a plain model: the estimator's "train"


def _train(tmp_path, callback, model=None):
    import transformers
    trainer = transformers.Trainer(model=model or tiny_gpt2(), args=_args(tmp_path),
                                   train_dataset=token_rows(2 * BATCH), callbacks=[callback])
    return trainer.train()


def _our_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "GpumemCallback" in str(w.message) or "gpumem_tui" in str(w.message)]


def test_an_unusable_probe_directory_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    from gpumem_tui.integrations.transformers import GpumemCallback
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # writable by every user: the probe refuses it
    monkeypatch.setenv("GPUMEM_TUI_PROBE_DIR", str(shared))
    callback = GpumemCallback()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        output = _train(tmp_path, callback)
    assert output.global_step == 2  # trained to the end
    ours = _our_warnings(caught)
    assert len(ours) == 1 and "writable by every user" in ours[0], ours
    assert list(shared.iterdir()) == []
    assert callback.probe is None  # closed at on_train_end


def test_a_second_probe_in_the_process_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    import torch
    from gpumem_tui.integrations.transformers import GpumemCallback
    import gpumem_tui.probe

    probes = tmp_path / "probes"
    probes.mkdir(mode=0o700)
    monkeypatch.setenv("GPUMEM_TUI_PROBE_DIR", str(probes))
    other = gpumem_tui.probe.attach(torch.nn.Linear(2, 2), directory=probes)
    try:
        callback = GpumemCallback()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            output = _train(tmp_path, callback)
    finally:
        other.close()
    assert output.global_step == 2
    ours = _our_warnings(caught)
    assert len(ours) == 1 and "already attached" in ours[0] and "training goes on" in ours[0], ours


def test_a_model_it_cannot_read_warns_once(tmp_path):
    import transformers
    from gpumem_tui.integrations.transformers import GpumemCallback
    callback = GpumemCallback()
    state, control = transformers.TrainerState(), transformers.TrainerControl()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callback.on_train_begin(_args(tmp_path), state, control, model=types.SimpleNamespace(), optimizer=None)
        callback.on_pre_optimizer_step(_args(tmp_path), state, control)
        callback.on_train_end(_args(tmp_path), state, control)
    ours = _our_warnings(caught)
    assert len(ours) == 1 and "cannot read the Trainer's setup" in ours[0], ours
    assert callback.probe is None


def test_first_batch_without_a_sequence_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    import torch
    import transformers
    from gpumem_tui.integrations.transformers import GpumemCallback
    probes = tmp_path / "probes"
    probes.mkdir(mode=0o700)
    monkeypatch.setenv("GPUMEM_TUI_PROBE_DIR", str(probes))

    class Regressor(torch.nn.Module):  # inputs of shape (b,): no sequence dimension
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(1, 1)

        def forward(self, x, labels):
            return {"loss": ((self.w(x[:, None]).squeeze(1) - labels) ** 2).mean()}

    rows = [{"x": torch.tensor(float(i)), "labels": torch.tensor(1.0)} for i in range(4)]
    callback = GpumemCallback()
    trainer = transformers.Trainer(model=Regressor(), args=_args(tmp_path), train_dataset=rows, callbacks=[callback])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        output = trainer.train()
    assert output.global_step == 2
    ours = _our_warnings(caught)
    assert len(ours) == 1 and "no (batch, sequence)" in ours[0], ours
    assert list(probes.iterdir()) == []


def test_an_unknown_transformers_version_warns_once(monkeypatch):
    # the package as sys.modules holds it now (transformers swaps its module object while importing)
    from gpumem_tui.integrations.transformers import GpumemCallback
    monkeypatch.setattr(sys.modules["transformers"], "__version__", "9.0.0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        GpumemCallback()
    ours = _our_warnings(caught)
    assert len(ours) == 1 and "transformers 9.0.0 is not a version gpumem-tui knows" in ours[0]
