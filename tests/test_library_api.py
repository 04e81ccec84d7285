"""The library API (``from gpumem_tui import estimate``), its readable result, and what
importing gpumem_tui and its integrations loads (checked in fresh interpreters)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import gpumem_tui
from gpumem_tui.estimator.architecture import ArchitectureError, load_architecture
from gpumem_tui.estimator.estimate import Estimate
from gpumem_tui.estimator.estimate import estimate as estimator_estimate
from gpumem_tui.estimator.spec import SpecError, TrainingSpec
from gpumem_tui.support.units import format_bytes

ROOT = Path(__file__).resolve().parents[1]
TINY = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 2048, "n_positions": 64}
FRAMEWORKS = ("torch", "transformers", "lightning", "pytorch_lightning", "accelerate", "peft", "textual")


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)


def test_importing_the_package_and_its_integrations_package_loads_no_framework():
    code = (
        "import sys, json, gpumem_tui, gpumem_tui.integrations\n"
        "before = sorted(m for m in sys.modules if m.startswith('gpumem_tui'))\n"
        "from gpumem_tui import estimate\n"
        f"print(json.dumps([before, [m for m in {FRAMEWORKS!r} if m in sys.modules]]))\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    before, loaded = json.loads(proc.stdout)
    assert before == ["gpumem_tui", "gpumem_tui.integrations"]  # estimate is loaded on first use
    assert loaded == []


# A finder that makes the named top-level packages look uninstalled.
_BLOCK = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in BLOCKED: raise ModuleNotFoundError(f'No module named {name!r}')\n"
    "sys.meta_path.insert(0, Block())\n"
)


@pytest.mark.parametrize(
    ("module", "blocked", "wanted"),
    [
        ("transformers", ("transformers",), "pip install transformers"),
        ("lightning", ("lightning", "pytorch_lightning"), "pip install lightning"),
        ("accelerate", ("accelerate",), "pip install accelerate"),
    ],
)
def test_a_missing_framework_is_one_clear_import_error(module, blocked, wanted):
    code = f"BLOCKED = {blocked!r}\n" + _BLOCK + (
        "try:\n"
        f"    import gpumem_tui.integrations.{module}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and wanted in lines[0] and f"gpumem_tui.integrations.{module}" in lines[0]


class _Uninstalled:
    """A finder that makes the named top-level packages look uninstalled (as ``_BLOCK`` does in
    a child interpreter)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}")


@contextlib.contextmanager
def _lightning_uninstalled():
    """In this process, ``lightning`` looks uninstalled: its modules leave ``sys.modules``, a
    finder refuses it, and ``gpumem_tui.integrations.lightning`` is imported afresh inside. All
    is put back afterwards (the module as it was, bound to whichever framework it had found), so
    later tests in this worker see what they would have seen."""
    import gpumem_tui.integrations as package

    name = "gpumem_tui.integrations.lightning"
    hidden = {k: m for k, m in sys.modules.items() if k.split(".")[0] == "lightning" or k == name}
    attribute = package.__dict__.get("lightning")
    for key in hidden:
        del sys.modules[key]
    package.__dict__.pop("lightning", None)
    sys.meta_path.insert(0, _Uninstalled(("lightning",)))
    try:
        yield
    finally:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Uninstalled)]
        sys.modules.pop(name, None)
        sys.modules.update(hidden)
        package.__dict__.pop("lightning", None)
        if attribute is not None:
            package.lightning = attribute


@pytest.mark.torch_in_process  # pytorch_lightning imports torch; on the torch worker it is there
def test_lightning_integration_falls_back_to_pytorch_lightning():
    # In this process, not a child interpreter: a child spent ~6.5 s of CPU importing what
    # pytorch_lightning loads (torch, torchmetrics, transformers), which the torch worker has;
    # here the fallback costs ~0.2 s. What is checked is the same: with lightning unimportable,
    # the integration binds to pytorch_lightning and nothing imports lightning.
    with _lightning_uninstalled():
        import pytorch_lightning

        from gpumem_tui.integrations.lightning import GpumemCallback

        assert issubclass(GpumemCallback, pytorch_lightning.Callback)
        assert not any(k.split(".")[0] == "lightning" for k in sys.modules)


def test_estimate_is_the_estimators_estimate_for_the_same_spec():
    result = gpumem_tui.estimate("gpt2", task="train", batch=4, seq=1024, dtype="bf16", device="cuda",
                                 grad_ckpt="full", optimizer="sgd")
    expected = estimator_estimate(load_architecture("gpt2"), TrainingSpec(
        task="train", batch=4, seq=1024, dtype="bf16", device="cuda", grad_ckpt="full", optimizer="sgd"))
    assert isinstance(result, Estimate)
    assert result.to_json() == expected.to_json()
    assert result.spec.grad_ckpt == "full" and result.spec.batch == 4


def test_estimate_takes_a_config_dict_a_path_an_object_with_to_dict_and_a_count(tmp_path):
    by_dict = gpumem_tui.estimate(TINY, batch=2, seq=64, dtype="fp32", device="cpu")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    by_path = gpumem_tui.estimate(path, batch=2, seq=64, dtype="fp32", device="cpu")
    by_folder = gpumem_tui.estimate(str(tmp_path), batch=2, seq=64, dtype="fp32", device="cpu")

    class Config:
        def to_dict(self):
            return dict(TINY)

    by_object = gpumem_tui.estimate(Config(), batch=2, seq=64, dtype="fp32", device="cpu")
    assert by_dict.peak_bytes == by_path.peak_bytes == by_folder.peak_bytes == by_object.peak_bytes > 0
    assert gpumem_tui.estimate(7e9, batch=1, seq=512).total_params == pytest.approx(7e9, rel=0.05)


def test_lora_targets_as_text_and_bad_input_errors():
    lora = gpumem_tui.estimate("llama-3.2-1b", task="lora", lora_rank=16, lora_targets="all-linear", batch=1, seq=256)
    assert lora.spec.lora_targets == ("q", "k", "v", "o", "gate", "up", "down")
    assert lora.trainable_params < lora.total_params
    with pytest.raises(TypeError, match="unknown keyword 'batch_size'"):
        gpumem_tui.estimate("gpt2", batch_size=4)
    with pytest.raises(ArchitectureError):
        gpumem_tui.estimate("no-such-model-anywhere")
    with pytest.raises(SpecError) as err:
        gpumem_tui.estimate("gpt2", batch=0)
    assert err.value.field == "batch"
    with pytest.raises(TypeError, match="model must be"):
        gpumem_tui.estimate(["gpt2"])


def test_repr_rich_and_html_show_the_peak_and_its_components():
    result = gpumem_tui.estimate(TINY, batch=2, seq=64, dtype="fp32", device="cpu")
    peak = format_bytes(result.peak_bytes)
    text = repr(result)
    assert text.startswith("Estimate(") and f"peak {peak} in {result.peak_phase}" in text
    assert "b=2 s=64 fp32" in text and format_bytes(result.components_bytes["parameters"]) in text
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(result)
    rendered = console.file.getvalue()
    assert "parameters" in rendered and peak in rendered
    html = result._repr_html_()
    assert html.startswith("<div>") and peak in html and "<table>" in html


def test_outside_text_in_a_model_name_is_shown_literally():
    name = "[bold red]evil[/] <script>alert(1)</script>\x1b[31m"
    result = gpumem_tui.estimate({**TINY, "_name_or_path": name}, batch=1, seq=8, dtype="fp32", device="cpu")
    html = result._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(result)
    rendered = console.file.getvalue()
    assert "[bold red]evil[/]" in rendered  # markup shown, not applied
    assert "\x1b" not in repr(result) and "\\x1b[31m" in repr(result)
