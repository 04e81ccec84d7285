"""The core stays headless (DESIGN.md rule 1) and start-up stays light (rule 3).

Each check imports a module in a fresh interpreter and looks at ``sys.modules``, so an
import that sneaks in through a dependency chain fails here, not on a user's machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEADLESS = [
    "gpumem_tui.support.units",
    "gpumem_tui.telemetry.model",
    "gpumem_tui.estimator.architecture",
    "gpumem_tui.estimator.spec",
    "gpumem_tui.estimator.estimate",
    "gpumem_tui.estimator.solve",
    "gpumem_tui.estimator.cli",
    "gpumem_tui.analysis.comparison",
    "gpumem_tui.analysis.process_estimate",
    "gpumem_tui.analysis.jobs",
    "gpumem_tui.analysis.job_compare",
    "gpumem_tui.telemetry.launch",
    "gpumem_tui.analysis.forecast",
    "gpumem_tui.alerts.rules",
    "gpumem_tui.alerts.evaluate",
    "gpumem_tui.alerts.actions",
    "gpumem_tui.ui.config",
]


def _loaded_after_import(module: str) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"importlib.import_module({module!r})\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("module", HEADLESS)
def test_headless_module_imports_no_ui_no_gpu_no_torch(module: str) -> None:
    loaded = _loaded_after_import(module)
    for heavy in ("textual", "rich", "pynvml", "torch", "transformers"):
        assert heavy not in loaded, f"{module} imports {heavy}"


def test_cli_dispatcher_imports_nothing_heavy() -> None:
    loaded = _loaded_after_import("gpumem_tui.cli")
    assert not {"textual", "torch", "pynvml", "psutil"} & loaded


def test_estimate_command_does_not_load_torch_or_textual() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from gpumem_tui.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['estimate', 'gpt2', '--batch', '2', '--seq', '128', '--json'])\n"
        "assert rc == 0, rc\n"
        "print(sorted(m for m in ('torch', 'textual', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
