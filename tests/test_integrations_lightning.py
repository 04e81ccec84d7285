"""gpumem_tui.integrations.lightning: the probe from one line in a Lightning script.

End to end: a LightningModule holding a 2-layer GPT-2, trained on the CPU by the real
``lightning.pytorch.Trainer`` with ``GpumemCallback``, recorded with ``gpumem-tui record`` and
compared with ``gpumem-tui compare --json``. Lightning is installed by scripts/setup.sh (the
``dev`` extra), so these tests do not skip.
"""

from __future__ import annotations

import types
import warnings

import pytest

from integration_jobs import BATCH, SEQ, tiny_gpt2
from integration_record import compare_json, phase_order, record_job, setup_of

# torch_in_process: these tests import torch here; under xdist they share one worker (tests/conftest.py)
pytestmark = pytest.mark.torch_in_process


@pytest.fixture(scope="module")
def lit() -> types.SimpleNamespace:
    """lightning.pytorch, our integration module and the test LightningModules, imported by the
    tests that use them (not at collection: Lightning costs ~4 s of CPU to import, in every xdist
    worker that collects this file; module scope keeps these tests on one worker)."""
    import torch
    import lightning.pytorch as pl

    from gpumem_tui.integrations import lightning as integration

    class Wrapper(pl.LightningModule):
        def __init__(self, extra_param: bool = False):
            super().__init__()
            self.model = tiny_gpt2()
            if extra_param:
                self.head = torch.nn.Linear(4, 4)

    class TwoOptimizers(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.a, self.b = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            for opt, layer in zip(self.optimizers(), (self.a, self.b)):
                loss = layer(batch).pow(2).mean()
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()

        def configure_optimizers(self):
            return torch.optim.SGD(self.a.parameters(), lr=0.1), torch.optim.SGD(self.b.parameters(), lr=0.1)

    return types.SimpleNamespace(pl=pl, integration=integration, Wrapper=Wrapper, TwoOptimizers=TwoOptimizers)


def test_lightning_job_recorded_and_compared_within_one_percent(tmp_path, lit):
    # (lit: Lightning imported once, on the worker that runs this module's tests, the job in-process)
    trace, pid = record_job("lightning", tmp_path, "--steps", "4")  # the job in this process
    setup = setup_of(trace, pid)
    assert (setup["batch"], setup["seq"], setup["task"]) == (BATCH, SEQ, "train")
    assert setup["framework"] == "lightning" and setup["zero_grad"] == "before_backward"
    assert setup["model_class"] == "GPT2LMHeadModel"  # the transformers model inside the LightningModule
    assert setup["rank"] == 0 and setup["strategy"] == "SingleDeviceStrategy"
    # optimizer.step(closure) runs forward and backward inside the step: the phases still come in order
    assert phase_order(trace, pid, 1) == ["forward", "backward", "optimizer_step", "idle"]
    result = compare_json(trace, pid)
    assert result["peak_measured_bytes"] > 0
    assert abs(result["peak_error_percent"]) <= 1.0, (result["peak_predicted_bytes"], result["peak_measured_bytes"])


def test_the_probe_follows_the_inner_model_only_when_it_holds_every_parameter(lit):
    plain = lit.Wrapper()
    assert lit.integration.probed_module(plain) is plain.model
    extra = lit.Wrapper(extra_param=True)
    assert lit.integration.probed_module(extra) is extra  # the extra parameters must be counted too


def test_lightning_setup_reads_the_trainer(lit):
    import torch
    trainer = types.SimpleNamespace(accumulate_grad_batches=4, precision="bf16-mixed", world_size=8,
                                    global_rank=3, local_rank=1, strategy=object())
    model = tiny_gpt2()
    setup = lit.integration.lightning_setup(trainer, model, torch.optim.AdamW(model.parameters(), fused=False, foreach=True))
    assert (setup["grad_accum"], setup["dtype"], setup["mixed_precision"]) == (4, "bf16", True)
    assert (setup["world_size"], setup["dp"], setup["rank"], setup["local_rank"]) == (8, 8, 3, 1)
    assert setup["optimizer_impl"] == "foreach" and setup["strategy"] == "object"


def test_a_setup_it_cannot_follow_warns_once_and_training_goes_on(tmp_path, monkeypatch, lit):
    import torch
    probes = tmp_path / "probes"
    probes.mkdir(mode=0o700)
    monkeypatch.setenv("GPUMEM_TUI_PROBE_DIR", str(probes))
    module = lit.TwoOptimizers()
    before = module.a.weight.detach().clone()
    callback = lit.integration.GpumemCallback()
    trainer = lit.pl.Trainer(max_steps=3, accelerator="cpu", devices=1, callbacks=[callback], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    loader = torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, loader)
    ours = [str(w.message) for w in caught if "GpumemCallback" in str(w.message)]
    assert len(ours) == 1 and "2 optimizers" in ours[0] and "training goes on" in ours[0], ours
    assert not torch.equal(before, module.a.weight)  # it trained
    assert list(probes.iterdir()) == []


def test_an_unknown_lightning_version_warns_once(monkeypatch, lit):
    monkeypatch.setattr(lit.pl, "__version__", "3.0.0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lit.integration.GpumemCallback()
    ours = [str(w.message) for w in caught if "GpumemCallback" in str(w.message)]
    assert len(ours) == 1 and "lightning 3.0.0 is not a version gpumem-tui knows" in ours[0]
