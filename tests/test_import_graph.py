"""DESIGN.md rule 4 and the layout: the folders are the layers. The UI imports the core, never
the reverse; no module imports upward or across its layer; no two modules import each other.

Reads every module's imports with ``ast`` (top-level, deferred inside functions, and under
``TYPE_CHECKING`` alike: a deferred import is still a dependency) and checks the graph.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from package_source import GROUP, PACKAGE, package_sources

# the package is parsed once per worker for this file, test_code_size and test_plots
pytestmark = pytest.mark.xdist_group(GROUP)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    sources = {_module_name(m.path): m for m in package_sources()}
    graph: dict[str, set[str]] = {}
    for name, source in sources.items():
        found: set[str] = set()
        package = name if source.path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for imp in source.imports:
            if not imp.is_from:
                targets = list(imp.names)
            else:
                base = imp.module or ""
                if imp.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - imp.level + 1] + ([base] if base else []))
                targets = [base] + [f"{base}.{alias}" for alias in imp.names]
            for target in targets:
                if target in sources and target != name:
                    found.add(target)
        graph[name] = found
    return graph


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """The package's import graph, built once for the tests of this module from the parse
    they share with test_code_size (tests/package_source.py)."""
    return _imports()


def test_no_two_modules_import_each_other(graph):
    pairs = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps if a in graph.get(b, ())})
    assert pairs == [], f"modules that import each other: {pairs}"


#: The layers, bottom first (DESIGN.md "Layout"; README "Layout"). A module may import its own
#: package and the packages of lower layers, never a higher one nor a sibling of its layer.
#: Entry points (``gpumem_tui.cli``, ``__main__``, and each subcommand's ``cli`` / ``*_cli``
#: module, which sits with what it drives) are the top of the graph and are left out.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("support",),                                 # bounded reads, units, text, signals, CLI parsing
    ("estimator",),                               # pure: architecture, rules, estimate
    ("telemetry",),                               # what was measured: NVML, host, probe streams, traces
    ("analysis", "alerts", "probe", "measure"),   # measured vs predicted; the torch side
    ("integrations", "plots", "remote", "demo"),  # frameworks, CLI charts, beyond one box, the demo job
    ("ui",),                                      # Textual
)


def _layer_of(module: str) -> int | None:
    parts = module.split(".")
    if module == "gpumem_tui" or parts[-1] == "cli" or parts[-1].endswith("_cli") or module == "gpumem_tui.__main__":
        return None  # an entry point
    for level, packages in enumerate(LAYERS):
        if parts[1] in packages:
            return level
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def test_the_package_root_holds_only_entry_points():
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py", "cli.py"]


def test_every_module_imports_only_its_own_layer_package_or_lower_ones(graph):
    offenders = []
    for module, deps in graph.items():
        level = _layer_of(module)
        if level is None:
            continue
        for dep in deps:
            if dep == "gpumem_tui":  # the package itself (its __version__): imports nothing eagerly
                continue
            dep_level = _layer_of(dep)
            if dep_level is None:  # an entry point imported by a library module
                offenders.append(f"{module} -> {dep} (an entry point)")
            elif dep_level > level or (dep_level == level and dep.split(".")[1] != module.split(".")[1]):
                offenders.append(f"{module} -> {dep}")
    assert offenders == []


def test_the_core_never_imports_the_ui(graph):
    core = [m for m in graph if _layer_of(m) is not None and _layer_of(m) < len(LAYERS) - 1]
    offenders = {m: sorted(d for d in graph[m] if d.startswith("gpumem_tui.ui")) for m in core}
    assert {m: d for m, d in offenders.items() if d} == {}


def test_the_layer_check_would_catch_an_upward_import():
    # the rule itself: telemetry (what was measured) importing analysis is refused
    assert _layer_of("gpumem_tui.telemetry.replay") < _layer_of("gpumem_tui.analysis.jobs")
    assert _layer_of("gpumem_tui.support.units") == 0 and _layer_of("gpumem_tui.ui.app") == len(LAYERS) - 1
    assert _layer_of("gpumem_tui.analysis.compare_cli") is None and _layer_of("gpumem_tui.cli") is None


def test_the_graph_sees_deferred_imports(graph):
    # the check must catch an import inside a function, as app.py's old lazy side_pane import was
    assert "gpumem_tui.ui.alerting" in graph["gpumem_tui.ui.app"]  # deferred in GpuMemApp.__init__
    assert "gpumem_tui.ui.screens" in graph["gpumem_tui.ui.app_screens"]  # deferred in screens_module
    assert "gpumem_tui.demo.process" in graph["gpumem_tui.ui.launch"]  # deferred in _live_source
