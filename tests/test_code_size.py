"""Issue 23: no module over 800 lines and no function over 80 lines in the package (tests and
benchmarks are outside it), so the split of app.py, components.py and the long simulation
functions cannot grow back unnoticed."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gpumem_tui"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    found = sorted(PACKAGE.rglob("*.py"))
    assert len(found) > 100  # the walk sees the package, not an empty folder
    return found


def test_no_module_is_over_800_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in _modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_is_over_80_lines():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(PACKAGE)}:{node.name}"] = length
    assert long == {}
