"""The probe notices a training loop that keeps the model output through backward and
publishes it (``keep_outputs``, a TrainingSpec field) so the estimator counts those logits."""

from __future__ import annotations

import json

import pytest

import gpumem_tui.probe
from gpumem_tui.analysis.comparison import spec_from_probe_info
from gpumem_tui.telemetry.probe_source import ProbeSource

# torch_in_process: these tests import torch here; under xdist they share one worker (tests/conftest.py)
pytestmark = pytest.mark.torch_in_process

V = 96


class _Output(dict):
    """An HF-style output (``ModelOutput`` is a dict): ``.loss`` and ``.logits``."""

    def __init__(self, loss, logits):
        super().__init__(loss=loss, logits=logits)

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _tiny_lm():
    """A one-layer LM whose forward returns an HF-style output (the loss and the logits)."""
    import torch  # here, not at the top: importing it costs every xdist worker seconds at collection

    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(V, 16)
            self.head = torch.nn.Linear(16, V)

        def forward(self, ids):
            logits = self.head(self.emb(ids))
            loss = torch.nn.functional.cross_entropy(logits.view(-1, V), ids.view(-1))
            return _Output(loss, logits)

    return TinyLM()


def _train(tmp_path, keep: bool, steps: int = 2):
    import torch

    torch.manual_seed(0)
    model = _tiny_lm()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    config = {"model_type": "gpt2", "vocab_size": V, "n_embd": 16, "n_layer": 1, "n_head": 2, "n_positions": 8}
    probe = gpumem_tui.probe.attach(model, opt, batch=3, seq=8, config=config, directory=tmp_path,
                                    min_step_interval=0.0)
    try:
        for _ in range(steps):
            ids = torch.randint(0, V, (3, 8))
            out = model(ids)
            loss = out.loss
            if not keep:
                del out
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            out = None
    finally:
        probe.close()
    lines = [json.loads(x) for x in probe.path.read_text().splitlines()]
    return [x for x in lines if x["kind"] == "info"]


def test_kept_output_is_published_once(tmp_path):
    infos = _train(tmp_path, keep=True, steps=3)
    assert len(infos) == 2  # the first at attach, one update at the first backward
    assert "keep_outputs" not in infos[0]["setup"]
    setup = infos[1]["setup"]
    assert setup["keep_outputs"] is True
    assert setup["kept_output_bytes"] == 3 * 8 * V * 4  # the fp32 logits
    # readers take the update; the estimator is configured from it
    (info,) = ProbeSource(tmp_path, alive=lambda pid, created: False).poll().probe_infos
    assert dict(info.setup)["keep_outputs"] is True
    _arch, spec = spec_from_probe_info(info, device="cpu")
    assert spec.keep_outputs is True


def test_released_output_is_not_reported(tmp_path):
    infos = _train(tmp_path, keep=False)
    assert len(infos) == 1 and "keep_outputs" not in infos[0]["setup"]
