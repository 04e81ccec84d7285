"""DESIGN.md rule 4: the UI imports the core, never the reverse, and no two modules import each other.

Reads every module's imports with ``ast`` (top-level, deferred inside functions, and under
``TYPE_CHECKING`` alike: a deferred import is still a dependency) and checks the graph.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gpumem_tui"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                if target in modules and target != name:
                    found.add(target)
        graph[name] = found
    return graph


def test_no_two_modules_import_each_other():
    graph = _imports()
    pairs = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps if a in graph.get(b, ())})
    assert pairs == [], f"modules that import each other: {pairs}"


def test_the_core_never_imports_the_ui():
    graph = _imports()
    core_packages = ("estimator", "comparison", "process_estimate", "telemetry", "units", "step_peaks",
                     "alerts", "alert_rules", "alert_actions", "forecast", "analysis")
    core = [m for m in graph if m.count(".") >= 1 and m.split(".")[1] in core_packages]
    offenders = {m: sorted(d for d in graph[m] if d.startswith("gpumem_tui.ui")) for m in core}
    assert {m: d for m, d in offenders.items() if d} == {}


def test_the_graph_sees_deferred_imports():
    # the check must catch an import inside a function, as app.py's old lazy side_pane import was
    graph = _imports()
    assert "gpumem_tui.ui.side_pane" in graph["gpumem_tui.ui.app"]
    assert "gpumem_tui.demo_process" in graph["gpumem_tui.ui.launch"]  # deferred in run_dashboard
