"""Issue 23: no module over 800 lines and no function over 80 lines in the package (tests and
benchmarks are outside it), so the split of app.py, components.py and the long simulation
functions cannot grow back unnoticed."""

from __future__ import annotations

import pytest

from package_source import GROUP, PACKAGE, ModuleSource, package_sources

MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80

# the package is parsed once per worker for this file, test_import_graph and test_plots
pytestmark = pytest.mark.xdist_group(GROUP)


def _modules() -> tuple[ModuleSource, ...]:
    found = package_sources()
    assert len(found) > 100  # the walk sees the package, not an empty folder
    return found


def test_no_module_is_over_800_lines():
    long = {str(m.path.relative_to(PACKAGE)): m.line_count for m in _modules() if m.line_count > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_is_over_80_lines():
    long = {f"{m.path.relative_to(PACKAGE)}:{f.name}": f.lines
            for m in _modules() for f in m.functions if f.lines > MAX_FUNCTION_LINES}
    assert long == {}
